package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/go-logr/zapr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/multicache/multicache/cmd/multicache/kubeprinters"
	"github.com/multicache/multicache/pkg/auth"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/config"
	"github.com/multicache/multicache/pkg/server"
	"github.com/multicache/multicache/pkg/shard"
	"github.com/multicache/multicache/pkg/storage/peer"
)

type serveFlags struct {
	config, listen, tokenFile, logFormat, logLevel string
	kubeconfigs, contexts, excludes, resources     []string
	allowInsecure                                  bool
	mgmtKubeconfig, mgmtContext, secretsNamespace  string
	authMode, memoryLimit                          string
	profiling                                      bool
	sharding                                       bool
	advertiseURL, shardingNamespace, identity      string
	peerCert, peerKey, peerCA                      string
	leaseDuration                                  time.Duration
	maxWarmups, weight                             int
	syncGCPercent                                  int
	unpagedListMax, unpagedListBudget              int
}

func newServe() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the daemon: cache the fleet and serve the HTTP API",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := f.load(cmd)
			if err != nil {
				return err
			}
			return serve(cmd.Context(), cfg)
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
	fl.StringVar(&f.mgmtKubeconfig, "management-kubeconfig", "", "kubeconfig of the management cluster (cluster Secrets, delegated auth); default: in-cluster config")
	fl.StringVar(&f.mgmtContext, "management-context", "", "context of --management-kubeconfig (default: its current context)")
	fl.StringVar(&f.secretsNamespace, "cluster-secrets-namespace", "", "also read clusters from kubeconfig Secrets in this namespace of the management cluster")
	fl.IntVar(&f.syncGCPercent, "sync-gc-percent", 0, "Go GC percent while the initial sync runs, within a quarter of the memory limit: -1 collects only at that budget, 0 leaves GOGC alone (default -1)")
	fl.IntVar(&f.unpagedListMax, "unpaged-list-max", 0, fmt.Sprintf("a cluster's first list of a resource with at most this many objects is one unpaged LIST from its API server's watch cache; a larger one streams (watch-list); -1: every first list streams (default %d)", clusterset.DefaultUnpagedListMax))
	fl.IntVar(&f.unpagedListBudget, "unpaged-list-budget", 0, "objects of first lists listed (not streamed) at once, across the fleet; a list that does not fit streams (default: an eighth of the memory limit, or of the machine's memory, at 10 KiB an object)")
	fl.BoolVar(&f.profiling, "profiling", false, "serve Go's runtime profiles under /debug/pprof/ (behind the API's authentication)")
	fl.StringVar(&f.memoryLimit, "memory-limit", "", "Go heap soft limit, e.g. 3Gi (default: 90% of the container's memory limit, or GOMEMLIMIT)")
	fl.StringVar(&f.authMode, "auth", "", "token (with --token-file) or delegated (TokenReview and SubjectAccessReview against the management cluster)")
	fl.BoolVar(&f.sharding, "sharding", false, "share the fleet with other replicas through Leases in the management cluster; any replica answers for the whole fleet")
	fl.StringVar(&f.advertiseURL, "advertise-url", "", "with --sharding: how the other replicas reach this one, e.g. https://10.0.0.5:8443")
	fl.StringVar(&f.shardingNamespace, "sharding-namespace", "", "with --sharding: namespace of the Leases (default: --cluster-secrets-namespace, else multicache-system)")
	fl.StringVar(&f.identity, "replica-id", "", "with --sharding: this replica's name among its peers (default: host name and a random suffix)")
	fl.DurationVar(&f.leaseDuration, "lease-duration", 0, "with --sharding: a replica silent this long loses its clusters (default 15s)")
	fl.IntVar(&f.maxWarmups, "max-warmups", 0, "with --sharding: clusters this replica syncs at once (default 4)")
	fl.IntVar(&f.weight, "shard-weight", 0, "with --sharding: this replica's share of clusters relative to the others' (default 1)")
	fl.StringVar(&f.peerCert, "peer-cert-file", "", "with --sharding: this replica's peer client certificate (signed by --peer-ca-file): replicas then pass callers' identities, not their credentials")
	fl.StringVar(&f.peerKey, "peer-key-file", "", "with --sharding: the key of --peer-cert-file")
	fl.StringVar(&f.peerCA, "peer-ca-file", "", "with --sharding: the CA of the replicas' peer and serving certificates")
	fl.StringVar(&f.logFormat, "log-format", "", "json or console")
	fl.StringVar(&f.logLevel, "log-level", "", "debug, info, warn or error")
	return cmd
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
	if f.memoryLimit != "" {
		cfg.MemoryLimit = f.memoryLimit
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
	if f.allowInsecure {
		cfg.Server.AllowInsecure = true
	}
	if fl.Changed("sharding") || f.advertiseURL != "" || f.shardingNamespace != "" || f.identity != "" || f.leaseDuration != 0 || f.maxWarmups != 0 || f.weight != 0 ||
		f.peerCert != "" || f.peerKey != "" || f.peerCA != "" {
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
		if f.weight != 0 {
			sh.Weight = f.weight
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

func newLogger(c config.Logging) (*zap.Logger, error) {
	var zc zap.Config
	if c.Format == "console" {
		zc = zap.NewDevelopmentConfig()
		zc.EncoderConfig.EncodeLevel = zapcore.CapitalColorLevelEncoder
	} else {
		zc = zap.NewProductionConfig()
		zc.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	}
	lvl, err := zapcore.ParseLevel(c.Level)
	if err != nil {
		return nil, fmt.Errorf("logging.level: %w", err)
	}
	zc.Level = zap.NewAtomicLevelAt(lvl)
	zc.DisableStacktrace = true
	return zc.Build()
}

func serve(ctx context.Context, cfg *config.Config) error {
	log, err := newLogger(cfg.Logging)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	// client-go logs through klog; send it to the same place, structured.
	klog.SetLogger(zapr.NewLogger(log.Named("client-go")))

	// The Go heap's soft limit: memoryLimit when given; otherwise 90% of the container's
	// memory limit, unless GOMEMLIMIT is set.
	if cfg.MemoryLimit != "" {
		q, _ := resource.ParseQuantity(cfg.MemoryLimit) // validated
		debug.SetMemoryLimit(q.Value())
		log.Info("memory limit", zap.Int64("goMemLimitBytes", q.Value()), zap.String("from", "memoryLimit"))
	} else if limit, err := memlimit.Set(memlimit.WithRatio(0.9), memlimit.WithProvider(memlimit.FromCgroup)); err == nil && limit > 0 && limit < math.MaxInt64 {
		log.Info("memory limit", zap.Int64("goMemLimitBytes", limit), zap.String("from", "cgroup or GOMEMLIMIT"))
	}

	specs, err := cfg.ResourceSpecs()
	if err != nil {
		return err
	}
	// Lives as long as the daemon: the management cluster's informers run under it.
	runCtx, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	var mgmt kubernetes.Interface
	if cfg.NeedsManagement() {
		if mgmt, err = managementClient(cfg.Management); err != nil {
			return err
		}
	}
	src, err := clusterSource(runCtx, cfg, mgmt, log)
	if err != nil {
		return err
	}
	metrics := prometheus.NewRegistry()
	trust, err := peerTrust(cfg)
	if err != nil {
		return err
	}
	var coord *shard.Coordinator
	if cfg.ShardingEnabled() {
		if coord, err = newCoordinator(cfg, mgmt, src, log, metrics, trust); err != nil {
			return err
		}
		src = coord // the registry runs the clusters this replica owns
	}
	listBudget := cfg.UnpagedListBudget
	if listBudget == 0 { // before raiseGCForSync, which lowers the memory limit while it holds
		listBudget = unpagedListBudget()
	}
	reg, err := clusterset.New(clusterset.Options{Source: src, Resources: specs, Logger: log, QPS: cfg.QPS, Burst: cfg.Burst, UserAgent: "multicache/" + version,
		UnpagedListMax: cfg.UnpagedListMax, UnpagedListBudget: listBudget})
	if err != nil {
		return err
	}
	sopts := cfg.ServerOptions()
	sopts.Registry, sopts.Logger, sopts.Metrics = reg, log, metrics
	if coord != nil {
		// Running includes stacks still stopping: a fence moves only once none is left.
		coord.SetLocal(func(cluster string) (bool, bool) {
			cs, ok := reg.ClusterStatus(cluster)
			return reg.Running(cluster), ok && cs.State != clusterset.Pending && cs.State != clusterset.Syncing
		})
		sopts.Fleet, sopts.PeerTrust = coord, trust
		if cfg.Sharding.PeerTimeout.Duration > 0 {
			sopts.PeerTimeout = cfg.Sharding.PeerTimeout.Duration
		}
	}
	authMode := "none"
	switch {
	case cfg.Delegated():
		var ca string
		if cfg.Server.TLS != nil {
			ca = cfg.Server.TLS.ClientCAFile
		}
		if sopts.Authorizer, err = auth.New(auth.Options{Client: mgmt, ClientCAFile: ca, Metrics: sopts.Metrics}); err != nil {
			return err
		}
		authMode = config.AuthDelegated
	case cfg.Server.Auth != nil:
		if sopts.Tokens, err = auth.ReadTokenFile(cfg.Server.Auth.TokenFile); err != nil {
			return fmt.Errorf("server.auth.tokenFile: %w", err)
		}
		authMode = config.AuthToken
	}
	sopts.Tables = kubeprinters.New()
	srv, err := server.New(sopts)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		return fmt.Errorf("server.listen: %w", err)
	}
	// Request contexts derive from base, so cancelling it ends open watches at shutdown.
	base, endRequests := context.WithCancel(context.Background())
	defer endRequests()
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return base }}
	if cfg.Server.TLS != nil && (cfg.Server.TLS.ClientCAFile != "" || trust != nil) {
		// Certificates are verified by the authenticators (callers' against the client CA,
		// peers' against the peer CA); the pool tells clients which CAs to use.
		pool := x509.NewCertPool()
		if f := cfg.Server.TLS.ClientCAFile; f != "" {
			pem, err := os.ReadFile(f)
			if err != nil || !pool.AppendCertsFromPEM(pem) {
				return fmt.Errorf("server.tls.clientCAFile %s: no PEM certificate in it (%v)", f, err)
			}
		}
		if trust != nil {
			pool.AppendCertsFromPEM(trust.CAPEM())
		}
		hs.TLSConfig = &tls.Config{ClientAuth: tls.RequestClientCert, ClientCAs: pool, MinVersion: tls.VersionTLS12}
		if trust != nil {
			// A peer that asks for this replica's identity gets its peer certificate.
			hs.TLSConfig = trust.ServerConfig(hs.TLSConfig)
		}
	}
	restoreGC := raiseGCForSync(cfg.SyncGC(), log)
	regCtx, stopReg := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_ = reg.Start(regCtx)
	}()
	// The initial lists' garbage sets the process's high-water mark: once the first sync is
	// over (every cluster synced or failing), the collector returns to GOGC's percent and the
	// memory the sync freed goes back to the operating system at once rather than over the
	// scavenger's minutes.
	returns := newMemoryReturns(metrics)
	go func() {
		failing := waitInitialSync(regCtx, reg)
		restoreGC()
		if regCtx.Err() == nil {
			returns.free("initial-sync")
			log.Info("initial sync over; freed memory returned to the OS", zap.Strings("failing", failing))
		}
	}()
	if coord != nil {
		// A sharded replica's clusters come and go (moves, a peer's death): each burst leaves
		// the garbage of lists synced or of stores handed off. Once a burst has been quiet for
		// longer than a handed-off state waits to be taken, return that memory too.
		go returnMemoryAfterMoves(regCtx, reg, returns, log)
	}
	serveErr := make(chan error, 1)
	go func() {
		defer wg.Done()
		var err error
		if cfg.Server.TLS != nil {
			err = hs.ServeTLS(ln, cfg.Server.TLS.CertFile, cfg.Server.TLS.KeyFile)
		} else {
			err = hs.Serve(ln)
		}
		if !errors.Is(err, http.ErrServerClosed) {
			serveErr <- err
		}
	}()
	coordDone := make(chan struct{})
	coordCtx, stopCoord := context.WithCancel(context.Background())
	defer stopCoord()
	if coord != nil {
		go func() {
			defer close(coordDone)
			if err := coord.Run(coordCtx); err != nil {
				log.Error("sharding stopped", zap.Error(err))
			}
		}()
		log.Info("sharding", zap.String("replica", coord.Identity()), zap.String("advertiseURL", cfg.Sharding.AdvertiseURL))
	} else {
		close(coordDone)
	}
	log.Info("serving", zap.String("listen", ln.Addr().String()), zap.Bool("tls", cfg.Server.TLS != nil), zap.String("auth", authMode), zap.Strings("resources", reg.Resources()))
	select {
	case <-ctx.Done():
	case err = <-serveErr:
		log.Error("server failed", zap.Error(err))
	}
	log.Info("shutting down")
	// First hand this replica's clusters to the others (the registry still runs, so that it
	// stops each cluster before its fence moves), then stop serving.
	stopCoord()
	<-coordDone
	if coord != nil {
		// The clusters' next owners take the state this replica kept of them (a handover
		// costs their API servers no list); wait for them, briefly, and not at all when no
		// other replica stays to take them (the whole fleet is stopping).
		waitCtx, cancelWait := context.WithTimeout(context.Background(), 10*time.Second)
		go func() {
			for waitCtx.Err() == nil {
				staying := false
				for _, p := range coord.Peers() {
					staying = staying || (!p.Self && p.Live && !p.Leaving)
				}
				if !staying {
					cancelWait()
					return
				}
				select {
				case <-waitCtx.Done():
				case <-time.After(200 * time.Millisecond):
				}
			}
		}()
		if left := reg.WaitShelfTaken(waitCtx); left > 0 {
			log.Info("handoff: states not taken by the next owners; they list from the clusters", zap.Int("left", left))
		}
		cancelWait()
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	endRequests()
	_ = hs.Shutdown(shutdownCtx)
	_ = hs.Close()
	stopReg()
	wg.Wait()
	return err
}

