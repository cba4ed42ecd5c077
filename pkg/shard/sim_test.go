package shard

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"k8s.io/client-go/kubernetes/fake"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/multicache/multicache/pkg/clusterset"
)

// sim runs real Coordinators, many of them, over one simStore and one fake clock: issue 37's
// 10,000 clusters over 30 replicas. Fake time moves by a tick only once the replicas are idle
// (settle), so a slow machine makes the simulation slow: no replica takes another for dead,
// or fences itself, because the CPU was busy. A fence change may reach a slow replica a tick
// late, which moves a figure by a tick, not an invariant.
//
// Each replica runs a stand-in Registry that applies every Load at once and reports its
// clusters synced as soon as they run. simulated "runs" are recorded fleet-wide: a replica
// starting a cluster another replica runs is a violation (two owners at once), checked at the
// moment it happens, not sampled.
type sim struct {
	t     testing.TB
	clk   *testingclock.FakeClock
	store *simStore
	cs    *fake.Clientset
	ld    time.Duration
	tick  time.Duration
	fleet *simFleet

	mu         sync.Mutex
	nodes      map[string]*simNode
	runs       map[string]string // cluster → the replica whose registry runs it
	violations []string
	changes    int // fence holder changes, as the store saw them
	changed    map[string]bool
}

type simNode struct {
	id      string
	c       *Coordinator
	cancel  context.CancelFunc
	stopReg context.CancelFunc
	done    chan error
	exited  atomic.Bool     // Run returned
	running map[string]bool // guarded by sim.mu
}

func newSim(t testing.TB, clusters int, ld time.Duration) *sim {
	s := &sim{
		t:     t,
		clk:   testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		store: newSimStore(),
		cs:    fake.NewClientset(),
		ld:    ld,
		tick:  ld / 60,
		fleet: newSimFleet(widthFleet(clusters)),
		nodes: map[string]*simNode{},
		runs:  map[string]string{},
	}
	s.store.moved = func(fence, from, to string) {
		s.mu.Lock()
		s.changes++
		if s.changed != nil {
			s.changed[fence] = true
		}
		s.mu.Unlock()
	}
	s.store.install(s.cs)
	t.Cleanup(s.close)
	return s
}

// start runs a replica named id.
func (s *sim) start(id string) {
	s.t.Helper()
	c, err := New(Options{
		Client: s.cs, Namespace: "multicache", Identity: id, AdvertiseURL: "http://" + id + ".test:8080",
		LeaseDuration: s.ld, Clock: s.clk, Source: s.fleet,
		Logger: zaptest.NewLogger(s.t, zaptest.Level(zap.WarnLevel)).Named(id),
	})
	if err != nil {
		s.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	regCtx, stopReg := context.WithCancel(context.Background())
	n := &simNode{id: id, c: c, cancel: cancel, stopReg: stopReg, done: make(chan error, 1), running: map[string]bool{}}
	c.SetLocal(func(cluster string) (running, synced bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return n.running[cluster], n.running[cluster]
	})
	s.mu.Lock()
	s.nodes[id] = n
	s.mu.Unlock()
	go s.follow(regCtx, n)
	go func() {
		err := c.Run(ctx)
		n.exited.Store(true)
		n.done <- err
	}()
}

// follow is the stand-in Registry: it runs what Load offers, each Load applied in turn.
func (s *sim) follow(ctx context.Context, n *simNode) {
	changes := n.c.Changes(ctx)
	for {
		cfgs, _ := n.c.Load()
		s.apply(n, cfgs)
		select {
		case <-ctx.Done():
			return
		case <-changes:
		}
	}
}

func (s *sim) apply(n *simNode, cfgs []clusterset.ClusterConfig) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nodes[n.id] != n {
		return // stopped or crashed: it runs nothing
	}
	want := make(map[string]bool, len(cfgs))
	for _, cfg := range cfgs {
		want[cfg.Name] = true
	}
	for name := range n.running {
		if !want[name] {
			delete(n.running, name)
			if s.runs[name] == n.id {
				delete(s.runs, name)
			}
		}
	}
	for name := range want {
		if n.running[name] {
			continue
		}
		if other, ok := s.runs[name]; ok && other != n.id {
			s.violations = append(s.violations, fmt.Sprintf("%s: %s started %s while %s runs it", s.clk.Now().Format("15:04:05.000"), n.id, name, other))
		}
		n.running[name] = true
		s.runs[name] = n.id
	}
}

