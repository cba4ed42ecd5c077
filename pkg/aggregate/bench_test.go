package aggregate

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/metrics"
	"runtime/trace"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
)

// benchFleet builds clusters × perCluster synthetic ConfigMaps in real client-go informers
// (fed by a fake list), joined to one Aggregate with a label index. Label "sel" has value "hit"
// on hits objects per cluster; label "bucket" has perCluster/hits values, each on hits objects
// per cluster, spread over the store. The sources' watchers feed the running informers.
func benchFleet(b *testing.B, clusters, perCluster, hits int) (*Aggregate, []cache.SharedIndexInformer, []*source) {
	b.Helper()
	a, _, _ := New(Options{Resource: "configmaps", SyncPollInterval: time.Millisecond})
	var infs []cache.SharedIndexInformer
	var srcs []*source
	_ = a.AddIndex(IndexSpec{Name: "sel", Func: func(obj any) ([]string, error) {
		return []string{obj.(*corev1.ConfigMap).Labels["sel"]}, nil
	}})
	_ = a.AddIndex(IndexSpec{Name: "bucket", Func: func(obj any) ([]string, error) {
		return []string{obj.(*corev1.ConfigMap).Labels["bucket"]}, nil
	}})
	for c := range clusters {
		s := &source{rv: "1"}
		s.items = make([]corev1.ConfigMap, perCluster)
		for i := range perCluster {
			v := "miss"
			if i%(perCluster/hits) == 0 {
				v = "hit"
			}
			s.items[i] = corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
				Namespace: "ns-" + strconv.Itoa(i%50), Name: "cm-" + strconv.Itoa(i), ResourceVersion: "1",
				Labels: map[string]string{"sel": v, "app": "app-" + strconv.Itoa(i%20), "bucket": strconv.Itoa(i % (perCluster / hits))},
			}}
		}
		inf := cache.NewSharedIndexInformerWithOptions(s.lwFor(), &corev1.ConfigMap{}, cache.SharedIndexInformerOptions{Indexers: cache.Indexers{}})
		ctx, cancel := context.WithCancel(context.Background())
		b.Cleanup(cancel)
		go inf.RunWithContext(ctx)
		if err := a.join("cluster-"+strconv.Itoa(c), inf); err != nil {
			b.Fatal(err)
		}
		infs = append(infs, inf)
		srcs = append(srcs, s)
	}
	if missing := a.WaitForSync(context.Background(), 5*time.Minute); missing != nil {
		b.Fatalf("unsynced %v", missing)
	}
	return a, infs, srcs
}

// daemonLoad is what a daemon holding the fleet does besides answering queries, run while a
// loop is timed: its informers apply watch updates, updatesPerSec in all, round robin over the
// members (each a fresh copy of a stored object with a new resourceVersion and the same labels,
// so answers do not change), and the GC collects the heap the fleet built. At a daemon's
// allocation rate a cycle of a 1M-object heap comes every tens of seconds and marks for a few
// hundred milliseconds, so a timed loop of 20,000 queries would rarely see one: the load runs
// cycles back to back instead (runtime.GC: a concurrent mark of the whole heap, then a sweep of
// it by the calling goroutine, where a daemon's background sweeper yields to other work).
// marking is true from the start of each cycle until, within about a millisecond, its mark has
// ended, so that a loop can tell the operations that overlapped a mark.
type daemonLoad struct {
	srcs          []*source
	updatesPerSec int
	marking       atomic.Bool
	cycle         atomic.Uint64 // completed cycles when the current one was started
	rv            int           // the last resourceVersion sent
}