// newCoordinator builds the replica's share of the fleet from the sharding config. With peer
// certificates, the replica's identity defaults to its certificate's, and a peer Lease counts
// only once its URL proves the peer (trust.Verify).
func newCoordinator(cfg *config.Config, mgmt kubernetes.Interface, src clusterset.Source, log *zap.Logger, metrics prometheus.Registerer, trust *peer.Trust) (*shard.Coordinator, error) {
	sh := cfg.Sharding
	ns := sh.Namespace
	if ns == "" {
		ns = "multicache-system"
		if cfg.Sources.Secrets != nil {
			ns = cfg.Sources.Secrets.Namespace
		}
	}
	opts := shard.Options{Client: mgmt, Namespace: ns, Identity: sh.Identity, AdvertiseURL: sh.AdvertiseURL,
		LeaseDuration: sh.LeaseDuration.Duration, Weight: sh.Weight, MaxWarmups: sh.MaxWarmups, Source: src,
		Logger: log.Named("shard"), Metrics: metrics}
	if trust != nil {
		opts.Identity, opts.Verify = trust.Identity(), trust.Verify
	}
	c, err := shard.New(opts)
	if err != nil {
		return nil, fmt.Errorf("sharding: %w", err)
	}
	return c, nil
}

// peerTrust loads this replica's peer certificate, nil without one. The peer CA must not be
// the callers' client CA, nor share a certificate with it: a caller's client certificate could
// then vouch for any user.
func peerTrust(cfg *config.Config) (*peer.Trust, error) {
	if !cfg.Sharding.PeerTrust() {
		return nil, nil
	}
	sh := cfg.Sharding
	trust, err := peer.LoadTrust(sh.PeerCertFile, sh.PeerKeyFile, sh.PeerCAFile, sh.Identity)
	if err != nil {
		return nil, err
	}
	if cfg.Server.TLS != nil && cfg.Server.TLS.ClientCAFile != "" {
		clientCA, err := os.ReadFile(cfg.Server.TLS.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("server.tls.clientCAFile: %w", err)
		}
		if ca := trust.Overlaps(clientCA); ca != "" {
			return nil, fmt.Errorf("sharding.peerCAFile %s: it holds %s, which server.tls.clientCAFile holds too: a caller's client certificate could then vouch for any user; use a CA of the replicas' own", sh.PeerCAFile, ca)
		}
	}
	return trust, nil
}

