package watchcache

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"

	"github.com/multicache/multicache/pkg/aggregate"
)

// The types of the events a Cache keeps. Watches relay the first three; Handoff is never
// relayed (see OnHandoff).
const (
	Added    = "ADDED"
	Modified = "MODIFIED"
	Deleted  = "DELETED"
	Handoff  = "HANDOFF"
)

// Event is one change of the fleet, in the order the aggregate delivered it.
type Event struct {
	Seq     uint64 // the Cache's position of this event: consecutive, from 1
	Cluster string
	Type    string // Added, Modified, Deleted, or Handoff (no object)
	Key     aggregate.Key
	Object  any
	// Prev is the object's state before this event, as the Cache knew it: nil for Added. A
	// watcher reads it to tell an object that stops matching its query; a snapshot at an
	// earlier position restores it. PrevSeq is the sequence of the event that made Prev.
	Prev    any
	PrevSeq uint64
	size    int // bytes charged against the ring's bound
}

// Item is one object of an answer, with the sequence of the event that made it when known
// (see Sequence): the Kubernetes API serves that as the object's resourceVersion.
type Item struct {
	Key    aggregate.Key
	Object any
	Seq    uint64
}

// Options configures a Cache.
type Options struct {
	// MaxEvents is how many events the ring keeps. Required.
	MaxEvents int
	// MaxBytes bounds the memory those events keep alive, estimated by ApproxSize. Required.
	MaxBytes int
	// Current lists the resource's cached objects, to rebuild the Cache's objects after it
	// lost events (Overflow). Nil: none.
	Current func() []Item
}

// Cache keeps the recent events of one resource, in the order the aggregate delivered them,
// for watches to read and resume from. It is an every-event aggregate handler
// (aggregate.HandlerOptions.EveryEvent), and an aggregate.HandoffHandler.
//
// A list's position is the Cache's Position read before the stores are: every event at or
// before it has reached the stores, so the list reflects it; the stores may be ahead, so a
// watch from that position may repeat a change the list already showed, and never misses one.
//
// The ring holds at most MaxEvents events and keeps about MaxBytes of memory alive. A watch
// whose next event was evicted is Gone, unless none of the evicted events concerned the
// clusters it watches.
//
// The Cache also keeps latest, every object's state as of its newest event, so that it can
// answer what the fleet held at any position whose later events it still keeps (Snapshot):
// latest, with the keys those events touched put back to their previous states. The stores
// cannot answer that: they run ahead of the Cache by the events still being delivered.
type Cache struct {
	opts         Options
	initialSizes sizeSampler // calls are sequential: the Cache is one aggregate handler

	mu         sync.Mutex
	epoch      string // positions of another epoch are gone; changes when events were lost
	ring       []Event
	start, n   int
	bytes      int
	seq        uint64            // of the newest event
	evicted    map[string]uint64 // per cluster, the seq of its newest evicted event
	evictedAll uint64            // the seq of the newest evicted event, at least every one of evicted
	wake       chan struct{}     // closed when events arrive or the epoch changes
	waiting    bool              // someone holds wake
	resets     int64             // epochs ended because the Cache lost events
	expired    int64             // watches ended because they fell behind the ring
	// latest is, per cluster, every object's state as of its newest event: a handoff drops a
	// cluster whole, and a snapshot of some clusters reads theirs alone.
	latest map[string]map[objectKey]state
	// cut is, per cluster, the seq of its newest handoff: the cluster moved to another
	// replica then. A position before it cannot go on for a watch or snapshot that spans the
	// cluster (its objects are no longer here, and were not deleted): Gone, and the client
	// relists from the fleet, which now reads the cluster at its new owner.
	cut    map[string]uint64
	cutMax uint64 // the newest seq in cut: a watch of every cluster compares with it alone
	// floor: every position before it is gone for every cluster. Entries of evicted and cut
	// older than the oldest event kept are folded into it (prune), so that neither map
	// keeps a name for every cluster that ever passed through.
	floor uint64
	// listed is, per cluster whose whole list the Cache holds, the seq at which it held it
	// (OnListed): a snapshot at a position before it, or of a cluster not in it, lacks
	// objects the cluster has.
	listed map[string]uint64
}

