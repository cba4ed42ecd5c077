package aggregate

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Handler receives the fleet's events for one resource, with the cluster they happened in. It
// is cache.ResourceEventHandler with a cluster argument. Calls for one handler are sequential.
type Handler interface {
	OnAdd(cluster string, obj any, isInInitialList bool)
	OnUpdate(cluster string, oldObj, newObj any)
	// OnDelete's obj may be a cache.DeletedFinalStateUnknown, as in client-go.
	OnDelete(cluster string, obj any)
}

// HandoffHandler is a Handler that takes a cluster's move to another replica as one event.
// When a cluster is handed off (Membership.Handoff), a handler that implements it, added with
// HandlerOptions.EveryEvent, gets
// OnHandoff(cluster) in place of a delete for each object it was told of: the objects were not
// deleted, another replica serves them now. Its events of the cluster before the handoff are
// delivered first; if the cluster joins again later, it gets adds as for any joining cluster.
// Handlers that do not implement it get the deletes, so that what they were told stays equal
// to what the Aggregate holds.
type HandoffHandler interface {
	Handler
	OnHandoff(cluster string)
}

// ListHandler is a Handler told, in order with its events, when it holds a whole list of a
// cluster (OnListed: every event of the initial list of the cluster's member, or of a member
// that replaced it, came before) and when the cluster left (OnLeft: its deletes, or its
// handoff, came before). A cluster it holds a whole list of is HasListOf's.
type ListHandler interface {
	Handler
	OnListed(cluster string)
	OnLeft(cluster string)
}

// HandlerFuncs adapts functions to Handler; nil functions are skipped.
type HandlerFuncs struct {
	AddFunc    func(cluster string, obj any, isInInitialList bool)
	UpdateFunc func(cluster string, oldObj, newObj any)
	DeleteFunc func(cluster string, obj any)
}

// OnAdd calls AddFunc if it is set.
func (h HandlerFuncs) OnAdd(c string, obj any, initial bool) {
	if h.AddFunc != nil {
		h.AddFunc(c, obj, initial)
	}
}

// OnUpdate calls UpdateFunc if it is set.
func (h HandlerFuncs) OnUpdate(c string, oldObj, newObj any) {
	if h.UpdateFunc != nil {
		h.UpdateFunc(c, oldObj, newObj)
	}
}

// OnDelete calls DeleteFunc if it is set.
func (h HandlerFuncs) OnDelete(c string, obj any) {
	if h.DeleteFunc != nil {
		h.DeleteFunc(c, obj)
	}
}

// Registration is a handler added with AddEventHandler.
type Registration struct {
	agg  *Aggregate
	h    Handler
	q    backlog
	opts HandlerOptions
	done chan struct{} // closed once the handler goroutine has ended
	stop chan struct{} // closed by Remove

	mu     sync.Mutex
	synced map[string]*member // per cluster, the member whose initial list this handler has had

	lag       atomic.Int64 // nanoseconds the last delivered object waited in the queue
	panics    atomic.Int64
	delivered atomic.Int64
	overflows atomic.Int64
	removed   atomic.Bool
}

// DefaultMaxPending bounds an EveryEvent handler's backlog when HandlerOptions.MaxPending is 0.
const DefaultMaxPending = 100000

// HandlerOptions tune one handler's delivery.
type HandlerOptions struct {
	// EveryEvent delivers every event. By default the events an object accumulates while
	// the handler is behind are merged (an add then a delete says nothing; updates fold into
	// one), so that a slow handler's backlog is bounded by distinct objects, as a workqueue's
	// is. A consumer that relays a change stream, as the server's watch does, needs every
	// event, in each cluster's arrival order; its backlog is then bounded by MaxPending.
	EveryEvent bool
	// MaxPending bounds an EveryEvent handler's backlog, in events. Default DefaultMaxPending.
	// When a new event would exceed it, every pending object event is dropped and OnOverflow
	// runs on the handler's goroutine before any later event: the handler has lost changes and
	// must rebuild from the Aggregate's stores (the server's watch hub ends its watches with
	// 410 Expired, so that their clients relist). Memory stays bounded whatever the handler does.
	MaxPending int
	// OnOverflow, for EveryEvent handlers; see MaxPending. Overflows are counted either way.
	OnOverflow func()
	// ResyncPeriod, when set, replays every object the handler was told of as an update
	// (OnUpdate with the same object as old and new) once per period, as client-go's
	// AddEventHandlerWithResyncPeriod does: one cluster at a time, the clusters spread evenly
	// over the period, never one burst of the whole fleet. Minimum one second; not with
	// EveryEvent.
	ResyncPeriod time.Duration
	// Cluster, when set, binds the handler to that cluster's members only: it is told of that
	// cluster's objects and no other's, as an informer of that one cluster would tell it, and
	// HasSynced waits for that cluster alone. The other clusters' events never reach its
	// queue.
	Cluster string
}

