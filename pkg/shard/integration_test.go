package shard

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/test/harness"
)

// TestCoordinatorsShareTheFleet runs replicas against a real kube-apiserver: three share nine
// clusters, one crashes, a fourth joins, one leaves gracefully. Throughout, a sampler checks
// that no cluster is offered (or running) on two replicas at once, and, from the fourth's start
// on, that the API server never shows a cluster without a live holder.
func TestCoordinatorsShareTheFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kube-apiserver")
	}
	env := harness.Start(t, harness.Options{Clusters: 1})
	r := newRig(t, env.Ctx, env.Fleet.Clusters[0].AdminConfig(), 9)

	// Three replicas: every cluster ends up with exactly one holder, its owner in the
	// assignment (rendezvous hashing with bounded loads).
	reg := prometheus.NewRegistry()
	r.start("r1", reg)
	r.start("r2", nil)
	r.start("r3", nil)
	r.converge("three replicas share the fleet", 5*r.ld, r.assigned("r1", "r2", "r3"))
	r.mu.Lock()
	var owned dto.Metric
	_ = r.nodes["r1"].c.m.owned.Write(&owned)
	r.mu.Unlock()
	if want := float64(len(r.holdersOf("r1"))); owned.GetGauge().GetValue() != want {
		t.Errorf("r1's multicache_shard_owned_clusters = %v, want %v", owned.GetGauge().GetValue(), want)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string]int{}
	for _, f := range families {
		series[f.GetName()] = len(f.GetMetric())
	}
	if want := map[string]int{"multicache_shard_owned_clusters": 1, "multicache_shard_unowned_clusters": 1, "multicache_shard_live_peers": 1, "multicache_shard_warming_clusters": 1, "multicache_shard_queued_clusters": 1, "multicache_shard_handoffs_total": 2, "multicache_shard_lease_writes_total": 2}; fmt.Sprint(series) != fmt.Sprint(want) {
		t.Errorf("metrics: %v, want %v", series, want)
	}

	// Crash the replica holding the most clusters: survivors take them within 2×LeaseDuration.
	victim, its := r.mostLoaded()
	t0 := time.Now()
	r.crash(victim)
	r.waitFor("survivors hold the crashed replica's clusters", 2*r.ld+time.Second, 20*time.Millisecond, func() (bool, string) {
		holders := r.apiHolders()
		for _, name := range its {
			if h := holders[name]; !r.alive(h) {
				return false, fmt.Sprintf("%s still held by %q", name, h)
			}
		}
		return true, ""
	})
	t.Logf("takeover: %d clusters of crashed %s held by survivors %s after the crash (lease duration %s)", len(its), victim, time.Since(t0).Round(time.Millisecond), r.ld)
	survivors := r.aliveIDs()
	r.converge("survivors share the fleet", 5*r.ld, r.assigned(survivors...))
	for _, id := range survivors {
		for _, p := range r.node(id).c.Peers() {
			if p.ID == victim && p.Live {
				t.Errorf("%s still sees crashed %s live", id, victim)
			}
		}
	}

	// A fourth replica: clusters move to it after the holders have seen it live for a
	// LeaseDuration, by direct handoff, never unowned.
	r.checkUnowned.Store(true)
	joined := append(survivors, "r4")
	want := r.assigned(joined...)
	if len(holdersIn(want(r.apiHolders()), "r4")) == 0 {
		t.Fatalf("the test's cluster names give r4 nothing: %v", want(r.apiHolders()))
	}
	t1 := time.Now()
	r.start("r4", nil)
	r.waitFor("a cluster moves to r4", 5*r.ld, 50*time.Millisecond, func() (bool, string) {
		return len(r.holdersOf("r4")) > 0, "r4 holds nothing"
	})
	if moved := time.Since(t1); moved < r.ld {
		t.Errorf("a cluster moved to r4 after %s, within the hysteresis of one lease duration", moved)
	} else {
		t.Logf("first cluster moved to the new replica after %s", moved.Round(time.Millisecond))
	}
	r.converge("four replicas share the fleet", 5*r.ld, want)

	// Graceful shutdown: its clusters are handed over and its peer Lease is gone.
	leaving, _ := r.mostLoaded()
	if err := r.stop(leaving); err != nil {
		t.Errorf("graceful shutdown of %s: %v", leaving, err)
	}
	if _, err := r.cs.CoordinationV1().Leases(r.ns).Get(r.ctx, peerLeaseName(leaving), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("peer lease of %s after its shutdown: %v, want NotFound", leaving, err)
	}
	if held := r.holdersOf(leaving); len(held) > 0 {
		t.Errorf("%s still holds %v after its shutdown", leaving, held)
	}
	r.converge("the rest share the fleet", 5*r.ld, r.assigned(r.aliveIDs()...))
	// Each replica came to own about 3 of the 9 clusters, more than its 2 warm-up slots; once
	// the fleet is shared and synced, nothing warms or waits anywhere.
	if q := r.queuedSeen.Load(); q == 0 {
		t.Errorf("no coordinator ever reported a cluster waiting for a warm-up slot (Warmups)")
	}
	r.waitFor("every replica's warm-ups done", 5*r.ld, 20*time.Millisecond, func() (bool, string) {
		for _, id := range r.aliveIDs() {
			if w, q := r.node(id).c.Warmups(); w != 0 || q != 0 {
				return false, fmt.Sprintf("%s: %d warming, %d queued", id, w, q)
			}
		}
		return true, ""
	})
	r.finish()
}