// forget removes what n's registry runs: its process is gone.
func (s *sim) forget(n *simNode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name := range n.running {
		if s.runs[name] == n.id {
			delete(s.runs, name)
		}
	}
	n.running = map[string]bool{}
	delete(s.nodes, n.id)
}

// crash ends a replica as a killed process ends: its clusters stop at once, its Leases stay.
func (s *sim) crash(id string) {
	s.t.Helper()
	n := s.node(id)
	s.forget(n)
	n.stopReg()
	n.c.crash.Store(true)
	n.cancel()
	if err := <-n.done; err != nil {
		s.t.Errorf("crashed %s: Run returned %v", id, err)
	}
}

// stop shuts a replica down gracefully, moving the clock on while its shutdown waits on it.
func (s *sim) stop(id string) {
	s.t.Helper()
	n := s.node(id)
	n.cancel()
	for deadline := s.clk.Now().Add(3 * s.ld); ; {
		select {
		case err := <-n.done:
			if err != nil {
				s.t.Errorf("%s: graceful shutdown: %v", id, err)
			}
			n.stopReg()
			s.forget(n)
			return
		default:
		}
		if s.clk.Now().After(deadline) {
			s.t.Fatalf("%s: Run did not return within 3 lease durations of its context ending", id)
		}
		s.step()
	}
}

func (s *sim) node(id string) *simNode {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nodes[id]
}

func (s *sim) ids() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sortedKeys(s.nodes)
}

// close stops every replica (without handing anything over) and reports the violations.
func (s *sim) close() {
	s.mu.Lock()
	nodes := make([]*simNode, 0, len(s.nodes))
	for _, n := range s.nodes {
		nodes = append(nodes, n)
	}
	s.mu.Unlock()
	for _, n := range nodes {
		s.forget(n)
		n.stopReg()
		n.c.crash.Store(true)
		n.cancel()
		<-n.done
	}
	if len(s.violations) > 0 {
		s.t.Errorf("%d violations, the first ones:\n%s", len(s.violations), strings.Join(s.violations[:min(len(s.violations), 20)], "\n"))
	}
}

// step moves fake time on by a tick once the replicas are idle.
func (s *sim) step() {
	s.t.Helper()
	s.settle()
	s.clk.Step(s.tick)
}

// settle waits until every write has reached every watch, every running replica has sent the
// renewal due by now, has delivered every peer Lease, has no reconcile or Registry load pending,
// and the replicas wait on their timers (three each: reconcile loop, renewals, watchdog), the
// whole holding for 2 ms of real time. A fence event between a watch and its informer's handler
// is covered by that hold only: it may be seen a tick late, as a slow replica would.
func (s *sim) settle() {
	s.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	var idleSince time.Time
	for {
		ok, why := s.idle()
		if ok {
			if idleSince.IsZero() {
				idleSince = time.Now()
			} else if time.Since(idleSince) >= 2*time.Millisecond {
				return
			}
		} else {
			idleSince = time.Time{}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("the replicas did not settle within 2 minutes at %s: %s", s.clk.Now().Format("15:04:05.000"), why)
		}
		s.clk.Step(0) // a timer set for now is due
		time.Sleep(200 * time.Microsecond)
	}
}

