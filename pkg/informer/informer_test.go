package informer

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// source lists a fixed set of ConfigMaps and then serves one fake watch.
type source struct {
	items []corev1.ConfigMap
	w     *watch.FakeWatcher
}

func (s *source) IsWatchListSemanticsUnSupported() bool { return true }

func (s *source) lw() cache.ListerWatcher {
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: s.items}, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return s.w, nil },
	}, s)
}

func newSource(n int) *source {
	s := &source{w: watch.NewFakeWithChanSize(100000, false)}
	for k := range n {
		s.items = append(s.items, *cm(k, 1))
	}
	return s
}

func cm(k, rv int) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "o" + strconv.Itoa(k), ResourceVersion: strconv.Itoa(rv)}}
}

func start(t *testing.T, s *source, opts Options) (*Informer, context.CancelFunc) {
	t.Helper()
	opts.ListerWatcher, opts.ObjectType = s.lw(), &corev1.ConfigMap{}
	inf, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return inf, cancel
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after 10s", what)
		}
	}
}

// view applies what a handler is told to a map, and checks that calls never overlap, that a
// key's version never goes back, and that an update's old object is the version last told
// (or that the update repeats it).
type view struct {
	inFlight *atomic.Int32 // shared by every view of one informer
	mu       sync.Mutex
	objs     map[string]int // key → resourceVersion
	initial  int
	problems []string
}

func newView(inFlight *atomic.Int32) *view { return &view{inFlight: inFlight, objs: map[string]int{}} }

func (v *view) enter() func() {
	if v.inFlight.Add(1) != 1 {
		v.problem("two handler calls at once")
	}
	return func() { v.inFlight.Add(-1) }
}

func (v *view) problem(p string) { v.problems = append(v.problems, p) }

func rvOf(obj any) (string, int) {
	c := obj.(*corev1.ConfigMap)
	rv, _ := strconv.Atoi(c.ResourceVersion)
	return c.Namespace + "/" + c.Name, rv
}

func (v *view) tell(key string, rv int) {
	if old, ok := v.objs[key]; ok && rv < old {
		v.problem(key + " went back from " + strconv.Itoa(old) + " to " + strconv.Itoa(rv))
	}
	v.objs[key] = rv
}

func (v *view) OnAdd(obj any, initial bool) {
	defer v.enter()()
	v.mu.Lock()
	defer v.mu.Unlock()
	if initial {
		v.initial++
	}
	v.tell(rvOf(obj))
}

func (v *view) OnUpdate(oldObj, newObj any) {
	defer v.enter()()
	v.mu.Lock()
	defer v.mu.Unlock()
	key, rv := rvOf(newObj)
	_, orv := rvOf(oldObj)
	// An update is from the version last told, or it repeats that version (the change being
	// handed out when a late handler's replay ran).
	switch told, ok := v.objs[key]; {
	case !ok:
		v.problem(key + ": update of an object never told")
	case rv != told && orv != told:
		v.problem(key + ": update from " + strconv.Itoa(orv) + ", not the " + strconv.Itoa(told) + " told")
	}
	v.tell(key, rv)
}

func (v *view) OnDelete(obj any) {
	defer v.enter()()
	v.mu.Lock()
	defer v.mu.Unlock()
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	key, _ := rvOf(obj)
	delete(v.objs, key)
}

func (v *view) matches(store cache.Store) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	items := store.List()
	if len(items) != len(v.objs) {
		return false
	}
	for _, obj := range items {
		key, rv := rvOf(obj)
		if v.objs[key] != rv {
			return false
		}
	}
	return true
}

func (v *view) check(t *testing.T, name string) {
	t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.problems) > 0 {
		t.Errorf("%s: %d problems, first: %s", name, len(v.problems), strings.Join(v.problems[:min(3, len(v.problems))], "; "))
	}
}

