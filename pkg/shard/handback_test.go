package shard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/multicache/multicache/pkg/clusterset"
)

// TestHandBack: a fence that came from a replica is not handed back to it within a LeaseDuration
// of its coming (and the reconcile loop is told when to look again); to anyone else, or later,
// it is.
func TestHandBack(t *testing.T) {
	const ld = 3 * time.Second
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	st := &loopState{arrived: map[string]arrival{"x": {from: "r2", at: at}}}
	for _, c := range []struct {
		cluster, to string
		after       time.Duration
		back        bool
	}{
		{"x", "r2", 0, true},
		{"x", "r2", ld - time.Millisecond, true},
		{"x", "r2", ld, false},
		{"x", "r3", time.Second, false},
		{"x", "", time.Second, false},
		{"y", "r2", time.Second, false},
	} {
		until, back := st.handBack(c.cluster, c.to, at.Add(c.after), ld)
		if back != c.back || (back && !until.Equal(at.Add(ld))) {
			t.Errorf("%s to %q %s after it came from r2: hand back %v until %v, want %v until %v", c.cluster, c.to, c.after, back, until, c.back, at.Add(ld))
		}
	}
}

// TestDisagreeingFleetsSettle: r1 sees fleet A, r2 sees A plus one more cluster, chosen so
// that, without holders, the assignment over A gives a cluster X of A to r2 and over A plus
// the extra cluster to r1: the two replicas disagree on X. r1 starts alone and takes all of A;
// then r2 joins. Sticky assignment (a holder within its capacity keeps what it holds) and the
// hand-back rule (TestHandBack) settle it: over 10 LeaseDurations after the hysteresis X
// changes holder at most once per LeaseDuration (here: once, when r1 sheds it), the fence
// counts exactly the changes seen, and every cluster of A is held by a live replica at the end.
func TestDisagreeingFleetsSettle(t *testing.T) {
	const (
		ld      = 3 * time.Second
		tick    = 100 * time.Millisecond
		ns      = "ns"
		window  = 10 // LeaseDurations measured
		maxMove = window + 2
	)
	fleetA, extra, x := disagreeingFleets(t)
	t.Logf("fleet A %v; r2 also sees %q; owner of %q: r2 over A, r1 over A+%s", fleetA, extra, x, extra)

	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cs := fake.NewClientset()
	moves := &holderLog{}
	withResourceVersions(cs, func(name string, from, to string) {
		if name == fenceLeaseName(x) {
			moves.add(clk.Now(), from, to)
		}
	})

	type replica struct {
		id     string
		c      *Coordinator
		cancel context.CancelFunc
		done   chan error
	}
	var replicas []*replica
	start := func(id string, fleet []string) {
		t.Helper()
		var src clusterset.Static
		for _, name := range fleet {
			src = append(src, clusterset.ClusterConfig{Name: name, Origin: "test", Fingerprint: "1"})
		}
		c, err := New(Options{
			Client: cs, Namespace: ns, Identity: id, AdvertiseURL: "http://" + id + ":1",
			LeaseDuration: ld, Clock: clk, Source: src,
			Logger: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).Named(id),
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		r := &replica{id: id, c: c, cancel: cancel, done: make(chan error, 1)}
		go func() { r.done <- c.Run(ctx) }()
		replicas = append(replicas, r)
	}
	defer func() {
		for _, r := range replicas {
			r.cancel()
		}
		deadline := time.Now().Add(10 * time.Second)
		for _, r := range replicas {
			for waiting := true; waiting; {
				select { // the graceful shutdown waits on the fake clock
				case err := <-r.done:
					if err != nil {
						t.Errorf("%s: Run: %v", r.id, err)
					}
					waiting = false
				case <-time.After(5 * time.Millisecond):
					if time.Now().After(deadline) {
						t.Fatalf("%s: Run did not return after its context ended", r.id)
					}
					clk.Step(fastPoll)
				}
			}
		}
	}()

	// settled: every replica has sent the renewal due by now, and has seen each other replica's.
	// Fake time only moves on once it is, however slow the machine, so that no replica
	// self-fences or takes another for dead.
	settled := func() bool {
		now := clk.Now()
		for _, r := range replicas {
			r.c.renewMu.Lock()
			last := r.c.lastRenew
			r.c.renewMu.Unlock()
			if last.IsZero() || now.Sub(last) >= ld/3 {
				return false
			}
			peers := r.c.obs.snapshot(now)
			for _, o := range replicas {
				if p, ok := peers[o.id]; o != r && (!ok || now.Sub(p.seen) >= ld/3) {
					return false
				}
			}
		}
		return true
	}
	// step moves fake time on by a tick once the replicas have settled, and (for at most 20ms
	// of real time) each waits on its three timers (reconcile loop, renewals, watchdog).
	step := func() {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !settled() {
			if time.Now().After(deadline) {
				t.Fatalf("replicas did not renew their peer Leases by %s", clk.Now())
			}
			time.Sleep(time.Millisecond)
			clk.Step(0) // a timer set late may already be due
		}
		for idle := time.Now().Add(20 * time.Millisecond); clk.Waiters() < 3*len(replicas) && time.Now().Before(idle); {
			time.Sleep(time.Millisecond)
		}
		clk.Step(tick)
		time.Sleep(time.Millisecond)
	}
	holders := func() map[string]string {
		t.Helper()
		list, err := cs.CoordinationV1().Leases(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for i := range list.Items {
			if l := &list.Items[i]; leaseKind(l) == kindFence {
				if _, dup := out[fenceCluster(l)]; dup {
					t.Errorf("%q has two fences", fenceCluster(l))
				}
				out[fenceCluster(l)] = holderOf(l)
			}
		}
		return out
	}

	// r1 alone takes every cluster of A.
	start("r1", fleetA)
	for deadline := time.Now().Add(5 * time.Second); ; step() {
		h, all := holders(), true
		for _, name := range fleetA {
			all = all && h[name] == "r1"
		}
		if all {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("r1 alone holds %v, want all of %v", h, fleetA)
		}
	}

	// r2 joins; handoffs begin once each has seen the other live for a LeaseDuration.
	start("r2", append(slices.Clone(fleetA), extra))
	joined := clk.Now()
	for clk.Since(joined) < ld {
		step()
	}
	from := clk.Now()
	for clk.Since(from) < window*ld {
		step()
	}
	until := clk.Now()

	all := moves.get()
	var in []holderMove
	for _, m := range all {
		if !m.at.Before(from) && !m.at.After(until) {
			in = append(in, m)
		}
	}
	t.Logf("%q changed holder %d times in the %d LeaseDurations after the hysteresis (%d in all since r2 joined)", x, len(in), window, len(all))
	for i, m := range all {
		if i < 8 || i >= len(all)-2 {
			t.Logf("  %s after r2 joined: %s -> %s", m.at.Sub(joined), m.from, m.to)
		}
	}
	if len(in) > maxMove {
		t.Errorf("%q changed holder %d times in %d LeaseDurations, want at most %d: it is handed back faster than once a LeaseDuration", x, len(in), window, maxMove)
	}
	bad := 0
	for i := 1; i < len(all); i++ {
		if gap := all[i].at.Sub(all[i-1].at); gap < ld {
			if bad++; bad <= 3 {
				t.Errorf("%q went %s -> %s and back %s later, within a LeaseDuration (%s)", x, all[i-1].from, all[i-1].to, gap, ld)
			}
		}
	}
	if bad > 3 {
		t.Errorf("... and %d more handbacks within a LeaseDuration", bad-3)
	}
	// The fence counts its own transitions (one per holder change, from its creation by r1); the
	// replicas run on meanwhile, so it may count a move more than all.
	f, err := cs.CoordinationV1().Leases(ns).Get(context.Background(), fenceLeaseName(x), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if tr, later := f.Spec.LeaseTransitions, moves.get(); tr == nil || int(*tr) < len(all) || int(*tr) > len(later) {
		t.Errorf("the fence of %q counts %d transitions, the API saw %d to %d holder changes", x, ptrValue(tr), len(all), len(later))
	}

	// Every cluster of A has one fence, held by a live replica.
	h := holders()
	for _, name := range fleetA {
		if got := h[name]; got != "r1" && got != "r2" {
			t.Errorf("%q is held by %q at the end, want r1 or r2", name, got)
		}
	}
	for _, r := range replicas {
		for _, p := range r.c.Peers() {
			if !p.Live {
				t.Errorf("%s sees %s not live", r.id, p.ID)
			}
		}
	}
}

// disagreeingFleets searches, deterministically, a fleet A, an extra cluster and a cluster x of A
// that the assignment over two replicas r1 and r2 of weight 1 gives r2 over A and r1 over A plus
// the extra cluster.
func disagreeingFleets(t *testing.T) (fleet []string, extra, x string) {
	t.Helper()
	members := []member{{id: "r1", weight: 1}, {id: "r2", weight: 1}}
	for n := 6; n <= 20; n++ {
		fleet = fleet[:0]
		for i := range n {
			fleet = append(fleet, fmt.Sprintf("cluster-%02d", i))
		}
		over := assign(members, fleet, nil)
		for e := range 200 {
			extra = fmt.Sprintf("extra-%d", e)
			wider := assign(members, append(slices.Clone(fleet), extra), nil)
			for _, name := range fleet {
				if over.owner(name) == "r2" && wider.owner(name) == "r1" {
					return fleet, extra, name
				}
			}
		}
	}
	t.Fatal("no fleet found where one more cluster moves a cluster from r2 to r1")
	return nil, "", ""
}

func ptrValue(p *int32) int32 {
	if p == nil {
		return -1
	}
	return *p
}

// holderMove is a change of a fence's holder, at the fake time of the write.
type holderMove struct {
	at       time.Time
	from, to string
}

type holderLog struct {
	mu    sync.Mutex
	moves []holderMove
}

func (l *holderLog) add(at time.Time, from, to string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.moves = append(l.moves, holderMove{at, from, to})
}

func (l *holderLog) get() []holderMove {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.moves)
}

// withResourceVersions makes cs's Leases behave as the API server's do, which the fake tracker
// does not: every write gives the Lease a new resourceVersion, and an update or delete that
// names another resourceVersion than the current one fails with a conflict. Without it every
// Lease keeps an empty resourceVersion, and a replica that wrote a fence would leave it alone
// for a LeaseDuration (its pending write never seen). moved is called, under cs's lock, for each
// update that changes a Lease's holder.
func withResourceVersions(cs *fake.Clientset, moved func(name, from, to string)) {
	gvr := schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}
	gr := gvr.GroupResource()
	var rv int64 // guarded by cs's lock, which every reaction runs under
	current := func(ns, name string) (*coordv1.Lease, error) {
		o, err := cs.Tracker().Get(gvr, ns, name)
		if err != nil {
			return nil, err
		}
		return o.(*coordv1.Lease), nil
	}
	cs.PrependReactor("*", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		switch a := a.(type) {
		case k8stesting.CreateActionImpl:
			if l, ok := a.GetObject().(*coordv1.Lease); ok {
				rv++
				l.ResourceVersion = strconv.FormatInt(rv, 10)
			}
		case k8stesting.UpdateActionImpl:
			l, ok := a.GetObject().(*coordv1.Lease)
			if !ok {
				break
			}
			cur, err := current(a.GetNamespace(), l.Name)
			if err != nil {
				break // the tracker answers NotFound
			}
			if l.ResourceVersion != "" && l.ResourceVersion != cur.ResourceVersion {
				return true, nil, apierrors.NewConflict(gr, l.Name, errors.New("the object has been modified"))
			}
			rv++
			l.ResourceVersion = strconv.FormatInt(rv, 10)
			if leaseKind(cur) == kindFence && holderOf(cur) != holderOf(l) {
				moved(l.Name, holderOf(cur), holderOf(l))
			}
		case k8stesting.DeleteActionImpl:
			p := a.DeleteOptions.Preconditions
			if p == nil || p.ResourceVersion == nil {
				break
			}
			if cur, err := current(a.GetNamespace(), a.GetName()); err == nil && cur.ResourceVersion != *p.ResourceVersion {
				return true, nil, apierrors.NewConflict(gr, a.GetName(), errors.New("the object has been modified"))
			}
		}
		return false, nil, nil
	})
}

