package local

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/storage"
)

func benchEnv(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// fixedList is a ListerWatcher of a fixed list whose watch never sends (and which says so: no
// streamed first list).
func fixedList(list runtime.Object) cache.ListerWatcher {
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc:  func(context.Context, metav1.ListOptions) (runtime.Object, error) { return list, nil },
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (kwatch.Interface, error) { return kwatch.NewFake(), nil },
	}, noWatchList{})
}

type noWatchList struct{}

func (noWatchList) IsWatchListSemanticsUnSupported() bool { return true }

// fixedAggregate joins one member per cluster, named c0, c1, …, each with the objects of
// list(c), and waits for them.
func fixedAggregate(b testing.TB, resource string, clusters int, example runtime.Object, list func(c int) runtime.Object) *aggregate.Aggregate {
	a, ms, err := aggregate.New(aggregate.Options{Resource: resource, SyncPollInterval: 5 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := a.AddEventHandler(aggregate.HandlerFuncs{}); err != nil { // as the daemon's watch cache: Len is O(1)
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	for c := range clusters {
		inf := cache.NewSharedIndexInformer(fixedList(list(c)), example, 0, cache.Indexers{})
		go inf.Run(ctx.Done())
		if err := ms.Join(fmt.Sprint("c", c), inf); err != nil {
			b.Fatal(err)
		}
	}
	if unsynced := a.WaitForSync(context.Background(), 30*time.Minute); len(unsynced) > 0 {
		b.Fatalf("unsynced: %v", unsynced)
	}
	return a
}

// BenchmarkSortedPage (I3) reads the first page of 500 and a page from the middle of a list of
// every Pod sorted by a path, in process: MULTICACHE_BENCH_SUMMARY_CLUSTERS ×
// MULTICACHE_BENCH_SUMMARY_PODS (100 × 20,000 for the 2M of issue 35's figures). The paths:
// metadata.name and metadata.creationTimestamp (read through the object's accessor),
// status.phase and spec.nodeName (a typed Pod's fields), spec.containers[0].image (JSONPath). Its owner rows read each Pod's chain (Pod →
// ReplicaSet → Deployment, in two other aggregates) for a summary by top-level owner.
func BenchmarkSortedPage(b *testing.B) {
	clusters, pods := benchEnv(b, "MULTICACHE_BENCH_SUMMARY_CLUSTERS", 4), benchEnv(b, "MULTICACHE_BENCH_SUMMARY_PODS", 5000)
	const perRS = 10
	t0 := metav1.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	uid := func(c int, kind string, i int) types.UID { return types.UID(fmt.Sprintf("%s-%d-%d", kind, c, i)) }
	podAgg := fixedAggregate(b, "pods", clusters, &corev1.Pod{}, func(c int) runtime.Object {
		l := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: make([]corev1.Pod, pods)}
		for i := range pods {
			p := &l.Items[i]
			p.Namespace, p.Name, p.ResourceVersion = fmt.Sprint("ns-", (i/perRS/2)%20), fmt.Sprint("p", i), "1" // with its ReplicaSet and Deployment
			p.CreationTimestamp = metav1.NewTime(t0.Add(time.Duration((i*7919)%pods) * time.Second))
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: fmt.Sprint("rs", i/perRS), UID: uid(c, "rs", i/perRS), Controller: ptrTo(true)}}
			p.Spec.NodeName = fmt.Sprint("node-", i%500)
			p.Spec.Containers = []corev1.Container{{Name: "a", Image: fmt.Sprint("registry/img-", i%50, ":1")}}
			p.Status.Phase = []corev1.PodPhase{corev1.PodRunning, corev1.PodPending}[i%7/6]
		}
		return l
	})
	rsAgg := fixedAggregate(b, "replicasets.apps", clusters, &appsv1.ReplicaSet{}, func(c int) runtime.Object {
		l := &appsv1.ReplicaSetList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
		for i := range pods / perRS {
			l.Items = append(l.Items, appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprint("ns-", (i/2)%20), Name: fmt.Sprint("rs", i), UID: uid(c, "rs", i), ResourceVersion: "1",
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: fmt.Sprint("d", i/2), UID: uid(c, "d", i/2), Controller: ptrTo(true)}}}})
		}
		return l
	})
	dAgg := fixedAggregate(b, "deployments.apps", clusters, &appsv1.Deployment{}, func(c int) runtime.Object {
		l := &appsv1.DeploymentList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
		for i := range pods / perRS / 2 {
			l.Items = append(l.Items, appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprint("ns-", i%20), Name: fmt.Sprint("d", i), UID: uid(c, "d", i), ResourceVersion: "1"}})
		}
		return l
	})
	objects := clusters * pods
	sel := &selected{resource: "pods", agg: podAgg}
	// measure runs f b.N times and reports its median, min and max, and per object.
	measure := func(b *testing.B, f func() error) {
		b.ReportAllocs()
		var took []time.Duration
		for b.Loop() {
			start := time.Now()
			if err := f(); err != nil {
				b.Fatal(err)
			}
			took = append(took, time.Since(start))
		}
		slices.Sort(took)
		b.ReportMetric(float64(took[len(took)/2].Nanoseconds())/float64(objects), "ns/object")
		b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(took[0].Microseconds())/1000, "min-ms")
		b.ReportMetric(float64(took[len(took)-1].Microseconds())/1000, "max-ms")
	}
	for _, tc := range []struct{ name, by string }{
		{"name", "metadata.name"}, {"creationTimestamp", "metadata.creationTimestamp"}, {"phase", "status.phase"}, {"node", "spec.nodeName"}, {"image-path", "spec.containers[0].image"},
	} {
		srt, err := sortingOf(storage.ListOptions{SortBy: tc.by}, sel)
		if err != nil {
			b.Fatal(err)
		}
		var middle *sortedItem
		b.Run("sort-"+tc.name+"-first-500", func(b *testing.B) {
			measure(b, func() error {
				pg, err := scanSortedPage(context.Background(), sel, srt, nil, 500)
				if err == nil && (len(pg.items) != 500 || pg.total != int64(objects)) {
					err = fmt.Errorf("page of %d items, total %d", len(pg.items), pg.total)
				}
				if err == nil && middle == nil {
					middle = &sortedItem{Item: pg.items[499], sort: pg.sorts[499]}
				}
				return err
			})
		})
		b.Run("sort-"+tc.name+"-next-500", func(b *testing.B) {
			measure(b, func() error {
				pg, err := scanSortedPage(context.Background(), sel, srt, middle, 500)
				if err == nil && len(pg.items) != 500 {
					err = fmt.Errorf("page of %d items", len(pg.items))
				}
				return err
			})
		})
		// Asked again, the order becomes a sort index: the same two pages from it, equal to
		// the scan's, once it has had every cluster's list ("learned in").
		scanFirst, err := scanSortedPage(context.Background(), sel, srt, nil, 500)
		if err != nil {
			b.Fatal(err)
		}
		scanNext, err := scanSortedPage(context.Background(), sel, srt, middle, 500)
		if err != nil {
			b.Fatal(err)
		}
		var learned time.Duration
		b.Run("indexed-"+tc.name+"-first-500", func(b *testing.B) {
			if learned == 0 {
				start := time.Now()
				for range 2 {
					if _, err := sortedPage(context.Background(), sel, srt, nil, 500); err != nil {
						b.Fatal(err)
					}
				}
				for !slices.ContainsFunc(podAgg.SortIndexes(), func(si aggregate.SortIndex) bool { return si.Name == "asc "+tc.by && si.Clusters == clusters }) {
					if time.Since(start) > 10*time.Minute {
						b.Fatal("no sort index after 10 minutes")
					}
					time.Sleep(10 * time.Millisecond)
				}
				learned = time.Since(start)
			}
			measure(b, func() error {
				pg, err := sortedPage(context.Background(), sel, srt, nil, 500)
				return samePage(pg, scanFirst, err)
			})
		})
		b.Run("indexed-"+tc.name+"-next-500", func(b *testing.B) {
			measure(b, func() error {
				pg, err := sortedPage(context.Background(), sel, srt, middle, 500)
				return samePage(pg, scanNext, err)
			})
		})
		for _, si := range podAgg.SortIndexes() {
			if si.Name == "asc "+tc.by {
				b.Logf("the sort index of %s: learned in %.1f s, %.0f MiB estimated, %.1f bytes per object, %d pages answered", tc.by, learned.Seconds(), float64(si.Bytes)/(1<<20), float64(si.Bytes)/float64(objects), si.Answers)
			}
		}
	}
	own := &owners{byKind: map[groupKind]map[string]ownerStore{}, self: map[string]map[string]groupKind{"pods": {}}}
	for _, x := range []struct {
		gk  groupKind
		agg *aggregate.Aggregate
	}{{groupKind{"", "Pod"}, podAgg}, {groupKind{"apps", "ReplicaSet"}, rsAgg}, {groupKind{"apps", "Deployment"}, dAgg}} {
		own.byKind[x.gk] = map[string]ownerStore{}
		for _, c := range x.agg.Clusters() {
			own.byKind[x.gk][c] = ownerStore{agg: x.agg, namespaced: true}
			own.self["pods"][c] = groupKind{"", "Pod"}
		}
	}
	b.Run("summary-by-owner", func(b *testing.B) {
		key := aggregate.FuncKey(OwnerKey, func(cluster string, obj any) []string { return own.top("pods", cluster, obj) })
		measure(b, func() error {
			s, err := podAgg.SummarizeKeys(aggregate.Query{}, []aggregate.GroupKey{key})
			if err == nil && (len(s.Groups) != pods/perRS/2 || s.Groups[0].Count != clusters*2*perRS) {
				err = fmt.Errorf("%d groups (the first of %d Pods), want %d Deployments of %d Pods (the same names in each cluster)", len(s.Groups), s.Groups[0].Count, pods/perRS/2, clusters*2*perRS)
			}
			return err
		})
	})
	b.Run("list-owner-filter", func(b *testing.B) {
		q := aggregate.Query{Fields: []aggregate.FieldTerm{ownerTerm(own, OwnerID("apps", "Deployment", "ns-0", "d0"))}}
		measure(b, func() error {
			r, err := podAgg.Select(q)
			if err == nil && len(r.Items) != clusters*2*perRS {
				err = fmt.Errorf("%d pods under d0, want %d", len(r.Items), clusters*2*perRS)
			}
			return err
		})
	})
}

func ptrTo[T any](v T) *T { return &v }

// samePage is an error unless pg has the items, sort values and counts of want.
func samePage(pg, want page, err error) error {
	if err != nil {
		return err
	}
	if len(pg.items) != len(want.items) || pg.total != want.total || pg.before != want.before || pg.more != want.more {
		return fmt.Errorf("page of %d items (total %d, before %d, more %v), want %d (%d, %d, %v)", len(pg.items), pg.total, pg.before, pg.more, len(want.items), want.total, want.before, want.more)
	}
	for i := range pg.items {
		if pg.items[i].Key != want.items[i].Key || pg.sorts[i] != want.sorts[i] {
			return fmt.Errorf("item %d: %v (%q), want %v (%q)", i, pg.items[i].Key, pg.sorts[i], want.items[i].Key, want.sorts[i])
		}
	}
	return nil
}
