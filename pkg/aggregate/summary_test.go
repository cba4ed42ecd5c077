package aggregate

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/multicache/multicache/pkg/index"
	"github.com/multicache/multicache/pkg/intern"
)

// summaryFleet is two clusters of ConfigMaps in namespaces a, b and none (cluster-scoped, as
// far as the namespace goes), some labelled tier, with data values that repeat within one
// object (a path with several values) and an index "app" that applies in c1 only.
func summaryFleet(t testing.TB) (*Aggregate, []Item) {
	t.Helper()
	a := newAgg(t)
	app := func(obj any) ([]string, error) { return []string{obj.(*corev1.ConfigMap).Labels["app"]}, nil }
	if err := a.AddIndex(IndexSpec{Name: "app", Func: app, Clusters: []string{"c1"}}); err != nil {
		t.Fatal(err)
	}
	var objs []Item
	for ci, c := range []string{"c1", "c2"} {
		s := &source{}
		for i, ns := range []string{"a", "b", ""} {
			for j := range 3 + ci {
				lbl := map[string]string{"app": fmt.Sprint("web", j%2)}
				if j%3 == 0 {
					lbl["tier"] = []string{"front", "back"}[i%2]
				}
				o := cm(ns, fmt.Sprintf("o%d%d", i, j), "1", lbl)
				o.Data = map[string]string{"x": "1", "y": fmt.Sprint(j % 2), "z": "1"} // x and z: one value, twice
				if j == 2 {
					o.Data = nil
				}
				s.items = append(s.items, *o)
				objs = append(objs, Item{Cluster: c, Object: o})
			}
		}
		inf, _ := startInformer(t, s)
		if err := a.join(c, inf); err != nil {
			t.Fatal(err)
		}
	}
	a.WaitForSync(context.Background(), 5*time.Second)
	return a, objs
}

// byHand counts items in the groups of by, as the keys are defined, from the objects
// themselves.
func byHand(t *testing.T, a *Aggregate, q Query, items []Item, by ...string) (map[string]int, int) {
	t.Helper()
	groups, total := map[string]int{}, 0
	for _, it := range items {
		if !a.Matches(q, it.Cluster, it.Object) {
			continue
		}
		total++
		o := it.Object.(*corev1.ConfigMap)
		combos := [][]string{{}}
		for _, k := range by {
			var vals []string
			switch {
			case k == "cluster":
				vals = []string{it.Cluster}
			case k == "namespace" && o.Namespace != "":
				vals = []string{o.Namespace}
			case strings.HasPrefix(k, "label:"):
				if v, ok := o.Labels[strings.TrimPrefix(k, "label:")]; ok {
					vals = []string{v}
				}
			case k == "field:data.*":
				for _, v := range o.Data {
					if !slices.Contains(vals, v) {
						vals = append(vals, v)
					}
				}
			case k == "index:app" && it.Cluster == "c1":
				vals = []string{o.Labels["app"]}
			}
			if len(vals) == 0 {
				vals = []string{"<null>"}
			}
			var next [][]string
			for _, c := range combos {
				for _, v := range vals {
					next = append(next, append(slices.Clone(c), v))
				}
			}
			combos = next
		}
		for _, c := range combos {
			groups[strings.Join(c, "|")]++
		}
	}
	return groups, total
}

func groupsOf(s Summary) map[string]int {
	out := map[string]int{}
	for _, g := range s.Groups {
		var parts []string
		for _, v := range g.Key {
			if v == nil {
				parts = append(parts, "<null>")
			} else {
				parts = append(parts, *v)
			}
		}
		out[strings.Join(parts, "|")] = g.Count
	}
	return out
}