// idle reports whether the replicas are idle, and if not, why.
func (s *sim) idle() (bool, string) {
	if q := s.store.queued.Load(); q != 0 {
		return false, fmt.Sprintf("%d events undelivered", q)
	}
	s.mu.Lock()
	nodes := make([]*simNode, 0, len(s.nodes))
	for _, n := range s.nodes {
		if !n.exited.Load() {
			nodes = append(nodes, n)
		}
	}
	s.mu.Unlock()
	if w := s.clk.Waiters(); w < 3*len(nodes) {
		return false, fmt.Sprintf("%d timers waiting for %d replicas", w, len(nodes))
	}
	now := s.clk.Now()
	peers := s.store.peerRVs()
	for _, n := range nodes {
		n.c.renewMu.Lock()
		last := n.c.lastRenew
		n.c.renewMu.Unlock()
		if last.IsZero() || now.Sub(last) >= s.ld/3 {
			return false, n.id + ": renewal due not sent"
		}
		// Its loop has no wake-up pending, its Registry has loaded what it last published,
		// and its informer has delivered every peer Lease as the store has it now: no replica
		// can take a live peer for dead because its informer lagged behind fake time.
		if len(n.c.wake) > 0 && !n.c.leaving.Load() { // a shutdown polls, it does not drain wake
			return false, n.id + ": reconcile wake-up pending"
		}
		n.c.mu.Lock()
		loaded := n.c.loaded == n.c.version
		n.c.mu.Unlock()
		if !loaded {
			return false, n.id + ": its Registry has not loaded the last publication"
		}
		seen := n.c.obs.snapshot(now)
		for id, rv := range peers {
			if id == n.id && n.c.obs.ownRV() != rv || id != n.id && seen[id].rv != rv {
				return false, fmt.Sprintf("%s: has not seen %s's peer Lease at %s", n.id, id, rv)
			}
		}
	}
	return true, ""
}

// held reports whether every cluster's fence is held by a live replica.
func (s *sim) held() bool {
	holders := s.store.holders()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, name := range s.fleet.names() {
		if n := s.nodes[holders[name]]; n == nil || n.exited.Load() {
			return false
		}
	}
	return true
}

// owned reports whether every cluster of the fleet runs on the replica holding its fence, and
// the first cluster that does not.
func (s *sim) owned() (bool, string) {
	holders := s.store.holders()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, name := range s.fleet.names() {
		h := holders[name]
		if h == "" || s.runs[name] != h || s.nodes[h] == nil {
			return false, fmt.Sprintf("%s: fence held by %q, running on %q", name, h, s.runs[name])
		}
	}
	return true, ""
}

// balanced reports whether the fences are where the assignment over the live replicas keeps
// them: its fixed point, which every replica computes alike once all see the same peers.
func (s *sim) balanced() bool {
	ids := s.ids()
	ms := make([]member, len(ids))
	for i, id := range ids {
		ms[i] = member{id: id, weight: 1}
	}
	holders := s.store.holders()
	a := assign(ms, s.fleet.names(), holders)
	for _, name := range s.fleet.names() {
		if holders[name] != a.owner(name) {
			return false
		}
	}
	return true
}

// simOutcome is what one event did, in fake time.
type simOutcome struct {
	event    string
	held     time.Duration // until every cluster's fence was held by a live replica
	owned    time.Duration // until every cluster ran on its fence holder again
	settled  time.Duration // until, also, the fences were the assignment's fixed point
	changes  int           // fence holder changes meanwhile
	clusters int           // clusters whose fence changed holder at least once
	writes   int64         // Lease writes meanwhile (peer and fence)
	share    int           // the event's own share: clusters of the leaving replica, capacity of the joining one
}

func (o simOutcome) String() string {
	return fmt.Sprintf("%s: every fence held after %s, every cluster running on its holder after %s, settled after %s; %d clusters moved (%d holder changes, share %d); %d Lease writes",
		o.event, o.held, o.owned, o.settled, o.clusters, o.changes, o.share, o.writes)
}

