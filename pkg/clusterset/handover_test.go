package clusterset

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// TestShelf: a state is taken once; WaitShelfTaken returns once every state is taken or
// expired.
func TestShelf(t *testing.T) {
	r := &Registry{}
	r.shelf.put("a", []HandedState{{Key: "k1", ResourceVersion: "5"}, {Key: "k2", ResourceVersion: "6"}})
	r.shelf.put("ab", []HandedState{{Key: "k1", ResourceVersion: "1"}})
	if !r.HasShelved("a") || !r.HasShelved("ab") || r.HasShelved("b") {
		t.Errorf("HasShelved a, ab, b: %t %t %t, want true true false", r.HasShelved("a"), r.HasShelved("ab"), r.HasShelved("b"))
	}
	if _, ok := r.Shelved("ab", "k1"); !ok {
		t.Fatal("ab's state not taken")
	}
	if r.HasShelved("ab") {
		t.Error("HasShelved(ab) once its one state was taken")
	}
	if st, ok := r.Shelved("a", "k1"); !ok || st.ResourceVersion != "5" {
		t.Fatalf("take k1: %+v %t", st, ok)
	}
	if _, ok := r.Shelved("a", "k1"); ok {
		t.Error("k1 taken twice")
	}
	if _, ok := r.Shelved("b", "k2"); ok {
		t.Error("another cluster's state taken")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if left := r.WaitShelfTaken(ctx); left != 1 {
		t.Errorf("WaitShelfTaken with k2 untaken: %d left, want 1", left)
	}
	done := make(chan int)
	go func() { done <- r.WaitShelfTaken(context.Background()) }()
	time.Sleep(20 * time.Millisecond)
	r.Shelved("a", "k2")
	select {
	case left := <-done:
		if left != 0 {
			t.Errorf("WaitShelfTaken: %d left", left)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WaitShelfTaken did not return once every state was taken")
	}
	defer func(d time.Duration) { ShelfTTL = d }(ShelfTTL)
	ShelfTTL = time.Millisecond
	r.shelf.put("a", []HandedState{{Key: "k3"}})
	time.Sleep(5 * time.Millisecond)
	if r.HasShelved("a") {
		t.Error("HasShelved(a) once its state expired")
	}
	if _, ok := r.Shelved("a", "k3"); ok {
		t.Error("an expired state was taken")
	}
}

// TestShelfWaitsWhileTakersTake: a move of many clusters is taken a few at a time, for longer
// than ShelfTTL; every state waits while states are being taken, the rest expire ShelfTTL after
// the last take (not before; the timer drops them with nothing touching the shelf), and
// WaitShelfProgress returns once nothing has been taken for its idle time.
func TestShelfWaitsWhileTakersTake(t *testing.T) {
	defer func(d time.Duration) { ShelfTTL = d }(ShelfTTL)
	ShelfTTL = time.Second // ten times the gaps between takes: room for a starved CPU
	r := &Registry{}
	taken := strings.Split("a b c d e f g h i j k l m n o", " ")
	for _, c := range append(slices.Clone(taken), "y", "z") {
		r.shelf.put(c, []HandedState{{Key: "k", ResourceVersion: c}})
	}
	// Fifteen taken 100 ms apart: the last 1.5 s after the put, past ShelfTTL.
	for _, c := range taken {
		time.Sleep(100 * time.Millisecond)
		if st, ok := r.Shelved(c, "k"); !ok || st.ResourceVersion != c {
			t.Fatalf("%s, taken while takers keep taking: %+v %t", c, st, ok)
		}
	}
	lastTake := time.Now()
	// Idle for 100 ms, well before the two left expire.
	if left := r.WaitShelfProgress(context.Background(), 100*time.Millisecond); left != 2 && time.Since(lastTake) < ShelfTTL {
		t.Errorf("WaitShelfProgress: %d left, want y and z", left)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		r.shelf.mu.Lock()
		n := len(r.shelf.entries)
		r.shelf.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d states still shelved 5 s after the last take, ShelfTTL %s", n, ShelfTTL)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if gone := time.Since(lastTake); gone < ShelfTTL {
		t.Errorf("the states left expired %s after the last take, before ShelfTTL (%s)", gone, ShelfTTL)
	}
}

// TestShelfMaxAge: however often other states are taken, one nobody asks for expires
// ShelfMaxAge after it was kept.
func TestShelfMaxAge(t *testing.T) {
	defer func(ttl, age time.Duration) { ShelfTTL, ShelfMaxAge = ttl, age }(ShelfTTL, ShelfMaxAge)
	ShelfTTL, ShelfMaxAge = 400*time.Millisecond, 700*time.Millisecond
	r := &Registry{}
	r.shelf.put("unasked", []HandedState{{Key: "k"}})
	start := time.Now()
	for i := 0; time.Since(start) < 1500*time.Millisecond; i++ {
		c := fmt.Sprintf("c%d", i)
		r.shelf.put(c, []HandedState{{Key: "k"}})
		if _, ok := r.Shelved(c, "k"); !ok {
			t.Fatalf("%s: not taken right after it was kept", c)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, ok := r.Shelved("unasked", "k"); ok {
		t.Errorf("a state nobody asked for was still shelved %s after it was kept, ShelfMaxAge %s", time.Since(start), ShelfMaxAge)
	}
	if n := r.ShelvedStates(); n != 0 {
		t.Errorf("%d states shelved, want none", n)
	}
}

// fakeWatches records the watches a stack opens and answers each with a FakeWatcher.
type fakeWatches struct {
	mu     sync.Mutex
	opened []metav1.ListOptions
	w      []*watch.FakeWatcher
}

// seen returns the options of the watches opened so far, and the watchers.
func (f *fakeWatches) seen() ([]metav1.ListOptions, []*watch.FakeWatcher) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]metav1.ListOptions(nil), f.opened...), append([]*watch.FakeWatcher(nil), f.w...)
}

func (f *fakeWatches) watch(_ context.Context, o metav1.ListOptions) (watch.Interface, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.opened = append(f.opened, o)
	w := watch.NewFakeWithChanSize(10, false)
	f.w = append(f.w, w)
	return w, nil
}

func handedOf(t *testing.T, rv string, names ...string) *Handed {
	h := &Handed{Key: "k", ResourceVersion: rv}
	for _, n := range names {
		b, err := json.Marshal(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: "ns", ResourceVersion: "3"}})
		if err != nil {
			t.Fatal(err)
		}
		h.Items = append(h.Items, b)
	}
	return h
}