// objectKey is an object's key within its cluster.
type objectKey struct{ namespace, name string }

func objectKeyOf(k aggregate.Key) objectKey { return objectKey{k.Namespace, k.Name} }

// state is an object as of the event that made it.
type state struct {
	obj any
	seq uint64
}

// New makes an empty Cache.
func New(opts Options) *Cache {
	opts.MaxEvents = max(opts.MaxEvents, 1)
	opts.MaxBytes = max(opts.MaxBytes, 1)
	return &Cache{opts: opts, epoch: newEpoch(), ring: make([]Event, min(opts.MaxEvents, 1024)), evicted: map[string]uint64{},
		wake: make(chan struct{}), latest: map[string]map[objectKey]state{}, cut: map[string]uint64{}, listed: map[string]uint64{}}
}

func newEpoch() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// OnAdd records an Added event.
// An object of a cluster's initial list is charged a sampled size (initialSizes).
func (c *Cache) OnAdd(cluster string, obj any, isInInitialList bool) {
	ev := Event{Cluster: cluster, Type: Added, Object: obj}
	if isInInitialList {
		ev.size = c.initialSizes.size(obj)
	}
	c.append(ev)
}

// OnUpdate records a Modified event.
func (c *Cache) OnUpdate(cluster string, _, newObj any) {
	c.append(Event{Cluster: cluster, Type: Modified, Object: newObj})
}

// OnDelete records a Deleted event.
func (c *Cache) OnDelete(cluster string, obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	c.append(Event{Cluster: cluster, Type: Deleted, Object: obj})
}

// OnListed records that the Cache holds a whole list of cluster (aggregate.ListHandler).
func (c *Cache) OnListed(cluster string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.listed[cluster] = c.seq
}

// OnLeft records that cluster left (aggregate.ListHandler): its deletes, or its handoff, came
// before.
func (c *Cache) OnLeft(cluster string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.listed, cluster)
}

// Unlisted lists the clusters of clusters whose whole list the snapshot at pos does not hold:
// the Cache had not taken it by then, or the cluster left or moved away since. A watch that
// starts with the objects at pos must not start without them.
func (c *Cache) Unlisted(pos Position, clusters []string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, cl := range clusters {
		if at, ok := c.listed[cl]; !ok || at > pos.Seq {
			out = append(out, cl)
		}
	}
	return out
}

// Listed reports whether the Cache holds a whole list of cluster now.
func (c *Cache) Listed(cluster string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.listed[cluster]
	return ok
}

// OnHandoff records that cluster moved to another replica (aggregate.HandoffHandler): its
// objects leave latest without a Deleted event, and every watch or snapshot that spans the
// cluster from an earlier position is Gone (see cut). A move thus never reaches a client as
// deletes of objects nobody deleted.
func (c *Cache) OnHandoff(cluster string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.latest, cluster)
	delete(c.listed, cluster)
	c.seq++
	c.cut[cluster], c.cutMax = c.seq, c.seq
	c.pushLocked(Event{Seq: c.seq, Cluster: cluster, Type: Handoff, size: 64})
}

// Overflow is the Cache's aggregate.HandlerOptions.OnOverflow: events were dropped before
// reaching it, so no position it handed out can be resumed from. Every watch ends Gone and
// every position expires; clients relist. latest is rebuilt from the stores (Options.Current),
// which may be ahead of the events still to come: those then repeat what latest holds, which
// changes nothing.
func (c *Cache) Overflow() {
	var objs []Item
	if c.opts.Current != nil {
		objs = c.opts.Current()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.latest)
	for _, it := range objs {
		c.setLocked(it.Key, state{obj: it.Object, seq: c.seq})
	}
	c.epoch = newEpoch()
	for i := range c.n {
		c.ring[(c.start+i)%len(c.ring)] = Event{}
	}
	c.start, c.n, c.bytes = 0, 0, 0
	clear(c.evicted)
	clear(c.cut) // every position before this is expired anyway
	c.cutMax, c.floor = 0, 0
	c.evictedAll = c.seq
	c.resets++
	c.wakeLocked()
}