// TestForgedPeerLeaseMovesNothing: with peers proved by their certificates (Options.Verify), a
// peer Lease in the replicas' own shape, renewed, at the largest weight, whose URL proves
// nothing, is never a member: three replicas share the fleet among themselves, a fence the
// forger writes to itself is taken back within a lease duration or two, and every replica
// reports the forger unproved and not live. Against a real kube-apiserver.
func TestForgedPeerLeaseMovesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kube-apiserver")
	}
	env := harness.Start(t, harness.Options{Clusters: 1})
	r := newRig(t, env.Ctx, env.Fleet.Clusters[0].AdminConfig(), 9)
	var asked sync.Map // IDs Verify was asked about
	r.verify = func(_ context.Context, id, url string) error {
		asked.Store(id, url)
		if id == "forged" {
			return fmt.Errorf("%s: the certificate does not name %q", url, id)
		}
		return nil
	}
	leases := r.cs.CoordinationV1().Leases(r.ns)
	forge := func() {
		now := metav1.NewMicroTime(time.Now())
		holder, secs := "forged", int32(r.ld.Seconds())
		l := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: peerLeaseName("forged"), Labels: map[string]string{labelLease: kindPeer},
			Annotations: map[string]string{annoURL: "https://127.0.0.1:1", annoWeight: fmt.Sprint(MaxWeight)}},
			Spec: coordv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, RenewTime: &now}}
		if old, err := leases.Get(r.ctx, l.Name, metav1.GetOptions{}); err == nil {
			old.Spec.RenewTime = &now
			_, _ = leases.Update(r.ctx, old, metav1.UpdateOptions{})
			return
		}
		_, _ = leases.Create(r.ctx, l, metav1.CreateOptions{})
	}
	forge()
	fctx, stopForging := context.WithCancel(r.ctx)
	defer stopForging()
	go func() {
		for fctx.Err() == nil {
			forge()
			time.Sleep(r.ld / 4)
		}
	}()
	r.start("r1", nil)
	r.start("r2", nil)
	r.start("r3", nil)
	r.converge("three replicas share the fleet; the forged Lease owns nothing", 5*r.ld, r.assigned("r1", "r2", "r3"))
	if _, ok := asked.Load("forged"); !ok {
		t.Error("Verify was never asked about the forged Lease")
	}
	for _, id := range []string{"r1", "r2", "r3"} {
		for _, p := range r.node(id).c.Peers() {
			if p.ID == "forged" && (p.Live || !p.Unproved) {
				t.Errorf("%s sees the forged peer %+v, want unproved and not live", id, p)
			}
		}
	}
	// The forger writes a fence to itself: the replica that owns the cluster takes it back.
	name := r.names[0]
	f, err := leases.Get(r.ctx, fenceLeaseName(name), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	forged := "forged"
	f.Spec.HolderIdentity = &forged
	if _, err := leases.Update(r.ctx, f, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.converge("a fence written to the forged holder is taken back", 5*r.ld, r.assigned("r1", "r2", "r3"))
	r.finish()
}

// TestHandoversWarmInTheirOwnSlots: clusters a live replica hands over warm in MaxHandovers'
// slots beside the MaxWarmups of the others; with MaxHandovers -1 they share the warm-up
// slots. r1 holds all 9 clusters; r2 joins with one warm-up slot and 4 for handovers, and
// warms more than one cluster at once (the rig checks that no more than one of them lacks
// a handed-over fence, and no more than 5 warm); r3 joins with MaxHandovers -1 and never
// warms more than its one slot.
func TestHandoversWarmInTheirOwnSlots(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kube-apiserver")
	}
	env := harness.Start(t, harness.Options{Clusters: 1})
	r := newRig(t, env.Ctx, env.Fleet.Clusters[0].AdminConfig(), 9)
	r.start("r1", nil)
	r.converge("r1 holds the fleet", 5*r.ld, r.assigned("r1"))
	slow := func(o *Options) { o.MaxWarmups = 1 }
	r.start("r2", nil, slow, func(o *Options) { o.MaxHandovers = 4 })
	r.converge("r1 hands r2 its share", 5*r.ld, r.assigned("r1", "r2"))
	r2 := r.node("r2").reg
	r2.mu.Lock()
	got := r2.maxWarming
	r2.mu.Unlock()
	if got < 2 {
		t.Errorf("r2 warmed at most %d cluster at once of the %d handed to it, with 1 warm-up slot and 4 for handovers", got, len(r.holdersOf("r2")))
	}
	r.start("r3", nil, slow, func(o *Options) { o.MaxHandovers = -1 })
	r.converge("r1 and r2 hand r3 its share", 5*r.ld, r.assigned("r1", "r2", "r3"))
	r3 := r.node("r3").reg
	r3.mu.Lock()
	got = r3.maxWarming
	r3.mu.Unlock()
	if n := len(r.holdersOf("r3")); got != 1 || n < 2 {
		t.Errorf("r3, handovers sharing its 1 warm-up slot, warmed at most %d at once of the %d handed to it, want 1", got, n)
	}
	r.finish()
}

