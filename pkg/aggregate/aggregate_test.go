package aggregate

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/multicache/multicache/pkg/informer"
)

// source is a ListerWatcher over a fixed list and a fake watch, feeding a real client-go informer.
type source struct {
	mu    sync.Mutex
	items []corev1.ConfigMap
	rv    string
	w     *watch.FakeWatcher
	block chan struct{} // if set, List waits for it
}

func (s *source) IsWatchListSemanticsUnSupported() bool { return true }

func (s *source) lwFor() cache.ListerWatcher {
	if s.w == nil {
		s.w = watch.NewFakeWithChanSize(16, false)
	}
	return s.lw()
}

func (s *source) lw() cache.ListerWatcher {
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, _ metav1.ListOptions) (runtime.Object, error) {
			if s.block != nil {
				select {
				case <-s.block:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: s.rv}, Items: append([]corev1.ConfigMap(nil), s.items...)}, nil
		},
		WatchFuncWithContext: func(ctx context.Context, _ metav1.ListOptions) (watch.Interface, error) {
			return s.w, nil
		},
	}, s)
}

func cm(ns, name, rv string, lbl map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: rv, Labels: lbl}}
}

func startInformer(t testing.TB, s *source) (cache.SharedIndexInformer, context.CancelFunc) {
	t.Helper()
	if s.w == nil {
		s.w = watch.NewFakeWithChanSize(2000, false)
	}
	if s.rv == "" {
		s.rv = "1"
	}
	inf := newMemberInformer(t, s.lw())
	ctx, cancel := context.WithCancel(context.Background())
	go inf.RunWithContext(ctx)
	t.Cleanup(cancel)
	return inf, cancel
}

// memberKind is the kind of informer the tests join: the daemon's (informer.New, whose
// handlers run on its goroutine) or client-go's SharedIndexInformer (a processorListener per
// handler). TestMain runs every test with each.
var memberKind = "informer.New"

func TestMain(m *testing.M) {
	code := m.Run()
	// Benchmarks run once, with the daemon's informers: a second fleet of millions of objects
	// next to the first would not fit in memory.
	benchmarking := flag.Lookup("test.bench") != nil && flag.Lookup("test.bench").Value.String() != ""
	if code == 0 && !benchmarking {
		memberKind = "client-go SharedIndexInformer"
		fmt.Println("again, with client-go SharedIndexInformers as members")
		code = m.Run()
	}
	os.Exit(code)
}

func newMemberInformer(t testing.TB, lw cache.ListerWatcher) cache.SharedIndexInformer {
	t.Helper()
	if memberKind != "informer.New" {
		return cache.NewSharedIndexInformerWithOptions(lw, &corev1.ConfigMap{}, cache.SharedIndexInformerOptions{Indexers: cache.Indexers{}})
	}
	inf, err := informer.New(informer.Options{ListerWatcher: lw, ObjectType: &corev1.ConfigMap{}})
	if err != nil {
		t.Fatal(err)
	}
	return inf
}

// recorder keeps every call in order.
type recorder struct {
	mu     sync.Mutex
	events []string
	delay  time.Duration
	gate   chan struct{} // if set, every call waits until it is closed
}

func (r *recorder) add(s string) {
	if r.gate != nil {
		<-r.gate
	}
	if r.delay > 0 {
		time.Sleep(r.delay)
	}
	r.mu.Lock()
	r.events = append(r.events, s)
	r.mu.Unlock()
}

func name(obj any) string {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return "tombstone:" + d.Key
	}
	o := obj.(*corev1.ConfigMap)
	return o.Namespace + "/" + o.Name + "@" + o.ResourceVersion
}

func (r *recorder) OnAdd(c string, obj any, initial bool) {
	r.add(fmt.Sprintf("add %s %s initial=%v", c, name(obj), initial))
}
func (r *recorder) OnUpdate(c string, o, n any) { r.add(fmt.Sprintf("update %s %s", c, name(n))) }
func (r *recorder) OnDelete(c string, obj any)  { r.add(fmt.Sprintf("delete %s %s", c, name(obj))) }

func (r *recorder) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := append([]string(nil), r.events...)
	return out
}