func (c *Cache) append(ev Event) {
	k, err := aggregate.KeyOf(ev.Cluster, ev.Object)
	if err != nil {
		return // not an object: the aggregate never stores one
	}
	ev.Key = k
	if ev.size == 0 {
		ev.size = ApproxSize(ev.Object)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	prev := c.latest[k.Cluster][objectKeyOf(k)]
	ev.Prev, ev.PrevSeq = prev.obj, prev.seq
	c.seq++
	ev.Seq = c.seq
	if ev.Type == Deleted {
		if objs := c.latest[k.Cluster]; objs != nil {
			delete(objs, objectKeyOf(k))
			if len(objs) == 0 {
				delete(c.latest, k.Cluster)
			}
		}
	} else {
		c.setLocked(k, state{obj: ev.Object, seq: ev.Seq})
	}
	if ev.Type == Modified && ev.Prev != nil {
		// The replaced state stays alive as long as the event does.
		ev.size += ApproxSize(ev.Prev)
	}
	c.pushLocked(ev)
}

// setLocked records st as k's latest state. Callers hold c.mu.
func (c *Cache) setLocked(k aggregate.Key, st state) {
	objs := c.latest[k.Cluster]
	if objs == nil {
		objs = map[objectKey]state{}
		c.latest[k.Cluster] = objs
	}
	objs[objectKeyOf(k)] = st
}

// pushLocked appends ev to the ring, evicting the oldest events past the bounds, and wakes
// the watches. Callers hold c.mu.
func (c *Cache) pushLocked(ev Event) {
	for c.n > 0 && (c.n == c.opts.MaxEvents || c.bytes+ev.size > c.opts.MaxBytes) {
		c.evictLocked()
	}
	if c.n == len(c.ring) {
		c.growLocked()
	}
	c.ring[(c.start+c.n)%len(c.ring)] = ev
	c.n++
	c.bytes += ev.size
	c.wakeLocked()
}

func (c *Cache) evictLocked() {
	old := c.ring[c.start]
	c.evicted[old.Cluster] = old.Seq
	c.evictedAll = old.Seq
	c.bytes -= old.size
	c.ring[c.start] = Event{}
	c.start = (c.start + 1) % len(c.ring)
	c.n--
	if len(c.evicted)+len(c.cut) > 2*(len(c.listed)+len(c.latest))+64 {
		c.pruneLocked()
	}
}

// pruneLocked forgets the entries of evicted and cut of the clusters the Cache holds nothing
// of now, those older than the oldest event kept, raising floor to the newest of them: a
// position before one of them is gone for every cluster, not only for the cluster that left.
// A few resumes fail that could have gone on; memory stays bounded by the clusters present.
func (c *Cache) pruneLocked() {
	first := c.seq - uint64(c.n) + 1
	for _, m := range []map[string]uint64{c.evicted, c.cut} {
		for cl, at := range m {
			_, held := c.latest[cl]
			_, listed := c.listed[cl]
			if !held && !listed && at < first {
				c.floor = max(c.floor, at)
				delete(m, cl)
			}
		}
	}
}

// growLocked doubles the ring, up to MaxEvents slots.
func (c *Cache) growLocked() {
	bigger := make([]Event, min(2*len(c.ring), c.opts.MaxEvents))
	for i := range c.n {
		bigger[i] = c.ring[(c.start+i)%len(c.ring)]
	}
	c.ring, c.start = bigger, 0
}

func (c *Cache) wakeLocked() {
	if c.waiting {
		close(c.wake)
		c.wake = make(chan struct{})
		c.waiting = false
	}
}

// Position is where the Cache stands: a list read after it reflects every event up to it.
func (c *Cache) Position() Position {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Position{Epoch: c.epoch, Seq: c.seq}
}

// Next appends to buf the events after pos (at most cap(buf)-len(buf), at least one if any),
// and returns wake, closed once there may be more. It fails with a GoneError when an event
// after pos that concerns clusters (every cluster when empty) is no longer kept, when a
// cluster it spans was handed off after pos, or when pos is of another epoch.
func (c *Cache) Next(pos Position, clusters []string, buf []Event) ([]Event, <-chan struct{}, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.checkLocked(pos, clusters, true); err != nil {
		return buf, nil, err
	}
	if pos.Seq >= c.seq {
		c.waiting = true
		return buf, c.wake, nil
	}
	first := c.seq - uint64(c.n) + 1 // seq of the oldest event kept
	from := 0
	if pos.Seq >= first {
		from = int(pos.Seq - first + 1)
	}
	for i := from; i < c.n && len(buf) < cap(buf); i++ {
		buf = append(buf, c.ring[(c.start+i)%len(c.ring)])
	}
	return buf, nil, nil
}

// Check reports whether a watch of clusters can continue from pos: nil, or a GoneError.
func (c *Cache) Check(pos Position, clusters []string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.checkLocked(pos, clusters, false)
}

// checkLocked is Next's and Snapshot's test of pos; count counts an expiry in the metrics.
func (c *Cache) checkLocked(pos Position, clusters []string, count bool) error {
	if pos.Merged() {
		return &GoneError{Msg: "resourceVersion comes from an answer merged from several replicas, and this replica now answers alone; list again"}
	}
	if pos.Epoch != c.epoch {
		return &GoneError{Msg: "resourceVersion comes from an earlier run of the daemon, or the watch cache was reset since (it fell behind); list again"}
	}
	if pos.Seq > c.seq {
		return &GoneError{Msg: fmt.Sprintf("resourceVersion is ahead of the newest event (%d); list again", c.seq)}
	}
	if pos.Seq < c.floor {
		if count {
			c.expired++
		}
		return &GoneError{Msg: "resourceVersion too old: events after it are no longer kept; list again"}
	}
	if cl, ok := c.cutLocked(pos.Seq, clusters); ok {
		if count {
			c.expired++
		}
		return &GoneError{Msg: fmt.Sprintf("cluster %q moved to another replica after this resourceVersion; list again", cl)}
	}
	first := c.seq - uint64(c.n) + 1
	if pos.Seq+1 < first && c.lostLocked(pos.Seq, clusters) {
		if count {
			c.expired++
		}
		return &GoneError{Msg: fmt.Sprintf("resourceVersion too old: events after it are no longer kept (the oldest kept is %d events later); list again", first-pos.Seq-1)}
	}
	return nil
}

// cutLocked returns a cluster of clusters (any, when empty) handed off after seq. Every watch
// asks on every event: with nothing handed off after seq (cutMax is the newest of cut), it
// answers without looking at a watch's clusters, which may be a thousand.
func (c *Cache) cutLocked(seq uint64, clusters []string) (string, bool) {
	if c.cutMax <= seq {
		return "", false
	}
	if len(clusters) == 0 {
		for cl, at := range c.cut {
			if at > seq {
				return cl, true
			}
		}
		return "", false
	}
	for _, cl := range clusters {
		if c.cut[cl] > seq {
			return cl, true
		}
	}
	return "", false
}

// lostLocked reports whether an event after seq that concerns clusters was evicted. It is
// asked only of a position older than the ring's oldest event (an event after it was evicted).
func (c *Cache) lostLocked(seq uint64, clusters []string) bool {
	if len(clusters) == 0 {
		return c.evictedAll > seq
	}
	for _, cl := range clusters {
		if c.evicted[cl] > seq {
			return true
		}
	}
	return false
}

// Stats are a Cache's counters, for metrics and reports.
type Stats struct {
	Events  uint64 // events ever recorded (the newest sequence)
	Expired int64  // watches ended because they fell behind the ring
	Resets  int64  // epochs ended because the Cache lost events
	Held    int    // events the ring holds
	Bytes   int    // about how many bytes of objects they keep alive
}

// Stats reports the Cache's counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{Events: c.seq, Expired: c.expired, Resets: c.resets, Held: c.n, Bytes: c.bytes}
}