// rig runs coordinators over one namespace of a real API server and samples them.
type rig struct {
	t     *testing.T
	ctx   context.Context
	cfg   *rest.Config
	cs    kubernetes.Interface
	ns    string
	ld    time.Duration
	src   clusterset.Static
	names []string

	mu    sync.Mutex // guards nodes; held while sampling, so a crash is atomic to samplers
	nodes map[string]*node

	// verify, when set, is every coordinator's Options.Verify.
	verify func(ctx context.Context, id, url string) error

	checkUnowned atomic.Bool
	// queuedSeen is the most clusters any coordinator's Warmups reported waiting for a slot.
	queuedSeen   atomic.Int64
	vmu          sync.Mutex
	violations   []string
	stopSampling context.CancelFunc
	sampling     sync.WaitGroup
}

type node struct {
	id        string
	c         *Coordinator
	reg       *fakeRegistry
	cancel    context.CancelFunc // ends Run
	cancelReg context.CancelFunc // ends the fake registry, which outlives Run as a Registry would
	done      chan error
}

func newRig(t *testing.T, ctx context.Context, admin *rest.Config, clusters int) *rig {
	cfg := rest.CopyConfig(admin)
	cfg.QPS, cfg.Burst = 100, 200
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, ctx: ctx, cfg: cfg, cs: cs, ns: "multicache-shard", ld: 2 * time.Second, nodes: map[string]*node{}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range clusters {
		name := fmt.Sprintf("cluster-%d", i)
		r.names = append(r.names, name)
		r.src = append(r.src, clusterset.ClusterConfig{Name: name, Origin: "test", Fingerprint: "1"})
	}
	sctx, stop := context.WithCancel(ctx)
	r.stopSampling = stop
	r.sampling.Add(2)
	go r.sampleLoads(sctx)
	go r.sampleLeases(sctx)
	t.Cleanup(func() {
		stop()
		r.sampling.Wait()
		r.mu.Lock()
		nodes := make([]*node, 0, len(r.nodes))
		for _, n := range r.nodes {
			nodes = append(nodes, n)
		}
		r.mu.Unlock()
		for _, n := range nodes {
			n.cancel()
		}
		for _, n := range nodes {
			<-n.done
			n.cancelReg()
		}
	})
	return r
}

