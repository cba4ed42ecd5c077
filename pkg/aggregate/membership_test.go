package aggregate

import (
	"context"
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// view is a handler's picture of the fleet: key → uid/resourceVersion, with every inconsistent
// call recorded (an add of a key it holds, an update or delete of one it does not).
type view struct {
	mu     sync.Mutex
	state  map[string]string
	errs   []string
	delay  time.Duration
	called atomic.Int64
}

func newView(delay time.Duration) *view { return &view{state: map[string]string{}, delay: delay} }

func stateOf(obj any) string {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, _ := meta.Accessor(obj)
	return string(m.GetUID()) + "/" + m.GetResourceVersion()
}

func keyIn(cluster string, obj any) string {
	k, err := KeyOf(cluster, obj)
	if err != nil {
		return "bad key: " + err.Error()
	}
	return k.String()
}

func (v *view) OnAdd(c string, obj any, _ bool) {
	v.called.Add(1)
	time.Sleep(v.delay)
	v.mu.Lock()
	defer v.mu.Unlock()
	k := keyIn(c, obj)
	if _, ok := v.state[k]; ok {
		v.errs = append(v.errs, "add of a held key "+k)
	}
	v.state[k] = stateOf(obj)
}

func (v *view) OnUpdate(c string, _, obj any) {
	v.called.Add(1)
	time.Sleep(v.delay)
	v.mu.Lock()
	defer v.mu.Unlock()
	k := keyIn(c, obj)
	if _, ok := v.state[k]; !ok {
		v.errs = append(v.errs, "update of an unknown key "+k)
	}
	v.state[k] = stateOf(obj)
}

func (v *view) OnDelete(c string, obj any) {
	v.called.Add(1)
	time.Sleep(v.delay)
	v.mu.Lock()
	defer v.mu.Unlock()
	k := keyIn(c, obj)
	if _, ok := v.state[k]; !ok {
		v.errs = append(v.errs, "delete of an unknown key "+k)
	}
	delete(v.state, k)
}

func (v *view) snapshot() (map[string]string, []string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make(map[string]string, len(v.state))
	for k, s := range v.state {
		out[k] = s
	}
	return out, append([]string(nil), v.errs...)
}

// cluster is a model of one API server: the truth, and the fake watch of the informer that
// currently follows it.
type cluster struct {
	name  string
	mu    sync.Mutex
	objs  map[string]*corev1.ConfigMap // name → object
	rv    int
	uid   int
	w     *watch.FakeWatcher
	rng   *rand.Rand
	names int
}

func newCluster(name string, n, rvBase int) *cluster {
	c := &cluster{name: name, objs: map[string]*corev1.ConfigMap{}, rv: rvBase, rng: rand.New(rand.NewSource(int64(rvBase) + int64(len(name)))), names: 2 * n}
	for i := range n {
		c.rv++
		c.uid++
		o := cm("a", "o"+strconv.Itoa(i), strconv.Itoa(c.rv), nil)
		o.UID = types.UID(name + "-" + strconv.Itoa(c.uid))
		c.objs[o.Name] = o
	}
	return c
}

// source starts a list+watch of the cluster's current state.
func (c *cluster) source() *source {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := &source{rv: strconv.Itoa(c.rv), w: watch.NewFakeWithChanSize(200000, false)}
	for _, o := range c.objs {
		s.items = append(s.items, *o)
	}
	c.w = s.w
	return s
}

// detach stops sending events to the watch: the cluster changes while nobody follows it.
func (c *cluster) detach() {
	c.mu.Lock()
	c.w = nil
	c.mu.Unlock()
}

// step makes one random change and sends it to the attached watch, if any.
func (c *cluster) step() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rv++
	name := "o" + strconv.Itoa(c.rng.Intn(c.names))
	old, ok := c.objs[name]
	switch {
	case !ok:
		c.uid++
		o := cm("a", name, strconv.Itoa(c.rv), nil)
		o.UID = types.UID(c.name + "-" + strconv.Itoa(c.uid))
		c.objs[name] = o
		if c.w != nil {
			c.w.Add(o)
		}
	case c.rng.Intn(3) == 0:
		delete(c.objs, name)
		d := old.DeepCopy()
		d.ResourceVersion = strconv.Itoa(c.rv)
		if c.w != nil {
			c.w.Delete(d)
		}
	default:
		n := old.DeepCopy()
		n.ResourceVersion = strconv.Itoa(c.rv)
		c.objs[name] = n
		if c.w != nil {
			c.w.Modify(n)
		}
	}
}