// Snapshot returns the objects of clusters (every cluster when empty) as of pos, in no order:
// latest, with every key that an event after pos touched put back to its state before the
// first such event. It fails with a GoneError as Next does.
func (c *Cache) Snapshot(pos Position, clusters []string) ([]Item, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.checkLocked(pos, clusters, false); err != nil {
		return nil, err
	}
	want := wanted(clusters)
	// Newest to oldest, so that the first event after pos has the last word.
	restore := map[aggregate.Key]state{}
	for i := c.n - 1; i >= 0; i-- {
		ev := &c.ring[(c.start+i)%len(c.ring)]
		if ev.Seq <= pos.Seq {
			break
		}
		if ev.Type != Handoff && want(ev.Cluster) {
			restore[ev.Key] = state{obj: ev.Prev, seq: ev.PrevSeq}
		}
	}
	// The clusters' objects, each cluster once. A watch reads one cluster at a time: it is
	// looked up, not found among every cluster's (a watch's start then grew with the square of
	// the clusters).
	type clusterObjects struct {
		cluster string
		objs    map[objectKey]state
	}
	var read []clusterObjects
	n := 0
	add := func(cl string, objs map[objectKey]state) {
		read = append(read, clusterObjects{cl, objs})
		n += len(objs)
	}
	switch {
	case len(clusters) == 0:
		for cl, objs := range c.latest {
			add(cl, objs)
		}
	case len(clusters) == 1:
		if objs, ok := c.latest[clusters[0]]; ok {
			add(clusters[0], objs)
		}
	default:
		for cl := range sets.New(clusters...) {
			if objs, ok := c.latest[cl]; ok {
				add(cl, objs)
			}
		}
	}
	out := make([]Item, 0, n)
	for _, r := range read {
		cl := r.cluster
		for key, st := range r.objs {
			k := aggregate.Key{Cluster: cl, Namespace: key.namespace, Name: key.name}
			if _, touched := restore[k]; touched {
				continue
			}
			out = append(out, Item{Key: k, Object: st.obj, Seq: st.seq})
		}
	}
	for k, st := range restore {
		if st.obj != nil {
			out = append(out, Item{Key: k, Object: st.obj, Seq: st.seq})
		}
	}
	return out, nil
}