// start runs a coordinator with the rig's options (MaxWarmups 2, MaxHandovers 2), changed by
// tweaks.
func (r *rig) start(id string, metrics prometheus.Registerer, tweaks ...func(*Options)) {
	r.t.Helper()
	cs, err := kubernetes.NewForConfig(r.cfg) // its own rate limiter, as a replica would have
	if err != nil {
		r.t.Fatal(err)
	}
	o := Options{
		Client: cs, Namespace: r.ns, Identity: id, AdvertiseURL: "http://" + id + ".test:8080",
		LeaseDuration: r.ld, MaxWarmups: 2, MaxHandovers: 2, Source: r.src, Metrics: metrics, Verify: r.verify,
		Logger: zaptest.NewLogger(r.t, zaptest.Level(zap.InfoLevel)).Named(id),
	}
	for _, tweak := range tweaks {
		tweak(&o)
	}
	c, err := New(o)
	if err != nil {
		r.t.Fatal(err)
	}
	reg := &fakeRegistry{id: id, syncAfter: 200 * time.Millisecond, running: map[string]time.Time{}, rig: r}
	c.SetLocal(reg.local)
	ctx, cancel := context.WithCancel(r.ctx)
	regCtx, cancelReg := context.WithCancel(r.ctx)
	n := &node{id: id, c: c, reg: reg, cancel: cancel, cancelReg: cancelReg, done: make(chan error, 1)}
	go reg.follow(regCtx, c)
	r.mu.Lock()
	r.nodes[id] = n // before Run: it is alive before it can hold anything
	r.mu.Unlock()
	go func() { n.done <- c.Run(ctx) }()
}

// crash ends a coordinator as if its process died: no handoff, the Lease left to expire, and
// its registry's clusters gone at once.
func (r *rig) crash(id string) {
	r.mu.Lock()
	n := r.nodes[id]
	delete(r.nodes, id)
	n.c.crash.Store(true)
	n.cancel()
	n.reg.kill()
	n.cancelReg()
	r.mu.Unlock()
	if err := <-n.done; err != nil {
		r.t.Errorf("crashed %s: Run returned %v", id, err)
	}
}

// stop cancels a coordinator's context and waits for its graceful shutdown.
func (r *rig) stop(id string) error {
	n := r.node(id)
	n.cancel()
	var err error
	select {
	case err = <-n.done:
	case <-time.After(5 * r.ld):
		r.t.Fatalf("%s: Run did not return within %s of its context ending", id, 5*r.ld)
	}
	r.mu.Lock()
	delete(r.nodes, id)
	n.cancelReg()
	r.mu.Unlock()
	return err
}

func (r *rig) node(id string) *node {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nodes[id]
}

func (r *rig) alive(id string) bool { return r.node(id) != nil }

func (r *rig) aliveIDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return sortedKeys(r.nodes)
}

// assigned is the assignment the design converges to over the given replicas (weight 1
// each), from the fences' holders: rendezvous hashing with bounded loads over the rig's whole
// fleet, sticky. The fleet has converged when its holders are that assignment's fixed point.
func (r *rig) assigned(ids ...string) func(holders map[string]string) map[string]string {
	ms := make([]member, len(ids))
	for i, id := range ids {
		ms[i] = member{id: id, weight: 1}
	}
	return func(holders map[string]string) map[string]string {
		a := assign(ms, r.names, holders)
		out := map[string]string{}
		for _, name := range r.names {
			out[name] = a.owner(name)
		}
		return out
	}
}