func (r *recorder) waitFor(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if ev := r.snapshot(); len(ev) >= n {
			return ev
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("want %d events, have %v", n, r.snapshot())
	return nil
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}

func eq(t *testing.T, what string, got, want []string) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s:\n got  %v\n want %v", what, got, want)
	}
}

func newAgg(t testing.TB) *Aggregate {
	a, _, err := New(Options{Resource: "configmaps", SyncPollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestJoinQueryAndHandlers(t *testing.T) {
	a := newAgg(t)
	rec := &recorder{}
	reg, _ := a.AddEventHandler(rec)
	s1 := &source{items: []corev1.ConfigMap{*cm("a", "x", "1", map[string]string{"app": "web"}), *cm("b", "y", "1", nil)}}
	s2 := &source{items: []corev1.ConfigMap{*cm("a", "x", "1", map[string]string{"app": "db"})}}
	i1, _ := startInformer(t, s1)
	i2, _ := startInformer(t, s2)
	if err := a.join("c1", i1); err != nil {
		t.Fatal(err)
	}
	if err := a.join("c2", i2); err != nil {
		t.Fatal(err)
	}
	if missing := a.WaitForSync(context.Background(), 5*time.Second); missing != nil {
		t.Fatalf("unsynced: %v", missing)
	}
	eq(t, "initial adds", sorted(rec.waitFor(t, 3)), []string{
		"add c1 a/x@1 initial=true", "add c1 b/y@1 initial=true", "add c2 a/x@1 initial=true"})
	waitTrue(t, "registration HasSynced", reg.HasSynced)

	eq(t, "ListKeys", sorted(a.ListKeys()), []string{"c1|a/x", "c1|b/y", "c2|a/x"})
	if o, ok, _ := a.GetByKey("c2|a/x"); !ok || o.(*corev1.ConfigMap).Labels["app"] != "db" {
		t.Errorf("GetByKey c2|a/x = %v %v", o, ok)
	}
	keys, _ := a.IndexKeys(IndexNamespace, "a")
	eq(t, "namespace index", sorted(keys), []string{"c1|a/x", "c2|a/x"})
	keys, _ = a.IndexKeys(IndexCluster, "c1")
	eq(t, "cluster index", sorted(keys), []string{"c1|a/x", "c1|b/y"})
	keys, _ = a.IndexKeys(IndexClusterNamespace, "c1/b")
	eq(t, "cluster-namespace index", keys, []string{"c1|b/y"})
	eq(t, "cluster-namespace values", a.ListIndexFuncValues(IndexClusterNamespace), []string{"c1/a", "c1/b", "c2/a"})
	if _, err := a.ByIndex("nope", "x"); err == nil {
		t.Error("ByIndex on an unknown index: no error")
	}
	if err := a.AddIndex(IndexSpec{Name: "app", Func: func(obj any) ([]string, error) {
		return []string{obj.(*corev1.ConfigMap).Labels["app"]}, nil
	}, Clusters: []string{"c2"}}); err != nil {
		t.Fatal(err)
	}
	keys, _ = a.IndexKeys("app", "db")
	eq(t, "custom index limited to c2", keys, []string{"c2|a/x"})
	keys, _ = a.IndexKeys("app", "web")
	eq(t, "custom index not in c1", keys, nil)

	res, err := a.Select(Query{Labels: labels.SelectorFromSet(labels.Set{"app": "web"})})
	if err != nil || len(res.Items) != 1 || res.Items[0].Cluster != "c1" || res.Items[0].Key().String() != "c1|a/x" {
		t.Errorf("Select app=web: %+v %v", res, err)
	}
	if idx, ok := a.Cluster("c1"); !ok || len(idx.ListKeys()) != 2 {
		t.Errorf("Cluster(c1) = %v %v", idx, ok)
	}

	// Live events keep per-object order; a handler that lags may see merged updates, but always
	// in order and always the final state.
	for i := 2; i <= 20; i++ {
		s1.w.Modify(cm("a", "x", strconv.Itoa(i), nil))
	}
	s1.w.Delete(cm("b", "y", "21", nil))
	waitTrue(t, "final events", func() bool {
		ev := rec.snapshot()
		return contains(ev, "delete c1 b/y@21") && contains(ev, "update c1 a/x@20")
	})
	var last int
	for _, e := range rec.snapshot()[3:] {
		var rv int
		if _, err := fmt.Sscanf(e, "update c1 a/x@%d", &rv); err == nil {
			if rv <= last {
				t.Errorf("update out of order: %v", rec.snapshot())
			}
			last = rv
		}
	}
}

func TestLateHandlerAndLeave(t *testing.T) {
	a := newAgg(t)
	s1 := &source{items: []corev1.ConfigMap{*cm("a", "x", "1", nil), *cm("a", "y", "1", nil)}}
	i1, _ := startInformer(t, s1)
	_ = a.join("c1", i1)
	a.WaitForSync(context.Background(), 5*time.Second)
	rec := &recorder{}
	reg, _ := a.AddEventHandler(rec)
	eq(t, "late handler", sorted(rec.waitFor(t, 2)), []string{"add c1 a/x@1 initial=true", "add c1 a/y@1 initial=true"})
	waitTrue(t, "late HasSynced", reg.HasSynced)
	a.leave("c1", false)
	eq(t, "leave", sorted(rec.waitFor(t, 4)[2:]), []string{"delete c1 tombstone:a/x", "delete c1 tombstone:a/y"})
	if len(a.List()) != 0 || len(a.Clusters()) != 0 {
		t.Errorf("after leave: %v %v", a.List(), a.Clusters())
	}
}

// TestReplaceMemberDiffs is the rotated-credential case: a new informer for the same cluster
// must produce only what changed.
func TestReplaceMemberDiffs(t *testing.T) {
	a := newAgg(t)
	s1 := &source{items: []corev1.ConfigMap{*cm("a", "same", "1", nil), *cm("a", "changed", "1", nil), *cm("a", "gone", "1", nil)}}
	i1, stop1 := startInformer(t, s1)
	_ = a.join("c1", i1)
	rec := &recorder{}
	_, _ = a.AddEventHandler(rec)
	a.WaitForSync(context.Background(), 5*time.Second)
	rec.waitFor(t, 3)

	block := make(chan struct{})
	s2 := &source{rv: "5", block: block, items: []corev1.ConfigMap{*cm("a", "same", "1", nil), *cm("a", "changed", "4", nil), *cm("a", "new", "5", nil)}}
	i2, _ := startInformer(t, s2)
	if err := a.join("c1", i2); err == nil {
		t.Fatal("Join replaced a member whose informer still runs")
	}
	stop1()
	waitTrue(t, "old informer stopped", i1.IsStopped)
	if err := a.join("c1", i2); err != nil {
		t.Fatal(err)
	}
	// Until the new informer syncs, queries read the old store and say it is unsynced.
	if o, ok, _ := a.GetByKey("c1|a/gone"); !ok || o == nil {
		t.Error("old store not served during the swap")
	}
	if u := a.Unsynced(); len(u) != 1 {
		t.Errorf("Unsynced during swap = %v", u)
	}
	close(block)
	if missing := a.WaitForSync(context.Background(), 5*time.Second); missing != nil {
		t.Fatal(missing)
	}
	rec.waitFor(t, 6)
	time.Sleep(50 * time.Millisecond) // and no event after those
	got := rec.snapshot()[3:]
	eq(t, "events of the swap", sorted(got), []string{"add c1 a/new@5 initial=true", "delete c1 tombstone:a/gone", "update c1 a/changed@4"})
	eq(t, "store after swap", sorted(a.ListKeys()), []string{"c1|a/changed", "c1|a/new", "c1|a/same"})
}

func TestPanickingAndSlowHandlers(t *testing.T) {
	a := newAgg(t)
	s1 := &source{}
	i1, _ := startInformer(t, s1)
	_ = a.join("c1", i1)
	a.WaitForSync(context.Background(), 5*time.Second)

	bad, _ := a.AddEventHandler(HandlerFuncs{AddFunc: func(string, any, bool) { panic("boom") }})
	slowRec := &recorder{delay: 20 * time.Millisecond, gate: make(chan struct{})}
	slow, _ := a.AddEventHandler(slowRec)
	release := sync.OnceFunc(func() { close(slowRec.gate) })
	defer release() // on a failure too: nothing stays held
	fast := &recorder{}
	_, _ = a.AddEventHandler(fast)

	for i := range 50 {
		s1.w.Add(cm("a", "o"+strconv.Itoa(i), strconv.Itoa(10+i), nil))
	}
	// Hammer one object: a lagging handler's backlog for it stays one event.
	for i := range 500 {
		s1.w.Modify(cm("a", "o0", strconv.Itoa(100+i), nil))
	}
	// A handler ends on the final state of o0: as an update, or as the add its pending add was
	// merged into if the updates came before it took that add (the fast one too, when the
	// writes hold the only core). (The add is an initial one when the informer replayed its
	// store to the member's feed after o0 arrived.)
	final := func(r *recorder) func() bool {
		return func() bool {
			got := r.snapshot()
			return contains(got, "update c1 a/o0@599") || contains(got, "add c1 a/o0@599 initial=false") || contains(got, "add c1 a/o0@599 initial=true")
		}
	}
	// The slow handler is held in its first call until the fast one has finished: it delays
	// no other handler.
	waitTrue(t, "fast handler reached the final state while the slow one was held", final(fast))
	if p := slow.Pending(); p > 50 {
		t.Errorf("slow handler backlog %d events, want ≤ 50 (one per object)", p)
	}
	release()
	waitTrue(t, "panics counted", func() bool { return bad.Panics() == 50 })
	waitTrue(t, "slow handler reached the final state", final(slowRec))
	if n := len(slowRec.snapshot()); n > 60 {
		t.Errorf("slow handler had %d calls for 50 objects: pending events were not merged", n)
	}
	slow.Remove()
	<-slow.Done()
}

func TestQueueFairAcrossClusters(t *testing.T) {
	q := newMergedQueue()
	for i := range 1000 {
		q.push("busy", "k"+strconv.Itoa(i), event{kind: evAdd})
	}
	q.push("quiet", "only", event{kind: evAdd})
	for i := range 2 {
		c, _, _, _ := q.pop()
		if c == "quiet" {
			return
		}
		_ = i
	}
	t.Fatal("the quiet cluster waited behind the busy one")
}

// mergedByKey is what a queue of a handler that reads by key keeps of in.
func mergedByKey(in []eventKind) []eventKind {
	q := newMergedQueue()
	q.byKey = true
	for i, k := range in {
		q.push("c", "k", event{kind: k, obj: i})
	}
	var got []eventKind
	if q.len() > 0 {
		_, evs, _, _ := q.pop()
		for _, e := range evs {
			got = append(got, e.kind)
		}
	}
	return got
}

func TestQueueMerge(t *testing.T) {
	for _, tc := range []struct {
		in, want, byKey []eventKind
	}{
		{[]eventKind{evAdd, evUpdate, evUpdate}, []eventKind{evAdd}, []eventKind{evAdd}},
		// A handler that reads by key may have read the object from the store meanwhile.
		{[]eventKind{evAdd, evDelete}, nil, []eventKind{evDelete}},
		{[]eventKind{evUpdate, evUpdate, evDelete}, []eventKind{evDelete}, []eventKind{evDelete}},
		{[]eventKind{evDelete, evAdd, evUpdate}, []eventKind{evDelete, evAdd}, []eventKind{evDelete, evAdd}},
		{[]eventKind{evDelete, evAdd, evDelete}, []eventKind{evDelete}, []eventKind{evDelete}},
	} {
		q := newMergedQueue()
		for i, k := range tc.in {
			q.push("c", "k", event{kind: k, obj: i})
		}
		if keyed := mergedByKey(tc.in); !slices.Equal(keyed, tc.byKey) {
			t.Errorf("%v merged for a handler that reads by key to %v, want %v", tc.in, keyed, tc.byKey)
		}
		var got []eventKind
		if q.len() > 0 {
			_, evs, _, _ := q.pop()
			for _, e := range evs {
				got = append(got, e.kind)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%v merged to %v, want %v", tc.in, got, tc.want)
		}
	}
}

// TestQueueEveryEvent: with every event kept nothing merges, and a cluster's events come out in
// arrival order across objects (a merged queue would put k's later events before other's).
func TestQueueEveryEvent(t *testing.T) {
	q := newFIFOQueue(100)
	type in struct {
		key  string
		kind eventKind
	}
	ins := []in{{"k", evAdd}, {"other", evAdd}, {"k", evUpdate}, {"k", evDelete}, {"other", evDelete}, {"k", evAdd}}
	for i, x := range ins {
		q.push("c", x.key, event{kind: x.kind, obj: i})
	}
	if q.len() != len(ins) {
		t.Fatalf("backlog %d, want %d", q.len(), len(ins))
	}
	for i := range ins {
		_, evs, _, _ := q.pop()
		if len(evs) != 1 || evs[0].obj != i || evs[0].kind != ins[i].kind {
			t.Fatalf("pop %d: got %+v, want event %d (%v)", i, evs, i, ins[i])
		}
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func waitTrue(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after 10s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestHandlerAddedDuringInitialList: a handler added while client-go is still delivering the
// initial list gets each object exactly once.
func TestHandlerAddedDuringInitialList(t *testing.T) {
	for range 5 {
		a := newAgg(t)
		s := &source{}
		for i := range 3000 {
			s.items = append(s.items, *cm("a", "o"+strconv.Itoa(i), "1", nil))
		}
		early := &recorder{}
		_, _ = a.AddEventHandler(early) // slows client-go's delivery to the aggregate a little
		i1, _ := startInformer(t, s)
		_ = a.join("c1", i1)
		time.Sleep(time.Duration(len(s.items)%7) * time.Millisecond)
		late := &recorder{}
		reg, _ := a.AddEventHandler(late)
		waitTrue(t, "late handler synced", reg.HasSynced)
		got := late.snapshot()
		seen := map[string]bool{}
		for _, e := range got {
			if seen[e] {
				t.Fatalf("duplicate %s", e)
			}
			seen[e] = true
		}
		if len(got) != 3000 {
			t.Fatalf("late handler got %d events, want 3000", len(got))
		}
	}
}

// handoffRecorder is a recorder that takes a move as one event.
type handoffRecorder struct{ recorder }

func (r *handoffRecorder) OnHandoff(c string) { r.add("handoff " + c) }

// TestHandoffIsNoDelete: a cluster handed to another replica leaves queries at once; a
// HandoffHandler hears one handoff and no delete, after every earlier event of the cluster;
// a plain handler hears the deletes it needs to match the Aggregate; a later join is adds.
func TestHandoffIsNoDelete(t *testing.T) {
	a := newAgg(t)
	s1 := &source{items: []corev1.ConfigMap{*cm("a", "x", "1", nil), *cm("a", "y", "1", nil)}}
	i1, stop1 := startInformer(t, s1)
	_ = a.join("c1", i1)
	s2 := &source{items: []corev1.ConfigMap{*cm("a", "z", "1", nil)}}
	i2, _ := startInformer(t, s2)
	_ = a.join("c2", i2)
	a.WaitForSync(context.Background(), 5*time.Second)
	// plain takes no handoffs; merged would, but a merged queue could fold a rejoin's add
	// before the marker, so it is told deletes.
	moving, plain, merged := &handoffRecorder{}, &recorder{}, &handoffRecorder{}
	_, _ = a.AddEventHandlerWithOptions(moving, HandlerOptions{EveryEvent: true})
	_, _ = a.AddEventHandler(plain)
	_, _ = a.AddEventHandler(merged)
	moving.waitFor(t, 3)
	plain.waitFor(t, 3)
	merged.waitFor(t, 3)

	s1.w.Modify(cm("a", "x", "2", nil))
	moving.waitFor(t, 4)
	plain.waitFor(t, 4)
	merged.waitFor(t, 4)
	stop1()
	a.leave("c1", true)
	eq(t, "handoff handler", moving.waitFor(t, 5)[3:], []string{"update c1 a/x@2", "handoff c1"})
	eq(t, "plain handler", sorted(plain.waitFor(t, 6)[3:]), []string{"delete c1 tombstone:a/x", "delete c1 tombstone:a/y", "update c1 a/x@2"})
	eq(t, "merged HandoffHandler", sorted(merged.waitFor(t, 6)[3:]), []string{"delete c1 tombstone:a/x", "delete c1 tombstone:a/y", "update c1 a/x@2"})
	eq(t, "queries after the handoff", a.ListKeys(), []string{"c2|a/z"})

	s3 := &source{items: []corev1.ConfigMap{*cm("a", "x", "3", nil)}}
	i3, _ := startInformer(t, s3)
	if err := a.join("c1", i3); err != nil {
		t.Fatal(err)
	}
	a.WaitForSync(context.Background(), 5*time.Second)
	eq(t, "rejoin after the handoff", moving.waitFor(t, 6)[5:], []string{"add c1 a/x@3 initial=true"})
	time.Sleep(50 * time.Millisecond)
	for _, ev := range moving.snapshot() {
		if strings.HasPrefix(ev, "delete") {
			t.Errorf("handoff handler was told %q", ev)
		}
	}
}

// TestClusterHandler: a handler bound to one cluster is told of that cluster's objects only,
// whether the cluster joined before or after it, and HasSynced waits for that cluster alone.
func TestClusterHandler(t *testing.T) {
	a := newAgg(t)
	i1, _ := startInformer(t, &source{items: []corev1.ConfigMap{*cm("a", "x", "1", nil)}})
	_ = a.join("c1", i1)
	a.WaitForSync(context.Background(), 5*time.Second)
	rec := &recorder{}
	reg, err := a.AddEventHandlerWithOptions(rec, HandlerOptions{Cluster: "c2"})
	if err != nil {
		t.Fatal(err)
	}
	if reg.HasSynced() {
		t.Error("HasSynced before its cluster joined: c1 is not its cluster")
	}
	block := make(chan struct{})
	i2, _ := startInformer(t, &source{block: block, items: []corev1.ConfigMap{*cm("a", "y", "1", nil), *cm("b", "z", "1", nil)}})
	_ = a.join("c2", i2)
	if reg.HasSynced() {
		t.Error("HasSynced before c2 synced")
	}
	close(block)
	eq(t, "c2's objects only", sorted(rec.waitFor(t, 2)), []string{"add c2 a/y@1 initial=true", "add c2 b/z@1 initial=true"})
	waitTrue(t, "HasSynced once c2 synced", reg.HasSynced)
	a.leave("c1", false)
	a.leave("c2", false)
	eq(t, "c2's deletes only", sorted(rec.waitFor(t, 4)[2:]), []string{"delete c2 tombstone:a/y", "delete c2 tombstone:b/z"})
	time.Sleep(50 * time.Millisecond)
	if n := len(rec.snapshot()); n != 4 {
		t.Errorf("told %d events, want 4: %v", n, rec.snapshot())
	}
}

// TestLen: a member's count follows its store through adds, updates and deletes, with handlers
// (the count of what they were told) and without (the store's keys); a cluster that is not a
// member has none.
func TestLen(t *testing.T) {
	for _, handlers := range []bool{true, false} {
		a := newAgg(t)
		if handlers {
			_, _ = a.AddEventHandler(&recorder{})
		}
		s1 := &source{items: []corev1.ConfigMap{*cm("a", "x", "1", nil), *cm("a", "y", "1", nil), *cm("b", "z", "1", nil)}}
		i1, _ := startInformer(t, s1)
		if err := a.join("c1", i1); err != nil {
			t.Fatal(err)
		}
		if missing := a.WaitForSync(context.Background(), 5*time.Second); missing != nil {
			t.Fatal(missing)
		}
		want := func(what string, n int) {
			t.Helper()
			waitTrue(t, what, func() bool {
				got, ok := a.Len("c1")
				idx, _ := a.Cluster("c1")
				return ok && got == n && len(idx.ListKeys()) == n
			})
		}
		want("initial list", 3)
		s1.w.Add(cm("b", "new", "2", nil))
		want("after an add", 4)
		s1.w.Modify(cm("a", "x", "3", nil))
		s1.w.Delete(cm("a", "y", "4", nil))
		s1.w.Delete(cm("b", "z", "5", nil))
		want("after an update and two deletes", 2)
		if n, ok := a.Len("nope"); ok || n != 0 {
			t.Errorf("handlers %v: Len of a cluster that is not a member: %d %v", handlers, n, ok)
		}
	}
}
