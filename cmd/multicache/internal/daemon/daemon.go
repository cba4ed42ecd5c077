package daemon

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
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/multicache/multicache/pkg/auth"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/config"
	"github.com/multicache/multicache/pkg/server"
	"github.com/multicache/multicache/pkg/shard"
	"github.com/multicache/multicache/pkg/storage/peer"
	"github.com/multicache/multicache/pkg/table"
)

// Options are what the daemon takes besides its config.
type Options struct {
	// Version names the build: in the User-Agent of every request to a member or the
	// management cluster.
	Version string
	// Tables supplies the Table columns of built-in kinds (kubectl get); nil: the default
	// columns.
	Tables table.Provider
}

// Daemon is a built daemon: its listener is open, nothing runs until Run.
type Daemon struct {
	cfg     *config.Config
	log     *zap.Logger
	reg     *clusterset.Registry
	coord   *shard.Coordinator // nil without sharding
	srv     *server.Server
	hs      *http.Server
	ln      net.Listener
	metrics *prometheus.Registry
	// base is the context of every request: cancelling it ends open watches at shutdown.
	base        context.Context
	endRequests context.CancelFunc
	// stopRun ends what lives as long as the daemon (the management cluster's informers).
	stopRun  context.CancelFunc
	authMode string
}

// Build makes the daemon of cfg (defaulted and validated): its logger and memory limit, the
// management client, the cluster source, the shard Coordinator, the Registry and the server,
// and opens its listener. Every error names the setting it comes from.
func Build(cfg *config.Config, opts Options) (*Daemon, error) {
	log, err := newLogger(cfg.Logging)
	if err != nil {
		return nil, err
	}
	d := &Daemon{cfg: cfg, log: log, metrics: prometheus.NewRegistry()}
	ok := false
	defer func() {
		if !ok {
			d.close()
		}
	}()
	// client-go logs through klog; send it to the same place, structured.
	klog.SetLogger(zapr.NewLogger(log.Named("client-go")))
	setMemoryLimit(cfg, log)

	specs, err := cfg.ResourceSpecs()
	if err != nil {
		return nil, err
	}
	runCtx, stopRun := context.WithCancel(context.Background())
	d.stopRun = stopRun
	var mgmt, reviews kubernetes.Interface
	if cfg.NeedsManagement() {
		if mgmt, err = managementClient(cfg.Management, opts.Version, 0, 0); err != nil {
			return nil, err
		}
	}
	if cfg.Delegated() {
		if reviews, err = managementClient(cfg.Management, opts.Version, reviewQPS, reviewBurst); err != nil {
			return nil, err
		}
	}
	src, err := clusterSource(runCtx, cfg, mgmt, opts.Version, log)
	if err != nil {
		return nil, err
	}
	trust, err := peerTrust(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.ShardingEnabled() {
		if d.coord, err = newCoordinator(cfg, mgmt, src, log, d.metrics, trust); err != nil {
			return nil, err
		}
		src = d.coord // the registry runs the clusters this replica owns
	}
	listBudget := cfg.UnpagedListBudget
	if listBudget == 0 { // before raiseGCForSync, which lowers the memory limit while it holds
		listBudget = unpagedListBudget()
	}
	d.reg, err = clusterset.New(clusterset.Options{Source: src, Resources: specs, Logger: log, QPS: cfg.QPS, Burst: cfg.Burst, DisableCompression: cfg.DisableCompression,
		UserAgent: "multicache/" + opts.Version, UnpagedListMax: cfg.UnpagedListMax, UnpagedListBudget: listBudget})
	if err != nil {
		return nil, err
	}
	sopts, err := d.serverOptions(reviews, trust)
	if err != nil {
		return nil, err
	}
	sopts.Tables = opts.Tables
	if d.srv, err = server.New(sopts); err != nil {
		return nil, err
	}
	if d.ln, err = net.Listen("tcp", cfg.Server.Listen); err != nil {
		return nil, fmt.Errorf("server.listen: %w", err)
	}
	d.base, d.endRequests = context.WithCancel(context.Background())
	d.hs = &http.Server{Handler: d.srv.Handler(), ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return d.base }}
	if d.hs.TLSConfig, err = tlsConfig(cfg, trust); err != nil {
		return nil, err
	}
	ok = true
	return d, nil
}

// close releases what Build made when it fails.
func (d *Daemon) close() {
	if d.ln != nil {
		_ = d.ln.Close()
	}
	if d.stopRun != nil {
		d.stopRun()
	}
	if d.endRequests != nil {
		d.endRequests()
	}
	_ = d.log.Sync()
}