// TestSummarizeCountsAsByHand: for every key and several filters, Summarize's groups and total
// equal a count done object by object from the definitions of the keys: missing values group
// under null, a path with several values counts the object once per distinct value.
func TestSummarizeCountsAsByHand(t *testing.T) {
	a, items := summaryFleet(t)
	sel := func(s string) labels.Selector { l, _ := labels.Parse(s); return l }
	for _, by := range [][]string{
		{"cluster"}, {"namespace"}, {"cluster", "namespace"}, {"label:tier"}, {"label:nope"}, {"field:data.*"},
		{"index:app"}, {"cluster", "label:tier", "field:data.*"}, {"namespace", "index:app"},
	} {
		for _, q := range []Query{
			{}, {Clusters: []string{"c2"}}, {Namespace: "a"}, {Labels: sel("tier")}, {Labels: sel("!tier,app=web1")},
			{Index: IndexCluster, Value: "c1"}, {Index: "app", Value: "web0"},
			{Fields: []FieldTerm{{Field: "app", Value: "web1", Not: true}}},
		} {
			s, err := a.Summarize(q, by...)
			if err != nil {
				t.Fatalf("%v %+v: %v", by, q, err)
			}
			want, total := byHand(t, a, q, items, by...)
			got := groupsOf(s)
			if s.Total != total || len(got) != len(want) {
				t.Errorf("by %v, %+v: total %d, %d groups %v; want %d, %d groups %v", by, q, s.Total, len(got), got, total, len(want), want)
				continue
			}
			for k, n := range want {
				if got[k] != n {
					t.Errorf("by %v, %+v: group %q counts %d, want %d", by, q, k, got[k], n)
				}
			}
			if !slices.Equal(s.By, by) {
				t.Errorf("By = %v, want %v", s.By, by)
			}
		}
	}
}

// TestSummarizeFromIndexEqualsScan: counts read from the namespace index (no filter) equal
// those of a scan of every object (a filter every object passes).
func TestSummarizeFromIndexEqualsScan(t *testing.T) {
	a, _ := summaryFleet(t)
	everything, _ := labels.Parse("app") // every object has app
	for _, by := range [][]string{{"cluster"}, {"namespace"}, {"namespace", "cluster"}} {
		fast, err := a.Summarize(Query{}, by...)
		if err != nil {
			t.Fatal(err)
		}
		scan, err := a.Summarize(Query{Labels: everything}, by...)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(groupsOf(fast)) != fmt.Sprint(groupsOf(scan)) || fast.Total != scan.Total || fast.Total == 0 {
			t.Errorf("by %v: from the index %v (%d), by a scan %v (%d)", by, groupsOf(fast), fast.Total, groupsOf(scan), scan.Total)
		}
	}
}

// TestSummaryMergeSortLimit: summaries of disjoint clusters merge into the fleet's; groups sort
// by count then key, or by key with null last; limit keeps the first.
func TestSummaryMergeSortLimit(t *testing.T) {
	a, _ := summaryFleet(t)
	whole, _ := a.Summarize(Query{}, "label:tier", "namespace")
	merged, _ := a.Summarize(Query{Clusters: []string{"c1"}}, "label:tier", "namespace")
	c2, _ := a.Summarize(Query{Clusters: []string{"c2"}}, "label:tier", "namespace")
	merged.Merge(c2)
	merged.Sort(false)
	if fmt.Sprint(groupsOf(merged)) != fmt.Sprint(groupsOf(whole)) || merged.Total != whole.Total {
		t.Errorf("c1 + c2 = %v (%d), the fleet %v (%d)", groupsOf(merged), merged.Total, groupsOf(whole), whole.Total)
	}
	for i := 1; i < len(whole.Groups); i++ {
		p, g := whole.Groups[i-1], whole.Groups[i]
		if p.Count < g.Count || (p.Count == g.Count && compareKeys(p.Key, g.Key) > 0) {
			t.Errorf("sort by count: group %d (%v) after %d (%v)", i, g, i-1, p)
		}
	}
	whole.Sort(true)
	var keys []string
	for _, g := range whole.Groups {
		keys = append(keys, fmt.Sprint(groupsKey(g.Key)))
	}
	if !sort.SliceIsSorted(whole.Groups, func(i, j int) bool { return compareKeys(whole.Groups[i].Key, whole.Groups[j].Key) < 0 }) ||
		whole.Groups[len(whole.Groups)-1].Key[0] != nil {
		t.Errorf("sort by key: %v; want keys in order, null last", keys)
	}
	whole.Limit(2)
	if len(whole.Groups) != 2 {
		t.Errorf("Limit(2) kept %d groups", len(whole.Groups))
	}
}

func groupsKey(k []*string) []string {
	var out []string
	for _, v := range k {
		if v == nil {
			out = append(out, "<null>")
		} else {
			out = append(out, *v)
		}
	}
	return out
}