// clusterSnapshots reads the objects of clusters as of pos one cluster at a time, each read
// what Snapshot answers for that cluster alone, under the Cache's lock. It walks the events
// after pos once for all the clusters: each read walks only the events that came since the
// last. (A watch's initial events, read a cluster at a time over a part's thousand clusters,
// walked every event after its position once per cluster.)
type clusterSnapshots struct {
	c    *Cache
	pos  Position
	want func(string) bool
	// walked is the newest event read into before: every event after pos up to it.
	walked uint64
	// before holds, by cluster not read yet, the state of each key that an event after pos
	// (up to walked) touched, as it was before the first such event. A cluster's entries go
	// once it is read, and its later events are not kept: they keep no object alive past the
	// read that needed them.
	before map[string]map[objectKey]state
	done   sets.Set[string] // the clusters read
}

// snapshots reads the clusters of clusters (every cluster when empty) as of pos, one at a time,
// each at most once.
func (c *Cache) snapshots(pos Position, clusters []string) *clusterSnapshots {
	return &clusterSnapshots{c: c, pos: pos, want: wanted(clusters), walked: pos.Seq, before: map[string]map[objectKey]state{}, done: sets.New[string]()}
}

// read returns the objects of cl as of the position, in no order; it fails with a GoneError as
// Snapshot does, and otherwise when cl is not one of the clusters, or was read before.
func (s *clusterSnapshots) read(cl string) ([]Item, error) {
	if !s.want(cl) || s.done.Has(cl) {
		return nil, fmt.Errorf("watchcache: cluster %q is not one of the snapshots' clusters, or was read before", cl)
	}
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.checkLocked(s.pos, []string{cl}, false); err != nil {
		return nil, err
	}
	// The events not walked yet, oldest first, so that a key's first event after the
	// position has the word. They are all kept: checkLocked found none of cl's evicted, and
	// another cluster's evicted event put back nothing cl reads.
	first := c.seq - uint64(c.n) + 1 // seq of the oldest event kept
	for seq := max(s.walked+1, first); seq <= c.seq; seq++ {
		ev := &c.ring[(c.start+int(seq-first))%len(c.ring)]
		if ev.Type == Handoff || !s.want(ev.Cluster) || s.done.Has(ev.Cluster) {
			continue
		}
		m := s.before[ev.Cluster]
		if m == nil {
			m = map[objectKey]state{}
			s.before[ev.Cluster] = m
		}
		k := objectKeyOf(ev.Key)
		if _, ok := m[k]; !ok {
			m[k] = state{obj: ev.Prev, seq: ev.PrevSeq}
		}
	}
	s.walked = max(s.walked, c.seq)
	objs, touched := c.latest[cl], s.before[cl]
	delete(s.before, cl)
	s.done.Insert(cl)
	out := make([]Item, 0, len(objs))
	for k, st := range objs {
		if _, ok := touched[k]; !ok {
			out = append(out, Item{Key: aggregate.Key{Cluster: cl, Namespace: k.namespace, Name: k.name}, Object: st.obj, Seq: st.seq})
		}
	}
	for k, st := range touched {
		if st.obj != nil {
			out = append(out, Item{Key: aggregate.Key{Cluster: cl, Namespace: k.namespace, Name: k.name}, Object: st.obj, Seq: st.seq})
		}
	}
	return out, nil
}

