// Package bench compares multicache with N client-go informer factories and with the raw LIST
// limit, on a local fleet, and writes docs/BENCHMARKS.md.
//
//	make bench
//	MULTICACHE_BENCH_OBJECTS=50000 MULTICACHE_BENCH_RUNS=3 go test -run '^$' -bench Fleet -benchtime 1x -timeout 60m ./test/bench/
package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/test/fleet"
	"github.com/multicache/multicache/test/harness"
)

// heap returns the live heap after two GCs.
func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

type result struct {
	sync  time.Duration
	bytes uint64 // heap held by the cache, measured after GC while it is running
}

type variant struct {
	name string
	run  func(ctx context.Context, cfgs []*rest.Config) (result, func(), error)
}

// baseline is how users write it today: one typed SharedInformerFactory per cluster, default
// options (JSON), Pods and ConfigMaps.
func baseline(ctx context.Context, cfgs []*rest.Config) (result, func(), error) {
	before := heap()
	stop := make(chan struct{})
	start := time.Now()
	var synced []cache.InformerSynced
	var stores []cache.Store
	for _, cfg := range cfgs {
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return result{}, nil, err
		}
		f := informers.NewSharedInformerFactory(cs, 0)
		p, c := f.Core().V1().Pods().Informer(), f.Core().V1().ConfigMaps().Informer()
		synced = append(synced, p.HasSynced, c.HasSynced)
		stores = append(stores, p.GetStore(), c.GetStore())
		f.Start(stop)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		close(stop)
		return result{}, nil, fmt.Errorf("baseline did not sync")
	}
	r := result{sync: time.Since(start)}
	r.bytes = heap() - before
	runtime.KeepAlive(stores)
	return r, func() { close(stop) }, nil
}

func multicache(transform clusterset.TransformOptions, mode clusterset.Mode) func(ctx context.Context, cfgs []*rest.Config) (result, func(), error) {
	return func(ctx context.Context, cfgs []*rest.Config) (result, func(), error) {
		before := heap()
		var src clusterset.Static
		for i, cfg := range cfgs {
			src = append(src, clusterset.ClusterConfig{Name: "fleet-" + strconv.Itoa(i+1), Config: cfg, Fingerprint: "x"})
		}
		reg, err := clusterset.New(clusterset.Options{Source: src, QPS: -1, Resources: []clusterset.ResourceSpec{
			{Name: "pods", Transform: transform, Mode: mode},
			{Name: "configmaps", Transform: transform, Mode: mode},
		}})
		if err != nil {
			return result{}, nil, err
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		start := time.Now()
		go func() { _ = reg.Start(rctx); close(done) }()
		if missing := reg.WaitForSync(ctx, 10*time.Minute); missing != nil {
			cancel()
			return result{}, nil, fmt.Errorf("unsynced: %v", missing)
		}
		r := result{sync: time.Since(start)}
		r.bytes = heap() - before
		runtime.KeepAlive(reg)
		return r, func() { cancel(); <-done }, nil
	}
}

// rawList is the limit: every cluster's Pods and ConfigMaps listed at once, decoded, no cache.
func rawList(contentType string) func(ctx context.Context, cfgs []*rest.Config) (result, func(), error) {
	return func(ctx context.Context, cfgs []*rest.Config) (result, func(), error) {
		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, 2*len(cfgs))
		for _, cfg := range cfgs {
			c := rest.CopyConfig(cfg)
			if contentType != "" {
				c.ContentType = contentType
				c.AcceptContentTypes = contentType
			}
			cs, err := kubernetes.NewForConfig(c)
			if err != nil {
				return result{}, nil, err
			}
			wg.Add(2)
			go func() {
				defer wg.Done()
				if _, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); err != nil {
					errs <- err
				}
			}()
			go func() {
				defer wg.Done()
				if _, err := cs.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{}); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			return result{}, nil, err
		}
		return result{sync: time.Since(start)}, func() {}, nil
	}
}