// TestSummarizeRefusesBadKeys: every bad key is an error that names it.
func TestSummarizeRefusesBadKeys(t *testing.T) {
	a, _ := summaryFleet(t)
	for _, by := range [][]string{{"colour"}, {"label:"}, {"field:spec.containers["}, {"index:nope"}, {"index:"}, {}} {
		_, err := a.Summarize(Query{}, by...)
		if err == nil {
			t.Errorf("by %v: no error", by)
			continue
		}
		if len(by) > 0 && !strings.Contains(err.Error(), by[0]) {
			t.Errorf("by %v: %v, which does not name the key", by, err)
		}
	}
}

// TestSummarizeRefusesTooManyCombinations: an object whose keys' values combine in more than
// MaxCombinations groups refuses the summary with an error that names it; under the bound it
// counts once in each.
func TestSummarizeRefusesTooManyCombinations(t *testing.T) {
	a := newAgg(t)
	s := &source{}
	big := cm("ns", "big", "1", nil)
	big.Data = map[string]string{}
	for i := range 40 {
		big.Data[fmt.Sprint("k", i)] = fmt.Sprint("v", i)
	}
	s.items = append(s.items, *big, *cm("ns", "small", "1", nil))
	inf, _ := startInformer(t, s)
	if err := a.join("c1", inf); err != nil {
		t.Fatal(err)
	}
	a.WaitForSync(context.Background(), 5*time.Second)
	// 40 × 40 = 1,600 combinations of the big ConfigMap's values.
	_, err := a.Summarize(Query{}, "field:data.*", "field:data.*")
	if err == nil || !strings.Contains(err.Error(), "c1|ns/big") || !strings.Contains(err.Error(), "1024") {
		t.Errorf("1,600 combinations: %v, want a refusal naming c1|ns/big and the bound", err)
	}
	// 40 × 1: counted, once per value.
	sum, err := a.Summarize(Query{}, "field:data.*", "namespace")
	if err != nil || sum.Total != 2 || len(sum.Groups) != 41 {
		t.Errorf("40 combinations: %d groups, total %d, %v; want 41 groups (40 values and null) and 2 objects", len(sum.Groups), sum.Total, err)
	}
}