// wanted judges a cluster by clusters, every cluster when empty: a set, for a watch's clusters
// may be a thousand.
func wanted(clusters []string) func(string) bool {
	switch len(clusters) {
	case 0:
		return func(string) bool { return true }
	case 1: // a watch's initial events, read one cluster at a time
		return func(c string) bool { return c == clusters[0] }
	}
	return sets.New(clusters...).Has
}

// clustersAt lists, sorted, the clusters of clusters (every cluster when empty) that had
// objects at pos: those with objects now, and those whose objects an event after pos removed.
func (c *Cache) clustersAt(pos Position, clusters []string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	set := map[string]bool{}
	for cl := range c.latest {
		set[cl] = true
	}
	for i := c.n - 1; i >= 0; i-- {
		ev := &c.ring[(c.start+i)%len(c.ring)]
		if ev.Seq <= pos.Seq {
			break
		}
		if ev.Prev != nil {
			set[ev.Cluster] = true
		}
	}
	out, want := make([]string, 0, len(set)), wanted(clusters)
	for cl := range set {
		if want(cl) {
			out = append(out, cl)
		}
	}
	slices.Sort(out)
	return out
}

// Sequence sets each item's Seq: that of the event that made its object, when the Cache holds
// that object as the key's latest state. An object the Cache has not seen yet (the stores run
// ahead of it) gets the Cache's position: its event is still to come, and a watch from there
// sees it.
func (c *Cache) Sequence(items []Item) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range items {
		if st, ok := c.latest[items[i].Key.Cluster][objectKeyOf(items[i].Key)]; ok && st.obj == items[i].Object {
			items[i].Seq = st.seq
		} else {
			items[i].Seq = c.seq
		}
	}
}