func holdersIn(assign map[string]string, id string) []string {
	var out []string
	for name, h := range assign {
		if h == id {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// apiHolders lists the fences from the API server: cluster → holder.
func (r *rig) apiHolders() map[string]string {
	r.t.Helper()
	list, err := r.cs.CoordinationV1().Leases(r.ns).List(r.ctx, metav1.ListOptions{LabelSelector: labelLease + "=" + kindFence})
	if err != nil {
		r.t.Fatalf("listing fences: %v", err)
	}
	out := map[string]string{}
	for i := range list.Items {
		out[fenceCluster(&list.Items[i])] = holderOf(&list.Items[i])
	}
	return out
}

func (r *rig) holdersOf(id string) []string { return holdersIn(r.apiHolders(), id) }

// mostLoaded is the live replica holding the most fences, and those fences' clusters.
func (r *rig) mostLoaded() (string, []string) {
	holders := r.apiHolders()
	best, its := "", []string(nil)
	for _, id := range r.aliveIDs() {
		if held := holdersIn(holders, id); len(held) > len(its) {
			best, its = id, held
		}
	}
	return best, its
}

// converge waits until every cluster's fence (as the API server lists it) is held by its
// wanted replica, that replica alone offers it, and every replica's Owners agrees.
func (r *rig) converge(what string, within time.Duration, assigned func(holders map[string]string) map[string]string) {
	r.t.Helper()
	start := time.Now()
	r.waitFor(what, within, 50*time.Millisecond, func() (bool, string) {
		holders := r.apiHolders()
		want := assigned(holders)
		r.mu.Lock()
		defer r.mu.Unlock()
		offeredBy := map[string][]string{}
		owners := map[string][]Owner{}
		for _, id := range sortedKeys(r.nodes) {
			cfgs, err := r.nodes[id].c.Load()
			if err != nil {
				return false, fmt.Sprintf("%s: Load: %v", id, err)
			}
			for _, cfg := range cfgs {
				offeredBy[cfg.Name] = append(offeredBy[cfg.Name], id)
			}
			owners[id] = r.nodes[id].c.Owners()
		}
		for i, name := range r.names {
			h := holders[name]
			if h != want[name] {
				return false, fmt.Sprintf("%s held by %q, want %q", name, h, want[name])
			}
			if got := offeredBy[name]; len(got) != 1 || got[0] != h {
				return false, fmt.Sprintf("%s held by %s but offered by %v", name, h, got)
			}
			for id, os := range owners {
				if len(os) != len(r.names) || os[i].Cluster != name || os[i].Holder != h || !os[i].Live || os[i].Self != (id == h) || os[i].URL != "http://"+h+".test:8080" {
					return false, fmt.Sprintf("%s's Owners disagree on %s (held by %s): %+v", id, name, h, os)
				}
			}
		}
		return true, ""
	})
	r.t.Logf("%s: converged after %s", what, time.Since(start).Round(time.Millisecond))
}

func (r *rig) waitFor(what string, within, every time.Duration, f func() (bool, string)) {
	r.t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, why := f()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%s: not true after %s: %s", what, within, why)
		}
		time.Sleep(every)
	}
}

func (r *rig) violate(format string, args ...any) {
	r.vmu.Lock()
	defer r.vmu.Unlock()
	r.violations = append(r.violations, fmt.Sprintf(time.Now().Format("15:04:05.000 ")+format, args...))
}

// sampleLoads checks, every 10 ms, that no cluster is offered by two coordinators' Load, nor
// running in two fake registries, at once, and that no coordinator reports more clusters
// warming than its warm-up slots (Warmups).
func (r *rig) sampleLoads(ctx context.Context) {
	defer r.sampling.Done()
	for ctx.Err() == nil {
		r.mu.Lock()
		offered, running := map[string]string{}, map[string]string{}
		for id, n := range r.nodes {
			warming, queued := n.c.Warmups()
			if slots := n.c.opts.MaxWarmups + max(n.c.opts.MaxHandovers, 0); warming < 0 || queued < 0 || warming > slots {
				r.violate("%s: Warmups() = %d warming, %d queued, with %d slots", id, warming, queued, slots)
			}
			if int64(queued) > r.queuedSeen.Load() {
				r.queuedSeen.Store(int64(queued))
			}
			cfgs, _ := n.c.Load()
			for _, cfg := range cfgs {
				if other, dup := offered[cfg.Name]; dup {
					r.violate("%s offered by %s and %s at once", cfg.Name, other, id)
				}
				offered[cfg.Name] = id
			}
			for _, name := range n.reg.names() {
				if other, dup := running[name]; dup {
					r.violate("%s running on %s and %s at once", name, other, id)
				}
				running[name] = id
			}
		}
		r.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
	}
}

// sampleLeases checks, every 100 ms once checkUnowned is set, that the API server shows every
// cluster's fence held by a replica that was alive when the list began.
func (r *rig) sampleLeases(ctx context.Context) {
	defer r.sampling.Done()
	for ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
		if !r.checkUnowned.Load() {
			continue
		}
		alive := map[string]bool{}
		for _, id := range r.aliveIDs() {
			alive[id] = true
		}
		list, err := r.cs.CoordinationV1().Leases(r.ns).List(ctx, metav1.ListOptions{LabelSelector: labelLease + "=" + kindFence})
		if err != nil {
			if ctx.Err() == nil {
				r.violate("listing fences: %v", err)
			}
			return
		}
		holders := map[string]string{}
		for i := range list.Items {
			holders[fenceCluster(&list.Items[i])] = holderOf(&list.Items[i])
		}
		for _, name := range r.names {
			if h, ok := holders[name]; !ok || !alive[h] {
				r.violate("%s unowned: fence present %v, holder %q", name, ok, h)
			}
		}
	}
}

