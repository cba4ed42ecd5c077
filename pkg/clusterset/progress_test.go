package clusterset

import (
	"context"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
)

func cmList(n int, cont string, remaining *int64) *corev1.ConfigMapList {
	l := &corev1.ConfigMapList{ListMeta: metav1.ListMeta{Continue: cont, RemainingItemCount: remaining}}
	for i := range n {
		l.Items = append(l.Items, corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-" + strconv.Itoa(i)}})
	}
	return l
}

func TestProgressPagedList(t *testing.T) {
	var p progress
	pages := map[string]runtime.Object{
		"":   cmList(500, "c1", ptr.To(int64(700))),
		"c1": cmList(500, "c2", ptr.To(int64(200))),
		"c2": cmList(200, "", nil),
	}
	list, _ := progressListWatch(&p, func(_ context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return pages[o.Continue], nil
	}, nil, nil)
	want := []SyncProgress{{500, 1200, true}, {1000, 1200, true}, {1200, 1200, false}}
	for i, cont := range []string{"", "c1", "c2"} {
		if _, err := list(context.Background(), metav1.ListOptions{Limit: 500, Continue: cont}); err != nil {
			t.Fatal(err)
		}
		if got := p.snapshot(); got != want[i] {
			t.Errorf("after page %d: %+v, want %+v", i+1, got, want[i])
		}
	}
	// A relist starts again from zero; an unpaged answer without a count is complete at once.
	pages[""] = cmList(3, "", nil)
	if _, err := list(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, want := p.snapshot(), (SyncProgress{3, 3, false}); got != want {
		t.Errorf("relist: %+v, want %+v", got, want)
	}
}

func TestProgressStreamedList(t *testing.T) {
	var p progress
	fw := watch.NewFake()
	estimated := make(chan metav1.ListOptions, 1)
	_, watchFn := progressListWatch(&p, func(_ context.Context, o metav1.ListOptions) (runtime.Object, error) {
		estimated <- o
		return cmList(1, "x", ptr.To(int64(9))), nil
	}, func(context.Context, metav1.ListOptions) (watch.Interface, error) { return fw, nil }, nil)

	w, err := watchFn(context.Background(), metav1.ListOptions{SendInitialEvents: ptr.To(true), LabelSelector: "a=b", AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if o := <-estimated; o.Limit != 1 || o.LabelSelector != "a=b" || o.ResourceVersion != "" {
		t.Errorf("estimate options %+v: want limit 1, the watch's selector, a consistent read", o)
	}
	eventually(t, func() bool { return p.snapshot().Expected == 10 })
	for i := range 4 {
		go fw.Add(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-" + strconv.Itoa(i)}})
		<-w.ResultChan()
	}
	if got, want := p.snapshot(), (SyncProgress{4, 10, true}); got != want {
		t.Errorf("mid-stream: %+v, want %+v", got, want)
	}
	go fw.Action(watch.Bookmark, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}})
	<-w.ResultChan()
	if got, want := p.snapshot(), (SyncProgress{4, 4, false}); got != want {
		t.Errorf("after the bookmark: %+v, want %+v", got, want)
	}
	// Later events are relayed, not counted.
	go fw.Add(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "late"}})
	if ev := <-w.ResultChan(); ev.Type != watch.Added {
		t.Errorf("relayed %v", ev.Type)
	}
	if got := p.snapshot().Loaded; got != 4 {
		t.Errorf("a later event was counted: loaded %d", got)
	}
}

func TestProgressWatchStops(t *testing.T) {
	var p progress
	fw := watch.NewRaceFreeFake()
	_, watchFn := progressListWatch(&p, func(context.Context, metav1.ListOptions) (runtime.Object, error) {
		return cmList(0, "", nil), nil
	}, func(context.Context, metav1.ListOptions) (watch.Interface, error) { return fw, nil }, nil)
	w, _ := watchFn(context.Background(), metav1.ListOptions{SendInitialEvents: ptr.To(true)})
	// An event nobody reads, then Stop: the relay must end and close its channel.
	fw.Add(&corev1.ConfigMap{})
	time.Sleep(10 * time.Millisecond)
	w.Stop()
	select {
	case <-drained(w.ResultChan()):
	case <-time.After(5 * time.Second):
		t.Fatal("the relay did not end after Stop")
	}
	// A plain watch (no initial events) is not wrapped and begins no list.
	if w2, _ := watchFn(context.Background(), metav1.ListOptions{}); w2 != watch.Interface(fw) || p.gen.Load() != 1 {
		t.Errorf("a plain watch was wrapped or began a list")
	}
}

func drained(ch <-chan watch.Event) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		for range ch {
		}
		close(done)
	}()
	return done
}

func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestTransformRunsOncePerStreamedObject(t *testing.T) {
	var p progress
	calls := map[any]int{}
	tf := p.once(func(obj any) (any, error) { calls[obj]++; return obj, nil })
	fw := watch.NewRaceFreeFake()
	_, watchFn := progressListWatch(&p, func(context.Context, metav1.ListOptions) (runtime.Object, error) {
		return cmList(0, "", nil), nil
	}, func(context.Context, metav1.ListOptions) (watch.Interface, error) { return fw, nil }, nil)
	w, _ := watchFn(context.Background(), metav1.ListOptions{SendInitialEvents: ptr.To(true)})
	defer w.Stop()
	streamed := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}}
	fw.Add(streamed)
	ev := <-w.ResultChan()
	// As client-go's reflector does: once into its temporary store, once more when its queue
	// replaces its contents.
	for range 2 {
		if _, err := tf(ev.Object); err != nil {
			t.Fatal(err)
		}
	}
	if calls[streamed] != 1 {
		t.Errorf("a streamed object was transformed %d times, want 1", calls[streamed])
	}
	// Objects that were not streamed (a paged list's, later events') are transformed at every
	// call, and nothing is left behind.
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "b"}}
	_, _ = tf(other)
	_, _ = tf(other)
	if calls[other] != 2 {
		t.Errorf("an object not streamed was transformed %d times, want 2", calls[other])
	}
	if n := len(p.streamed); n != 0 {
		t.Errorf("%d objects left in the streamed set", n)
	}
}