// BenchmarkSummarize counts 20,000 ConfigMaps over 4 clusters by each kind of key.
func BenchmarkSummarize(b *testing.B) {
	a, _, err := New(Options{Resource: "configmaps", SyncPollInterval: 5 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	for c := range 4 {
		s := &source{}
		for i := range 5000 {
			o := cm(fmt.Sprint("ns-", i%50), fmt.Sprint("o", i), "1", map[string]string{"tier": fmt.Sprint("t", i%7)})
			o.Data = map[string]string{"x": fmt.Sprint(i % 13)}
			s.items = append(s.items, *o)
		}
		inf, _ := startInformer(b, s)
		if err := a.join(fmt.Sprint("c", c), inf); err != nil {
			b.Fatal(err)
		}
	}
	a.WaitForSync(context.Background(), time.Minute)
	for _, by := range [][]string{{"cluster", "namespace"}, {"label:tier"}, {"field:data.x"}} {
		b.Run(strings.Join(by, ","), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := a.Summarize(Query{}, by...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzGroupKey: any key text is parsed or refused with an error that names it; a parsed key
// summarizes a small fleet without a panic, and its total counts each object once.
func FuzzGroupKey(f *testing.F) {
	for _, seed := range []string{"cluster", "namespace", "label:tier", "field:spec.nodeName", "field:data.*",
		"field:{.metadata.labels}", "index:app", "label:", "field:[", "field:$..name", "colour"} {
		f.Add(seed)
	}
	a, items := summaryFleet(f)
	f.Fuzz(func(t *testing.T, key string) {
		k, err := ParseGroupKey(key)
		if err != nil {
			if !strings.Contains(err.Error(), fmt.Sprintf("%q", key)) {
				t.Fatalf("%q: %v, which does not name the key", key, err)
			}
			return
		}
		s, err := a.SummarizeKeys(Query{}, []GroupKey{k})
		if err != nil {
			return // an index that does not exist
		}
		if s.Total != len(items) {
			t.Fatalf("%q: total %d, want every object once (%d)", key, s.Total, len(items))
		}
	})
}

// BenchmarkSummarizeFleet counts Pods over a fleet in process: clusters ×
// pods-per-cluster from MULTICACHE_BENCH_SUMMARY_CLUSTERS and _PODS (default 4 × 5,000; issue
// I1/I2's 2M objects are 100 × 20,000). Each Pod has 2 containers of 50 images, 20
// namespaces, a tier label on half of them; its informer interns it as the daemon's do. ns/op
// over the objects is the cost per object.
//
//	MULTICACHE_BENCH_SUMMARY_CLUSTERS=100 MULTICACHE_BENCH_SUMMARY_PODS=20000 \
//	  go test -run '^$' -bench SummarizeFleet -benchtime 5x -count 5 ./pkg/aggregate/
func BenchmarkSummarizeFleet(b *testing.B) {
	clusters, pods := envInt(b, "MULTICACHE_BENCH_SUMMARY_CLUSTERS", 4), envInt(b, "MULTICACHE_BENCH_SUMMARY_PODS", 5000)
	// Counts kept from the start: namespace (the default), the tier label and the image index,
	// as a config's counts: [label:tier, index:image] would keep them.
	a, ms, err := New(Options{Resource: "pods", SyncPollInterval: 5 * time.Millisecond, CountedKeys: []string{"namespace", "label:tier"}})
	if err != nil {
		b.Fatal(err)
	}
	if err := a.AddIndex(IndexSpec{Name: "image", Func: index.ByImage}); err != nil {
		b.Fatal(err)
	}
	if err := a.KeepCounts("index:image"); err != nil {
		b.Fatal(err)
	}
	// As in the daemon, where the watch cache is always a handler: members are fed, and Len
	// is O(1).
	if _, err := a.AddEventHandler(HandlerFuncs{}); err != nil {
		b.Fatal(err)
	}
	joined := time.Now()
	for c := range clusters {
		items := make([]runtime.Object, 0, pods)
		for i := range pods {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprint("ns-", i%20), Name: fmt.Sprint("p", i), ResourceVersion: "1",
				Labels: map[string]string{"app": fmt.Sprint("app-", i%100)}}}
			if i%2 == 0 {
				p.Labels["tier"] = []string{"web", "db", "cache"}[i%3]
			}
			p.Spec.Containers = []corev1.Container{{Name: "a", Image: fmt.Sprint("registry/img-", i%50, ":1")}, {Name: "b", Image: "registry/sidecar:2"}}
			p.Status.Phase = []corev1.PodPhase{corev1.PodRunning, corev1.PodPending}[i%7/6]
			items = append(items, p)
		}
		inf := cache.NewSharedIndexInformer(listOnlyPods(items), &corev1.Pod{}, 0, cache.Indexers{})
		// The daemon's stores hold objects whose repeated strings (images, names, label
		// values) are shared (pkg/intern, in its informers' transform): so do these.
		if err := inf.SetTransform(internPods); err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		b.Cleanup(cancel)
		go inf.Run(ctx.Done())
		if err := ms.Join(fmt.Sprint("c", c), inf); err != nil {
			b.Fatal(err)
		}
	}
	if unsynced := a.WaitForSync(context.Background(), 10*time.Minute); len(unsynced) > 0 {
		b.Fatalf("unsynced: %v", unsynced)
	}
	synced := time.Since(joined)
	for {
		n := 0
		for _, li := range a.LearnedIndexes() {
			if li.Kept && li.Clusters == clusters {
				n++
			}
		}
		if n == 3 {
			break
		}
		if time.Since(joined) > 10*time.Minute {
			b.Fatalf("the kept counts have not had every list after 10 minutes: %+v", a.LearnedIndexes())
		}
		time.Sleep(10 * time.Millisecond)
	}
	kept := time.Since(joined)
	objects := clusters * pods
	tierWeb, _ := labels.Parse("tier=web")
	whereWant := 0
	for i := range pods {
		if strings.HasPrefix(fmt.Sprint("registry/img-", i%50, ":1"), "registry/img-1") {
			whereWant += clusters
		}
	}
	// The scans first, with neither kept counts nor learning; then the kept keys' first asks;
	// then other keys asked again, read from the indexes they became.
	learn := a.learn
	a.learn = newLearner(0, DefaultLearnedIndexBytes)
	for _, tc := range []struct {
		name string
		q    Query
		by   []string
	}{
		{"by-cluster", Query{}, []string{"cluster"}},
		{"by-namespace", Query{}, []string{"namespace"}},
		{"by-cluster-namespace", Query{}, []string{"cluster", "namespace"}},
		{"by-label", Query{}, []string{"label:tier"}},
		{"by-image-path", Query{}, []string{"field:spec.containers[*].image"}},
		{"by-phase-path", Query{}, []string{"field:status.phase"}},
		{"by-cluster-where-label", Query{Labels: tierWeb}, []string{"cluster"}},
		{"by-image-index", Query{}, []string{"index:image"}},
		{"by-cluster-where-cel", Query{}, []string{"cluster"}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			var took []time.Duration
			for b.Loop() {
				q := tc.q
				if tc.name == "by-cluster-where-cel" {
					q = whereQuery(b, benchWhere) // bound per ask, as per request
				}
				start := time.Now()
				s, err := a.Summarize(q, tc.by...)
				if err != nil {
					b.Fatal(err)
				}
				if tc.name == "by-cluster-where-cel" && s.Total != whereWant {
					b.Fatalf("the where counted %d Pods, want %d", s.Total, whereWant)
				}
				took = append(took, time.Since(start))
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Nanoseconds())/float64(objects), "ns/object")
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(took[0].Microseconds())/1000, "min-ms")
			b.ReportMetric(float64(took[len(took)-1].Microseconds())/1000, "max-ms")
		})
	}
	a.learn = learn
	for _, by := range [][]string{{"namespace"}, {"cluster", "namespace"}, {"label:tier"}, {"index:image"}} {
		b.Run("kept-by-"+strings.Join(by, ","), func(b *testing.B) {
			var took []time.Duration
			var answered int64
			for b.Loop() {
				before := answersOf(a, by[len(by)-1])
				s := time.Now()
				if _, err := a.Summarize(Query{}, by...); err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(s))
				answered += answersOf(a, by[len(by)-1]) - before
			}
			if answered != int64(len(took)) {
				b.Fatalf("%d of %d summaries read the kept counts", answered, len(took))
			}
			slices.Sort(took)
			b.ReportMetric(synced.Seconds(), "synced-s")
			b.ReportMetric(kept.Seconds(), "kept-s")
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(took[0].Microseconds())/1000, "min-ms")
			b.ReportMetric(float64(took[len(took)-1].Microseconds())/1000, "max-ms")
		})
	}
	for _, by := range [][]string{{"field:spec.containers[*].image"}, {"field:status.phase"}} {
		b.Run("again-by-"+strings.Join(by, ","), func(b *testing.B) {
			for range 2 { // the second ask starts the index
				if _, err := a.Summarize(Query{}, by...); err != nil {
					b.Fatal(err)
				}
			}
			start := time.Now()
			for !slices.ContainsFunc(a.LearnedIndexes(), func(li LearnedIndex) bool { return li.Clusters == clusters && slices.Contains(by, li.Key) }) {
				if time.Since(start) > 10*time.Minute {
					b.Fatal("no learned index after 10 minutes")
				}
				time.Sleep(10 * time.Millisecond)
			}
			learned := time.Since(start)
			var took []time.Duration
			for b.Loop() {
				s := time.Now()
				if _, err := a.Summarize(Query{}, by...); err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(s))
			}
			slices.Sort(took)
			b.ReportMetric(learned.Seconds(), "learn-s")
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(took[0].Microseconds())/1000, "min-ms")
			b.ReportMetric(float64(took[len(took)-1].Microseconds())/1000, "max-ms")
		})
	}
}

