package aggregate

import (
	"strconv"
	"sync"
	"time"
)

type eventKind uint8

const (
	evAdd eventKind = iota
	evUpdate
	evDelete
	// Markers: no object.
	evSynced   // every event of the cluster's initial list is before it
	evLeft     // the cluster left; its deletes are before it
	evHandoff  // the cluster moved to another replica: HandoffHandlers are told instead of deletes
	evOverflow // an every-event backlog hit its bound and its pending events were dropped
)

func (k eventKind) marker() bool { return k >= evSynced }

type event struct {
	at      time.Time // when its member pushed it; zero for markers (stamped at push)
	kind    eventKind
	old     any
	obj     any
	initial bool
}

// backlog is a handler's queue of pending events: fair across clusters (round robin) and FIFO
// within a cluster. pop blocks until an event is pending or the backlog is closed.
type backlog interface {
	push(cluster, key string, ev event)
	pop() (cluster string, evs []event, since time.Time, ok bool)
	// forget drops the per-cluster state of cluster if nothing of it is pending.
	forget(cluster string)
	len() int
	close()
}

// entry holds the pending events of one object, oldest first. Merging keeps it at one event,
// or two when an object was deleted and then re-created before the handler caught up.
type entry struct {
	evs   []event
	since time.Time // when the oldest pending event arrived
}

// merge folds ev into the pending events; it reports false when nothing is left pending.
// byKey: the handler reads objects by key from the store (QueueKeys), which runs ahead of
// the handlers, so it may have seen an object it was never told of.
func (e *entry) merge(ev event, byKey bool) bool {
	last := &e.evs[len(e.evs)-1]
	switch {
	case last.kind == evAdd && ev.kind == evUpdate:
		last.obj = ev.obj // still an add: the handler never saw the object
	case last.kind == evAdd && ev.kind == evDelete && byKey && len(e.evs) == 1:
		// The handler was never told of the object, but its worker may have read it from
		// the store: its key is told gone, or the worker keeps what it read for ever.
		*last = ev
	case last.kind == evAdd && ev.kind == evDelete:
		e.evs = e.evs[:len(e.evs)-1] // the handler never saw it: nothing to say
	case last.kind == evUpdate && ev.kind == evUpdate:
		last.obj = ev.obj // keep the oldest old, the newest new
	case last.kind == evUpdate && ev.kind == evDelete:
		*last = ev
	case last.kind == evDelete && ev.kind == evDelete:
		*last = ev
	default: // a delete followed by a re-create (or an update of it)
		e.evs = append(e.evs, ev)
	}
	return len(e.evs) > 0
}

// mergedCluster is one cluster's pending objects in order of first arrival. order may hold
// keys whose entry was merged away; they are skipped.
type mergedCluster struct {
	order []string
	head  int
	items map[string]*entry
}

// mergedQueue coalesces per object: its size is bounded by the number of distinct objects
// with pending events (each at most two events), plus markers.
type mergedQueue struct {
	mu       sync.Mutex
	cond     *sync.Cond
	clusters map[string]*mergedCluster
	ring     []string // clusters with pending work, in service order
	depth    int      // pending object events (markers are not counted)
	closed   bool
	markers  uint64 // makes marker keys unique: markers never merge
	// byKey: the handler reads objects by key (entry.merge).
	byKey bool
}

func newMergedQueue() *mergedQueue {
	q := &mergedQueue{clusters: map[string]*mergedCluster{}}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func (q *mergedQueue) push(cluster, key string, ev event) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	cq := q.clusters[cluster]
	if cq == nil {
		cq = &mergedCluster{items: map[string]*entry{}}
		q.clusters[cluster] = cq
	}
	if len(cq.items) == 0 {
		q.ring = append(q.ring, cluster)
	}
	if ev.kind.marker() {
		// Object keys are never empty and never start with NUL.
		q.markers++
		key = "\x00" + strconv.FormatUint(q.markers, 10)
	} else if e, ok := cq.items[key]; ok {
		before := len(e.evs)
		if !e.merge(ev, q.byKey) {
			delete(cq.items, key)
			q.dropIfIdle(cluster, cq)
		}
		q.depth += len(e.evs) - before
		return
	}
	cq.items[key] = &entry{evs: []event{ev}, since: time.Now()}
	cq.order = append(cq.order, key)
	if !ev.kind.marker() {
		q.depth++
	}
	q.cond.Signal()
}

func (q *mergedQueue) dropIfIdle(cluster string, cq *mergedCluster) {
	if len(cq.items) > 0 {
		return
	}
	cq.order, cq.head = cq.order[:0], 0
	for i, c := range q.ring {
		if c == cluster {
			q.ring = append(q.ring[:i], q.ring[i+1:]...)
			break
		}
	}
}

