package daemon

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/config"
	"github.com/multicache/multicache/pkg/shard"
	"github.com/multicache/multicache/pkg/sources"
	"github.com/multicache/multicache/pkg/storage/peer"
)

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
		LeaseDuration: sh.LeaseDuration.Duration, Weight: sh.Weight, MaxWarmups: sh.MaxWarmups, MaxHandovers: sh.MaxHandovers, Source: src,
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
// none is given, from the Pod the daemon runs in. A qps of 0 keeps client-go's default rate.
func managementClient(m config.Management, version string, qps float32, burst int) (kubernetes.Interface, error) {
	rc, err := managementConfig(m, "management", version)
	if err != nil {
		return nil, err
	}
	if qps > 0 {
		rc.QPS, rc.Burst = qps, burst
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("management cluster: %w", err)
	}
	return cs, nil
}

// The access reviews of delegated auth have a rate of their own (a client of their own). A
// caller's first read of the fleet asks one review per cluster (1,001 for 1,000 clusters),
// cached after that; at the management client's 50/s that first read waited 20 s, and a
// hundred identities' first reads over half an hour (S2.8, docs/SCALING.md).
const reviewQPS, reviewBurst = 500, 1000

// managementConfig is the client config of a cluster the daemon reads its own settings from
// (the management cluster, an inventory): m's kubeconfig and context, else in cluster. field
// names m in the config file, for errors.
func managementConfig(m config.Management, field, version string) (*rest.Config, error) {
	var rc *rest.Config
	var err error
	if m.Kubeconfig == "" {
		if rc, err = rest.InClusterConfig(); err != nil {
			return nil, fmt.Errorf("%s cluster: not running in a Pod (%v): set %s.kubeconfig (--management-kubeconfig)", field, err, field)
		}
	} else {
		rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: m.Kubeconfig}
		if rc, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: m.Context}).ClientConfig(); err != nil {
			return nil, fmt.Errorf("%s.kubeconfig %s: %w", field, m.Kubeconfig, err)
		}
	}
	rc = rest.CopyConfig(rc)
	rc.UserAgent = "multicache/" + version
	rc.QPS, rc.Burst = 50, 100
	return rc, nil
}

// clusterProfiles is the ClusterProfiles source, started and listed.
func clusterProfiles(ctx context.Context, cfg *config.Config, version string, log *zap.Logger) (*sources.ClusterProfiles, error) {
	p := cfg.Clusters.ClusterProfiles
	field := "management"
	if p.Kubeconfig != "" {
		field = "clusters.clusterProfiles"
	}
	rc, err := managementConfig(p.InventoryConfig(cfg.Management), field, version)
	if err != nil {
		return nil, err
	}
	dc, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("clusters.clusterProfiles: %w", err)
	}
	src, err := sources.NewClusterProfiles(sources.ClusterProfilesOptions{Client: dc, Namespace: p.Namespace, LabelSelector: p.LabelSelector,
		ProviderFile: p.ProviderFile, Logger: log.Named("clusterprofiles")})
	if err != nil {
		return nil, err
	}
	if err := src.Start(ctx, time.Minute); err != nil {
		return nil, err
	}
	return src, nil
}

// clusterSource is the kubeconfig source, the Secret source, the ClusterProfiles source, or
// several. With Secrets or ClusterProfiles on, the kubeconfig source is used only when its
// files are named (kubeconfig.paths, --kubeconfig): the default kubeconfig of whoever runs the
// daemon is not taken for fleet members.
func clusterSource(ctx context.Context, cfg *config.Config, mgmt kubernetes.Interface, version string, log *zap.Logger) (clusterset.Source, error) {
	var srcs []clusterset.Source
	inventory := cfg.Sources.Secrets != nil || cfg.Clusters.ClusterProfiles != nil
	if !inventory || len(cfg.Kubeconfig.Paths) > 0 {
		kc, err := sources.NewKubeconfig(cfg.KubeconfigOptions())
		if err != nil {
			return nil, err
		}
		// Fail fast when the kubeconfig yields nothing usable and nothing else can; later
		// reload errors only get logged.
		if clusters, err := kc.Load(); err != nil {
			if len(clusters) == 0 && !inventory {
				return nil, err
			}
			log.Warn("some kubeconfig contexts are unusable", zap.Error(err))
		}
		srcs = append(srcs, kc)
	}
	if s := cfg.Sources.Secrets; s != nil {
		sec, err := sources.NewSecrets(sources.SecretsOptions{Client: mgmt, Namespace: s.Namespace, Include: s.Include, Exclude: s.Exclude, Logger: log.Named("secrets")})
		if err != nil {
			return nil, err
		}
		if err := sec.Start(ctx, time.Minute); err != nil {
			return nil, err
		}
		srcs = append(srcs, sec)
	}
	if cfg.Clusters.ClusterProfiles != nil {
		src, err := clusterProfiles(ctx, cfg, version, log)
		if err != nil {
			return nil, err
		}
		srcs = append(srcs, src)
	}
	if len(srcs) == 1 {
		return srcs[0], nil
	}
	return sources.NewMulti(srcs...), nil
}

// returnMemoryAfterMoves returns freed memory to the operating system once clusters have
// stopped joining, syncing and leaving this replica for a while, and the states it handed off
// have left its shelf (taken or expired: they are whole stores).
func returnMemoryAfterMoves(ctx context.Context, reg *clusterset.Registry, returns *memoryReturns, log *zap.Logger) {
	changes, stop := reg.Subscribe(256)
	defer stop()
	const quiet = 15 * time.Second
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
			if reg.ShelvedStates() > 0 {
				timer.Reset(quiet) // still waiting for their next owners
				continue
			}
			returns.free("moves")
			log.Info("clusters moved; freed memory returned to the OS")
		}
	}
}
