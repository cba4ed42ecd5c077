package shard

import (
	"context"
	"errors"
	"slices"
	"sort"
	"time"

	"go.uber.org/zap"
	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	coordlisters "k8s.io/client-go/listers/coordination/v1"

	"github.com/multicache/multicache/pkg/clusterset"
)

// fastPoll is how often the loop looks again while something waits on Local (a handoff, a
// queued warm-up, a shutdown): Local has no events.
const fastPoll = 100 * time.Millisecond

// gcAfter is how long a peer Lease must have been dead, and hold no fence, before the live
// peer with the smallest ID deletes it (a crashed replica never deletes its own), in
// LeaseDurations.
const gcAfter = 5

// loopState is what Run's goroutine owns; nothing else reads or writes it.
type loopState struct {
	leases coordlisters.LeaseNamespaceLister

	fleet  map[string]clusterset.ClusterConfig // the inner source's clusters, completed when partial
	names  []string                            // fleet's names, sorted
	srcErr error                               // the inner Load's error, as Load returns it
	srcNew bool                                // the inner source was loaded since the last publish

	offered   map[string]bool         // as last published
	lastOffer map[string]uint64       // the last published version that offered the cluster
	handoff   map[string]string       // cluster → peer it is being handed to; not offered meanwhile
	orphan    map[string]orphanMark   // fences whose holder has no peer Lease, since when
	pending   map[string]pendingWrite // our fence writes the informer has not shown yet
	holders   map[string]string       // each fence's holder at the last reconcile, for logs
	first     bool                    // no reconcile has run yet
	wasLive   bool                    // selfLive at the last reconcile
	stopping  bool                    // Run's context ended: offer nothing, take nothing
	fleetGen  uint64                  // bumped by every loadSource
	view      *fenceView              // the fences as the last pass read them
	assigned  *assignment             // the last assignment computed, reused while its inputs hold
	scores    *scores                 // the last assignment's scores, reused while its sets hold
	arrived   map[string]arrival      // fences that came to us from another holder, from whom and when
	// handedIn: fences a peer handed to us, naming where the cluster's state waits, and when
	// we saw them come; kept while we hold them, at most clusterset.ShelfMaxAge. Such a cluster
	// warms in a slot of Options.MaxHandovers.
	handedIn map[string]time.Time
}

// arrival: a fence we hold came to us from the replica from, as this replica saw at `at` (by
// its own clock).
type arrival struct {
	from string
	at   time.Time
}

// handBack reports whether handing cluster's fence to `to` now would hand it back to the
// replica it came from within ld of its coming, and until when that holds. Such a handoff
// waits: while two replicas see different fleets or peers, each may take the other for the
// owner, and they would otherwise pass the fence back and forth as fast as they reconcile,
// running the cluster nowhere. Once they agree, or the window has passed, it moves.
func (st *loopState) handBack(cluster, to string, now time.Time, ld time.Duration) (until time.Time, back bool) {
	a, ok := st.arrived[cluster]
	if !ok || to == "" || to != a.from || now.Sub(a.at) >= ld {
		return time.Time{}, false
	}
	return a.at.Add(ld), true
}

// noteHolder keeps the records of a fence's arrival as a pass sees its holder h (self is this
// replica; from is the fence's multicache.io/handed-over-from): a fence held by another drops
// them; one that came to us since the last pass saw prev hold it is an arrival, and a handover
// too when it names where its state waits. The first pass sees no arrival: a replica that
// restarts finds its own fences.
func (st *loopState) noteHolder(cluster, h, from, self string, now time.Time) {
	if h != self {
		delete(st.handoff, cluster)
		delete(st.arrived, cluster)
		delete(st.handedIn, cluster)
		return
	}
	if prev := st.holders[cluster]; !st.first && prev != "" && prev != self {
		st.arrived[cluster] = arrival{from: prev, at: now}
		if from != "" {
			st.handedIn[cluster] = now
		}
	}
}

// handedOver reports whether cluster came to us by a handover less than
// clusterset.ShelfMaxAge ago: its state may still wait on the peer that handed it.
func (st *loopState) handedOver(cluster string, now time.Time) bool {
	at, ok := st.handedIn[cluster]
	return ok && now.Sub(at) < clusterset.ShelfMaxAge
}

