package server

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/api"
)

// event is one change in the fleet as a watch sends it.
type event struct {
	seq     uint64 // the hub's position of this event: consecutive, from 1
	cluster string
	typ     string // ADDED, MODIFIED, DELETED, or handedOff (no object)
	key     aggregate.Key
	obj     any
	// prev is the object's state before this event, as the hub knew it: nil for ADDED. A watch
	// reads it to tell an object that stops matching its query; a snapshot at an earlier
	// position restores it. prevSeq is the sequence of the event that made prev.
	prev    any
	prevSeq uint64
	size    int // bytes charged against the ring's bound
}

// hub keeps the recent events of one resource, in the order the aggregate delivered them, for
// watches to read and resume from. It is an every-event aggregate handler.
//
// Positions are the hub's own sequence numbers, never the clusters' resourceVersions: those
// come from different etcds, and a cluster that restarts against another server (new
// credentials, a new address, a name reused) starts another resourceVersion sequence. A
// restarted cluster's differences arrive as ordinary events (aggregate.Join), so a watch
// relays them; it never compares resourceVersions.
//
// A list's position is the hub's sequence read before the stores are: every event at or before
// it has reached the stores, so the list reflects it; the stores may be ahead, so a watch from
// that position may repeat a change the list already showed, and never misses one.
//
// The ring holds at most maxEvents events and keeps about maxBytes of memory alive (objects
// and previous states, estimated by approxSize). A watch whose next event was evicted ends
// with 410 Expired, unless none of the evicted events concerned the clusters it watches.
//
// The hub also keeps latest, every object's state as of its newest event, so that it can
// answer what the fleet held at any position whose later events it still keeps (snapshot):
// latest, with the keys those events touched put back to their previous states. The stores
// cannot answer that: they run ahead of the hub by the events still being delivered.
type hub struct {
	resource  string
	current   func() []item // the stores' objects, to rebuild latest after an overflow
	maxEvents int
	maxBytes  int

	mu         sync.Mutex
	epoch      string // tokens of another epoch are expired; changes when events were lost
	ring       []event
	start, n   int
	bytes      int
	seq        uint64            // of the newest event
	evicted    map[string]uint64 // per cluster, the seq of its newest evicted event
	evictedAll uint64            // the seq of the newest evicted event
	wake       chan struct{}     // closed when events arrive or the epoch changes
	waiting    bool              // someone holds wake
	resets     int64             // epochs ended because the hub's backlog overflowed
	expired    int64             // watches ended because they fell behind the ring
	latest     map[aggregate.Key]state
	// cut is, per cluster, the seq of its newest handoff: the cluster moved to another
	// replica then. A position before it cannot go on for a watch or snapshot that spans the
	// cluster (its objects are no longer here, and were not deleted): 410, and the client
	// relists from the fleet, which now reads the cluster at its new owner.
	cut    map[string]uint64
	cutMax uint64 // the newest seq in cut: a watch of every cluster compares with it alone
}

// handedOff is the type of the ring event that records a handoff. Watches never relay it.
const handedOff = "HANDOFF"

// state is an object as of the event that made it.
type state struct {
	obj any
	seq uint64
}

// newHub makes an empty hub; current lists the resource's cached objects (see overflow).
func newHub(resource string, maxEvents, maxBytes int, current func() []item) *hub {
	return &hub{resource: resource, current: current, maxEvents: maxEvents, maxBytes: maxBytes,
		epoch: newEpoch(), ring: make([]event, min(maxEvents, 1024)), evicted: map[string]uint64{},
		wake: make(chan struct{}), latest: map[aggregate.Key]state{}, cut: map[string]uint64{}}
}

func newEpoch() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (h *hub) OnAdd(cluster string, obj any, _ bool) {
	h.append(event{cluster: cluster, typ: api.Added, obj: obj})
}

func (h *hub) OnUpdate(cluster string, _, newObj any) {
	h.append(event{cluster: cluster, typ: api.Modified, obj: newObj})
}

func (h *hub) OnDelete(cluster string, obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	h.append(event{cluster: cluster, typ: api.Deleted, obj: obj})
}

// OnHandoff records that cluster moved to another replica (aggregate.HandoffHandler): its
// objects leave latest without a DELETE event, and every watch or snapshot that spans the
// cluster from an earlier position ends with 410 (see cut). A move thus never reaches a
// client as deletes of objects nobody deleted.
func (h *hub) OnHandoff(cluster string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k := range h.latest {
		if k.Cluster == cluster {
			delete(h.latest, k)
		}
	}
	h.seq++
	h.cut[cluster], h.cutMax = h.seq, h.seq
	h.pushLocked(event{seq: h.seq, cluster: cluster, typ: handedOff, size: 64})
}