// benchWhere selects the Pods of 11 of the 50 images (img-1, img-10 to img-19): I4's where
// question.
const benchWhere = `object.spec.containers.exists(c, c.image.startsWith('registry/img-1'))`

// whereQuery is a query of the where expr, bound for one ask.
// internPods shares an object's repeated parts as the daemon's informers do.
func internPods(obj any) (any, error) {
	intern.Shared().Object(obj)
	return obj, nil
}

func whereQuery(b *testing.B, expr string) Query {
	f, err := index.CompileFilter(expr)
	if err != nil {
		b.Fatal(err)
	}
	return Query{Fields: []FieldTerm{{Field: "where", Value: "true", Values: f.Bind().Values, Where: expr}}}
}

// answersOf is how many summaries key's kept or learned index answered.
func answersOf(a *Aggregate, key string) int64 {
	for _, li := range a.LearnedIndexes() {
		if li.Key == key {
			return li.Answers
		}
	}
	return 0
}

func envInt(b *testing.B, name string, def int) int {
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

// listOnlyPods is a ListerWatcher of fixed Pods whose watch never sends.
func listOnlyPods(items []runtime.Object) cache.ListerWatcher {
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			l := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
			for _, o := range items {
				l.Items = append(l.Items, *o.(*corev1.Pod))
			}
			return l, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return watch.NewFake(), nil },
	}, &source{})
}