// forgetArrivals drops the arrivals whose windows are over: the hand-back window (ld) and a
// handover's (clusterset.ShelfMaxAge, after which its state has expired wherever it waited).
func (st *loopState) forgetArrivals(now time.Time, ld time.Duration) {
	for name, a := range st.arrived {
		if now.Sub(a.at) >= ld {
			delete(st.arrived, name)
		}
	}
	for name, at := range st.handedIn {
		if now.Sub(at) >= clusterset.ShelfMaxAge {
			delete(st.handedIn, name)
		}
	}
}

// orphanMark: the fence's holder was first seen without a peer Lease at since.
type orphanMark struct {
	holder string
	since  time.Time
}

// pendingWrite: we wrote the fence at `at` over resourceVersion rv ("" for a create). Until the
// informer shows another version (or a LeaseDuration passes), the fence is left alone, so that
// a stale cache never makes us write twice.
type pendingWrite struct {
	rv string
	at time.Time
}

func newLoopState(leases coordlisters.LeaseNamespaceLister) *loopState {
	return &loopState{
		leases:    leases,
		fleet:     map[string]clusterset.ClusterConfig{},
		offered:   map[string]bool{},
		lastOffer: map[string]uint64{},
		handoff:   map[string]string{},
		arrived:   map[string]arrival{},
		handedIn:  map[string]time.Time{},
		orphan:    map[string]orphanMark{},
		pending:   map[string]pendingWrite{},
		holders:   map[string]string{},
		first:     true,
	}
}

// loadSource loads the inner source. A partial load (an error that is not a CompleteError) is
// completed with the clusters the source yielded before and misses now, as sources.Multi
// does, and its error becomes a CompleteError: the Registry must remove what we stop offering.
func (c *Coordinator) loadSource(st *loopState) {
	cfgs, err := c.opts.Source.Load()
	var complete *clusterset.CompleteError
	partial := err != nil && !errors.As(err, &complete)
	next := make(map[string]clusterset.ClusterConfig, len(cfgs))
	for _, cfg := range cfgs {
		if _, dup := next[cfg.Name]; !dup {
			next[cfg.Name] = cfg
		}
	}
	if partial {
		for name, cfg := range st.fleet {
			if _, ok := next[name]; !ok {
				next[name] = cfg
			}
		}
		err = &clusterset.CompleteError{Err: err}
	}
	if err != nil {
		c.log.Debug("cluster source", zap.Error(err)) // the Registry logs it from Load
	}
	st.fleet, st.names, st.srcErr, st.srcNew = next, sortedKeys(next), err, true
	st.fleetGen++
}

// fences maps each cluster to its fence Lease as the informer has it. Should two Leases claim
// one cluster, the one with the expected name wins.
func (st *loopState) fences() map[string]*coordv1.Lease {
	all, _ := st.leases.List(labels.Everything()) // a cache read: it cannot fail
	out := make(map[string]*coordv1.Lease, len(all))
	for _, l := range all {
		if leaseKind(l) != kindFence {
			continue
		}
		name := fenceCluster(l)
		if prev, ok := out[name]; ok && prev.Name == fenceLeaseName(name) {
			continue
		}
		out[name] = l
	}
	return out
}

// fenceView is what a pass derives from the fences alone (and the fleet): rebuilt only when a
// fence event has arrived or the fleet changed since, so that a pass while nothing moves reads
// no Lease. Never mutated once built: an assignment and the loop's records keep its maps.
type fenceView struct {
	gen, fleetGen uint64
	fences        map[string]*coordv1.Lease
	held          map[string]string // each held fence's holder, free ones left out (assign's input)
	holders       map[string]string // every fence's holder, "" for a free one
	holding       map[string]bool   // the replicas that hold a fence
	owned         int               // fences this replica holds
	outside       []string          // clusters outside the fleet that have a fence, sorted
}