// overflow is the hub's aggregate.HandlerOptions.OnOverflow: events were dropped before
// reaching it, so no position it handed out can be resumed from. Every watch ends with 410 and
// every token expires; clients relist. latest is rebuilt from the stores, which may be ahead
// of the events still to come: those then repeat what latest holds, which changes nothing.
func (h *hub) overflow() {
	var objs []item
	if h.current != nil {
		objs = h.current()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	clear(h.latest)
	for _, it := range objs {
		h.latest[it.key] = state{obj: it.obj, seq: h.seq}
	}
	h.epoch = newEpoch()
	for i := range h.n {
		h.ring[(h.start+i)%len(h.ring)] = event{}
	}
	h.start, h.n, h.bytes = 0, 0, 0
	clear(h.evicted)
	clear(h.cut) // every position before this is expired anyway
	h.cutMax = 0
	h.evictedAll = h.seq
	h.resets++
	h.wakeLocked()
}

func (h *hub) append(ev event) {
	k, err := aggregate.KeyOf(ev.cluster, ev.obj)
	if err != nil {
		return // not an object: the aggregate never stores one
	}
	ev.key = k
	ev.size = approxSize(ev.obj)
	h.mu.Lock()
	defer h.mu.Unlock()
	prev := h.latest[k]
	ev.prev, ev.prevSeq = prev.obj, prev.seq
	h.seq++
	ev.seq = h.seq
	if ev.typ == api.Deleted {
		delete(h.latest, k)
	} else {
		h.latest[k] = state{obj: ev.obj, seq: ev.seq}
	}
	if ev.typ == api.Modified && ev.prev != nil {
		// The replaced state stays alive as long as the event does.
		ev.size += approxSize(ev.prev)
	}
	h.pushLocked(ev)
}

// pushLocked appends ev to the ring, evicting the oldest events past the bounds, and wakes
// the watches. Callers hold h.mu.
func (h *hub) pushLocked(ev event) {
	for h.n > 0 && (h.n == h.maxEvents || h.bytes+ev.size > h.maxBytes) {
		h.evictLocked()
	}
	if h.n == len(h.ring) {
		h.growLocked()
	}
	h.ring[(h.start+h.n)%len(h.ring)] = ev
	h.n++
	h.bytes += ev.size
	h.wakeLocked()
}

func (h *hub) evictLocked() {
	old := h.ring[h.start]
	h.evicted[old.cluster] = old.seq
	h.evictedAll = old.seq
	h.bytes -= old.size
	h.ring[h.start] = event{}
	h.start = (h.start + 1) % len(h.ring)
	h.n--
}

// growLocked doubles the ring, up to maxEvents slots.
func (h *hub) growLocked() {
	bigger := make([]event, min(2*len(h.ring), h.maxEvents))
	for i := range h.n {
		bigger[i] = h.ring[(h.start+i)%len(h.ring)]
	}
	h.ring, h.start = bigger, 0
}

func (h *hub) wakeLocked() {
	if h.waiting {
		close(h.wake)
		h.wake = make(chan struct{})
		h.waiting = false
	}
}

// position is where the hub stands: a list read after it reflects every event up to it.
func (h *hub) position() token {
	h.mu.Lock()
	defer h.mu.Unlock()
	return token{Epoch: h.epoch, Seq: h.seq}
}

// errExpired is returned for positions the hub cannot continue from.
type errExpired struct{ msg string }

func (e errExpired) Error() string { return e.msg }

// next appends to buf the events after pos (at most cap(buf)-len(buf), at least one if any),
// and returns wake, closed once there may be more. It fails with errExpired when an event
// after pos that concerns clusters (every cluster when empty) is no longer kept, or when pos
// is from another epoch.
func (h *hub) next(pos token, clusters []string, buf []event) ([]event, <-chan struct{}, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if pos.Epoch != h.epoch {
		return buf, nil, errExpired{"it comes from an earlier run of the daemon, or the watch cache was reset since (it fell behind); list again"}
	}
	if c, ok := h.cutLocked(pos.Seq, clusters); ok {
		h.expired++
		return buf, nil, errExpired{fmt.Sprintf("cluster %q moved to another replica after this resourceVersion; list again", c)}
	}
	first := h.seq - uint64(h.n) + 1 // seq of the oldest event kept
	if pos.Seq+1 < first && h.lostLocked(pos.Seq, clusters) {
		h.expired++
		return buf, nil, errExpired{fmt.Sprintf("resourceVersion too old: events after it are no longer kept (the oldest kept is %d events later); list again", first-pos.Seq-1)}
	}
	if pos.Seq >= h.seq {
		h.waiting = true
		return buf, h.wake, nil
	}
	from := 0
	if pos.Seq >= first {
		from = int(pos.Seq - first + 1)
	}
	for i := from; i < h.n && len(buf) < cap(buf); i++ {
		buf = append(buf, h.ring[(h.start+i)%len(h.ring)])
	}
	return buf, nil, nil
}

// cutLocked returns a cluster of clusters (any, when empty) handed off after seq.
func (h *hub) cutLocked(seq uint64, clusters []string) (string, bool) {
	if len(clusters) == 0 {
		if h.cutMax <= seq {
			return "", false
		}
		for c, at := range h.cut {
			if at > seq {
				return c, true
			}
		}
		return "", false
	}
	for _, c := range clusters {
		if h.cut[c] > seq {
			return c, true
		}
	}
	return "", false
}

// lostLocked reports whether an event after seq that concerns clusters was evicted.
func (h *hub) lostLocked(seq uint64, clusters []string) bool {
	if len(clusters) == 0 {
		return h.evictedAll > seq
	}
	for _, c := range clusters {
		if h.evicted[c] > seq {
			return true
		}
	}
	return false
}

// held reports how many events and bytes the ring holds.
func (h *hub) held() (events, bytes int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n, h.bytes
}

// sizer is implemented by typed API objects (their protobuf size).
type sizer interface{ Size() int }

// heapPerWireByte is how much heap a decoded typed object takes per byte of its protobuf
// encoding, as measured on cached ConfigMaps under the soak load (a 100,000-event ring of
// about 32 MiB of protobuf held about 95 MiB of heap): an estimate, not an accounting.
const heapPerWireByte = 3

// approxSize estimates the memory an event keeps alive, for the ring's bound.
func approxSize(obj any) int {
	switch o := obj.(type) {
	case sizer:
		return heapPerWireByte*o.Size() + 128
	case *unstructured.Unstructured:
		return sizeOfValue(o.Object) + 128
	}
	return 4096
}

// sizeOfValue estimates the heap of an unstructured value.
func sizeOfValue(v any) int {
	switch x := v.(type) {
	case map[string]any:
		n := 48
		for k, e := range x {
			n += len(k) + 48 + sizeOfValue(e)
		}
		return n
	case []any:
		n := 24
		for _, e := range x {
			n += 16 + sizeOfValue(e)
		}
		return n
	case string:
		return len(x) + 16
	}
	return 16
}

// snapshot returns the objects of clusters (every cluster when empty) as of pos, in no order:
// latest, with every key that an event after pos touched put back to its state before the
// first such event. It fails with errExpired when pos is of another epoch, or when an event
// after pos that concerns clusters is no longer kept.
func (h *hub) snapshot(pos token, clusters []string) ([]item, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if pos.Epoch != h.epoch {
		return nil, errExpired{"it comes from an earlier run of the daemon, or the watch cache was reset since; list again"}
	}
	if pos.Seq > h.seq {
		return nil, errExpired{fmt.Sprintf("resourceVersion is ahead of the newest event (%d); list again", h.seq)}
	}
	if c, ok := h.cutLocked(pos.Seq, clusters); ok {
		return nil, errExpired{fmt.Sprintf("cluster %q moved to another replica after this resourceVersion; list again", c)}
	}
	first := h.seq - uint64(h.n) + 1
	if pos.Seq+1 < first && h.lostLocked(pos.Seq, clusters) {
		return nil, errExpired{"resourceVersion too old: events after it are no longer kept; list again"}
	}
	want := func(c string) bool { return len(clusters) == 0 || slices.Contains(clusters, c) }
	// Newest to oldest, so that the first event after pos has the last word.
	restore := map[aggregate.Key]state{}
	for i := h.n - 1; i >= 0; i-- {
		ev := &h.ring[(h.start+i)%len(h.ring)]
		if ev.seq <= pos.Seq {
			break
		}
		if ev.typ != handedOff && want(ev.cluster) {
			restore[ev.key] = state{obj: ev.prev, seq: ev.prevSeq}
		}
	}
	out := make([]item, 0, len(h.latest))
	for k, st := range h.latest {
		if _, touched := restore[k]; touched || !want(k.Cluster) {
			continue
		}
		out = append(out, item{key: k, cluster: k.Cluster, obj: st.obj, seq: st.seq})
	}
	for k, st := range restore {
		if st.obj != nil {
			out = append(out, item{key: k, cluster: k.Cluster, obj: st.obj, seq: st.seq})
		}
	}
	return out, nil
}

// sequence sets each item's seq: that of the event that made its object, when the hub holds
// that object as the key's latest state. An object the hub has not seen yet (the stores run
// ahead of it) gets the hub's position: its event is still to come, and a watch from there
// sees it.
func (h *hub) sequence(items []item) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range items {
		if st, ok := h.latest[items[i].key]; ok && st.obj == items[i].obj {
			items[i].seq = st.seq
		} else {
			items[i].seq = h.seq
		}
	}
}