// start begins the load; stop ends it and waits until its goroutines have.
func (l *daemonLoad) start() (stop func()) {
	done, collecting := make(chan struct{}), make(chan struct{})
	completed := func() uint64 {
		s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		close(collecting)
		for {
			select {
			case <-done:
				return
			default:
			}
			l.cycle.Store(completed())
			l.marking.Store(true)
			runtime.GC()
			l.marking.Store(false)
		}
	})
	wg.Go(func() {
		const tick = time.Millisecond
		perTick := max(1, l.updatesPerSec/int(time.Second/tick))
		t := time.NewTicker(tick)
		defer t.Stop()
		for n := 0; ; {
			select {
			case <-done:
				return
			case <-t.C:
			}
			if l.marking.Load() && completed() > l.cycle.Load() {
				l.marking.Store(false) // the mark has ended; the cycle's sweep goes on
			}
			for range perTick {
				s := l.srcs[n%len(l.srcs)]
				o := s.items[(n/len(l.srcs)*7919)%len(s.items)].DeepCopy()
				l.rv++
				o.ResourceVersion = strconv.Itoa(l.rv)
				s.w.Modify(o)
				n++
			}
		}
	})
	<-collecting
	return func() {
		close(done)
		wg.Wait()
	}
}

// slowOp is the duration above which, while an execution trace is being taken (go test
// -trace), a timed operation is logged to it (category "slow-op", at the operation's end, its
// duration in nanoseconds), so that what overlapped it can be found. Each timed loop is logged
// too: "loop" with the benchmark's name at its start, "loop-end" at its end.
var slowOp = flag.Duration("aggregate.slowop", 20*time.Microsecond, "operations slower than this are logged to the execution trace")

// loopMetrics are the runtime metrics read around a timed loop.
var loopMetrics = []string{
	"/gc/cycles/total:gc-cycles",
	"/sched/latencies:seconds",
}