// TestHandedOverArrivals: a fence counts as handed over when a pass sees it come to us from
// another holder naming where its state waits, not on the first pass (a restart), not
// without the name (an acquire), not once another holds it, and not after
// clusterset.ShelfMaxAge.
func TestHandedOverArrivals(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	st := newLoopState(nil)
	st.holders = map[string]string{"a": "r2", "b": "r2", "c": "r2", "d": "r1"}
	// The first pass finds every fence where it is: nothing arrived.
	for _, name := range []string{"a", "b", "c"} {
		st.noteHolder(name, "r1", "https://r2", "r1", at)
	}
	if st.handedOver("a", at) {
		t.Error("the first pass counted a fence it found held as handed over")
	}
	st.first = false
	st.noteHolder("a", "r1", "https://r2", "r1", at) // handed over
	st.noteHolder("b", "r1", "", "r1", at)           // acquired: the annotation was cleared
	st.noteHolder("c", "r1", "https://r2", "r1", at)
	st.noteHolder("d", "r1", "https://r3", "r1", at) // ours already at the last pass
	for name, want := range map[string]bool{"a": true, "b": false, "c": true, "d": false} {
		if got := st.handedOver(name, at); got != want {
			t.Errorf("%s: handed over %v, want %v", name, got, want)
		}
	}
	if _, ok := st.arrived["b"]; !ok {
		t.Error("an acquired fence is an arrival (for the hand-back window) all the same")
	}
	st.noteHolder("c", "r3", "", "r1", at.Add(time.Second)) // handed on to r3
	if st.handedOver("c", at.Add(time.Second)) {
		t.Error("a fence another replica holds still counts as handed over to us")
	}
	late := at.Add(clusterset.ShelfMaxAge)
	if st.handedOver("a", late) || !st.handedOver("a", late.Add(-time.Millisecond)) {
		t.Errorf("a handover counts until clusterset.ShelfMaxAge (%s) after it, not from then", clusterset.ShelfMaxAge)
	}
	st.forgetArrivals(late, time.Second)
	if _, ok := st.handedIn["a"]; ok {
		t.Error("forgetArrivals kept a handover past clusterset.ShelfMaxAge")
	}
}