func next(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("the watch ended")
		}
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event")
	}
	return watch.Event{}
}

// TestHandedWatch: the first watch that asks for initial events gets the handed objects, the
// bookmark that ends them at the handed resourceVersion, then the member's watch from there;
// every other watch, and one with nothing to take or state that does not decode, goes to the
// member as asked.
func TestHandedWatch(t *testing.T) {
	s := &stack{cluster: "a", log: zap.NewNop()}
	newCM := func() runtime.Object { return &corev1.ConfigMap{} }
	yes := true
	initial := metav1.ListOptions{SendInitialEvents: &yes, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true, LabelSelector: "x=y", TimeoutSeconds: ptrTo(int64(300))}

	f := &fakeWatches{}
	takes := 0
	wf := s.handedWatch(func(context.Context) (*Handed, bool) { takes++; return handedOf(t, "42", "one", "two"), true }, newCM, f.watch)
	w, err := wf(context.Background(), initial)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"one", "two"} {
		ev := next(t, w)
		if cm, ok := ev.Object.(*corev1.ConfigMap); ev.Type != watch.Added || !ok || cm.Name != want {
			t.Fatalf("initial event %v %T, want ADDED %s", ev.Type, ev.Object, want)
		}
	}
	ev := next(t, w)
	m, _ := meta.Accessor(ev.Object)
	if ev.Type != watch.Bookmark || m.GetResourceVersion() != "42" || m.GetAnnotations()[metav1.InitialEventsAnnotationKey] != "true" {
		t.Fatalf("after the initial events: %v rv %q annotations %v, want the bookmark that ends them at 42", ev.Type, m.GetResourceVersion(), m.GetAnnotations())
	}
	// The member's watch, from 42, relayed.
	deadline := time.Now().Add(5 * time.Second)
	opened, ws := f.seen()
	for len(opened) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
		opened, ws = f.seen()
	}
	if len(opened) != 1 {
		t.Fatalf("member watches opened: %d", len(opened))
	}
	o := opened[0]
	if o.ResourceVersion != "42" || o.SendInitialEvents != nil || o.ResourceVersionMatch != "" || !o.AllowWatchBookmarks || o.LabelSelector != "x=y" || o.TimeoutSeconds == nil {
		t.Errorf("member watch options %+v: want from 42, no initial events, bookmarks, the same selector and timeout", o)
	}
	ws[0].Modify(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "one", Namespace: "ns", ResourceVersion: "43"}})
	if ev := next(t, w); ev.Type != watch.Modified {
		t.Errorf("relayed %v, want MODIFIED", ev.Type)
	}
	ws[0].Stop() // the member's watch ends: so does the handed one
	select {
	case _, ok := <-w.ResultChan():
		if ok {
			t.Error("an event after the member's watch ended")
		}
	case <-time.After(5 * time.Second):
		t.Error("the handed watch did not end with the member's")
	}
	// Once only: the next initial list goes to the member.
	_, err = wf(context.Background(), initial)
	if opened, _ = f.seen(); err != nil || takes != 1 || len(opened) != 2 || opened[1].SendInitialEvents == nil {
		t.Errorf("second initial watch: err %v, takes %d, member watches %d: want the member's own initial list", err, takes, len(opened))
	}

	// Nothing to take, or state that does not decode: the member's.
	for name, take := range map[string]func(context.Context) (*Handed, bool){
		"none": func(context.Context) (*Handed, bool) { return nil, false },
		"broken": func(context.Context) (*Handed, bool) {
			return &Handed{ResourceVersion: "9", Items: []json.RawMessage{[]byte(`"x"`)}}, true
		},
	} {
		f := &fakeWatches{}
		if _, err := s.handedWatch(take, newCM, f.watch)(context.Background(), initial); err != nil || len(f.opened) != 1 || f.opened[0].SendInitialEvents == nil {
			t.Errorf("%s: member watches %+v: want the member's initial list", name, f.opened)
		}
	}
	// The member refuses a watch from the handed version (410): the state is dropped, and the
	// member lists.
	f = &fakeWatches{}
	refusing := func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		if o.SendInitialEvents == nil {
			return nil, apierrors.NewResourceExpired("too old resource version: 42")
		}
		return f.watch(ctx, o)
	}
	w, err = s.handedWatch(func(context.Context) (*Handed, bool) { return handedOf(t, "42", "one"), true }, newCM, refusing)(context.Background(), initial)
	if opened, _ := f.seen(); err != nil || len(opened) != 1 || opened[0].SendInitialEvents == nil || w == nil {
		t.Errorf("member refuses the handed version: err %v, member watches %+v: want the member's initial list", err, opened)
	}
	// A watch without initial events never takes.
	f = &fakeWatches{}
	takes = 0
	if _, err := s.handedWatch(func(context.Context) (*Handed, bool) { takes++; return nil, false }, newCM, f.watch)(context.Background(), metav1.ListOptions{ResourceVersion: "7"}); err != nil || takes != 0 || len(f.opened) != 1 {
		t.Errorf("a plain watch: takes %d, member watches %d", takes, len(f.opened))
	}
}

