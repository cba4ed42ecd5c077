package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/test/fleet"
	"github.com/multicache/multicache/test/harness"
)

// BenchmarkWriteLatency measures P4: API server write → handler latency, for one multicache
// handler on the fleet and, side by side in the same process on the same events, for handlers
// on one client-go informer factory per cluster (B). The loader churns ConfigMaps (creates,
// updates, deletes) across 3 clusters at the target rate (1,000/s, the figure) and then
// at a rate the machine sustains with headroom; both are reported with the rate achieved, where
// the CPU went and the handler's backlog and lag sampled each second.
//
//	MULTICACHE_BENCH_LATENCY_SECONDS=30 go test -run '^$' -bench WriteLatency -benchtime 1x ./test/bench/
func BenchmarkWriteLatency(b *testing.B) {
	secs := harness.EnvInt("MULTICACHE_BENCH_LATENCY_SECONDS", 30)
	rates := []float64{float64(harness.EnvInt("MULTICACHE_BENCH_LATENCY_RATE", 1000)), 600, 300}
	ctx := context.Background()
	var sb strings.Builder
	var goals []goal
	fmt.Fprintf(&sb, "| target ops/s | achieved ops/s | multicache p50 | multicache p99 | B p50 | B p99 | multicache − B, same event, p50 / p99 | events (multicache / B) | handler backlog max | handler lag max | CPU (cores busy, by process) |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, rate := range rates {
		// A fresh fleet per rate: etcd history left by one row would slow the next.
		row, g := latencyRow(ctx, b, rate, time.Duration(secs)*time.Second)
		sb.WriteString(row)
		goals = append(goals, g)
	}
	b.Log("\n" + sb.String())
	if os.Getenv("MULTICACHE_BENCH_WRITE") != "" {
		writeSection(b, "P4: write → handler latency, 3 clusters", fmt.Sprintf(`%s

The loader creates, updates and deletes ConfigMaps for %d s per row (48 writers per cluster, at
most 40 live objects each), stamping each write's time into the object. A multicache handler
and handlers on one client-go informer factory per cluster (B) run in the same process on the
same events. Latency is from the write being sent to the handler being called. The
"multicache − B" column pairs every event both saw (cluster, object, resourceVersion) and
subtracts B's delay from multicache's: the latency multicache adds to the same event. The API
servers, etcds, loader and both caches share the machine's CPUs; where they saturate, the
achieved rate is below the target and the CPU column says where the time went.

%s
Command: `+"`MULTICACHE_BENCH_LATENCY_SECONDS=%d go test -run '^$' -bench WriteLatency -benchtime 1x ./test/bench/`"+`
`, machineLine(), secs, sb.String(), secs))
		recordGoals(b, goals...)
	}
}

// latencyRow runs one rate on its own 3-cluster fleet and returns its table row and goal.
func latencyRow(ctx context.Context, b *testing.B, rate float64, dur time.Duration) (string, goal) {
	h := harness.Start(b, harness.Options{Timeout: time.Hour})
	f, loader, src := h.Fleet, h.Loader, h.Static()
	defer func() { // before the next row starts; runs after the caches below have stopped
		if err := f.Stop(); err != nil {
			b.Errorf("stop fleet: %v", err)
		}
	}()
	reg, err := clusterset.New(clusterset.Options{Source: src, Logger: zap.NewNop(),
		Resources: []clusterset.ResourceSpec{{Name: "configmaps", Namespace: "churn"}}})
	if err != nil {
		b.Fatal(err)
	}
	cms, _ := reg.Aggregate("configmaps")
	mcLat, bLat := &fleet.WriteLatency{}, &fleet.WriteLatency{}
	hreg, err := cms.AddEventHandler(aggregate.HandlerFuncs{
		AddFunc:    func(cluster string, obj any, initial bool) { mcLat.ObserveIn(cluster, obj, initial) },
		UpdateFunc: func(cluster string, _, obj any) { mcLat.ObserveIn(cluster, obj, false) },
	})
	if err != nil {
		b.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = reg.Start(rctx); close(done) }()
	var factories []informers.SharedInformerFactory
	defer func() {
		stop()
		for _, fac := range factories {
			fac.Shutdown()
		}
		<-done
	}()
	for _, c := range f.Clusters {
		fac := informers.NewSharedInformerFactoryWithOptions(kubernetes.NewForConfigOrDie(c.Config()), 0, informers.WithNamespace("churn"))
		_, _ = fac.Core().V1().ConfigMaps().Informer().AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
			AddFunc:    func(obj any, initial bool) { bLat.ObserveIn(c.Name, obj, initial) },
			UpdateFunc: func(_, obj any) { bLat.ObserveIn(c.Name, obj, false) },
		})
		fac.Start(rctx.Done())
		factories = append(factories, fac)
	}
	if missing := reg.WaitForSync(ctx, time.Minute); missing != nil {
		b.Fatal(missing)
	}
	var sb strings.Builder
	mcLat.Reset()
	bLat.Reset()
	var maxPending int
	var maxLag time.Duration
	sampleStop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-sampleStop:
				return
			case <-t.C:
				maxPending, maxLag = max(maxPending, hreg.Pending()), max(maxLag, hreg.Lag())
			}
		}
	}()
	cpu0 := f.CPUSeconds()
	res, err := loader.Churn(ctx, fleet.ChurnSpec{Rate: rate, Duration: dur, Namespace: "churn", Workers: 48, MaxLive: 40})
	if err != nil {
		b.Fatal(err)
	}
	cpu1 := f.CPUSeconds()
	time.Sleep(2 * time.Second) // the last events arrive
	close(sampleStop)
	<-sampled
	diff := fleet.PairedDiff(mcLat, bLat)
	dpct := func(p int) string {
		if len(diff) == 0 {
			return "—"
		}
		return diff[min(len(diff)-1, len(diff)*p/100)].Round(10 * time.Microsecond).String()
	}
	fmt.Fprintf(&sb, "| %.0f | %.0f | %s | %s | %s | %s | %s / %s (%d events) | %d / %d | %d | %s | %s |\n", rate, float64(res.Ops())/res.Elapsed.Seconds(),
		mcLat.Pct(50), mcLat.Pct(99), bLat.Pct(50), bLat.Pct(99), dpct(50), dpct(99), len(diff), mcLat.N(), bLat.N(), maxPending, maxLag.Round(time.Millisecond),
		fleet.CPUSplit(cpu0, cpu1, res.Elapsed))
	achieved := float64(res.Ops()) / res.Elapsed.Seconds()
	return sb.String(), goal{"P4", fmt.Sprintf("write → handler p99, 3 clusters, %.0f writes/s target", rate), "≤ 50 ms, no growing lag",
		fmt.Sprintf("%s at %.0f writes/s achieved (B: %s; multicache − B on the same event p50 %s, p99 %s); backlog max %d, lag max %s", mcLat.Pct(99), achieved, bLat.Pct(99), dpct(50), dpct(99), maxPending, maxLag.Round(time.Millisecond)),
		met(mcLat.Pct(99) <= 50*time.Millisecond && maxLag < time.Second), ""}
}