// managementClient reaches the management cluster: from its kubeconfig and context, or, when
// none is given, from the Pod the daemon runs in.
func managementClient(m config.Management) (kubernetes.Interface, error) {
	var rc *rest.Config
	var err error
	if m.Kubeconfig == "" {
		if rc, err = rest.InClusterConfig(); err != nil {
			return nil, fmt.Errorf("management cluster: not running in a Pod (%v): set management.kubeconfig (--management-kubeconfig)", err)
		}
	} else {
		rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: m.Kubeconfig}
		if rc, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: m.Context}).ClientConfig(); err != nil {
			return nil, fmt.Errorf("management.kubeconfig %s: %w", m.Kubeconfig, err)
		}
	}
	rc = rest.CopyConfig(rc)
	rc.UserAgent = "multicache/" + version
	rc.QPS, rc.Burst = 50, 100
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("management cluster: %w", err)
	}
	return cs, nil
}

// clusterSource is the kubeconfig source, the Secret source, or both. With Secrets on, the
// kubeconfig source is used only when its files are named (kubeconfig.paths, --kubeconfig):
// the default kubeconfig of whoever runs the daemon is not taken for fleet members.
func clusterSource(ctx context.Context, cfg *config.Config, mgmt kubernetes.Interface, log *zap.Logger) (clusterset.Source, error) {
	var srcs []clusterset.Source
	if cfg.Sources.Secrets == nil || len(cfg.Kubeconfig.Paths) > 0 {
		kc, err := clusterset.NewKubeconfig(cfg.KubeconfigOptions())
		if err != nil {
			return nil, err
		}
		// Fail fast when the kubeconfig yields nothing usable and nothing else can; later
		// reload errors only get logged.
		if clusters, err := kc.Load(); err != nil {
			if len(clusters) == 0 && cfg.Sources.Secrets == nil {
				return nil, err
			}
			log.Warn("some kubeconfig contexts are unusable", zap.Error(err))
		}
		srcs = append(srcs, kc)
	}
	if s := cfg.Sources.Secrets; s != nil {
		sec, err := clusterset.NewSecrets(clusterset.SecretsOptions{Client: mgmt, Namespace: s.Namespace, Include: s.Include, Exclude: s.Exclude, Logger: log.Named("secrets")})
		if err != nil {
			return nil, err
		}
		if err := sec.Start(ctx, time.Minute); err != nil {
			return nil, err
		}
		srcs = append(srcs, sec)
	}
	if len(srcs) == 1 {
		return srcs[0], nil
	}
	return clusterset.NewMulti(srcs...), nil
}

// returnMemoryAfterMoves returns freed memory to the operating system once clusters have
// stopped joining, syncing and leaving this replica for a while.
func returnMemoryAfterMoves(ctx context.Context, reg *clusterset.Registry, returns *memoryReturns, log *zap.Logger) {
	changes, stop := reg.Subscribe(256)
	defer stop()
	quiet := clusterset.ShelfTTL + 5*time.Second
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ch := <-changes:
			if ch.To == clusterset.Removed || ch.To == clusterset.Synced {
				timer.Reset(quiet)
			}
		case <-timer.C:
			returns.free("moves")
			log.Info("clusters moved; freed memory returned to the OS")
		}
	}
}