// truth is what a handler must end with for this cluster.
func (c *cluster) truth() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]string{}
	for _, o := range c.objs {
		out[keyIn(c.name, o)] = string(o.UID) + "/" + o.ResourceVersion
	}
	return out
}

// churn steps the cluster until stop is closed.
func (c *cluster) churn(stop <-chan struct{}) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			c.step()
		}
	}()
	return done
}

func diffViews(want, got map[string]string) []string {
	var d []string
	for k, v := range want {
		if got[k] != v {
			d = append(d, fmt.Sprintf("%s: want %s, handler has %q", k, v, got[k]))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			d = append(d, "extra "+k)
		}
	}
	return d
}

// settle waits until every view equals want, and fails with the differences otherwise.
func settle(t *testing.T, what string, want map[string]string, views map[string]*view) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		bad := map[string][]string{}
		for name, v := range views {
			got, errs := v.snapshot()
			if d := diffViews(want, got); len(d) > 0 {
				bad[name] = d
			}
			if len(errs) > 0 {
				t.Fatalf("%s: %s handler was told an inconsistent story: %v", what, name, errs[:min(5, len(errs))])
			}
		}
		if len(bad) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for name, d := range bad {
				t.Errorf("%s: %s handler differs from the cluster in %d objects, e.g. %v", what, name, len(d), d[:min(3, len(d))])
			}
			t.FailNow()
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestQueryDuringReplacement: while a member's informer is replaced (a rotated credential),
// queries keep answering from the previous store until the new one has synced; they never see
// an empty cluster. Run with -race: the swap must be synchronized with readers.
func TestQueryDuringReplacement(t *testing.T) {
	a := newAgg(t)
	c := newCluster("c1", 50, 0)
	i1, stop := startInformer(t, c.source())
	if err := a.join("c1", i1); err != nil {
		t.Fatal(err)
	}
	if missing := a.WaitForSync(context.Background(), 5*time.Second); missing != nil {
		t.Fatal(missing)
	}
	done := make(chan struct{})
	var reads, empty atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				reads.Add(1)
				idx, ok := a.Cluster("c1")
				if !ok || len(idx.ListKeys()) == 0 {
					empty.Add(1)
				}
				if res, _ := a.Select(Query{Clusters: []string{"c1"}}); len(res.Items) == 0 {
					empty.Add(1)
				}
			}
		})
	}
	for range 20 {
		s := c.source()
		s.block = make(chan struct{})
		inf, stopNext := startInformer(t, s)
		stop()
		waitTrue(t, "old informer stopped", func() bool { return i1.IsStopped() })
		if err := a.join("c1", inf); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
		close(s.block)
		if missing := a.WaitForSync(context.Background(), 5*time.Second); missing != nil {
			t.Fatal(missing)
		}
		i1, stop = inf, stopNext
	}
	close(done)
	wg.Wait()
	if n := empty.Load(); n > 0 {
		t.Errorf("%d of %d queries saw an empty cluster during replacements", n, reads.Load())
	}
}