func (q *mergedQueue) pop() (cluster string, evs []event, since time.Time, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.ring) == 0 && !q.closed {
		q.cond.Wait()
	}
	if q.closed {
		return "", nil, time.Time{}, false
	}
	cluster = q.ring[0]
	cq := q.clusters[cluster]
	for {
		key := cq.order[cq.head]
		cq.head++
		if e, ok := cq.items[key]; ok {
			delete(cq.items, key)
			evs, since = e.evs, e.since
			break
		}
	}
	if !evs[0].kind.marker() {
		q.depth -= len(evs)
	}
	// Compact the order slice once its consumed prefix dominates.
	if cq.head > 1024 && cq.head*2 > len(cq.order) {
		cq.order = append(cq.order[:0], cq.order[cq.head:]...)
		cq.head = 0
	}
	// Rotate: this cluster goes to the back of the ring if it still has work.
	q.ring = q.ring[1:]
	if len(cq.items) > 0 {
		q.ring = append(q.ring, cluster)
	} else {
		cq.order, cq.head = cq.order[:0], 0
	}
	return cluster, evs, since, true
}

func (q *mergedQueue) forget(cluster string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if cq := q.clusters[cluster]; cq != nil && len(cq.items) == 0 {
		delete(q.clusters, cluster)
	}
}

func (q *mergedQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.depth
}

func (q *mergedQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.cond.Broadcast()
	q.mu.Unlock()
}

// fifoCluster is one cluster's pending events in arrival order.
type fifoCluster struct {
	evs  []event // each with its arrival time in at
	head int
}

func (f *fifoCluster) pending() int { return len(f.evs) - f.head }

// fifoQueue keeps every event, in each cluster's arrival order. It holds at most max object
// events: a push beyond that drops every pending object event (markers are kept, in order) and
// makes the next pop report an overflow, so that the handler learns it lost events before it
// sees anything newer.
type fifoQueue struct {
	mu       sync.Mutex
	cond     *sync.Cond
	clusters map[string]*fifoCluster
	ring     []string
	depth    int // pending events, markers included
	max      int
	overflow bool // an overflow is to be reported by the next pop
	closed   bool
	one      [1]event // pop's answer; valid until the next pop (one consumer)
}

func newFIFOQueue(max int) *fifoQueue {
	q := &fifoQueue{clusters: map[string]*fifoCluster{}, max: max}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func (q *fifoQueue) push(cluster, _ string, ev event) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	if !ev.kind.marker() && q.depth >= q.max {
		q.dropObjectsLocked()
	}
	f := q.clusters[cluster]
	if f == nil {
		f = &fifoCluster{}
		q.clusters[cluster] = f
	}
	if f.pending() == 0 {
		q.ring = append(q.ring, cluster)
	}
	if ev.at.IsZero() {
		ev.at = time.Now()
	}
	f.evs = append(f.evs, ev)
	q.depth++
	q.cond.Signal()
}

// dropObjectsLocked empties the queue of object events, keeping markers.
func (q *fifoQueue) dropObjectsLocked() {
	q.depth = 0
	ring := q.ring[:0]
	for _, c := range q.ring {
		f := q.clusters[c]
		var kept []event
		for _, e := range f.evs[f.head:] {
			if e.kind.marker() {
				kept = append(kept, e)
			}
		}
		f.evs, f.head = kept, 0
		q.depth += len(kept)
		if len(kept) > 0 {
			ring = append(ring, c)
		}
	}
	q.ring = ring
	q.overflow = true
	q.cond.Signal()
}

func (q *fifoQueue) pop() (cluster string, evs []event, since time.Time, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.ring) == 0 && !q.overflow && !q.closed {
		q.cond.Wait()
	}
	if q.closed {
		return "", nil, time.Time{}, false
	}
	if q.overflow {
		q.overflow = false
		return "", []event{{kind: evOverflow}}, time.Now(), true
	}
	cluster = q.ring[0]
	f := q.clusters[cluster]
	e := f.evs[f.head]
	f.evs[f.head] = event{}
	f.head++
	q.depth--
	q.ring = q.ring[1:]
	if f.pending() > 0 {
		q.ring = append(q.ring, cluster)
		if f.head > 1024 && f.head*2 > len(f.evs) {
			f.evs = append(f.evs[:0], f.evs[f.head:]...)
			f.head = 0
		}
	} else {
		f.evs, f.head = f.evs[:0], 0
	}
	q.one[0] = e
	return cluster, q.one[:], e.at, true
}

func (q *fifoQueue) forget(cluster string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if f := q.clusters[cluster]; f != nil && f.pending() == 0 {
		delete(q.clusters, cluster)
	}
}

func (q *fifoQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.depth
}

func (q *fifoQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.cond.Broadcast()
	q.mu.Unlock()
}