// accepts reports whether r is told of cluster's objects.
func (r *Registration) accepts(cluster string) bool {
	return r.opts.Cluster == "" || r.opts.Cluster == cluster
}

// AddEventHandler adds h with default options. It first receives every object already held,
// as adds with isInInitialList true, then live events. Its calls run on its own goroutine
// until Remove.
func (a *Aggregate) AddEventHandler(h Handler) (*Registration, error) {
	return a.AddEventHandlerWithOptions(h, HandlerOptions{})
}

// AddEventHandlerWithOptions is AddEventHandler with opts. It fails only on bad arguments; once
// it returns a Registration, h is bound to every member, present and future.
func (a *Aggregate) AddEventHandlerWithOptions(h Handler, opts HandlerOptions) (*Registration, error) {
	if h == nil {
		return nil, fmt.Errorf("aggregate %s: nil handler", a.resource)
	}
	if opts.MaxPending < 0 {
		return nil, fmt.Errorf("aggregate %s: HandlerOptions.MaxPending %d: must not be negative", a.resource, opts.MaxPending)
	}
	if !opts.EveryEvent && (opts.MaxPending != 0 || opts.OnOverflow != nil) {
		return nil, fmt.Errorf("aggregate %s: HandlerOptions.MaxPending and OnOverflow apply to EveryEvent handlers only", a.resource)
	}
	if opts.ResyncPeriod != 0 && opts.EveryEvent {
		return nil, fmt.Errorf("aggregate %s: HandlerOptions.ResyncPeriod does not apply to EveryEvent handlers: they relay changes, and a resync is none", a.resource)
	}
	if opts.ResyncPeriod != 0 && opts.ResyncPeriod < time.Second {
		return nil, fmt.Errorf("aggregate %s: HandlerOptions.ResyncPeriod %s: below the minimum of 1s", a.resource, opts.ResyncPeriod)
	}
	mq := newMergedQueue()
	_, mq.byKey = h.(keyReader)
	var q backlog = mq
	if opts.EveryEvent {
		if opts.MaxPending == 0 {
			opts.MaxPending = DefaultMaxPending
		}
		q = newFIFOQueue(opts.MaxPending)
	}
	r := &Registration{agg: a, h: h, q: q, opts: opts, done: make(chan struct{}), stop: make(chan struct{}), synced: map[string]*member{}}
	a.mu.Lock()
	a.regs = append(a.regs, r)
	members := a.memberList()
	a.mu.Unlock()
	// Each member tells r what it has told every other handler, then every change.
	for _, m := range members {
		if r.accepts(m.cluster) {
			m.bind(r)
		}
	}
	go r.run()
	if opts.ResyncPeriod > 0 {
		go r.resync(opts.ResyncPeriod)
	}
	return r, nil
}

// resync replays, every period, each member's objects to r, one cluster at a time, the
// clusters spread evenly over the period. It holds cluster names, not members, so that a
// cluster that leaves meanwhile is not kept in memory.
func (r *Registration) resync(period time.Duration) {
	for {
		clusters := slices.DeleteFunc(r.agg.Clusters(), func(c string) bool { return !r.accepts(c) })
		n := max(1, len(clusters))
		for i := range n {
			select {
			case <-r.stop:
				return
			case <-time.After(period / time.Duration(n)):
			}
			if i < len(clusters) {
				if m := r.agg.member(clusters[i]); m != nil {
					m.replay(r)
				}
			}
		}
	}
}

func (r *Registration) run() {
	defer close(r.done)
	for {
		cluster, evs, since, ok := r.q.pop()
		if !ok {
			return
		}
		r.lag.Store(int64(time.Since(since)))
		for _, ev := range evs {
			switch ev.kind {
			case evSynced:
				r.mu.Lock()
				r.synced[cluster] = ev.obj.(*member)
				r.mu.Unlock()
				if h, ok := r.h.(ListHandler); ok {
					r.call(cluster, func() { h.OnListed(cluster) })
				}
			case evHandoff:
				if h, ok := r.h.(HandoffHandler); ok {
					r.delivered.Add(1)
					r.call(cluster, func() { h.OnHandoff(cluster) })
				}
			case evLeft:
				r.mu.Lock()
				delete(r.synced, cluster)
				r.mu.Unlock()
				r.q.forget(cluster)
				if h, ok := r.h.(ListHandler); ok {
					r.call(cluster, func() { h.OnLeft(cluster) })
				}
			case evOverflow:
				r.overflows.Add(1)
				r.agg.log.Error("handler backlog overflowed: pending events dropped", zap.Int("maxPending", r.opts.MaxPending))
				if r.opts.OnOverflow != nil {
					r.call(cluster, r.opts.OnOverflow)
				}
			default:
				r.deliver(cluster, ev)
			}
		}
	}
}