// measure runs do, then moves time on until every cluster is owned and the fences settle
// (within limit), and reports what happened meanwhile.
func (s *sim) measure(event string, share int, limit time.Duration, do func()) simOutcome {
	s.t.Helper()
	s.settle()
	s.mu.Lock()
	s.changes, s.changed = 0, map[string]bool{}
	s.mu.Unlock()
	w0 := s.store.peerWrites.Load() + s.store.fenceWrites.Load()
	start := s.clk.Now()
	do()
	out := simOutcome{event: event, share: share}
	lastCheck := time.Time{}
	for {
		s.settle()
		now := s.clk.Now()
		if out.held == 0 && s.held() {
			out.held = now.Sub(start)
		}
		if out.owned == 0 {
			if ok, _ := s.owned(); ok {
				out.owned = now.Sub(start)
			}
		}
		if out.owned > 0 && now.Sub(lastCheck) >= s.ld/6 {
			lastCheck = now
			if ok, _ := s.owned(); ok && s.balanced() {
				out.settled = now.Sub(start)
				break
			}
		}
		if now.Sub(start) > limit {
			_, why := s.owned()
			s.t.Fatalf("%s: not settled after %s of fake time (limit %s): %s", event, now.Sub(start), limit, why)
		}
		s.clk.Step(s.tick)
	}
	s.mu.Lock()
	out.changes, out.clusters = s.changes, len(s.changed)
	s.changed = nil
	s.mu.Unlock()
	out.writes = s.store.peerWrites.Load() + s.store.fenceWrites.Load() - w0
	return out
}

