package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/multicache/multicache/cmd/multicache/internal/daemon"
	"github.com/multicache/multicache/cmd/multicache/kubeprinters"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/config"
)

type serveFlags struct {
	config, listen, tokenFile, logFormat, logLevel string
	kubeconfigs, contexts, excludes, resources     []string
	allowInsecure                                  bool
	mgmtKubeconfig, mgmtContext, secretsNamespace  string
	profilesNamespace, profileProviderFile         string
	authMode, memoryLimit                          string
	profiling, disableCompression                  bool
	sharding                                       bool
	advertiseURL, shardingNamespace, identity      string
	peerCert, peerKey, peerCA                      string
	leaseDuration                                  time.Duration
	maxWarmups, maxHandovers, weight               int
	syncGCPercent, takeoverGCPercent, gcPercent    int
	unpagedListMax, unpagedListBudget              int
}

func newServe() *cobra.Command {
	cmd, _ := serveCommand()
	return cmd
}

// serveCommand returns the serve command and the flags its parsing fills, for load.
func serveCommand() (*cobra.Command, *serveFlags) {
	f := &serveFlags{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the daemon: cache the fleet and serve the HTTP API",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := f.load(cmd)
			if err != nil {
				return err
			}
			d, err := daemon.Build(cfg, daemon.Options{Version: version, Tables: kubeprinters.New()})
			if err != nil {
				return err
			}
			return d.Run(cmd.Context())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "YAML config file (flags override it)")
	fl.StringArrayVar(&f.kubeconfigs, "kubeconfig", nil, "kubeconfig file (repeatable; default $KUBECONFIG or ~/.kube/config)")
	fl.StringArrayVar(&f.contexts, "context", nil, "include contexts matching this glob (repeatable)")
	fl.StringArrayVar(&f.excludes, "exclude-context", nil, "exclude contexts matching this glob (repeatable)")
	fl.StringArrayVar(&f.resources, "resource", nil, "resource to cache: plural, kind, short name or group/version/resource (repeatable)")
	fl.StringVar(&f.listen, "listen", "", "listen address (default 127.0.0.1:8080)")
	fl.StringVar(&f.tokenFile, "token-file", "", "require a bearer token from this file (one per line)")
	fl.BoolVar(&f.allowInsecure, "allow-insecure", false, "allow listening beyond loopback without auth")
	fl.StringVar(&f.mgmtKubeconfig, "management-kubeconfig", "", "kubeconfig of the management cluster (cluster Secrets, ClusterProfiles, Leases, delegated auth); default: in-cluster config")
	fl.StringVar(&f.mgmtContext, "management-context", "", "context of --management-kubeconfig (default: its current context)")
	fl.StringVar(&f.secretsNamespace, "cluster-secrets-namespace", "", "also read clusters from kubeconfig Secrets in this namespace of the management cluster")
	fl.StringVar(&f.profilesNamespace, "cluster-profiles", "", "read the fleet from the ClusterProfiles (Cluster Inventory API) in this namespace of the management cluster")
	fl.StringVar(&f.profileProviderFile, "cluster-profile-provider-file", "", "with --cluster-profiles: JSON file mapping each access provider to its exec credential plugin")
	fl.IntVar(&f.syncGCPercent, "sync-gc-percent", 0, "Go GC percent while the initial sync runs, within a quarter of the memory limit: -1 collects only at that budget, 0 leaves GOGC alone (default -1)")
	fl.IntVar(&f.gcPercent, "gc-percent", 0, "Go GC percent outside the initial sync and takeovers: a lower one holds less garbage for more collector CPU; 0 leaves GOGC alone")
	fl.IntVar(&f.unpagedListMax, "unpaged-list-max", 0, fmt.Sprintf("a cluster's first list of a resource with at most this many objects is one unpaged LIST from its API server's watch cache; a larger one streams (watch-list); -1: every first list streams (default %d)", clusterset.DefaultUnpagedListMax))
	fl.IntVar(&f.unpagedListBudget, "unpaged-list-budget", 0, "objects of first lists listed (not streamed) at once, across the fleet; a list that does not fit streams (default: an eighth of the memory limit, or of the machine's memory, at 10 KiB an object)")
	fl.BoolVar(&f.disableCompression, "disable-compression", false, "ask the member API servers for uncompressed answers, as kubectl's --disable-compression: less CPU on both sides for large lists, more bytes on the network (clusters reached over TLS)")
	fl.BoolVar(&f.profiling, "profiling", false, "serve Go's runtime profiles under /debug/pprof/ (behind the API's authentication)")
	fl.StringVar(&f.memoryLimit, "memory-limit", "", "Go heap soft limit, e.g. 3Gi (default: 90% of the container's memory limit, or GOMEMLIMIT)")
	fl.StringVar(&f.authMode, "auth", "", "token (with --token-file) or delegated (TokenReview and SubjectAccessReview against the management cluster)")
	fl.BoolVar(&f.sharding, "sharding", false, "share the fleet with other replicas through Leases in the management cluster; any replica answers for the whole fleet")
	fl.StringVar(&f.advertiseURL, "advertise-url", "", "with --sharding: how the other replicas reach this one, e.g. https://10.0.0.5:8443")
	fl.StringVar(&f.shardingNamespace, "sharding-namespace", "", "with --sharding: namespace of the Leases (default: --cluster-secrets-namespace, else multicache-system)")
	fl.StringVar(&f.identity, "replica-id", "", "with --sharding: this replica's name among its peers (default: host name and a random suffix)")
	fl.DurationVar(&f.leaseDuration, "lease-duration", 0, "with --sharding: a replica silent this long loses its clusters (default 15s)")
	fl.IntVar(&f.maxWarmups, "max-warmups", 0, "with --sharding: clusters this replica syncs at once, but for those --max-handovers counts (default 4)")
	fl.IntVar(&f.maxHandovers, "max-handovers", 0, "with --sharding: clusters a peer handed over that this replica syncs at once, beside --max-warmups (a handover whose state the peer still keeps costs the member a watch, not a list; one whose state is gone lists); -1: they take --max-warmups' slots (default 16)")
	fl.IntVar(&f.takeoverGCPercent, "takeover-gc-percent", 0, "with --sharding: --sync-gc-percent for a takeover, while this replica owns more clusters than it syncs at once, its start included (default -1)")
	fl.IntVar(&f.weight, "shard-weight", 0, "with --sharding: this replica's share of clusters relative to the others' (default 1)")
	fl.StringVar(&f.peerCert, "peer-cert-file", "", "with --sharding: this replica's peer client certificate (signed by --peer-ca-file): replicas then pass callers' identities, not their credentials")
	fl.StringVar(&f.peerKey, "peer-key-file", "", "with --sharding: the key of --peer-cert-file")
	fl.StringVar(&f.peerCA, "peer-ca-file", "", "with --sharding: the CA of the replicas' peer and serving certificates")
	fl.StringVar(&f.logFormat, "log-format", "", "json or console")
	fl.StringVar(&f.logLevel, "log-level", "", "debug, info, warn or error")
	return cmd, f
}