// TestHandlerBeforeRun: a handler added before Run gets the initial list as initial adds,
// then every event, and syncs with the informer.
func TestHandlerBeforeRun(t *testing.T) {
	s := newSource(100)
	opts := Options{ListerWatcher: s.lw(), ObjectType: &corev1.ConfigMap{}, Indexers: cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}}
	inf, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	var inFlight atomic.Int32
	v := newView(&inFlight)
	reg, err := inf.AddEventHandler(v)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(ctx) }()
	if !cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		t.Fatal("registration never synced")
	}
	select {
	case <-reg.HasSyncedChecker().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("registration's checker never done")
	}
	if v.initial != 100 {
		t.Errorf("initial adds: %d, want 100", v.initial)
	}
	s.w.Add(cm(100, 2))
	s.w.Modify(cm(0, 3))
	s.w.Delete(cm(1, 4))
	waitFor(t, "the handler follows the store", func() bool {
		return inf.GetStore() != nil && len(inf.GetStore().List()) == 100 && v.matches(inf.GetStore())
	})
	if got, _ := inf.GetIndexer().ByIndex(cache.NamespaceIndex, "ns"); len(got) != 100 {
		t.Errorf("namespace index: %d objects, want 100", len(got))
	}
	cancel()
	<-done
	if !inf.IsStopped() {
		t.Error("IsStopped false after Run returned")
	}
	if _, err := inf.AddEventHandler(newView(&inFlight)); err == nil {
		t.Error("a stopped informer took a handler")
	}
	v.check(t, "handler")
}

// TestLateHandlersUnderEvents: handlers added while events stream in each get the store, then
// follow it: their views end equal to the store, no version ever goes back, and no two calls
// overlap.
func TestLateHandlersUnderEvents(t *testing.T) {
	for round := range 20 {
		s := newSource(50)
		var inFlight atomic.Int32
		first := newView(&inFlight)
		inf, err := New(Options{ListerWatcher: s.lw(), ObjectType: &corev1.ConfigMap{}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := inf.AddEventHandler(first); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); inf.RunWithContext(ctx) }()
		writing := make(chan struct{})
		go func() {
			defer close(writing)
			rv := 10
			for i := range 3000 {
				rv++
				k := i % 80
				switch i % 7 {
				case 3:
					s.w.Delete(cm(k, rv))
				case 5:
					s.w.Add(cm(k, rv))
				default:
					s.w.Modify(cm(k, rv))
				}
			}
		}()
		var late []*view
		var regs []cache.ResourceEventHandlerRegistration
		for range 3 {
			time.Sleep(time.Duration(round%4) * time.Millisecond)
			v := newView(&inFlight)
			reg, err := inf.AddEventHandler(v)
			if err != nil {
				t.Fatal(err)
			}
			late, regs = append(late, v), append(regs, reg)
		}
		<-writing
		for i, reg := range regs {
			waitFor(t, "late handler "+strconv.Itoa(i)+" synced", reg.HasSynced)
		}
		waitFor(t, "every view equals the store", func() bool {
			for _, v := range append(late, first) {
				if !v.matches(inf.GetStore()) {
					return false
				}
			}
			return true
		})
		cancel()
		<-done
		first.check(t, "handler added before Run")
		for i, v := range late {
			v.check(t, "late handler "+strconv.Itoa(i))
		}
		if t.Failed() {
			t.Fatalf("round %d", round)
		}
	}
}

// TestIdleLateHandler: a handler added to an informer that has no event coming still gets the
// store and syncs.
func TestIdleLateHandler(t *testing.T) {
	s := newSource(30)
	inf, _ := start(t, s, Options{})
	waitFor(t, "informer synced", inf.HasSynced)
	var inFlight atomic.Int32
	v := newView(&inFlight)
	reg, err := inf.AddEventHandler(v)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "late handler synced", reg.HasSynced)
	if v.initial != 30 || !v.matches(inf.GetStore()) {
		t.Errorf("late handler had %d initial adds, want the store's 30", v.initial)
	}
}

// TestRemoveEventHandler: once removed, a handler is called no more.
func TestRemoveEventHandler(t *testing.T) {
	s := newSource(1)
	inf, _ := start(t, s, Options{})
	var calls atomic.Int32
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(any, any) { calls.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "synced", reg.HasSynced)
	s.w.Modify(cm(0, 2))
	waitFor(t, "the update delivered", func() bool { return calls.Load() == 1 })
	if err := inf.RemoveEventHandler(reg); err != nil {
		t.Fatal(err)
	}
	var after atomic.Int32
	other, _ := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(any, any) { after.Add(1) }})
	waitFor(t, "second synced", other.HasSynced)
	s.w.Modify(cm(0, 3))
	waitFor(t, "the next update delivered to the other handler", func() bool { return after.Load() == 1 })
	if n := calls.Load(); n != 1 {
		t.Errorf("removed handler called %d times, want 1", n)
	}
	if err := inf.RemoveEventHandler(fakeRegistration{}); err == nil {
		t.Error("removing a foreign registration: no error")
	}
}

