package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/multicache/multicache/pkg/clusterset"
	mcrcache "github.com/multicache/multicache/pkg/crcache"
	"github.com/multicache/multicache/test/fleet"
	"github.com/multicache/multicache/test/harness"
)

// watchPods is what a controller of Pods does with its cache: it asks for the Pods' informer
// and adds an event handler, then waits for it to sync.
func watchPods(ctx context.Context, c crcache.Cache) error {
	inf, err := c.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return err
	}
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{})
	if err != nil {
		return err
	}
	if !toolscache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		return fmt.Errorf("a handler never synced")
	}
	return nil
}

// controllerRuntimeCaches is how a controller-runtime user caches N clusters today: one
// cache.Cache per cluster (each its own informers), Pods watched in each.
func controllerRuntimeCaches(ctx context.Context, cfgs []*rest.Config) (result, func(), error) {
	before := heap()
	ctx, cancel := context.WithCancel(ctx)
	var caches []crcache.Cache
	for _, cfg := range cfgs {
		c, err := crcache.New(cfg, crcache.Options{})
		if err != nil {
			cancel()
			return result{}, nil, err
		}
		go func() { _ = c.Start(ctx) }()
		caches = append(caches, c)
	}
	for _, c := range caches {
		if err := watchPods(ctx, c); err != nil {
			cancel()
			return result{}, nil, err
		}
	}
	r := result{bytes: heap() - before}
	runtime.KeepAlive(caches)
	return r, cancel, nil
}

// multicacheCaches is the same controller on multicache: one Registry, a crcache.Cache per
// cluster, Pods watched in each.
func multicacheCaches(ctx context.Context, cfgs []*rest.Config) (result, func(), error) {
	before := heap()
	var src clusterset.Static
	for i, cfg := range cfgs {
		src = append(src, clusterset.ClusterConfig{Name: "fleet-" + strconv.Itoa(i+1), Config: cfg, Fingerprint: "x"})
	}
	reg, err := clusterset.New(clusterset.Options{Source: src, QPS: -1, Resources: []clusterset.ResourceSpec{{Name: "pods"}}})
	if err != nil {
		return result{}, nil, err
	}
	fl, err := mcrcache.NewFleet(reg, mcrcache.Options{})
	if err != nil {
		return result{}, nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = fl.Start(ctx); close(done) }()
	var caches []client.Reader
	for _, s := range src {
		c := fl.Cache(s.Name)
		go func() { _ = c.Start(ctx) }()
		if err := watchPods(ctx, c); err != nil {
			cancel()
			<-done
			return result{}, nil, err
		}
		caches = append(caches, c)
	}
	r := result{bytes: heap() - before}
	runtime.KeepAlive(caches)
	return r, func() { cancel(); <-done }, nil
}

// BenchmarkControllerRuntimeHeap measures the heap per cached Pod of a controller on 3
// clusters of MULTICACHE_BENCH_CR_PODS Pods each (default 20,000, bulk-seeded): with
// controller-runtime's own cache per cluster (B), and with multicache's crcache over one
// Registry. MULTICACHE_BENCH_RUNS runs (default 5) in rotating order; medians (min–max).
//
//	go test -run '^$' -bench ControllerRuntimeHeap -benchtime 1x -timeout 30m -v ./test/bench/
func BenchmarkControllerRuntimeHeap(b *testing.B) {
	perCluster := harness.EnvInt("MULTICACHE_BENCH_CR_PODS", 20000)
	runs := harness.EnvInt("MULTICACHE_BENCH_RUNS", 5)
	h := harness.Start(b, harness.Options{Timeout: time.Hour})
	ctx, f := h.Ctx, h.Fleet
	const namespaces = 10
	if _, err := h.Loader.BulkSeed(ctx, fleet.BulkSpec{Namespaces: namespaces, PodsPerNamespace: perCluster / namespaces, ConfigMapsPerNamespace: 1, Nodes: 100}); err != nil {
		b.Fatal(err)
	}
	var cfgs []*rest.Config
	for _, c := range f.Clusters {
		cfg := c.Config()
		cfg.QPS, cfg.Burst = -1, 0
		cfgs = append(cfgs, cfg)
	}
	total := perCluster / namespaces * namespaces * len(cfgs)
	variants := []variant{
		{"B: controller-runtime, a cache per cluster", controllerRuntimeCaches},
		{"multicache: crcache over one Registry", multicacheCaches},
	}
	perPod := map[string][]float64{}
	rotate(b, ctx, cfgs, variants, runs, func(run int, v variant, r result) {
		perPod[v.name] = append(perPod[v.name], float64(r.bytes)/float64(total))
		b.Logf("run %d %-45s heap %6.0f B/Pod", run+1, v.name, float64(r.bytes)/float64(total))
	})
	base := median(perPod[variants[0].name])
	var sb strings.Builder
	fmt.Fprintf(&sb, "| variant | heap per Pod, median (min–max) | ÷ B |\n|---|---|---|\n")
	for _, v := range variants {
		fmt.Fprintf(&sb, "| %s | %s | %.2f× |\n", v.name, spreadBytes(perPod[v.name]), median(perPod[v.name])/base)
	}
	b.ReportMetric(median(perPod[variants[1].name]), "multicache-B/pod")
	b.Log("\n" + sb.String())
	if os.Getenv("MULTICACHE_BENCH_WRITE") != "" {
		writeSection(b, "R1: a controller-runtime controller's cache, per Pod", fmt.Sprintf(`%s

%d Pods in %d clusters (bulk-seeded, fleet.BulkSeed), cached for one controller: it asks its
cache of each cluster for the Pods' informer, adds a handler and waits for it to sync. B is
controller-runtime's own cache, one per cluster (cache.New, default options: typed objects,
each cluster its own informer); multicache is pkg/crcache, one Cache per cluster over one
Registry (default transform: managedFields dropped, equal strings shared). Heap per Pod: the
live heap after GC that the caches add, divided by the Pods. %d runs in rotating order.

%s`, machineLine(), total, len(cfgs), runs, sb.String()))
	}
}