// call runs f, recovering and counting a panic so that the others go on.
func (r *Registration) call(cluster string, f func()) {
	defer func() {
		if p := recover(); p != nil {
			r.panics.Add(1)
			r.agg.log.Error("handler panicked", zap.String("cluster", cluster), zap.Any("panic", p))
		}
	}()
	f()
}

// handsOff reports whether the handler takes a handoff as one OnHandoff: a HandoffHandler
// added with EveryEvent. A merged queue could fold a rejoined member's add into an entry
// queued before the handoff marker, so other handlers are told deletes.
func (r *Registration) handsOff() bool {
	_, ok := r.h.(HandoffHandler)
	return ok && r.opts.EveryEvent
}

// deliver calls the handler for one event.
func (r *Registration) deliver(cluster string, ev event) {
	r.delivered.Add(1)
	r.call(cluster, func() {
		switch ev.kind {
		case evAdd:
			r.h.OnAdd(cluster, ev.obj, ev.initial)
		case evUpdate:
			r.h.OnUpdate(cluster, ev.old, ev.obj)
		case evDelete:
			r.h.OnDelete(cluster, ev.obj)
		}
	})
}

// HasSynced is true once this handler has had the initial list of every member whose informer
// has synced (and at least one has); for a replaced member, its differences. Like client-go's,
// it never turns false again for a member that stays.
func (r *Registration) HasSynced() bool {
	members := r.agg.snapshot()
	r.mu.Lock()
	defer r.mu.Unlock()
	some := false
	for _, m := range members {
		if !r.accepts(m.cluster) {
			continue
		}
		if m.synced.Load() {
			if r.synced[m.cluster] != m {
				return false
			}
			some = true
		}
	}
	return some
}

// HasSyncedCluster reports whether this handler has had the initial list of cluster's current
// member (for a replaced member, its differences), whose informer has synced: whatever the
// handler keeps of the cluster is then complete. It is false for a cluster that is not a
// member.
func (r *Registration) HasSyncedCluster(cluster string) bool {
	m := r.agg.member(cluster)
	if m == nil || !m.synced.Load() {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.synced[cluster] == m
}

// HasListOf reports whether this handler holds a whole list of cluster: it has had the
// initial list of the cluster's current member, or, while a restarted member syncs (queries
// then still read the replaced store), of the member it replaces. False once the cluster left.
func (r *Registration) HasListOf(cluster string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.synced[cluster] != nil
}

// Pending is the number of events queued for this handler and not yet delivered. By default
// it is bounded by the distinct objects with pending changes (at most two events each); for
// an EveryEvent handler, by MaxPending.
func (r *Registration) Pending() int { return r.q.len() }

// Lag is how long the most recently delivered object's events waited in this handler's queue.
func (r *Registration) Lag() time.Duration { return time.Duration(r.lag.Load()) }

// Panics counts handler calls that panicked.
func (r *Registration) Panics() int64 { return r.panics.Load() }

// Delivered counts handler calls made.
func (r *Registration) Delivered() int64 { return r.delivered.Load() }

// Overflows counts the times an EveryEvent handler's backlog hit MaxPending.
func (r *Registration) Overflows() int64 { return r.overflows.Load() }

// Remove stops deliveries and drops pending events. A call in flight may still be running when
// Remove returns; Done is closed once it has returned. Remove may be called from the handler.
func (r *Registration) Remove() {
	if !r.removed.CompareAndSwap(false, true) {
		return
	}
	a := r.agg
	a.mu.Lock()
	a.regs = slices.DeleteFunc(slices.Clone(a.regs), func(x *Registration) bool { return x == r })
	members := a.memberList()
	a.mu.Unlock()
	for _, m := range members {
		m.unbind(r)
	}
	close(r.stop)
	r.q.close()
}

// Done is closed once the handler has been removed and its last call has returned.
func (r *Registration) Done() <-chan struct{} { return r.done }