// fenceView returns the view of the fences as of the observer's fence generation gen (read
// before the call: the informer's store holds at least the changes gen counts), reusing the
// last one while neither gen nor the fleet changed.
func (st *loopState) fenceView(gen uint64, self string) (v *fenceView, fresh bool) {
	if v := st.view; v != nil && v.gen == gen && v.fleetGen == st.fleetGen {
		return v, false
	}
	fences := st.fences()
	v = &fenceView{gen: gen, fleetGen: st.fleetGen, fences: fences, held: heldBy(fences),
		holders: make(map[string]string, len(fences)), holding: map[string]bool{}}
	for name, f := range fences {
		h := holderOf(f)
		v.holders[name] = h
		v.holding[h] = true
		if h == self {
			v.owned++
		}
		if _, ok := st.fleet[name]; !ok {
			v.outside = append(v.outside, name)
		}
	}
	slices.Sort(v.outside)
	st.view = v
	return v, true
}

type op int

const (
	opAcquire     op = iota // take a free fence for ourselves
	opHandoff               // give our fence to `to`
	opRelease               // delete our fence of a cluster that left the fleet
	opDeleteFence           // delete a free fence of a cluster that left the fleet
	opDeletePeer            // delete a long-dead peer's Lease
)

type action struct {
	op      op
	cluster string
	lease   *coordv1.Lease // as observed; nil when the fence does not exist
	to      string
	peer    peerView
}

// members are the peers ownership is spread over: the live ones that are not leaving, and this
// replica when it may own clusters. A leaving peer's fences still count as held (it is live),
// but nothing is handed to it, so that what it hands over on shutdown is not handed back.
func (c *Coordinator) members(peers map[string]peerView, withSelf bool) []member {
	out := make([]member, 0, len(peers)+1)
	for id, p := range peers {
		if p.Live && !p.Leaving {
			out = append(out, member{id: id, weight: p.Weight})
		}
	}
	if withSelf {
		out = append(out, member{id: c.opts.Identity, weight: c.opts.Weight})
	}
	return out
}

// stopped reports whether the Registry has let go of a cluster we hold: it is not offered, a
// Load has returned a set newer than the last one offering it (so no reload still applies an
// older set), and Local says it is not running. Without Local, dropping it is enough.
func (c *Coordinator) stopped(st *loopState, name string, local func(string) (bool, bool), loaded uint64) bool {
	if st.offered[name] {
		return false
	}
	if local == nil {
		return true
	}
	if v, ok := st.lastOffer[name]; ok && loaded <= v {
		return false
	}
	running, _ := local(name)
	return !running
}

// reconcile compares what the informer shows with what should be, publishes what Load offers
// and Owners says, and writes what this replica must write. It reports whether it waits on
// something without events (Local, warm-up), so that the loop looks again soon, and the next
// instant at which a judgement made here expires by itself (a peer's liveness, an orphan's
// grace, a hysteresis window, a pending write), zero if none.
func (c *Coordinator) reconcile(ctx context.Context, st *loopState) (busy bool, next time.Time) {
	d := c.decide(ctx, st)
	return c.apply(ctx, st, d), d.next
}

// decision is what one pass decided: the writes this replica must make, what to publish, and
// the figures it reports; busy and next as reconcile returns them.
type decision struct {
	acts    []action
	snap    snapshot
	offered map[string]bool
	holders map[string]string
	owned   int
	unowned int
	live    int
	busy    bool
	next    time.Time
}

