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

// HandlerFuncs adapts functions to Handler; nil functions are skipped.
type HandlerFuncs struct {
	AddFunc    func(cluster string, obj any, isInInitialList bool)
	UpdateFunc func(cluster string, oldObj, newObj any)
	DeleteFunc func(cluster string, obj any)
}

func (h HandlerFuncs) OnAdd(c string, obj any, initial bool) {
	if h.AddFunc != nil {
		h.AddFunc(c, obj, initial)
	}
}

func (h HandlerFuncs) OnUpdate(c string, oldObj, newObj any) {
	if h.UpdateFunc != nil {
		h.UpdateFunc(c, oldObj, newObj)
	}
}

func (h HandlerFuncs) OnDelete(c string, obj any) {
	if h.DeleteFunc != nil {
		h.DeleteFunc(c, obj)
	}
}

// Registration is a handler added with AddEventHandler.
type Registration struct {
	agg  *Aggregate
	h    Handler
	q    *queue
	done chan struct{}

	mu     sync.Mutex
	synced map[string]bool // clusters whose initial list this handler has had

	lag       atomic.Int64 // nanoseconds the last delivered object waited in the queue
	panics    atomic.Int64
	delivered atomic.Int64
	removed   atomic.Bool
}

// HandlerOptions tune one handler's delivery.
type HandlerOptions struct {
	// EveryEvent delivers every event. By default the events an object accumulates while
	// the handler is behind are merged (an add then a delete says nothing; updates fold into
	// one), so that a slow handler's backlog is bounded by distinct objects, as a workqueue's
	// is. A consumer that relays a change stream, as the server's watch does, needs every
	// event; its backlog is then bounded by events, as a client-go listener's is.
	EveryEvent bool
}

// AddEventHandler adds h with default options. It first receives every object already held,
// as adds with isInInitialList true, then live events. Its calls run on its own goroutine
// until Remove.
func (a *Aggregate) AddEventHandler(h Handler) (*Registration, error) {
	return a.AddEventHandlerWithOptions(h, HandlerOptions{})
}

// AddEventHandlerWithOptions is AddEventHandler with opts.
func (a *Aggregate) AddEventHandlerWithOptions(h Handler, opts HandlerOptions) (*Registration, error) {
	if h == nil {
		return nil, fmt.Errorf("aggregate %s: nil handler", a.resource)
	}
	q := newQueue()
	q.everyEvent = opts.EveryEvent
	r := &Registration{agg: a, h: h, q: q, done: make(chan struct{}), synced: map[string]bool{}}
	a.mu.Lock()
	a.regs = append(a.regs, r)
	members := a.memberList()
	a.mu.Unlock()
	// client-go hands each binding the informer's current objects as initial adds, then every
	// change, with no overlap between the two.
	for _, m := range members {
		m.mu.Lock()
		if !m.gone && m.bindings[r] == nil {
			if err := m.bindLocked(r, nil); err != nil {
				m.mu.Unlock()
				return nil, fmt.Errorf("aggregate %s: cluster %q: %w", a.resource, m.cluster, err)
			}
		}
		m.mu.Unlock()
	}
	go r.run()
	return r, nil
}

func (r *Registration) run() {
	defer close(r.done)
	for {
		cluster, _, evs, since, ok := r.q.pop()
		if !ok {
			return
		}
		r.lag.Store(int64(time.Since(since)))
		for _, ev := range evs {
			if ev.kind == evSynced {
				r.mu.Lock()
				r.synced[cluster] = true
				r.mu.Unlock()
				continue
			}
			r.deliver(cluster, ev)
		}
	}
}

// deliver calls the handler, recovering and counting a panic so that the others go on.
func (r *Registration) deliver(cluster string, ev event) {
	defer func() {
		if p := recover(); p != nil {
			r.panics.Add(1)
			r.agg.log.Error("handler panicked", zap.String("cluster", cluster), zap.Any("panic", p))
		}
	}()
	r.delivered.Add(1)
	switch ev.kind {
	case evAdd:
		r.h.OnAdd(cluster, ev.obj, ev.initial)
	case evUpdate:
		r.h.OnUpdate(cluster, ev.old, ev.obj)
	case evDelete:
		r.h.OnDelete(cluster, ev.obj)
	}
}

func (r *Registration) leave(cluster string) {
	r.mu.Lock()
	delete(r.synced, cluster)
	r.mu.Unlock()
}

// HasSynced is true once this handler has had the initial list of every member whose informer
// has synced (and at least one has). Like client-go's, it never turns false again for a member
// that stays.
func (r *Registration) HasSynced() bool {
	members := r.agg.snapshot()
	r.mu.Lock()
	defer r.mu.Unlock()
	some := false
	for _, m := range members {
		if m.synced.Load() {
			if !r.synced[m.cluster] {
				return false
			}
			some = true
		}
	}
	return some
}

// Pending is the number of events queued for this handler and not yet delivered. It is bounded
// by the number of distinct objects with pending changes (twice that at most).
func (r *Registration) Pending() int { return r.q.len() }

// Lag is how long the most recently delivered object's events waited in this handler's queue.
func (r *Registration) Lag() time.Duration { return time.Duration(r.lag.Load()) }

// Panics counts handler calls that panicked.
func (r *Registration) Panics() int64 { return r.panics.Load() }

// Delivered counts handler calls made.
func (r *Registration) Delivered() int64 { return r.delivered.Load() }

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
		m.mu.Lock()
		b := m.bindings[r]
		delete(m.bindings, r)
		m.mu.Unlock()
		if b != nil {
			b.close()
		}
	}
	r.q.close()
}

// Done is closed once the handler has been removed and its last call has returned.
func (r *Registration) Done() <-chan struct{} { return r.done }
