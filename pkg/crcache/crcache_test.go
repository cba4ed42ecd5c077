package crcache

import (
	"context"
	"errors"
	"sort"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/multicache/multicache/internal/fakeapi"
	"github.com/multicache/multicache/pkg/clusterset"
)

// The behaviours of a Cache that need no real API server: TestControllerRuntimeCache
// (test/integration) reads a local fleet.

func pod(name, node string) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", ResourceVersion: "7"}, Spec: corev1.PodSpec{NodeName: node}}
}

// fakeFleet is a Fleet over fake clusters a (pods p1 on n1, p2 on n2) and b (p3 on n1), whose
// Registry is not started yet: start starts it.
func fakeFleet(t *testing.T) (fl *Fleet, start func()) {
	a, b := fakeapi.New(t), fakeapi.New(t)
	a.SetPods([]corev1.Pod{pod("p1", "n1"), pod("p2", "n2")})
	b.SetPods([]corev1.Pod{pod("p3", "n1")})
	reg, err := clusterset.New(clusterset.Options{
		Source:    clusterset.Static{{Name: "a", Config: a.Config(), Fingerprint: "1"}, {Name: "b", Config: b.Config(), Fingerprint: "1"}},
		Resources: []clusterset.ResourceSpec{{Name: "pods"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	fl, err = NewFleet(reg, Options{SyncPoll: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return fl, func() {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = fl.Start(ctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
	}
}

func waitSynced(t *testing.T, c *Cache) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !c.WaitForCacheSync(ctx) {
		t.Fatalf("cluster %s never synced", c.cluster)
	}
}

// TestIndexFieldBeforeTheKindResolves: an IndexField made before the Registry has resolved
// the kind (before it starts) is added once it has, in every cluster.
func TestIndexFieldBeforeTheKindResolves(t *testing.T) {
	fl, start := fakeFleet(t)
	byNode := func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }
	if err := fl.Cache("a").IndexField(context.Background(), &corev1.Pod{}, "spec.nodeName", byNode); err != nil {
		t.Fatalf("IndexField before the Registry started: %v", err)
	}
	start()
	for cluster, want := range map[string][]string{"a": {"p1"}, "b": {"p3"}} {
		c := fl.Cache(cluster)
		waitSynced(t, c)
		// The first read of the kind adds the pending index before it reads.
		var l corev1.PodList
		if err := c.List(context.Background(), &l, client.MatchingFields{"spec.nodeName": "n1"}); err != nil {
			t.Fatalf("cluster %s: %v", cluster, err)
		}
		var got []string
		for _, p := range l.Items {
			got = append(got, p.Name)
		}
		sort.Strings(got)
		if len(got) != len(want) || got[0] != want[0] {
			t.Errorf("cluster %s, spec.nodeName=n1: %v, want %v", cluster, got, want)
		}
	}
}

// counter counts a handler's calls.
type counter struct {
	mu                     sync.Mutex
	adds, updates, deletes int
}

func (c *counter) OnAdd(any, bool)   { c.mu.Lock(); c.adds++; c.mu.Unlock() }
func (c *counter) OnUpdate(_, _ any) { c.mu.Lock(); c.updates++; c.mu.Unlock() }
func (c *counter) OnDelete(any)      { c.mu.Lock(); c.deletes++; c.mu.Unlock() }
func (c *counter) get() (int, int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.adds, c.updates, c.deletes
}

// TestInformerHandlersEnd: an informer's handler hears its cluster only; RemoveInformer and the
// end of Start remove the handlers a Cache's informers added, and a stopped Cache adds none.
func TestInformerHandlersEnd(t *testing.T) {
	fl, start := fakeFleet(t)
	start()
	c := fl.Cache("a")
	waitSynced(t, c)
	ctx := context.Background()
	inf, err := c.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		t.Fatal(err)
	}
	var n counter
	h, err := inf.AddEventHandler(&n)
	if err != nil {
		t.Fatal(err)
	}
	if !toolscache.WaitForCacheSync(make(chan struct{}), h.HasSynced) {
		t.Fatal("the handler never synced")
	}
	if adds, _, _ := n.get(); adds != 2 {
		t.Errorf("told of %d adds, want cluster a's 2 Pods", adds)
	}
	done := func(h toolscache.ResourceEventHandlerRegistration) <-chan struct{} { return h.(registration).Done() }
	if err := c.RemoveInformer(ctx, &corev1.Pod{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done(h):
	case <-time.After(5 * time.Second):
		t.Error("RemoveInformer left the handler registered")
	}

	// Start's end removes the handlers, and a stopped Cache adds no more.
	c2 := fl.Cache("b")
	startCtx, stop := context.WithCancel(ctx)
	started := make(chan struct{})
	go func() { _ = c2.Start(startCtx); close(started) }()
	inf2, err := c2.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		t.Fatal(err)
	}
	h2, err := inf2.AddEventHandlerWithResyncPeriod(&counter{}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	<-started
	select {
	case <-done(h2):
	case <-time.After(5 * time.Second):
		t.Error("the end of Start left the handler registered")
	}
	if _, err := inf2.AddEventHandler(&counter{}); err == nil {
		t.Error("a stopped Cache added a handler")
	}
}

// TestResyncPeriod: a handler added with a resync period is told its objects again as updates.
func TestResyncPeriod(t *testing.T) {
	fl, start := fakeFleet(t)
	start()
	c := fl.Cache("a")
	waitSynced(t, c)
	inf, err := c.GetInformer(context.Background(), &corev1.Pod{})
	if err != nil {
		t.Fatal(err)
	}
	var n counter
	if _, err := inf.AddEventHandlerWithResyncPeriod(&n, time.Second); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, updates, _ := n.get(); updates >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no resync within 10 s of a 1 s period")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestNotRegistered: an object whose type the scheme does not know is the scheme's own error,
// as controller-runtime returns it (runtime.IsNotRegisteredError).
func TestNotRegistered(t *testing.T) {
	fl, _ := fakeFleet(t)
	type unknown struct{ corev1.Pod }
	err := fl.Cache("a").Get(context.Background(), client.ObjectKey{Name: "x"}, &unknown{})
	if !runtime.IsNotRegisteredError(err) {
		t.Errorf("an unregistered type: %v (%T)", err, errors.Unwrap(err))
	}
}