// load reads the config file if any, then applies the flags that were set.
func (f *serveFlags) load(cmd *cobra.Command) (*config.Config, error) {
	cfg := &config.Config{}
	if f.config != "" {
		c, err := config.Read(f.config)
		if err != nil {
			return nil, err
		}
		cfg = c
	}
	fl := cmd.Flags()
	if fl.Changed("kubeconfig") {
		cfg.Kubeconfig.Paths = f.kubeconfigs
	}
	if fl.Changed("context") {
		cfg.Kubeconfig.Include = f.contexts
	}
	if fl.Changed("exclude-context") {
		cfg.Kubeconfig.Exclude = f.excludes
	}
	if fl.Changed("resource") {
		cfg.Resources = nil
		for _, r := range f.resources {
			cfg.Resources = append(cfg.Resources, config.Resource{Name: r})
		}
	}
	if f.listen != "" {
		cfg.Server.Listen = f.listen
	}
	if f.tokenFile != "" {
		cfg.Server.Auth = &config.Auth{TokenFile: f.tokenFile}
	}
	if f.authMode != "" {
		if cfg.Server.Auth == nil {
			cfg.Server.Auth = &config.Auth{}
		}
		cfg.Server.Auth.Mode = f.authMode
		if f.authMode == config.AuthDelegated && f.tokenFile == "" {
			cfg.Server.Auth.TokenFile = "" // a file's token list does not apply
		}
	}
	if f.profiling {
		cfg.Server.Profiling = true
	}
	if fl.Changed("unpaged-list-max") {
		cfg.UnpagedListMax = f.unpagedListMax
	}
	if fl.Changed("unpaged-list-budget") {
		cfg.UnpagedListBudget = f.unpagedListBudget
	}
	if fl.Changed("sync-gc-percent") {
		p := f.syncGCPercent
		cfg.SyncGCPercent = &p
	}
	if fl.Changed("gc-percent") {
		p := f.gcPercent
		cfg.GCPercent = &p
	}
	if f.memoryLimit != "" {
		cfg.MemoryLimit = f.memoryLimit
	}
	if fl.Changed("disable-compression") {
		cfg.DisableCompression = f.disableCompression
	}
	if f.mgmtKubeconfig != "" {
		cfg.Management.Kubeconfig = f.mgmtKubeconfig
	}
	if f.mgmtContext != "" {
		cfg.Management.Context = f.mgmtContext
	}
	if f.secretsNamespace != "" {
		if cfg.Sources.Secrets == nil {
			cfg.Sources.Secrets = &config.SecretsSource{}
		}
		cfg.Sources.Secrets.Namespace = f.secretsNamespace
	}
	if f.profilesNamespace != "" || f.profileProviderFile != "" {
		if cfg.Clusters.ClusterProfiles == nil {
			cfg.Clusters.ClusterProfiles = &config.ClusterProfilesSource{}
		}
		if f.profilesNamespace != "" {
			cfg.Clusters.ClusterProfiles.Namespace = f.profilesNamespace
		}
		if f.profileProviderFile != "" {
			cfg.Clusters.ClusterProfiles.ProviderFile = f.profileProviderFile
		}
	}
	if f.allowInsecure {
		cfg.Server.AllowInsecure = true
	}
	if fl.Changed("sharding") || f.advertiseURL != "" || f.shardingNamespace != "" || f.identity != "" || f.leaseDuration != 0 || f.maxWarmups != 0 || f.maxHandovers != 0 || f.weight != 0 ||
		fl.Changed("takeover-gc-percent") || f.peerCert != "" || f.peerKey != "" || f.peerCA != "" {
		if cfg.Sharding == nil {
			cfg.Sharding = &config.Sharding{}
		}
		sh := cfg.Sharding
		if fl.Changed("sharding") {
			sh.Enabled = f.sharding
		}
		if f.advertiseURL != "" {
			sh.AdvertiseURL = f.advertiseURL
		}
		if f.shardingNamespace != "" {
			sh.Namespace = f.shardingNamespace
		}
		if f.identity != "" {
			sh.Identity = f.identity
		}
		if f.leaseDuration != 0 {
			sh.LeaseDuration = config.Duration{Duration: f.leaseDuration}
		}
		if f.maxWarmups != 0 {
			sh.MaxWarmups = f.maxWarmups
		}
		if f.maxHandovers != 0 {
			sh.MaxHandovers = f.maxHandovers
		}
		if f.weight != 0 {
			sh.Weight = f.weight
		}
		if fl.Changed("takeover-gc-percent") {
			p := f.takeoverGCPercent
			sh.TakeoverGCPercent = &p
		}
		for _, v := range []struct {
			to   *string
			from string
		}{{&sh.PeerCertFile, f.peerCert}, {&sh.PeerKeyFile, f.peerKey}, {&sh.PeerCAFile, f.peerCA}} {
			if v.from != "" {
				*v.to = v.from
			}
		}
	}
	if f.logFormat != "" {
		cfg.Logging.Format = f.logFormat
	}
	if f.logLevel != "" {
		cfg.Logging.Level = f.logLevel
	}
	cfg.Default()
	if err := cfg.Validate(); err != nil {
		if f.config != "" {
			return nil, fmt.Errorf("config %s: %w", f.config, err)
		}
		return nil, err
	}
	return cfg, nil
}