// rotate runs every variant runs times, each run in an order rotated by one, and hands each
// result to record.
func rotate(b *testing.B, ctx context.Context, cfgs []*rest.Config, variants []variant, runs int, record func(run int, v variant, r result)) {
	for run := range runs {
		for i := range variants {
			v := variants[(i+run)%len(variants)]
			r, stop, err := v.run(ctx, cfgs)
			if err != nil {
				b.Fatalf("%s: %v", v.name, err)
			}
			stop()
			record(run, v, r)
		}
	}
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// BenchmarkFleetSync measures P1 (heap per cached object) and P2 (time to synced) for the
// baseline B, multicache's modes and the raw LIST limit L, side by side in one run, several
// times, in rotating order, and writes the medians to docs/BENCHMARKS.md.
func BenchmarkFleetSync(b *testing.B) {
	perCluster := harness.EnvInt("MULTICACHE_BENCH_OBJECTS", 50000)
	runs := harness.EnvInt("MULTICACHE_BENCH_RUNS", 3)
	h := harness.Start(b, harness.Options{Timeout: time.Hour})
	ctx, f, loader := h.Ctx, h.Fleet, h.Loader
	seedStart := time.Now()
	ns := 20
	perNS := perCluster / 2 / ns
	if _, err := loader.BulkSeed(ctx, fleet.BulkSpec{Namespaces: ns, PodsPerNamespace: perNS, ConfigMapsPerNamespace: perNS, Nodes: 50}); err != nil {
		b.Fatal(err)
	}
	seedTook := time.Since(seedStart)
	var cfgs []*rest.Config
	total := 0
	for _, c := range f.Clusters {
		cfg := c.Config()
		cfg.QPS, cfg.Burst = -1, 0
		cfgs = append(cfgs, cfg)
		cs, _ := kubernetes.NewForConfig(c.AdminConfig())
		pods, _ := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		cms, _ := cs.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
		total += len(pods.Items) + len(cms.Items)
	}
	variants := []variant{
		// A generated clientset asks for protobuf unless told otherwise: each row names its
		// content type.
		{"L: raw LIST, JSON", rawList("application/json")},
		{"L: raw LIST, protobuf", rawList("application/vnd.kubernetes.protobuf")},
		{"B: informer factory per cluster", baseline},
		{"multicache default (typed, protobuf, managedFields dropped)", multicache(clusterset.TransformOptions{}, "")},
		{"multicache, no transform", multicache(clusterset.TransformOptions{KeepManagedFields: true, KeepLastApplied: true, KeepDuplicates: true}, "")},
		{"multicache metadata-only", multicache(clusterset.TransformOptions{}, clusterset.ModeMetadata)},
	}
	syncs := map[string][]float64{}
	bytes := map[string][]float64{}
	rotate(b, ctx, cfgs, variants, runs, func(run int, v variant, r result) {
		syncs[v.name] = append(syncs[v.name], r.sync.Seconds())
		bytes[v.name] = append(bytes[v.name], float64(r.bytes)/float64(total))
		b.Logf("run %d %-60s synced %6.2fs  heap %7.0f B/object", run+1, v.name, r.sync.Seconds(), float64(r.bytes)/float64(total))
		time.Sleep(2 * time.Second) // let the API servers settle
	})
	bSync, bBytes := median(syncs[variants[2].name]), median(bytes[variants[2].name])
	lSync := median(syncs[variants[1].name])
	var sb strings.Builder
	fmt.Fprintf(&sb, "| variant | time to synced, median (min–max) | ÷ B | ÷ L (protobuf LIST) | heap per object (median) | ÷ B |\n|---|---|---|---|---|---|\n")
	for _, v := range variants {
		s, by := median(syncs[v.name]), median(bytes[v.name])
		heapCol, ratioCol := fmt.Sprintf("%.0f B", by), fmt.Sprintf("%.2f×", by/bBytes)
		if strings.HasPrefix(v.name, "L:") {
			heapCol, ratioCol = "—", "—"
		}
		fmt.Fprintf(&sb, "| %s | %s | %.2f× | %.2f× | %s | %s |\n", v.name, spreadSeconds(syncs[v.name]), s/bSync, s/lSync, heapCol, ratioCol)
	}
	b.ReportMetric(median(bytes[variants[3].name])/bBytes, "default-heap-ratio")
	b.ReportMetric(median(syncs[variants[3].name])/bSync, "default-sync-ratio")
	b.Log("\n" + sb.String())
	if os.Getenv("MULTICACHE_BENCH_WRITE") != "" {
		writeReport(b, sb.String(), total, runs, float64(total)/seedTook.Seconds())
		ratio := func(i int) float64 { return median(bytes[variants[i].name]) / bBytes }
		sync := median(syncs[variants[3].name])
		recordGoals(b,
			goal{"P1", "heap per object, multicache default ÷ B", "≤ 0.6×", fmt.Sprintf("%.2f× (%.0f B vs %.0f B)", ratio(3), median(bytes[variants[3].name]), bBytes), met(ratio(3) <= 0.6), ""},
			goal{"P1", "heap per object, no transform ÷ B", "≤ 1.05×", fmt.Sprintf("%.2f×", ratio(4)), met(ratio(4) <= 1.05), ""},
			goal{"P1", "heap per object, metadata-only ÷ B", "—", fmt.Sprintf("%.2f×", ratio(5)), "—", ""},
			goal{"P2", "time to synced, 3 clusters × 50k, default ÷ B", "≤ 1.0×", fmt.Sprintf("%.2f× B (%s vs B %s)", sync/bSync, spreadSeconds(syncs[variants[3].name]), spreadSeconds(syncs[variants[2].name])), met(sync/bSync <= 1.0), ""},
			goal{"P2", "time to synced, 3 clusters × 50k, default ÷ L (protobuf LIST)", "≤ 1.3×", fmt.Sprintf("%.2f× L (L protobuf %s, L JSON %s)", sync/lSync, spreadSeconds(syncs[variants[1].name]), spreadSeconds(syncs[variants[0].name])), met(sync/lSync <= 1.3), ""},
		)
	}
}

// column is get of every round, in order: one figure's values, for ceilingSpread and median.
func column[R any](rounds []R, get func(R) float64) []float64 {
	xs := make([]float64, 0, len(rounds))
	for _, r := range rounds {
		xs = append(xs, get(r))
	}
	return xs
}

// machineLine says when and where a section was measured.
func machineLine() string {
	host, _ := os.Hostname()
	var mem string
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		mem = strings.Fields(strings.SplitN(string(b), "\n", 2)[0])[1] + " kB"
	}
	return fmt.Sprintf("Measured on %s. Machine: %d CPUs (nproc), MemTotal %s, %s, host %s.",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), mem, runtime.Version(), host)
}