func ptrTo[T any](v T) *T { return &v }

// listOnly is a ListWatch that lists, then watches (no watch-list, which a fake watch does not
// end with a bookmark).
type listOnly struct{ *cache.ListWatch }

func (listOnly) IsWatchListSemanticsUnSupported() bool { return true }

// syncedInformer is an informer over a fake list of objects at resourceVersion 7, synced.
func syncedInformer(t *testing.T, list runtime.Object, obj runtime.Object) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) { return list, nil },
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			return watch.NewFake(), nil
		},
	}
	inf := cache.NewSharedIndexInformer(listOnly{lw}, obj, 0, cache.Indexers{})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go inf.RunWithContext(ctx)
	syncCtx, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	if !cache.WaitForCacheSync(syncCtx.Done(), inf.HasSynced) {
		t.Fatal("the informer did not sync")
	}
	cancel() // stopped, as a stack's informer is before it is shelved
	return inf
}

// TestShelveLeavesSecretsOut: a stopped cluster's state is shelved for its next owner resource
// by resource, but Secrets': their data stays between each replica and its clusters.
func TestShelveLeavesSecretsOut(t *testing.T) {
	cms := syncedInformer(t, &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "7"},
		Items: []corev1.ConfigMap{{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "ns", ResourceVersion: "5"}}}}, &corev1.ConfigMap{})
	secrets := syncedInformer(t, &corev1.SecretList{ListMeta: metav1.ListMeta{ResourceVersion: "7"},
		Items: []corev1.Secret{{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns", ResourceVersion: "6"}, Data: map[string][]byte{"k": []byte("hunter2")}}}}, &corev1.Secret{})
	reg := &Registry{log: zap.NewNop(), taker: func(context.Context, string, string) (*Handed, bool, error) { return nil, false, nil }}
	r := &runner{reg: reg, cfg: ClusterConfig{Name: "c1", Config: &rest.Config{Host: "https://c1"}}, stacks: []*stack{
		{informer: cms, key: "k-cm", st: ResourceStatus{Kind: "ConfigMap"}},
		{informer: secrets, key: "k-secret", st: ResourceStatus{Kind: "Secret"}},
	}}
	r.shelve()
	if st, ok := reg.Shelved("c1", "k-cm"); !ok || st.ResourceVersion != "7" || len(st.Items) != 1 {
		t.Errorf("ConfigMaps' state: %+v %t, want it shelved at 7 with one object", st, ok)
	}
	if st, ok := reg.Shelved("c1", "k-secret"); ok {
		t.Errorf("Secrets' state shelved: %+v", st)
	}
}
