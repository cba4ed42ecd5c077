package aggregate

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
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
// per cluster, spread over the store.
func benchFleet(b *testing.B, clusters, perCluster, hits int) (*Aggregate, []cache.SharedIndexInformer) {
	b.Helper()
	a, _, _ := New(Options{Resource: "configmaps", SyncPollInterval: time.Millisecond})
	var infs []cache.SharedIndexInformer
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
	}
	if missing := a.WaitForSync(context.Background(), 5*time.Minute); missing != nil {
		b.Fatalf("unsynced %v", missing)
	}
	return a, infs
}

// percentiles times f once per iteration and reports p50 and p99 besides ns/op.
func percentiles(b *testing.B, f func()) {
	d := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t := time.Now()
		f()
		d = append(d, time.Since(t))
	}
	b.StopTimer()
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	b.ReportMetric(float64(d[len(d)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(d[len(d)*99/100].Nanoseconds()), "p99-ns")
}

// BenchmarkFleetQuery is P3: 100 objects out of 1M across 10 cluster stores.
//
//	go test -run '^$' -bench FleetQuery -benchtime 20000x ./pkg/aggregate/
func BenchmarkFleetQuery(b *testing.B) {
	a, infs := benchFleet(b, 10, 100_000, 10)
	b.Run("ByIndex", func(b *testing.B) {
		percentiles(b, func() {
			if objs, _ := a.ByIndex("sel", "hit"); len(objs) != 100 {
				b.Fatalf("%d objects", len(objs))
			}
		})
	})
	// The same value every time keeps its objects in CPU caches; a random value of 10,000, as
	// a fleet inventory sees, pays a cache miss per object.
	buckets := make([]string, 100_000/10)
	for i := range buckets {
		buckets[i] = strconv.Itoa(i)
	}
	b.Run("ByIndexRandomValue", func(b *testing.B) {
		r := rand.New(rand.NewPCG(1, 2))
		percentiles(b, func() {
			if objs, _ := a.ByIndex("bucket", buckets[r.IntN(len(buckets))]); len(objs) != 100 {
				b.Fatalf("%d objects", len(objs))
			}
		})
	})
	// The baseline on the same stores: a loop over the 10 client-go indexers, as code merging N
	// informer factories by hand does.
	b.Run("ByIndexRandomValue-B", func(b *testing.B) {
		r := rand.New(rand.NewPCG(1, 2))
		percentiles(b, func() {
			v := buckets[r.IntN(len(buckets))]
			var out []any
			for _, inf := range infs {
				objs, _ := inf.GetIndexer().ByIndex("bucket", v)
				out = append(out, objs...)
			}
			if len(out) != 100 {
				b.Fatalf("%d objects", len(out))
			}
		})
	})
	b.Run("SelectIndexAndLabels", func(b *testing.B) {
		sel := labels.SelectorFromSet(labels.Set{"sel": "hit"})
		percentiles(b, func() {
			if res, _ := a.Select(Query{Index: "sel", Value: "hit", Labels: sel}); len(res.Items) != 100 {
				b.Fatalf("%d items", len(res.Items))
			}
		})
	})
	b.Run("GetByKey", func(b *testing.B) {
		percentiles(b, func() {
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