type fakeRegistration struct {
	cache.ResourceEventHandlerRegistration
}

// TestHasSyncedWhileHandlerWaits: HasSynced must answer while a handler is blocked, also when
// client-go's FIFO holds its lock through the call. An Aggregate member asks HasSynced holding
// the lock its feed waits for. With client-go 0.37's defaults (RealFIFO with atomic events,
// unlocked while processing unless two batches of 1000 are queued), the 5000 queued watch
// events below make the FIFO hold its lock; with client-go's HasSynced, this test fails.
func TestHasSyncedWhileHandlerWaits(t *testing.T) {
	s := newSource(1)
	gate1, gate2 := make(chan struct{}), make(chan struct{})
	blocked1, blocked2 := make(chan struct{}), make(chan struct{})
	inf, err := New(Options{ListerWatcher: s.lw(), ObjectType: &corev1.ConfigMap{}})
	if err != nil {
		t.Fatal(err)
	}
	var adds atomic.Int32
	reg, _ := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) {
		switch adds.Add(1) {
		case 1: // the initial list
			close(blocked1)
			<-gate1
		case 2: // the first of the queued watch events
			close(blocked2)
			<-gate2
		}
	}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(ctx) }()
	var release sync.Once
	open := func() { release.Do(func() { close(gate2) }) }
	defer func() { open(); cancel(); <-done }()
	<-blocked1
	for k := 1; k <= 5000; k++ {
		s.w.Add(cm(k, 10+k))
	}
	waitFor(t, "the watch events queued in the FIFO", func() bool { return len(s.w.ResultChan()) == 0 })
	time.Sleep(50 * time.Millisecond) // the reflector's last Add
	close(gate1)
	<-blocked2
	answered := make(chan bool)
	go func() { answered <- inf.HasSynced() && reg.HasSynced() }()
	select {
	case synced := <-answered:
		if !synced {
			t.Error("not synced after the initial list")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("HasSynced blocked while a handler waited")
	}
	open()
	waitFor(t, "every object stored", func() bool { return len(inf.GetStore().List()) == 5001 })
}

// TestTransformAndRefusals: the transform reaches store and handlers; what this informer does
// not do is refused with an error that says so.
func TestTransformAndRefusals(t *testing.T) {
	if _, err := New(Options{ObjectType: &corev1.ConfigMap{}}); err == nil || !strings.Contains(err.Error(), "ListerWatcher") {
		t.Errorf("no ListerWatcher: %v", err)
	}
	if _, err := New(Options{ListerWatcher: newSource(0).lw()}); err == nil || !strings.Contains(err.Error(), "ObjectType") {
		t.Errorf("no ObjectType: %v", err)
	}
	s := newSource(3)
	inf, err := New(Options{ListerWatcher: s.lw(), ObjectType: &corev1.ConfigMap{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := inf.SetTransform(func(obj any) (any, error) {
		c := obj.(*corev1.ConfigMap)
		c.Labels = map[string]string{"seen": "yes"}
		return c, nil
	}); err != nil {
		t.Fatal(err)
	}
	var labelled atomic.Int32
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		if obj.(*corev1.ConfigMap).Labels["seen"] == "yes" {
			labelled.Add(1)
		}
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := inf.AddEventHandlerWithResyncPeriod(cache.ResourceEventHandlerFuncs{}, time.Minute); err == nil {
		t.Error("a resync period was taken")
	}
	if _, err := inf.AddEventHandler(nil); err == nil {
		t.Error("a nil handler was taken")
	}
	if err := inf.SetWatchErrorHandler(nil); err == nil {
		t.Error("SetWatchErrorHandler: no error")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "synced", inf.HasSynced)
	if labelled.Load() != 3 {
		t.Errorf("handler saw %d transformed objects, want 3", labelled.Load())
	}
	if err := inf.SetTransform(nil); err == nil {
		t.Error("SetTransform after Run: no error")
	}
	if got := inf.GetIndexer().List(); len(got) != 3 || got[0].(*corev1.ConfigMap).Labels["seen"] != "yes" {
		t.Errorf("store holds untransformed objects: %v", got)
	}
}