// TestHandoffNamesTheHolderOnlyWithAState: a fence handed to another replica names this one
// (multicache.io/handed-over-from and -by) only when SetKept says a state of the cluster
// waits here, or the cluster still runs here, or SetKept was never called; a take never names
// anyone, and clears a name left by the last handoff.
func TestHandoffNamesTheHolderOnlyWithAState(t *testing.T) {
	c, err := New(Options{
		Client: fake.NewClientset(), Namespace: "ns", Identity: "r1", AdvertiseURL: "https://r1:8443",
		Source: clusterset.Static{{Name: "kept"}, {Name: "lost"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	handed := func(l *coordv1.Lease) (from, by string) {
		return l.Annotations[annoHandedFrom], l.Annotations[annoHandedBy]
	}
	ours := c.newFence("lost", now)
	if from, by := handed(c.withHolder(ours, "lost", "r2", now)); from != "https://r1:8443" || by != "r1" {
		t.Errorf("without SetKept, a handoff names %q, %q; want this replica", from, by)
	}
	c.SetKept(func(cluster string) bool { return cluster == "kept" })
	if from, by := handed(c.withHolder(c.newFence("kept", now), "kept", "r2", now)); from != "https://r1:8443" || by != "r1" {
		t.Errorf("a handoff with a kept state names %q, %q; want this replica", from, by)
	}
	if from, by := handed(c.withHolder(ours, "lost", "r2", now)); from != "" || by != "" {
		t.Errorf("a handoff without a kept state names %q, %q; want nobody, so that its next owner lists it in a warm-up slot", from, by)
	}
	// A shutdown hands over what it could not stop in time: its state may still be kept.
	c.SetLocal(func(cluster string) (bool, bool) { return cluster == "lost", true })
	if from, by := handed(c.withHolder(ours, "lost", "r2", now)); from != "https://r1:8443" || by != "r1" {
		t.Errorf("a handoff of a cluster still running here names %q, %q; want this replica", from, by)
	}
	theirs := c.withHolder(ours, "lost", "r2", now)
	r2 := "r2"
	theirs.Spec.HolderIdentity = &r2
	theirs.Annotations[annoHandedFrom], theirs.Annotations[annoHandedBy] = "https://r3:8443", "r3"
	if from, by := handed(c.withHolder(theirs, "lost", "r1", now)); from != "" || by != "" {
		t.Errorf("a take kept the last handoff's names %q, %q", from, by)
	}
}