// percentiles times f once per iteration, with load running beside the loop if it is not nil,
// and reports besides ns/op: p50 and p99; the GC cycles that completed during the loop; the
// p99 of every goroutine's scheduling latency (runnable to running) during the loop; for the
// whole process, the times the OS took a CPU from one of its threads (ivcsw) and page faults
// per operation; and, with a load, the share of operations that started while a GC mark was
// running (mark-%) and their p99 (mark-p99-ns).
func percentiles(b *testing.B, load *daemonLoad, f func()) {
	d := make([]time.Duration, 0, b.N)
	var marked []bool
	if load != nil {
		marked = make([]bool, 0, b.N)
	}
	tracing := trace.IsEnabled()
	ctx := context.Background()
	before := make([]metrics.Sample, len(loopMetrics))
	after := make([]metrics.Sample, len(loopMetrics))
	for i, name := range loopMetrics {
		before[i].Name, after[i].Name = name, name
	}
	var stop func()
	if load != nil {
		stop = load.start()
	}
	if tracing {
		trace.Log(ctx, "loop", b.Name())
	}
	metrics.Read(before)
	ru0 := readRusage()
	b.ResetTimer()
	for range b.N {
		if load != nil {
			marked = append(marked, load.marking.Load())
		}
		t := time.Now()
		f()
		el := time.Since(t)
		d = append(d, el)
		if tracing && el > *slowOp {
			trace.Log(ctx, "slow-op", strconv.FormatInt(el.Nanoseconds(), 10))
		}
	}
	b.StopTimer()
	ru1 := readRusage()
	metrics.Read(after)
	if tracing {
		trace.Log(ctx, "loop-end", b.Name())
	}
	if stop != nil {
		stop()
	}
	var inMark []time.Duration
	for i, m := range marked {
		if m {
			inMark = append(inMark, d[i])
		}
	}
	p50, p99 := quantiles(d)
	b.ReportMetric(float64(p50.Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(p99.Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(after[0].Value.Uint64()-before[0].Value.Uint64()), "gc-cycles")
	b.ReportMetric(histDeltaQuantile(before[1].Value.Float64Histogram(), after[1].Value.Float64Histogram(), 0.99)*1e9, "sched-p99-ns")
	b.ReportMetric(float64(ru1.ivcsw-ru0.ivcsw), "ivcsw")
	b.ReportMetric(float64(ru1.minflt-ru0.minflt)/float64(b.N), "minflt/op")
	if load != nil {
		b.ReportMetric(100*float64(len(inMark))/float64(b.N), "mark-%")
		if len(inMark) > 0 {
			_, p99 := quantiles(inMark)
			b.ReportMetric(float64(p99.Nanoseconds()), "mark-p99-ns")
		}
	}
}

// quantiles sorts d and returns its median and 99th percentile.
func quantiles(d []time.Duration) (p50, p99 time.Duration) {
	slices.Sort(d)
	return d[len(d)/2], d[len(d)*99/100]
}

// histDeltaQuantile is the q quantile of the samples after holds beyond before (two readings
// of one cumulative histogram), as its bucket's upper bound; 0 without samples.
func histDeltaQuantile(before, after *metrics.Float64Histogram, q float64) float64 {
	var total uint64
	for i := range after.Counts {
		total += after.Counts[i] - before.Counts[i]
	}
	if total == 0 {
		return 0
	}
	var seen uint64
	for i := range after.Counts {
		seen += after.Counts[i] - before.Counts[i]
		if float64(seen) >= q*float64(total) {
			return after.Buckets[i+1]
		}
	}
	return after.Buckets[len(after.Buckets)-1]
}

// chain is a random cyclic permutation of n indexes: following it from any index visits every
// index once, in an order the CPU cannot predict, each step a read the next depends on.
func chain(n int) []uint32 {
	c := make([]uint32, n)
	for i := range c {
		c[i] = uint32(i)
	}
	r := rand.New(rand.NewPCG(3, 4))
	for i := n - 1; i > 0; i-- { // Sattolo's shuffle: one cycle through all n
		j := r.IntN(i)
		c[i], c[j] = c[j], c[i]
	}
	return c
}

// sink keeps the Floor operations' results alive.
var sink uint64

// spin computes n dependent steps of a multiplicative generator from x, touching no memory.
func spin(x uint64, n int) uint64 {
	for range n {
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x
}

// BenchmarkFleetQuery is P3: 100 objects out of 1M across 10 cluster stores.
//
//	go test -run '^$' -bench FleetQuery -benchtime 20000x ./pkg/aggregate/
//
// Each query runs twice: alone, and, suffixed -GC, beside a daemonLoad. The Floor operations
// bound what any query can achieve here, in both settings: Floor is empty (the cost of timing),
// FloorSpin is about as long as ByIndex but computes in registers only (what sharing the CPUs
// adds), and FloorMiss reads 100 words from a 128 MB array, each read's address given by the
// previous one (100 cache misses in a row, as a query touching 100 objects the CPU caches do not
// hold pays at least).
func BenchmarkFleetQuery(b *testing.B) {
	a, infs, srcs := benchFleet(b, 10, 100_000, 10)
	// The same value every time keeps its objects in CPU caches; a random value of 10,000, as
	// a fleet inventory sees, pays cache misses for every object.
	buckets := make([]string, 100_000/10)
	for i := range buckets {
		buckets[i] = strconv.Itoa(i)
	}
	misses := sync.OnceValue(func() []uint32 { return chain(32 << 20) })
	queries := []struct {
		name string
		op   func(b *testing.B) func()
	}{
		{"ByIndex", func(b *testing.B) func() {
			return func() {
				if objs, _ := a.ByIndex("sel", "hit"); len(objs) != 100 {
					b.Fatalf("%d objects", len(objs))
				}
			}
		}},
		{"ByIndexRandomValue", func(b *testing.B) func() {
			r := rand.New(rand.NewPCG(1, 2))
			return func() {
				if objs, _ := a.ByIndex("bucket", buckets[r.IntN(len(buckets))]); len(objs) != 100 {
					b.Fatalf("%d objects", len(objs))
				}
			}
		}},
		// The baseline on the same stores: a loop over the 10 client-go indexers, as code
		// merging N informer factories by hand does.
		{"ByIndexRandomValue-B", func(b *testing.B) func() {
			r := rand.New(rand.NewPCG(1, 2))
			return func() {
				v := buckets[r.IntN(len(buckets))]
				var out []any
				for _, inf := range infs {
					objs, _ := inf.GetIndexer().ByIndex("bucket", v)
					out = append(out, objs...)
				}
				if len(out) != 100 {
					b.Fatalf("%d objects", len(out))
				}
			}
		}},
		// AppendByIndex into a buffer the caller reuses.
		{"AppendByIndex", func(b *testing.B) func() {
			buf := make([]any, 0, 128)
			return func() {
				buf, _ = a.AppendByIndex(buf[:0], "sel", "hit")
				if len(buf) != 100 {
					b.Fatalf("%d objects", len(buf))
				}
			}
		}},
		{"AppendByIndexRandomValue", func(b *testing.B) func() {
			r := rand.New(rand.NewPCG(1, 2))
			buf := make([]any, 0, 128)
			return func() {
				buf, _ = a.AppendByIndex(buf[:0], "bucket", buckets[r.IntN(len(buckets))])
				if len(buf) != 100 {
					b.Fatalf("%d objects", len(buf))
				}
			}
		}},
		{"Floor", func(b *testing.B) func() { return func() {} }},
		{"FloorSpin", func(b *testing.B) func() {
			return func() { sink = spin(sink, 3000) }
		}},
		{"FloorMiss", func(b *testing.B) func() {
			c, next := misses(), uint32(0)
			return func() {
				for range 100 {
					next = c[next]
				}
				sink = uint64(next)
			}
		}},
	}
	load := &daemonLoad{srcs: srcs, updatesPerSec: 1000}
	for _, withLoad := range []bool{false, true} {
		for _, q := range queries {
			name, l := q.name, (*daemonLoad)(nil)
			if withLoad {
				name, l = name+"-GC", load
			}
			b.Run(name, func(b *testing.B) { percentiles(b, l, q.op(b)) })
		}
	}
	b.Run("SelectIndexAndLabels", func(b *testing.B) {
		sel := labels.SelectorFromSet(labels.Set{"sel": "hit"})
		percentiles(b, nil, func() {
			if res, _ := a.Select(Query{Index: "sel", Value: "hit", Labels: sel}); len(res.Items) != 100 {
				b.Fatalf("%d items", len(res.Items))
			}
		})
	})
	b.Run("GetByKey", func(b *testing.B) {
		percentiles(b, nil, func() {
			if _, ok, _ := a.GetByKey("cluster-7|ns-3/cm-5003"); !ok {
				b.Fatal("missing")
			}
		})
	})
}

func BenchmarkKey(b *testing.B) {
	k := Key{Cluster: "fleet-12", Namespace: "kube-system", Name: "coredns-7db6d8ff4d-abcde"}
	s := k.String()
	b.Run("String", func(b *testing.B) {
		for range b.N {
			_ = k.String()
		}
	})
	b.Run("Parse", func(b *testing.B) {
		for range b.N {
			if _, err := ParseKey(s); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDispatch measures the queue a handler's events go through: push from a member and
// delivery by the handler's goroutine, for distinct objects.
func BenchmarkDispatch(b *testing.B) {
	q := newMergedQueue()
	done := make(chan struct{})
	go func() {
		n := 0
		for {
			_, evs, _, ok := q.pop()
			if !ok {
				close(done)
				return
			}
			n += len(evs)
		}
	}()
	keys := make([]string, 4096)
	for i := range keys {
		keys[i] = fmt.Sprintf("ns/obj-%d", i)
	}
	b.ResetTimer()
	for i := range b.N {
		q.push("c"+strconv.Itoa(i%3), keys[i%len(keys)], event{kind: evUpdate})
	}
	b.StopTimer()
	q.close()
	<-done
}