// decide compares what the informer shows with what should be: who holds each fence and who
// should, what to offer the Registry, which writes to make. It keeps the loop's own records
// (handoffs under way, arrivals, orphans, pending writes) and logs what changed; it writes no
// Lease and publishes nothing.
func (c *Coordinator) decide(ctx context.Context, st *loopState) decision {
	var busy bool
	var next time.Time
	now := c.clock.Now()
	soon := func(t time.Time) {
		if t.After(now) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	self := c.opts.Identity
	selfLive := c.selfLive(now)
	active := selfLive && !st.stopping // may offer and take clusters
	peers := c.obs.snapshot(now)
	c.proof.apply(ctx, peers, now, soon)
	for _, p := range peers {
		if p.Live {
			soon(p.seen.Add(c.ld))
			soon(p.Since.Add(c.ld))
		}
	}
	members := c.members(peers, active)
	// Who should hold each cluster: one assignment over the whole fleet this replica sees, the
	// members and the fences' holders (sticky: a holder within its capacity keeps what it
	// holds), computed only when this replica may take or hand over clusters. Replicas that see
	// the same fleet, members and fences compute the same one.
	view, fresh := st.fenceView(c.obs.fenceGeneration(), self)
	fences := view.fences
	var own *assignment
	if active {
		own = st.assignmentFor(members, st.names, view.held)
	}
	local := c.localFunc()
	loaded := c.loadedVersion()

	if !st.first && !st.stopping && st.wasLive != selfLive {
		if selfLive {
			c.log.Info("peer lease renewed again: offering clusters again")
		} else {
			c.log.Warn("self-fencing: the peer lease was not renewed in time, offering no cluster until it is", zap.Duration("limit", c.fenceAfter()))
		}
	}
	st.wasLive = selfLive

	// held says whether a fence counts as held, and whether by a live peer. A holder without a
	// peer Lease, or whose renewed Lease is not proved (Options.Verify), keeps it for a
	// LeaseDuration from when we first saw that: a replica just started is proved within
	// moments, and a forged Lease holds nothing for longer.
	marks := map[string]orphanMark{}
	held := func(cluster, h string) (held, live bool) {
		if h == "" {
			return false, false
		}
		if h == self {
			return true, selfLive
		}
		if p, ok := peers[h]; ok && !(p.Unproved && p.renewing) {
			return p.Live, p.Live
		}
		m, ok := st.orphan[cluster]
		if !ok || m.holder != h {
			m = orphanMark{holder: h, since: now}
		}
		marks[cluster] = m
		soon(m.since.Add(c.ld))
		return now.Sub(m.since) < c.ld, false
	}
	blocked := func(cluster string, f *coordv1.Lease) bool {
		p, ok := st.pending[cluster]
		if ok && rvOf(f) == p.rv && now.Sub(p.at) < c.ld {
			soon(p.at.Add(c.ld))
			return true
		}
		delete(st.pending, cluster)
		return false
	}

	var acts []action
	var candidates []string
	handed := map[string]bool{} // candidates a peer handed over (st.handedIn)
	owners := make([]Owner, 0, len(st.names))
	unowned := 0
	for _, name := range st.names {
		f := fences[name]
		h := holderOf(f)
		isHeld, live := held(name, h)
		var from, fromID string
		if f != nil && h != "" {
			from, fromID = f.Annotations[annoHandedFrom], f.Annotations[annoHandedBy]
		}
		owners = append(owners, Owner{Cluster: name, Holder: h, URL: c.urlOf(h, peers), Live: live, Self: h == self, From: from, FromID: fromID})
		if !live {
			unowned++
		}
		st.noteHolder(name, h, from, self, now)
		switch {
		case h == self:
			if !active {
				continue // keep the fence, run nothing
			}
			to := c.handoffTarget(name, own, peers, now)
			if until, back := st.handBack(name, to, now, c.ld); back {
				soon(until)
				to = ""
			}
			if to == "" {
				if st.handoff[name] != "" {
					c.log.Info("handoff cancelled: the target is no longer the owner or no longer live", zap.String("cluster", name), zap.String("to", st.handoff[name]))
					delete(st.handoff, name)
				}
				candidates = append(candidates, name)
				if st.handedOver(name, now) {
					handed[name] = true
				}
				continue
			}
			if st.handoff[name] != to {
				c.log.Info("handing cluster over: stopping it here first", zap.String("cluster", name), zap.String("from", self), zap.String("to", to))
				st.handoff[name] = to
			}
			switch {
			case blocked(name, f):
			case c.stopped(st, name, local, loaded):
				acts = append(acts, action{op: opHandoff, cluster: name, lease: f, to: to})
			default:
				busy = true
			}
		case !isHeld:
			if active && !blocked(name, f) && own.owner(name) == self {
				acts = append(acts, action{op: opAcquire, cluster: name, lease: f})
			}
		}
	}

	st.forgetArrivals(now, c.ld)

	// Fences of clusters that left the fleet.
	lowest := lowestID(members)
	for _, name := range view.outside {
		f := fences[name]
		h := holderOf(f)
		isHeld, _ := held(name, h)
		switch {
		case blocked(name, f):
		case h == self && c.stopped(st, name, local, loaded):
			acts = append(acts, action{op: opRelease, cluster: name, lease: f})
		case h == self:
			busy = true
		case !isHeld && active && lowest == self:
			acts = append(acts, action{op: opDeleteFence, cluster: name, lease: f})
		}
	}
	st.orphan = marks
	for name, p := range st.pending {
		if rvOf(fences[name]) != p.rv || now.Sub(p.at) >= c.ld {
			delete(st.pending, name) // seen, or given up on
		}
	}

	// Long-dead peers' Leases, collected by one replica.
	if active && lowest == self {
		for _, id := range sortedIDs(peers) {
			p := peers[id]
			if !p.Live && now.Sub(p.seen) >= gcAfter*c.ld && !view.holding[id] {
				acts = append(acts, action{op: opDeletePeer, peer: p})
			}
		}
	}

	if fresh {
		c.logHolders(st, view.holders)
	}

	chosen, warming, queued := admit(candidates, st.offered, local, c.opts.MaxWarmups, handed, c.opts.MaxHandovers)
	if queued > 0 {
		busy = true
	}
	cfgs := make([]clusterset.ClusterConfig, 0, len(chosen))
	offered := make(map[string]bool, len(chosen))
	for _, name := range chosen {
		cfgs = append(cfgs, st.fleet[name])
		offered[name] = true
	}
	live := 0
	if selfLive {
		live++
	}
	for _, p := range peers {
		if p.Live {
			live++
		}
	}
	return decision{acts: acts, offered: offered, holders: view.holders, owned: view.owned, unowned: unowned, live: live, busy: busy, next: next,
		snap: snapshot{offered: cfgs, loadErr: st.srcErr, force: st.srcNew, live: selfLive, owners: owners, peers: c.peerList(peers, selfLive), warming: warming, queued: queued}}
}

// apply carries out d: it publishes what the Registry and the readers see (Load, Owners,
// Peers), reports the figures, and makes the writes, stopping them if this replica fences
// itself meanwhile. It reports whether the loop should look again soon.
func (c *Coordinator) apply(ctx context.Context, st *loopState, d decision) (busy bool) {
	v := c.publish(d.snap)
	st.srcNew, st.offered = false, d.offered
	for name := range d.offered {
		st.lastOffer[name] = v
	}
	for name := range st.lastOffer {
		if _, inFleet := st.fleet[name]; !inFleet && d.holders[name] != c.opts.Identity {
			delete(st.lastOffer, name)
		}
	}
	c.m.owned.Set(float64(d.owned))
	c.m.unowned.Set(float64(d.unowned))
	c.m.livePeers.Set(float64(d.live))
	c.m.warming.Set(float64(d.snap.warming))
	c.m.queued.Set(float64(d.snap.queued))
	st.first = false

	for _, a := range d.acts {
		if ctx.Err() != nil {
			break
		}
		if !c.selfLive(c.clock.Now()) && !st.stopping {
			return true // self-fenced meanwhile: look again soon
		}
		c.do(ctx, st, a)
	}
	return d.busy
}

// handoffTarget is the peer a cluster we hold should go to now: its owner in the assignment,
// if that is another peer we have seen live for at least a LeaseDuration; else "".
func (c *Coordinator) handoffTarget(cluster string, own *assignment, peers map[string]peerView, now time.Time) string {
	t := own.owner(cluster)
	if t == "" || t == c.opts.Identity {
		return ""
	}
	if p, ok := peers[t]; ok && p.Live && !p.Leaving && now.Sub(p.Since) >= c.ld {
		return t
	}
	return ""
}

// logHolders logs fence holder changes (Info when this replica is involved) and counts the
// fences that came to it.
func (c *Coordinator) logHolders(st *loopState, holders map[string]string) {
	self := c.opts.Identity
	var changed []string // sorted below: only what changed, not the whole fleet every pass
	for name, to := range holders {
		if from, known := st.holders[name]; from != to && (!st.first || known) {
			changed = append(changed, name)
		}
	}
	slices.Sort(changed)
	for _, name := range changed {
		to := holders[name]
		from := st.holders[name]
		log := c.log.Debug
		if from == self || to == self {
			log = c.log.Info
		}
		log("cluster owner changed", zap.String("cluster", name), zap.String("from", from), zap.String("to", to))
		if to == self {
			c.m.handoffIn.Inc()
		}
	}
	for name, from := range st.holders {
		if _, ok := holders[name]; !ok && from != "" {
			c.log.Debug("cluster owner changed: fence deleted", zap.String("cluster", name), zap.String("from", from), zap.String("to", ""))
		}
	}
	st.holders = holders
}

// admit chooses what Load offers among candidates (the clusters we may run, sorted): those
// offered already stay, and the others join in name order while a slot of their pool is free.
// A cluster a peer handed over (handed, per loopState.handedOver) warms in a pool of maxHanded
// slots, any other in one of max; a slot is an offered cluster that is warming (per local, not
// both running and synced). With maxHanded < 1 (or handed nil) every cluster takes a slot of
// max. Without local nothing warms. It returns the chosen names in order, how many of them
// are warming (those just chosen included) and how many wait for a slot, both pools together.
func admit(candidates []string, offered map[string]bool, local func(string) (bool, bool), max int, handed map[string]bool, maxHanded int) (next []string, warming, queued int) {
	pool := func(name string) int {
		if maxHanded >= 1 && handed[name] {
			return 1
		}
		return 0
	}
	size := [2]int{max, maxHanded}
	var busy [2]int
	if local != nil {
		for _, name := range candidates {
			if offered[name] {
				if running, synced := local(name); !running || !synced {
					busy[pool(name)]++
				}
			}
		}
	}
	for _, name := range candidates {
		p := pool(name)
		switch {
		case offered[name]:
			next = append(next, name)
		case local == nil:
			next = append(next, name)
		case busy[p] < size[p]:
			next = append(next, name)
			busy[p]++
		default:
			queued++
		}
	}
	return next, busy[0] + busy[1], queued
}

func lowestID(ms []member) string {
	lowest := ""
	for _, m := range ms {
		if lowest == "" || m.id < lowest {
			lowest = m.id
		}
	}
	return lowest
}

// urlOf is a holder's advertise URL, "" when unknown.
func (c *Coordinator) urlOf(holder string, peers map[string]peerView) string {
	if holder == c.opts.Identity {
		return c.opts.AdvertiseURL
	}
	return peers[holder].URL
}

// peerList is what Peers returns: the observed peers and this replica, sorted by ID.
func (c *Coordinator) peerList(peers map[string]peerView, selfLive bool) []Peer {
	out := make([]Peer, 0, len(peers)+1)
	for _, p := range peers {
		out = append(out, Peer{ID: p.ID, URL: p.URL, Weight: p.Weight, Live: p.Live, Leaving: p.Leaving, Since: p.Since, Unproved: p.Unproved})
	}
	me := Peer{ID: c.opts.Identity, URL: c.opts.AdvertiseURL, Weight: c.opts.Weight, Live: selfLive, Self: true}
	if selfLive {
		c.renewMu.Lock()
		me.Since = c.selfSince
		c.renewMu.Unlock()
	}
	out = append(out, me)
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// do performs one write. Every write carries the observed resourceVersion: a conflict means
// another replica got there first, and the next reconcile sees what it did.
func (c *Coordinator) do(ctx context.Context, st *loopState, a action) {
	ctx, cancel := context.WithTimeout(ctx, c.ld)
	defer cancel()
	leases := c.opts.Client.CoordinationV1().Leases(c.opts.Namespace)
	self := c.opts.Identity
	now := c.clock.Now()
	lost := func(err error) bool {
		return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err)
	}
	switch a.op {
	case opAcquire:
		c.m.fenceWrites.Inc()
		var err error
		if a.lease == nil {
			_, err = leases.Create(ctx, c.newFence(a.cluster, now), metav1.CreateOptions{})
		} else {
			_, err = leases.Update(ctx, c.withHolder(a.lease, a.cluster, self, now), metav1.UpdateOptions{})
		}
		switch {
		case err == nil:
			st.pending[a.cluster] = pendingWrite{rv: rvOf(a.lease), at: now}
			c.log.Debug("took fence", zap.String("cluster", a.cluster), zap.String("from", holderOf(a.lease)), zap.String("to", self))
		case lost(err):
			c.log.Debug("fence changed meanwhile: another replica won", zap.String("cluster", a.cluster), zap.Error(err))
		default:
			c.log.Warn("taking fence", zap.String("cluster", a.cluster), zap.Error(err))
		}
	case opHandoff:
		c.m.fenceWrites.Inc()
		_, err := leases.Update(ctx, c.withHolder(a.lease, a.cluster, a.to, now), metav1.UpdateOptions{})
		switch {
		case err == nil:
			st.pending[a.cluster] = pendingWrite{rv: rvOf(a.lease), at: now}
			c.m.handoffOut.Inc()
			c.log.Debug("handed fence over", zap.String("cluster", a.cluster), zap.String("from", self), zap.String("to", a.to))
		case lost(err):
			c.log.Info("fence changed before the handoff: looking again", zap.String("cluster", a.cluster), zap.Error(err))
		default:
			c.log.Warn("handing fence over", zap.String("cluster", a.cluster), zap.String("to", a.to), zap.Error(err))
		}
	case opRelease, opDeleteFence:
		c.m.fenceWrites.Inc()
		rv := a.lease.ResourceVersion
		err := leases.Delete(ctx, a.lease.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
		switch {
		case err == nil:
			st.pending[a.cluster] = pendingWrite{rv: rv, at: now}
			if a.op == opRelease {
				c.m.handoffOut.Inc()
			}
			c.log.Info("deleted the fence of a cluster that left the fleet", zap.String("cluster", a.cluster), zap.String("from", holderOf(a.lease)), zap.String("to", ""))
		case lost(err):
		default:
			c.log.Warn("deleting the fence of a cluster that left the fleet", zap.String("cluster", a.cluster), zap.Error(err))
		}
	case opDeletePeer:
		c.m.peerWrites.Inc()
		rv := a.peer.rv
		err := leases.Delete(ctx, peerLeaseName(a.peer.ID), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
		switch {
		case err == nil:
			c.log.Info("deleted the peer lease of a long-dead replica", zap.String("peer", a.peer.ID), zap.Time("lastSeen", a.peer.seen))
		case lost(err):
		default:
			c.log.Warn("deleting a dead replica's peer lease", zap.String("peer", a.peer.ID), zap.Error(err))
		}
	}
}

// newFence is a fence Lease for cluster held by this replica.
func (c *Coordinator) newFence(cluster string, now time.Time) *coordv1.Lease {
	self := c.opts.Identity
	t := metav1.NewMicroTime(now)
	return &coordv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:        fenceLeaseName(cluster),
			Namespace:   c.opts.Namespace,
			Labels:      map[string]string{labelLease: kindFence},
			Annotations: map[string]string{annoCluster: cluster},
		},
		Spec: coordv1.LeaseSpec{HolderIdentity: &self, AcquireTime: &t, LeaseTransitions: new(int32)},
	}
}

// withHolder is a copy of fence l held by `to` ("" clears the holder), its transitions counted.
func (c *Coordinator) withHolder(l *coordv1.Lease, cluster, to string, now time.Time) *coordv1.Lease {
	n := l.DeepCopy()
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Labels[labelLease] = kindFence
	n.Annotations[annoCluster] = cluster
	if holderOf(l) != to {
		var tr int32
		if l.Spec.LeaseTransitions != nil {
			tr = *l.Spec.LeaseTransitions
		}
		tr++
		n.Spec.LeaseTransitions = &tr
	}
	if to == "" {
		n.Spec.HolderIdentity = nil
	} else {
		n.Spec.HolderIdentity = &to
	}
	// A fence this replica hands to another names where the cluster's state waits, when one
	// may (SetKept); any other write (a take) clears that.
	if holderOf(l) == c.opts.Identity && to != "" && to != c.opts.Identity && c.opts.AdvertiseURL != "" && c.mayHandState(cluster) {
		n.Annotations[annoHandedFrom] = c.opts.AdvertiseURL
		n.Annotations[annoHandedBy] = c.opts.Identity
	} else {
		delete(n.Annotations, annoHandedFrom)
		delete(n.Annotations, annoHandedBy)
	}
	t := metav1.NewMicroTime(now)
	n.Spec.AcquireTime = &t
	return n
}