const reportPath = "../../docs/BENCHMARKS.md"

// writeSection replaces the section headed "## title" in docs/BENCHMARKS.md with body (or
// appends it), leaving the other sections as they are.
func writeSection(b *testing.B, title, body string) {
	old, err := os.ReadFile(reportPath)
	if err != nil && !os.IsNotExist(err) {
		b.Fatal(err)
	}
	doc := string(old)
	if doc == "" {
		doc = "# Benchmarks\n"
	}
	head := "\n## " + title + "\n"
	section := head + "\n" + strings.TrimSpace(body) + "\n"
	if i := strings.Index(doc, head); i >= 0 {
		end := len(doc)
		if j := strings.Index(doc[i+len(head):], "\n## "); j >= 0 {
			end = i + len(head) + j
		}
		doc = doc[:i] + section + doc[end:]
	} else if j := strings.Index(doc, "\n## "); title == "Summary" && j >= 0 {
		doc = doc[:j] + section + doc[j:]
	} else {
		doc = strings.TrimRight(doc, "\n") + "\n" + section
	}
	if err := os.WriteFile(reportPath, []byte(doc), 0o644); err != nil {
		b.Fatal(err)
	}
	b.Logf("wrote %q in %s", title, reportPath)
}

func writeReport(b *testing.B, table string, total, runs int, seedRate float64) {
	writeSection(b, "P1, P2: sync time and heap per object, 3 clusters", fmt.Sprintf(`%s
3 kube-apiservers, 3 etcds and the cache under test share the CPUs, so only ratios measured
side by side in one run are meaningful.

%d Pods and ConfigMaps in all (half each; Pods with 2–3 containers, labels and a nodeName),
bulk-seeded at %.0f objects/s (copies of objects the API server created, written into etcd; see
fleet.BulkSeed). Each variant ran %d times in rotating order; median (min–max). Heap is the live
heap (after GC) the cache adds, divided by the objects it holds.

%s
Command: `+"`MULTICACHE_BENCH_OBJECTS=%d MULTICACHE_BENCH_RUNS=%d go test -run '^$' -bench FleetSync -benchtime 1x ./test/bench/`"+`
`, machineLine(), total, seedRate, runs, table, harness.EnvInt("MULTICACHE_BENCH_OBJECTS", 50000), runs))
}