// TestGroupKeyWithView: a key with a view counts what the view shows of each object (a Secret
// as a caller reads it), not the object.
func TestGroupKeyWithView(t *testing.T) {
	a, items := summaryFleet(t)
	k, err := ParseGroupKey("field:data.y")
	if err != nil {
		t.Fatal(err)
	}
	hide := func(obj any) any { c := *obj.(*corev1.ConfigMap); c.Data = nil; return &c }
	s, err := a.SummarizeKeys(Query{}, []GroupKey{k.WithView(hide)})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Groups) != 1 || s.Groups[0].Key[0] != nil || s.Groups[0].Count != len(items) {
		t.Errorf("data.y through a view that hides data: %v, want every object under null", groupsOf(s))
	}
	s, _ = a.SummarizeKeys(Query{}, []GroupKey{k})
	if len(s.Groups) < 2 {
		t.Errorf("data.y without a view: %v, want its values", groupsOf(s))
	}
	for _, alias := range []string{"index:cluster", "index:namespace"} {
		got, _ := a.Summarize(Query{}, alias)
		want, _ := a.Summarize(Query{}, strings.TrimPrefix(alias, "index:"))
		if fmt.Sprint(groupsOf(got)) != fmt.Sprint(groupsOf(want)) {
			t.Errorf("%s: %v, want as %s: %v", alias, groupsOf(got), strings.TrimPrefix(alias, "index:"), groupsOf(want))
		}
	}
	if _, err := a.Summarize(Query{}, "cluster", "namespace", "cluster", "namespace", "cluster", "namespace", "cluster", "namespace", "cluster"); err == nil {
		t.Errorf("9 keys: no error (at most %d)", MaxGroupKeys)
	}
}

// TestSummarizeStopsWithItsContext: a summary whose context has ended returns its error
// instead of counts.
func TestSummarizeStopsWithItsContext(t *testing.T) {
	a, _ := summaryFleet(t)
	k, _ := ParseGroupKey("label:tier")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := a.SummarizeKeysContext(ctx, Query{}, []GroupKey{k}); err != context.Canceled {
		t.Errorf("a summary after its context ended: %v, want context.Canceled", err)
	}
	if s, err := a.SummarizeKeysContext(context.Background(), Query{}, []GroupKey{k}); err != nil || s.Total == 0 {
		t.Errorf("a summary with a live context: %v, total %d", err, s.Total)
	}
}

// TestSplitGroupKeys: keys split at the commas between them, not at those inside a path's
// brackets, braces, parentheses or quotes.
func TestSplitGroupKeys(t *testing.T) {
	for in, want := range map[string][]string{
		"cluster,namespace":                           {"cluster", "namespace"},
		" cluster , , label:app ":                     {"cluster", "label:app"},
		"field:{.spec.containers[0,1].image},cluster": {"field:{.spec.containers[0,1].image}", "cluster"},
		"field:{.a[?(@.b in ['x,y'])].c},namespace":   {"field:{.a[?(@.b in ['x,y'])].c}", "namespace"},
		`field:{.metadata.labels['a\',b']},cluster`:   {`field:{.metadata.labels['a\',b']}`, "cluster"},
		"field:spec.containers[*].image":              {"field:spec.containers[*].image"},
		"field:a],cluster":                            {"field:a]", "cluster"},
		"":                                            nil,
	} {
		if got := SplitGroupKeys(in); !slices.Equal(got, want) {
			t.Errorf("SplitGroupKeys(%q) = %q, want %q", in, got, want)
		}
	}
}