// TestAddHandlerWithStoppedMember: a member whose informer has stopped (the owner stops it
// before Leave or before a replacement) must not half-register a handler: the handler is added,
// gets the member's objects, and later members and leaves reach it.
func TestAddHandlerWithStoppedMember(t *testing.T) {
	a := newAgg(t)
	s1 := &source{items: []corev1.ConfigMap{*cm("a", "x", "1", nil), *cm("a", "y", "1", nil)}}
	i1, stop1 := startInformer(t, s1)
	if err := a.join("c1", i1); err != nil {
		t.Fatal(err)
	}
	a.WaitForSync(context.Background(), 5*time.Second)
	stop1()
	waitTrue(t, "informer stopped", i1.IsStopped)

	a.mu.RLock()
	n0 := len(a.regs) // the kept counts' handler
	a.mu.RUnlock()
	v := newView(0)
	reg, err := a.AddEventHandler(v)
	if err != nil {
		t.Fatalf("AddEventHandler with a stopped member: %v", err)
	}
	s2 := &source{items: []corev1.ConfigMap{*cm("b", "z", "1", nil)}}
	i2, _ := startInformer(t, s2)
	if err := a.join("c2", i2); err != nil {
		t.Fatal(err)
	}
	waitTrue(t, "handler got both clusters", func() bool { st, _ := v.snapshot(); return len(st) == 3 })
	a.leave("c1", false)
	waitTrue(t, "c1 left the handler's view", func() bool { st, _ := v.snapshot(); return len(st) == 1 })
	waitTrue(t, "nothing left pending", func() bool { return reg.Pending() == 0 })
	if _, errs := v.snapshot(); len(errs) > 0 {
		t.Errorf("inconsistent events: %v", errs)
	}
	if _, err := a.AddEventHandler(nil); err == nil {
		t.Error("AddEventHandler(nil): no error")
	}
	a.mu.RLock()
	n := len(a.regs)
	a.mu.RUnlock()
	if n != n0+1 {
		t.Errorf("%d registrations after one good and one failed AddEventHandler, %d before", n, n0)
	}
}

// TestLeaveUnderWrites: a cluster leaves while it is being written to. Every handler, fast or
// slow, must end with nothing of it: the deletes are built from what each was told, not from
// the store, which is ahead of what client-go has delivered.
func TestLeaveUnderWrites(t *testing.T) {
	for i := range 10 {
		a := newAgg(t)
		fast, slow := newView(0), newView(50*time.Microsecond)
		_, _ = a.AddEventHandler(fast)
		_, _ = a.AddEventHandler(slow)
		c := newCluster("c1", 200, 0)
		other := newCluster("c2", 20, 0)
		i1, _ := startInformer(t, c.source())
		i2, _ := startInformer(t, other.source())
		_ = a.join("c1", i1)
		_ = a.join("c2", i2)
		a.WaitForSync(context.Background(), 5*time.Second)
		stop := make(chan struct{})
		done := c.churn(stop)
		time.Sleep(time.Duration(20+i*5) * time.Millisecond)
		a.leave("c1", false)
		close(stop)
		<-done
		settle(t, fmt.Sprintf("round %d: after c1 left", i), other.truth(), map[string]*view{"fast": fast, "slow": slow})
	}
}

// TestReplaceUnderWrites: a cluster's informer is replaced (rotated credentials) while it is
// written to, before, during and after the swap. Every handler must end equal to the cluster.
func TestReplaceUnderWrites(t *testing.T) {
	for i := range 10 {
		a := newAgg(t)
		fast, slow := newView(0), newView(50*time.Microsecond)
		_, _ = a.AddEventHandler(fast)
		_, _ = a.AddEventHandler(slow)
		c := newCluster("c1", 200, 0)
		i1, stop1 := startInformer(t, c.source())
		_ = a.join("c1", i1)
		a.WaitForSync(context.Background(), 5*time.Second)
		stop := make(chan struct{})
		done := c.churn(stop)
		time.Sleep(time.Duration(20+i*5) * time.Millisecond)
		// The owner stops the old informer, then joins the new one, as the Registry does; the
		// cluster keeps changing throughout.
		c.detach()
		stop1()
		waitTrue(t, "old informer stopped", i1.IsStopped)
		time.Sleep(5 * time.Millisecond)
		i2, _ := startInformer(t, c.source())
		if err := a.join("c1", i2); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		close(stop)
		<-done
		if missing := a.WaitForSync(context.Background(), 5*time.Second); missing != nil {
			t.Fatal(missing)
		}
		settle(t, fmt.Sprintf("round %d: after the replacement", i), c.truth(), map[string]*view{"fast": fast, "slow": slow})
	}
}

