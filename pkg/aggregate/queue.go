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
	evSynced // marker: every event of the cluster's initial list is before it
)

type event struct {
	kind    eventKind
	old     any
	obj     any
	initial bool
}

// entry holds the pending events of one object, oldest first. Merging keeps it at one event,
// or two when an object was deleted and then re-created before the handler caught up.
type entry struct {
	evs   []event
	since time.Time // when the oldest pending event arrived
}

// merge folds ev into the pending events; it reports false when nothing is left pending.
func (e *entry) merge(ev event) bool {
	last := &e.evs[len(e.evs)-1]
	switch {
	case last.kind == evAdd && ev.kind == evUpdate:
		last.obj = ev.obj // still an add: the handler never saw the object
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

// clusterQueue is one cluster's pending objects in order of first arrival. order may hold keys
// whose entry was merged away; they are skipped.
type clusterQueue struct {
	order []string
	head  int
	items map[string]*entry
}

// queue is a handler's backlog: fair across clusters (round robin), FIFO per cluster, coalescing
// per object. Its size is bounded by the number of distinct objects with pending events (unless
// everyEvent).
type queue struct {
	mu       sync.Mutex
	cond     *sync.Cond
	clusters map[string]*clusterQueue
	ring     []string // clusters with pending work, in service order
	depth    int      // pending events
	closed   bool
	// everyEvent keeps every event as its own entry instead of merging per object.
	everyEvent bool
	seq        uint64
}

func newQueue() *queue {
	q := &queue{clusters: map[string]*clusterQueue{}}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// markerKey cannot collide with an object key: those are never empty.
const markerKey = ""

func (q *queue) push(cluster, key string, ev event) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	cq := q.clusters[cluster]
	if cq == nil {
		cq = &clusterQueue{items: map[string]*entry{}}
		q.clusters[cluster] = cq
	}
	if len(cq.items) == 0 {
		q.ring = append(q.ring, cluster)
	}
	if q.everyEvent && key != markerKey {
		// Each event is its own entry, so a cluster's events come out exactly in arrival
		// order (client-go's, which is resourceVersion order), across objects too.
		q.seq++
		key += "\x00" + strconv.FormatUint(q.seq, 10)
	}
	if e, ok := cq.items[key]; ok && key != markerKey {
		before := len(e.evs)
		if !e.merge(ev) {
			delete(cq.items, key)
			q.dropIfIdle(cluster, cq)
		}
		q.depth += len(e.evs) - before
		return
	}
	if _, ok := cq.items[key]; ok {
		// A marker is already pending for this cluster: a second would say nothing more.
		return
	}
	cq.items[key] = &entry{evs: []event{ev}, since: time.Now()}
	cq.order = append(cq.order, key)
	q.depth++
	q.cond.Signal()
}

func (q *queue) dropIfIdle(cluster string, cq *clusterQueue) {
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

// pop blocks until work is pending and returns the next object's events, taking clusters in
// turn. ok is false once the queue is closed.
func (q *queue) pop() (cluster, key string, evs []event, since time.Time, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.ring) == 0 && !q.closed {
		q.cond.Wait()
	}
	if q.closed {
		return "", "", nil, time.Time{}, false
	}
	cluster = q.ring[0]
	cq := q.clusters[cluster]
	for {
		key = cq.order[cq.head]
		cq.head++
		if e, ok := cq.items[key]; ok {
			delete(cq.items, key)
			evs, since = e.evs, e.since
			break
		}
	}
	q.depth -= len(evs)
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
	return cluster, key, evs, since, true
}

// forget drops every pending event of cluster.
func (q *queue) forget(cluster string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	cq := q.clusters[cluster]
	if cq == nil {
		return
	}
	for _, e := range cq.items {
		q.depth -= len(e.evs)
	}
	cq.items = map[string]*entry{}
	q.dropIfIdle(cluster, cq)
	delete(q.clusters, cluster)
}

func (q *queue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.depth
}

func (q *queue) close() {
	q.mu.Lock()
	q.closed = true
	q.cond.Broadcast()
	q.mu.Unlock()
}
