package chaos

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/server"
	"github.com/multicache/multicache/pkg/verify"
	"github.com/multicache/multicache/test/fleet"
	"github.com/multicache/multicache/test/harness"
)

// TestLoad writes at MULTICACHE_LOAD_RATE ops/s (default 1000: creates, updates, deletes of
// ConfigMaps) across 3 clusters for MULTICACHE_LOAD_SECONDS (default 60; `make soak` runs 600)
// with a fast handler, a slow one (10 ms per event) and one that panics now and then attached,
// and the daemon's HTTP API with its watch hub and a list-then-watch client (unless
// MULTICACHE_LOAD_HUB=0, to measure the heap without the hub).
// Each writer keeps at most 40 objects, so the object count levels off (3 × 48 × 40 = 5,760)
// and a flat heap can be told from a leak. Afterwards the cache and the fast handler must equal what the API servers list, and the slow
// handler must catch up. It reports the achieved rate, where the CPU went, handler backlog and
// lag, and the heap over time.
func TestLoad(t *testing.T) {
	rate := float64(harness.EnvInt("MULTICACHE_LOAD_RATE", 1000))
	dur := time.Duration(harness.EnvInt("MULTICACHE_LOAD_SECONDS", 60)) * time.Second
	h := harness.Start(t, harness.Options{Timeout: dur + 10*time.Minute})
	ctx, f, loader := h.Ctx, h.Fleet, h.Loader
	servers := h.Servers()
	reg, err := clusterset.New(clusterset.Options{Source: h.Static(), Resources: []clusterset.ResourceSpec{{Name: "configmaps", Namespace: "churn"}}})
	if err != nil {
		t.Fatal(err)
	}
	cms, _ := reg.Aggregate("configmaps")
	fast, slow := harness.NewFinalStates(0), harness.NewFinalStates(10*time.Millisecond)
	fastReg, _ := cms.AddEventHandler(fast)
	slowReg, _ := cms.AddEventHandler(slow)
	var calls atomic.Int64
	panicky, _ := cms.AddEventHandler(aggregate.HandlerFuncs{UpdateFunc: func(string, any, any) {
		if calls.Add(1)%97 == 0 {
			panic("a handler bug")
		}
	}})
	// Write → handler latency, for a multicache handler and, side by side in the same process,
	// for a handler on plain client-go informers (one factory per cluster: the baseline B).
	mcLat, bLat := &fleet.WriteLatency{}, &fleet.WriteLatency{}
	_, _ = cms.AddEventHandler(aggregate.HandlerFuncs{
		AddFunc:    func(_ string, obj any, initial bool) { mcLat.Observe(obj, initial) },
		UpdateFunc: func(_ string, _, obj any) { mcLat.Observe(obj, false) },
	})
	hubOn := os.Getenv("MULTICACHE_LOAD_HUB") != "0"
	var watch *watchClient
	var srv *server.Server
	if hubOn {
		var err error
		if srv, err = server.New(server.Options{Registry: reg}); err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(srv.Handler())
		defer hs.Close()
		defer hs.CloseClientConnections()
		defer func() {
			if watch != nil {
				watch.stop()
			}
		}()
		defer srv.Close()
		watch = startWatchClient(ctx, hs.URL, "configmaps", nil)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = reg.Start(rctx); close(done) }()
	var factories []informers.SharedInformerFactory
	defer func() {
		stop() // first: the factories stop on rctx
		for _, fac := range factories {
			fac.Shutdown()
		}
		<-done
	}()
	for _, c := range f.Clusters {
		cs := kubernetes.NewForConfigOrDie(c.Config())
		fac := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace("churn"))
		inf := fac.Core().V1().ConfigMaps().Informer()
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
			AddFunc:    func(obj any, initial bool) { bLat.Observe(obj, initial) },
			UpdateFunc: func(_, obj any) { bLat.Observe(obj, false) },
		})
		fac.Start(rctx.Done())
		factories = append(factories, fac)
	}
	if missing := reg.WaitForSync(ctx, time.Minute); missing != nil {
		t.Fatal(missing)
	}

	// Sample backlog, lag and heap while the load runs.
	type sample struct {
		at                  time.Duration
		heapMiB             float64
		slowPending, fastPd int
		fastLag             time.Duration
	}
	var samples []sample
	sampleStop := make(chan struct{})
	sampled := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(sampled)
		tick := time.NewTicker(dur / 6)
		defer tick.Stop()
		for {
			select {
			case <-sampleStop:
				return
			case <-tick.C:
			}
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			samples = append(samples, sample{time.Since(start).Round(time.Second), float64(ms.HeapAlloc) / (1 << 20), slowReg.Pending(), fastReg.Pending(), fastReg.Lag()})
		}
	}()
	cpu0 := f.CPUSeconds()
	res, err := loader.Churn(ctx, fleet.ChurnSpec{Rate: rate, Duration: dur, Namespace: "churn", Workers: 48, MaxLive: 40})
	if err != nil {
		t.Fatal(err)
	}
	cpu1 := f.CPUSeconds()
	close(sampleStop)
	<-sampled
	achieved := float64(res.Ops()) / res.Elapsed.Seconds()

	t0 := time.Now()
	var rep verify.Report
	for {
		rep, err = verify.Compare(ctx, cms, harness.ConfigMaps, "churn", servers)
		if err == nil && len(rep.Diverged) == 0 {
			break
		}
		if time.Since(t0) > 60*time.Second {
			t.Fatalf("cache not converged 60s after the load: %v %s", err, rep.Summary())
		}
		time.Sleep(200 * time.Millisecond)
	}
	cacheConverged := time.Since(t0)
	want := cachedIn(cms, f.Names())
	harness.WaitFor(t, "fast handler converged", 60*time.Second, func() bool { return len(harness.Diff(want, fast.InClusters(f.Names()...))) == 0 })
	fastConverged := time.Since(t0)
	watchNote := "hub off"
	if watch != nil {
		harness.WaitFor(t, "watch client converged", 60*time.Second, func() bool { return len(harness.Diff(want, watch.InClusters(f.Names()...))) == 0 })
		lists, expired, errs := watch.counts()
		if len(errs) > 0 {
			t.Errorf("watch client: %v", errs[:min(5, len(errs))])
		}
		st := srv.Local().Cache("configmaps").Stats()
		events, bytes := st.Held, st.Bytes
		watchNote = fmt.Sprintf("hub on: watch client converged %s after the load (%d lists, %d 410s); watch ring holds %d events, about %.1f MiB",
			time.Since(t0).Round(time.Millisecond), lists, expired, events, float64(bytes)/(1<<20))
	}
	slowBacklog := slowReg.Pending()
	if int64(slowBacklog) > res.Creates+int64(len(want)) {
		t.Errorf("slow handler backlog %d exceeds the objects that ever existed (%d)", slowBacklog, res.Creates+int64(len(want)))
	}
	slowConverged := time.Duration(0)
	if os.Getenv("MULTICACHE_LOAD_WAIT_SLOW") != "" {
		// At 100 events/s the slow handler needs backlog/100 seconds; `make soak` waits for it.
		harness.WaitFor(t, "slow handler converged", 30*time.Minute, func() bool { return len(harness.Diff(want, slow.InClusters(f.Names()...))) == 0 })
		slowConverged = time.Since(t0)
	}
	for name, s := range map[string]*harness.FinalStates{"fast": fast, "slow": slow} {
		if p := s.Problems(); len(p) > 0 {
			t.Errorf("%s handler saw inconsistent events: %v", name, p[:min(5, len(p))])
		}
	}
	if panicky.Panics() == 0 {
		t.Error("the panicking handler never panicked: the case proves nothing")
	}

	var sb strings.Builder
	fmt.Fprintf(&sb, "\nload: target %.0f ops/s for %s; achieved %.0f ops/s (%d creates, %d updates, %d deletes, %d errors)\n",
		rate, dur, achieved, res.Creates, res.Updates, res.Deletes, res.Errors)
	fmt.Fprintf(&sb, "CPU during the load: %s\n", fleet.CPUSplit(cpu0, cpu1, res.Elapsed)+" (self = loader + cache + handlers)")
	fmt.Fprintf(&sb, "after the load: cache converged in %s (%d objects, 0 diverged), fast handler in %s; slow handler (10 ms/event) backlog %d events, caught up in %s (0s: not waited for); panics recovered: %d\n",
		cacheConverged.Round(time.Millisecond), rep.Objects, fastConverged.Round(time.Millisecond), slowBacklog, slowConverged.Round(time.Millisecond), panicky.Panics())
	fmt.Fprintf(&sb, "%s\n", watchNote)
	fmt.Fprintf(&sb, "write → handler latency: multicache p50 %s p99 %s (%d events); client-go informer per cluster p50 %s p99 %s (%d events)\n",
		mcLat.Pct(50), mcLat.Pct(99), mcLat.N(), bLat.Pct(50), bLat.Pct(99), bLat.N())
	sb.WriteString("| t | heap (MiB, after GC) | fast handler backlog | fast handler lag | slow handler backlog |\n|---|---|---|---|---|\n")
	for _, s := range samples {
		fmt.Fprintf(&sb, "| %s | %.1f | %d | %s | %d |\n", s.at, s.heapMiB, s.fastPd, s.fastLag.Round(time.Microsecond), s.slowPending)
	}
	t.Log(sb.String())
}