// TestEveryEventBacklogIsBounded: an every-event handler that stops consuming must not grow
// the daemon's memory without bound.
func TestEveryEventBacklogIsBounded(t *testing.T) {
	a := newAgg(t)
	c := newCluster("c1", 10, 0)
	i1, _ := startInformer(t, c.source())
	_ = a.join("c1", i1)
	a.WaitForSync(context.Background(), 5*time.Second)
	block := make(chan struct{})
	reg, err := a.AddEventHandlerWithOptions(HandlerFuncs{UpdateFunc: func(string, any, any) { <-block }}, HandlerOptions{EveryEvent: true})
	if err != nil {
		t.Fatal(err)
	}
	for range 150000 {
		c.step()
	}
	// Wait until the backlog stops growing (or passes the bound).
	last, still := -1, 0
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && still < 10; time.Sleep(100 * time.Millisecond) {
		p := reg.Pending()
		if p > 100000 {
			break
		}
		if p == last {
			still++
		} else {
			last, still = p, 0
		}
	}
	if p := reg.Pending(); p > 100000 {
		t.Errorf("every-event backlog %d events after 150,000 changes: not bounded", p)
	}
	close(block)
	waitTrue(t, "the overflow reported", func() bool { return reg.Overflows() > 0 })
}

// TestLeaveForgetsHandlerState: once a cluster has left and its deletes are delivered, no
// handler keeps per-cluster state for it (queue, synced flag), with either kind of queue.
func TestLeaveForgetsHandlerState(t *testing.T) {
	a := newAgg(t)
	merged, _ := a.AddEventHandler(newView(0))
	every, _ := a.AddEventHandlerWithOptions(newView(0), HandlerOptions{EveryEvent: true})
	c := newCluster("c1", 20, 0)
	i1, _ := startInformer(t, c.source())
	_ = a.join("c1", i1)
	waitTrue(t, "handlers synced", func() bool { return merged.HasSynced() && every.HasSynced() })
	a.leave("c1", false)
	for name, r := range map[string]*Registration{"merged": merged, "every-event": every} {
		waitTrue(t, name+" drained", func() bool {
			r.mu.Lock()
			_, synced := r.synced["c1"]
			r.mu.Unlock()
			var held bool
			switch q := r.q.(type) {
			case *mergedQueue:
				q.mu.Lock()
				_, held = q.clusters["c1"]
				q.mu.Unlock()
			case *fifoQueue:
				q.mu.Lock()
				_, held = q.clusters["c1"]
				q.mu.Unlock()
			}
			return r.Pending() == 0 && !synced && !held
		})
	}
}

// TestEveryEventOverflow: at the bound the pending events are dropped and OnOverflow runs, in
// order, before any later event; markers survive.
func TestEveryEventOverflow(t *testing.T) {
	q := newFIFOQueue(3)
	q.push("c", "a", event{kind: evAdd, obj: 1})
	q.push("c", "", event{kind: evSynced})
	q.push("c", "b", event{kind: evAdd, obj: 2})
	q.push("d", "x", event{kind: evAdd, obj: 3}) // over the bound: 1 and 2 are dropped, the marker kept
	q.push("d", "y", event{kind: evAdd, obj: 4})
	var got []string
	for q.len() > 0 || len(got) == 0 {
		c, evs, _, _ := q.pop()
		got = append(got, fmt.Sprintf("%s:%d:%v", c, evs[0].kind, evs[0].obj))
	}
	want := []string{fmt.Sprintf(":%d:<nil>", evOverflow), fmt.Sprintf("c:%d:<nil>", evSynced), fmt.Sprintf("d:%d:3", evAdd), fmt.Sprintf("d:%d:4", evAdd)}
	eq(t, "after an overflow", got, want)
}

// TestLifecycleKeepsNoPastCluster: joins and leaves of many clusters, several of one cluster at
// once, leave no lock behind: lifecycle holds a cluster only while it joins or leaves.
func TestLifecycleKeepsNoPastCluster(t *testing.T) {
	a := newAgg(t)
	var wg sync.WaitGroup
	for i := range 40 {
		name := fmt.Sprintf("c%d", i%8) // five goroutines for each cluster
		wg.Go(func() {
			inf, stop := startInformer(t, &source{})
			if err := a.join(name, inf); err != nil && !strings.Contains(err.Error(), "still running") {
				t.Errorf("join %s: %v", name, err)
			}
			stop()
			a.leave(name, false)
		})
	}
	wg.Wait()
	a.mu.RLock()
	left := len(a.lifecycle)
	a.mu.RUnlock()
	if left != 0 || len(a.Clusters()) != 0 {
		t.Errorf("after every cluster left: %d lifecycle locks, clusters %v; want none", left, a.Clusters())
	}
}