// steady moves time on for d and reports the Lease writes per second of fake time, and the
// CPU time this process spent per replica and second of fake time: what coordination costs
// each replica while nothing changes (renewals observed, reconciles run).
func (s *sim) steady(d time.Duration) (perSecond float64, fenceWrites int64, cpu time.Duration) {
	p0, f0 := s.store.peerWrites.Load(), s.store.fenceWrites.Load()
	c0 := processCPU()
	start := s.clk.Now()
	for s.clk.Since(start) < d {
		s.step()
	}
	s.settle()
	secs := s.clk.Since(start).Seconds()
	used := processCPU() - c0
	p, f := s.store.peerWrites.Load()-p0, s.store.fenceWrites.Load()-f0
	return float64(p+f) / secs, f, time.Duration(float64(used) / secs / float64(len(s.ids())))
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// counts is how many fences each live replica holds.
func (s *sim) counts() map[string]int {
	out := map[string]int{}
	for _, h := range s.store.holders() {
		out[h]++
	}
	return out
}

// simFleet is the fleet every replica loads: a Source whose clusters the simulation changes.
type simFleet struct {
	mu    sync.Mutex
	list  []string
	cfgs  []clusterset.ClusterConfig
	chans []chan struct{}
}

func newSimFleet(names []string) *simFleet {
	f := &simFleet{}
	f.set(names)
	return f
}

func (f *simFleet) set(names []string) {
	names = slices.Clone(names)
	sort.Strings(names)
	cfgs := make([]clusterset.ClusterConfig, len(names))
	for i, name := range names {
		cfgs[i] = clusterset.ClusterConfig{Name: name, Origin: "sim", Fingerprint: "1"}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.list, f.cfgs = names, cfgs
	for _, ch := range f.chans {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (f *simFleet) names() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.list
}

func (f *simFleet) Load() ([]clusterset.ClusterConfig, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cfgs, nil
}

func (f *simFleet) Changes(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{}, 1)
	f.mu.Lock()
	f.chans = append(f.chans, ch)
	f.mu.Unlock()
	return ch
}

// simScenario is issue 37's sequence at one width: start, steady state, a replica leaving, one
// dying, one joining, a cluster added and one removed, and a rolling restart of every replica.
type simScenario struct {
	clusters, replicas int
	ld                 time.Duration
	rolling            bool // also restart every replica in turn
}

type simResult struct {
	outcomes      []simOutcome
	steadyWrites  float64       // Lease writes per second, steady state
	steadyFences  int64         // fence writes in the steady window
	steadyCPU     time.Duration // CPU per replica per second of fake time, steady state
	rollingWrites float64       // Lease writes per second during the rolling restart
	maxOwned      int           // the most fences one replica held once settled after start
}

func replicaID(i int) string { return fmt.Sprintf("replica-%02d", i) }

func runSim(t testing.TB, sc simScenario) (*sim, simResult) {
	s := newSim(t, sc.clusters, sc.ld)
	var res simResult
	limit := 20 * sc.ld
	capOf := func(members int) int { return capacity(sc.clusters, 1, members) }

	res.outcomes = append(res.outcomes, s.measure(fmt.Sprintf("%d replicas start", sc.replicas), capOf(sc.replicas), limit, func() {
		// Replicas start a tick apart, as pods do, so that their renewals are spread over
		// the LeaseDuration rather than all due at one instant.
		for i := range sc.replicas {
			if i > 0 {
				s.step()
			}
			s.start(replicaID(i))
		}
	}))
	for _, n := range s.counts() {
		res.maxOwned = max(res.maxOwned, n)
	}
	res.steadyWrites, res.steadyFences, res.steadyCPU = s.steady(5 * sc.ld)

	counts := s.counts()
	leaving := replicaID(0)
	res.outcomes = append(res.outcomes, s.measure("a replica leaves", counts[leaving], limit, func() { s.stop(leaving) }))
	counts = s.counts()
	dying := replicaID(1)
	res.outcomes = append(res.outcomes, s.measure("a replica dies", counts[dying], limit, func() { s.crash(dying) }))
	res.outcomes = append(res.outcomes, s.measure("a replica joins", capOf(sc.replicas-1), limit, func() { s.start(replicaID(sc.replicas)) }))
	names := s.fleet.names()
	res.outcomes = append(res.outcomes, s.measure("a cluster is added", 1, limit, func() { s.fleet.set(append(slices.Clone(names), "zz-new-cluster")) }))
	names = s.fleet.names()
	res.outcomes = append(res.outcomes, s.measure("a cluster is removed", 1, limit, func() { s.fleet.set(names[1:]) }))

	if sc.rolling {
		w0 := s.store.peerWrites.Load() + s.store.fenceWrites.Load()
		start := s.clk.Now()
		var changes, clusters int
		for _, id := range s.ids() {
			o := s.measure("restart "+id, 0, limit, func() {
				s.stop(id)
				s.start(id)
			})
			changes += o.changes
			clusters += o.clusters
		}
		d := s.clk.Since(start)
		res.rollingWrites = float64(s.store.peerWrites.Load()+s.store.fenceWrites.Load()-w0) / d.Seconds()
		res.outcomes = append(res.outcomes, simOutcome{event: "rolling restart", settled: d, changes: changes, clusters: clusters,
			writes: s.store.peerWrites.Load() + s.store.fenceWrites.Load() - w0})
	}
	return s, res
}

// widthScenario is issue 37's simulation: 10,000 clusters over 30 replicas, the default
// LeaseDuration, every event, and a rolling restart of every replica.
var widthScenario = simScenario{clusters: 10000, replicas: 30, ld: 15 * time.Second, rolling: true}

// TestShardSimulationAtWidth runs 30 real Coordinators over 10,000 clusters on an in-process
// Lease store and a fake clock (sim): a staggered start, a steady state of 5 LeaseDurations, a
// replica leaving, one dying, one joining, a cluster added and one removed, and a rolling
// restart of all of them. It checks the invariants:
//   - no cluster ever runs on two replicas at once (checked at every start, not sampled);
//   - after every event each cluster runs on its fence's holder, and the fences reach the
//     assignment's fixed point, within 20 LeaseDurations;
//   - once the start settled, no replica holds more than its capacity, ⌈10,000/30⌉;
//   - a replica leaving or dying moves at most 1.2 × its own clusters, one joining at most
//     1.2 × its capacity; a cluster added or removed moves no other (S2.9);
//   - every fence is held by a live replica within a LeaseDuration of a replica leaving, and
//     within two of one dying;
//   - the steady state writes no fence and at most replicas × 3 / LeaseDuration Leases per
//     second (S2.10).
//
// BenchmarkShardSimulation reports the figures.
//
// Under the race detector, which multiplies its cost several times, it runs the same events at
// 1,000 clusters over 10 replicas: that run looks for races; `make test` runs the full width
// again without the detector.
func TestShardSimulationAtWidth(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates 10,000 clusters over 30 replicas")
	}
	sc := widthScenario
	if raceEnabled {
		sc.clusters, sc.replicas = 1000, 10
		t.Logf("race detector on: %d clusters over %d replicas (the full width runs without it)", sc.clusters, sc.replicas)
	}
	_, res := runSim(t, sc)
	for _, o := range res.outcomes {
		t.Log(o)
	}
	t.Logf("steady state: %.2f Lease writes/s (%d fence writes), %s CPU per replica per second; rolling restart: %.2f Lease writes/s",
		res.steadyWrites, res.steadyFences, res.steadyCPU, res.rollingWrites)
	checkSim(t, sc, res)
}

func checkSim(t testing.TB, sc simScenario, res simResult) {
	t.Helper()
	if c := capacity(sc.clusters, 1, sc.replicas); res.maxOwned > c {
		t.Errorf("a replica held %d clusters once settled, over its capacity %d", res.maxOwned, c)
	}
	if limit := float64(sc.replicas*3) / sc.ld.Seconds(); res.steadyWrites > limit || res.steadyFences != 0 {
		t.Errorf("steady state: %.2f Lease writes/s with %d fence writes, want at most %.2f and none", res.steadyWrites, res.steadyFences, limit)
	}
	for _, o := range res.outcomes {
		// A dead replica's fences are taken a lease duration after its last renewal was seen; a
		// leaving one hands them over at once.
		if bound := map[string]time.Duration{"a replica dies": 2 * sc.ld, "a replica leaves": sc.ld}[o.event]; bound > 0 && o.held > bound {
			t.Errorf("%s: every fence held by a live replica only after %s, want within %s", o.event, o.held, bound)
		}
		switch {
		case o.event == "rolling restart", strings.HasPrefix(o.event, "restart "), strings.HasSuffix(o.event, " start"):
		case o.share == 1 && o.clusters > 1:
			t.Errorf("%s: %d clusters changed holder, want only the one", o.event, o.clusters)
		case o.share > 1 && float64(o.clusters) > 1.2*float64(o.share):
			t.Errorf("%s: %d clusters moved, over 1.2 × its share of %d", o.event, o.clusters, o.share)
		}
	}
}

// BenchmarkShardSimulation reports the simulation's figures (fake time, so the machine's speed
// changes none but the CPU per replica):
//
//	go test -run '^$' -bench ShardSimulation -benchtime 1x -count 5 -timeout 3h ./pkg/shard/
func BenchmarkShardSimulation(b *testing.B) {
	sc := widthScenario
	for range b.N {
		_, res := runSim(b, sc)
		for _, o := range res.outcomes {
			b.Log(o)
			unit := strings.ReplaceAll(o.event, " ", "_")
			switch {
			case o.event == "rolling restart":
				b.ReportMetric(o.settled.Seconds(), "s:rolling_restart")
				b.ReportMetric(float64(o.clusters), "moved:rolling_restart")
			case strings.HasPrefix(o.event, "restart "):
			default:
				b.ReportMetric(o.settled.Seconds(), "s-settled:"+unit)
				if o.share > 0 {
					b.ReportMetric(float64(o.clusters)/float64(o.share), "moved/share:"+unit)
				}
			}
		}
		b.ReportMetric(res.steadyWrites, "writes/s:steady")
		b.ReportMetric(res.rollingWrites, "writes/s:rolling_restart")
		b.ReportMetric(float64(res.steadyCPU.Microseconds())/1000, "cpu-ms/replica-s:steady")
		checkSim(b, sc, res)
	}
}