// finish stops the samplers and reports what they saw.
func (r *rig) finish() {
	r.stopSampling()
	r.sampling.Wait()
	r.vmu.Lock()
	defer r.vmu.Unlock()
	if len(r.violations) > 0 {
		r.t.Errorf("%d violations, first ones:\n%s", len(r.violations), strings.Join(r.violations[:min(len(r.violations), 20)], "\n"))
	}
}

// fakeRegistry stands in for a clusterset.Registry: it runs what Load offers, applying each
// Load in turn as Registry.reload does, and reports a cluster synced syncAfter after it
// started. It also checks that no more than MaxWarmups clusters warm at once.
type fakeRegistry struct {
	id        string
	syncAfter time.Duration
	rig       *rig

	mu         sync.Mutex
	running    map[string]time.Time
	dead       bool
	maxWarming int // the most clusters seen warming at once
}

func (f *fakeRegistry) follow(ctx context.Context, c *Coordinator) {
	changes := c.Changes(ctx)
	for {
		cfgs, _ := c.Load()
		f.apply(cfgs, c)
		select {
		case <-ctx.Done():
			return
		case <-changes:
		}
	}
}

// apply runs what c offers, and checks that no more clusters warm at once than c's slots: at
// most MaxWarmups of those no peer handed over (their fence names no state to take), and at
// most MaxHandovers more of those one did.
func (f *fakeRegistry) apply(cfgs []clusterset.ClusterConfig, c *Coordinator) {
	handed := map[string]bool{}
	for _, o := range c.Owners() {
		handed[o.Cluster] = o.From != ""
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dead {
		return
	}
	want := map[string]bool{}
	for _, cfg := range cfgs {
		want[cfg.Name] = true
		if _, ok := f.running[cfg.Name]; !ok {
			f.running[cfg.Name] = time.Now()
		}
	}
	warming, plain := 0, 0
	for name, since := range f.running {
		if !want[name] {
			delete(f.running, name)
		} else if time.Since(since) < f.syncAfter {
			warming++
			if !handed[name] {
				plain++
			}
		}
	}
	f.maxWarming = max(f.maxWarming, warming)
	if slots := c.opts.MaxWarmups + max(c.opts.MaxHandovers, 0); plain > c.opts.MaxWarmups || warming > slots {
		f.rig.violate("%s: %d clusters warming at once (%d not handed over), more than %d slots (%d for those)", f.id, warming, plain, slots, c.opts.MaxWarmups)
	}
}

func (f *fakeRegistry) local(name string) (running, synced bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	since, ok := f.running[name]
	return ok, ok && time.Since(since) >= f.syncAfter
}

func (f *fakeRegistry) kill() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dead = true
	f.running = map[string]time.Time{}
}

func (f *fakeRegistry) names() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return sortedKeys(f.running)
}