// Addr is the address the daemon listens on.
func (d *Daemon) Addr() net.Addr { return d.ln.Addr() }

// serverOptions are the server's options of the config: the Registry, the fleet and peer trust
// when sharded, and the authentication mode (delegated: its reviews sent through reviews).
func (d *Daemon) serverOptions(reviews kubernetes.Interface, trust *peer.Trust) (server.Options, error) {
	cfg := d.cfg
	sopts := cfg.ServerOptions()
	sopts.Registry, sopts.Logger, sopts.Metrics = d.reg, d.log, d.metrics
	if d.coord != nil {
		// Running includes stacks still stopping: a fence moves only once none is left. A
		// cluster its source holds back (Waiting) has nothing to sync: it takes no warm-up slot.
		d.coord.SetLocal(func(cluster string) (bool, bool) {
			cs, ok := d.reg.ClusterStatus(cluster)
			return d.reg.Running(cluster), ok && (cs.Waiting || cs.State != clusterset.Pending && cs.State != clusterset.Syncing)
		})
		// A handoff names this replica only when a state of the cluster waits here (or may yet).
		d.coord.SetKept(d.reg.HasShelved)
		sopts.Fleet, sopts.PeerTrust = d.coord, trust
		if cfg.Sharding.PeerTimeout.Duration > 0 {
			sopts.PeerTimeout = cfg.Sharding.PeerTimeout.Duration
		}
	}
	d.authMode = "none"
	var err error
	switch {
	case cfg.Delegated():
		var ca string
		if cfg.Server.TLS != nil {
			ca = cfg.Server.TLS.ClientCAFile
		}
		if sopts.Authorizer, err = auth.New(auth.Options{Client: reviews, ClientCAFile: ca, Metrics: sopts.Metrics}); err != nil {
			return sopts, err
		}
		d.authMode = config.AuthDelegated
	case cfg.Server.Auth != nil:
		if sopts.Tokens, err = auth.ReadTokenFile(cfg.Server.Auth.TokenFile); err != nil {
			return sopts, fmt.Errorf("server.auth.tokenFile: %w", err)
		}
		d.authMode = config.AuthToken
	}
	return sopts, nil
}

// tlsConfig is the listener's TLS beyond its certificate: the CAs callers' and peers'
// certificates are asked of, and, with peer trust, this replica's peer certificate for a peer
// that asks for its identity. nil without a client CA or peer trust.
func tlsConfig(cfg *config.Config, trust *peer.Trust) (*tls.Config, error) {
	if cfg.Server.TLS == nil || (cfg.Server.TLS.ClientCAFile == "" && trust == nil) {
		return nil, nil
	}
	// Certificates are verified by the authenticators (callers' against the client CA, peers'
	// against the peer CA); the pool tells clients which CAs to use.
	pool := x509.NewCertPool()
	if f := cfg.Server.TLS.ClientCAFile; f != "" {
		pem, err := os.ReadFile(f)
		if err != nil || !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("server.tls.clientCAFile %s: no PEM certificate in it (%v)", f, err)
		}
	}
	tc := &tls.Config{ClientAuth: tls.RequestClientCert, ClientCAs: pool, MinVersion: tls.VersionTLS12}
	if trust != nil {
		pool.AppendCertsFromPEM(trust.CAPEM())
		tc = trust.ServerConfig(tc)
	}
	return tc, nil
}

