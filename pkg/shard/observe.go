package shard

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// observer records, for every peer Lease, when this replica last saw it change, by this
// replica's clock: the informer's event handlers feed it, so the time is that of delivery, not
// of the next reconcile. Liveness never compares clocks across replicas: a peer is live while
// now - seen < ttl.
type observer struct {
	clock clock.PassiveClock
	ttl   time.Duration
	self  string
	poke  func() // wakes the reconcile loop

	// fenceGen counts the events of Leases other than peer Leases (fences): a view of the
	// fences read from the informer's store after reading it holds at least those changes,
	// since the store is updated before the handlers run.
	fenceGen atomic.Uint64

	mu     sync.Mutex
	peers  map[string]*peerObs // by ID; self excluded
	selfRV string              // resourceVersion of our own peer Lease as last delivered
}

type peerObs struct {
	url     string
	weight  int
	leaving bool
	rv      string
	renew   time.Time
	seen    time.Time // last observed change (or first sight)
	since   time.Time // start of the current run of observed liveness
}

// peerView is one peer as a reconcile sees it.
type peerView struct {
	ID, URL string
	Weight  int
	Live    bool
	Leaving bool      // shutting down: still holds its fences, takes no new ones
	Since   time.Time // zero unless Live
	// Unproved: Options.Verify has not proved the peer at its URL, so it counts as not live;
	// renewing says whether its Lease is renewed all the same.
	Unproved bool
	renewing bool
	seen     time.Time
	rv       string
}

func newObserver(clk clock.PassiveClock, ttl time.Duration, self string, poke func()) *observer {
	return &observer{clock: clk, ttl: ttl, self: self, poke: poke, peers: map[string]*peerObs{}}
}

// handler is what the Lease informer calls. Every event wakes the reconcile loop but one: a
// live peer's renewal that changes nothing else (its URL, weight and leaving mark stay). A
// reconcile is O(fleet), and peers renew every LeaseDuration/3, so waking on each renewal
// would cost every replica peers×3 full passes per LeaseDuration; the loop runs at least every
// LeaseDuration/6 anyway, and a peer's expiry (seen + LeaseDuration) is then always farther
// than that.
func (o *observer) handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { o.saw(obj) },
		UpdateFunc: func(old, obj any) {
			if l, ok := old.(*coordv1.Lease); ok && leaseKind(l) != kindPeer {
				o.fenceGen.Add(1) // it was a fence: counted even if relabelled into something else
			}
			o.saw(obj)
		},
		DeleteFunc: func(obj any) { o.gone(obj) },
	}
}

func (o *observer) saw(obj any) {
	if !o.record(obj) {
		o.poke()
	}
}

// record notes a Lease as delivered now and reports whether it was only a live peer's
// renewal, which changes no reconcile's outcome.
func (o *observer) record(obj any) (renewalOnly bool) {
	l, ok := obj.(*coordv1.Lease)
	if !ok || leaseKind(l) != kindPeer {
		o.fenceGen.Add(1)
		return false
	}
	id := peerID(l)
	now := o.clock.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	if id == o.self {
		o.selfRV = l.ResourceVersion
		return false
	}
	var renew time.Time
	if l.Spec.RenewTime != nil {
		renew = l.Spec.RenewTime.Time
	}
	url, weight, leaving := l.Annotations[annoURL], peerWeight(l), l.Annotations[annoLeaving] == "true"
	p := o.peers[id]
	switch {
	case p == nil:
		// A Lease first seen counts as just observed.
		p = &peerObs{seen: now, since: now}
		o.peers[id] = p
	case p.rv != l.ResourceVersion || !p.renew.Equal(renew):
		renewalOnly = now.Sub(p.seen) < o.ttl && p.url == url && p.weight == weight && p.leaving == leaving
		if now.Sub(p.seen) >= o.ttl {
			p.since = now // it was dead in between: its live run starts again
		}
		p.seen = now
	}
	p.rv, p.renew = l.ResourceVersion, renew
	p.url, p.weight, p.leaving = url, weight, leaving
	return renewalOnly
}

func (o *observer) gone(obj any) {
	defer o.poke()
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	l, ok := obj.(*coordv1.Lease)
	if !ok || leaseKind(l) != kindPeer {
		o.fenceGen.Add(1)
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if id := peerID(l); id == o.self {
		o.selfRV = ""
	} else {
		delete(o.peers, id)
	}
}

// snapshot returns every other peer that has a Lease, by ID, as of now.
func (o *observer) snapshot(now time.Time) map[string]peerView {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make(map[string]peerView, len(o.peers))
	for id, p := range o.peers {
		v := peerView{ID: id, URL: p.url, Weight: p.weight, Live: now.Sub(p.seen) < o.ttl, Leaving: p.leaving, seen: p.seen, rv: p.rv}
		if v.Live {
			v.Since = p.since
		}
		out[id] = v
	}
	return out
}

// fenceGeneration counts the fence events delivered so far.
func (o *observer) fenceGeneration() uint64 { return o.fenceGen.Load() }

// ownRV is the resourceVersion of our own peer Lease as the informer last delivered it.
func (o *observer) ownRV() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.selfRV
}

// sortedIDs lists a snapshot's IDs in order.
func sortedIDs(peers map[string]peerView) []string {
	ids := make([]string, 0, len(peers))
	for id := range peers {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}