// Run serves until ctx ends or the listener fails, then shuts down: this replica's clusters go
// to the others first (the Registry still runs, so that it stops each before its fence moves),
// then serving and the Registry stop. It returns the listener's failure, if any.
func (d *Daemon) Run(ctx context.Context) error {
	defer d.close()
	log, reg, cfg := d.log, d.reg, d.cfg
	setGCPercent(cfg.SteadyGC(), log)
	restoreGC := raiseGCForSync(cfg.SyncGC(), "initial sync", log)
	regCtx, stopReg := context.WithCancel(context.Background())
	defer stopReg()
	var wg sync.WaitGroup
	wg.Go(func() { _ = reg.Start(regCtx) })
	// The initial lists' garbage sets the process's high-water mark: once the first sync is
	// over (every cluster synced or failing), the collector returns to its percent (gcPercent,
	// else GOGC's) and the memory the sync freed goes back to the operating system at once
	// rather than over the scavenger's minutes.
	returns := newMemoryReturns(d.metrics)
	go func() {
		failing := waitInitialSync(regCtx, reg)
		restoreGC()
		if regCtx.Err() == nil {
			returns.free("initial-sync")
			log.Info("initial sync over; freed memory returned to the OS", zap.Strings("failing", failing))
		}
		if d.coord != nil {
			// Takeovers raise it again; returnMemoryAfterMoves returns what they freed.
			raiseGCForTakeovers(regCtx, d.coord.Warmups, cfg.TakeoverGC(), log)
		}
	}()
	if d.coord != nil {
		// A sharded replica's clusters come and go (moves, a peer's death): each burst leaves
		// the garbage of lists synced or of stores handed off. Once a burst has been quiet and
		// the states it handed off have been taken or have expired, return that memory too.
		go returnMemoryAfterMoves(regCtx, reg, returns, log)
	}
	serveErr := make(chan error, 1)
	wg.Go(func() {
		var err error
		if cfg.Server.TLS != nil {
			err = d.hs.ServeTLS(d.ln, cfg.Server.TLS.CertFile, cfg.Server.TLS.KeyFile)
		} else {
			err = d.hs.Serve(d.ln)
		}
		if !errors.Is(err, http.ErrServerClosed) {
			serveErr <- err
		}
	})
	coordDone := make(chan struct{})
	coordCtx, stopCoord := context.WithCancel(context.Background())
	defer stopCoord()
	if d.coord != nil {
		go func() {
			defer close(coordDone)
			if err := d.coord.Run(coordCtx); err != nil {
				log.Error("sharding stopped", zap.Error(err))
			}
		}()
		log.Info("sharding", zap.String("replica", d.coord.Identity()), zap.String("advertiseURL", cfg.Sharding.AdvertiseURL))
	} else {
		close(coordDone)
	}
	log.Info("serving", zap.String("listen", d.ln.Addr().String()), zap.Bool("tls", cfg.Server.TLS != nil), zap.String("auth", d.authMode), zap.Strings("resources", reg.Resources()))
	var err error
	select {
	case <-ctx.Done():
	case err = <-serveErr:
		log.Error("server failed", zap.Error(err))
	}
	log.Info("shutting down")
	stopCoord()
	<-coordDone
	d.awaitHandovers()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d.endRequests()
	_ = d.hs.Shutdown(shutdownCtx)
	_ = d.hs.Close()
	stopReg()
	wg.Wait()
	return err
}

// Handing off on shutdown: the replica waits while its clusters' next owners take the states
// it kept (they take them a few at a time, sharding.maxHandovers), until none has been taken for
// handoverIdle, and at most handoverWaitMax. deploy/sharded gives the Pod a termination grace
// period above the whole shutdown: a lease duration for the clusters to stop, the fence
// writes, this wait, and the HTTP server's drain.
const (
	handoverIdle    = 10 * time.Second
	handoverWaitMax = 90 * time.Second
)

// awaitHandovers waits for the clusters' next owners to take the state this replica kept of
// them (a handover costs their API servers no list), and not at all when no other replica
// stays to take them (the whole fleet is stopping).
func (d *Daemon) awaitHandovers() {
	if d.coord == nil {
		return
	}
	waitCtx, cancelWait := context.WithTimeout(context.Background(), handoverWaitMax)
	defer cancelWait()
	go func() {
		for waitCtx.Err() == nil {
			staying := false
			for _, p := range d.coord.Peers() {
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
	start := time.Now()
	if left := d.reg.WaitShelfProgress(waitCtx, handoverIdle); left > 0 {
		d.log.Info("handoff: states not taken by the next owners; they list from the clusters", zap.Int("left", left), zap.Duration("waited", time.Since(start)))
	}
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

// setMemoryLimit sets the Go heap's soft limit: memoryLimit when given; otherwise 90% of the
// container's memory limit, unless GOMEMLIMIT is set.
func setMemoryLimit(cfg *config.Config, log *zap.Logger) {
	if cfg.MemoryLimit != "" {
		q, _ := resource.ParseQuantity(cfg.MemoryLimit) // validated
		debug.SetMemoryLimit(q.Value())
		log.Info("memory limit", zap.Int64("goMemLimitBytes", q.Value()), zap.String("from", "memoryLimit"))
	} else if limit, err := memlimit.Set(memlimit.WithRatio(0.9), memlimit.WithProvider(memlimit.FromCgroup)); err == nil && limit > 0 && limit < math.MaxInt64 {
		log.Info("memory limit", zap.Int64("goMemLimitBytes", limit), zap.String("from", "cgroup or GOMEMLIMIT"))
	}
}
