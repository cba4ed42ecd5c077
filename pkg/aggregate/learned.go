package aggregate

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/multicache/multicache/pkg/index"
	"go.uber.org/zap"

	"k8s.io/client-go/tools/cache"
)

// Learned indexes: a summary key that is asked for again becomes a live count index, and later
// summaries by it (alone, or with cluster) read counts instead of objects. A count index is a
// handler of the Aggregate's events, kept by the same events as every handler: per cluster, how
// many objects have each value of the key, and how many objects there are. It answers for a
// cluster once it has had the cluster's whole list (ListHandler), and only queries that read
// every object of their clusters (no namespace, label, field or index filter); others scan, as
// before. Learned indexes are few and small (their size is per value, not per object) and
// evicted least recently used beyond LearnedIndexes or LearnedIndexBytes; an evicted index's
// handler is removed. The bounds are per Aggregate (per resource); memory is checked each time
// a learned index answers or starts.
//
// A count index answers what its handler has been told, which trails the stores by the
// handler's lag (milliseconds, unless the handler is behind a burst): a summary may then count
// an object a list taken a moment earlier did not hold yet, as two lists a moment apart differ.

// Defaults of Options.LearnedIndexes and Options.LearnedIndexBytes.
const (
	DefaultLearnedIndexes    = 16
	DefaultLearnedIndexBytes = 64 << 20
	learnAfterAsks           = 2 // the ask that starts an index; the next ones read it
	// keptMaxPending is a kept index's spare backlog, beyond the objects held when it starts:
	// kept indexes start with the first member, before the later members' lists arrive.
	keptMaxPending = 10 * DefaultMaxPending
	// keptRestartAfter is how long after an overflow the kept indexes start over (each start
	// replays every object held): a handler that keeps falling behind restarts at most this
	// often.
	keptRestartAfter          = time.Second
	countEntryBytes           = 64
	countClusterOverheadBytes = 128
)

// LearnedIndex describes one learned index.
type LearnedIndex struct {
	Key   string // the summary key, as written
	Bytes int64  // an estimate of its memory: per cluster, per value
	// Clusters is how many clusters it answers for (whose whole list it has had).
	Clusters int
	// Answers counts the summaries it answered.
	Answers int64
	// Kept: counted from the start (KeepCounts), never evicted.
	Kept bool
	// GivenUp: a kept index that outgrew LearnedIndexBytes on its own (a key with about a
	// value per object) and counts no more; summaries by its key read objects.
	GivenUp bool
}

// learner keeps the learned and the kept indexes of one Aggregate. Its mu (indexSet's) guards
// kept too.
type learner struct {
	*indexSet[*countIndex]
	kept map[string]*countIndex // KeepCounts' keys, never evicted
	// closed: the Aggregate's owner is done with it (Membership.Close): no index runs or
	// starts from then on.
	closed bool
}

func newLearner(maxIndexes int, maxBytes int64) *learner {
	return &learner{indexSet: newIndexSet[*countIndex](maxIndexes, maxBytes, false), kept: map[string]*countIndex{}}
}

// learnable is the key a count index would keep for a summary by keys of a plan that reads
// every object of its clusters, and whether there is one: one key that reads the object (not a
// view of it, not another resource's objects), alone or with cluster.
func learnable(keys []GroupKey) (GroupKey, bool) {
	var k GroupKey
	n := 0
	for _, key := range keys {
		switch {
		case key.kind == byCluster:
		case key.view != nil || key.kind == byFunc:
			return k, false
		default:
			k = key
			n++
		}
	}
	return k, n == 1 && len(keys) <= 2
}

// learnableWhere is the key a count index of a where filter would keep for a summary by
// cluster of the plan: the filter is its only condition (FieldTerm.Where), and every key is
// cluster. Its value is "true" for the objects that pass; an evaluation past the cost limit
// does not pass, as on a watch.
func learnableWhere(p selectPlan, keys []GroupKey) (GroupKey, bool) {
	r := p.rest
	if p.q.Index != "" || r.Namespace != "" || (r.Labels != nil && !r.Labels.Empty()) || len(r.Fields) != 1 {
		return GroupKey{}, false
	}
	ft := r.Fields[0]
	if ft.Where == "" || ft.Not || ft.Value != "true" {
		return GroupKey{}, false
	}
	for _, k := range keys {
		if k.kind != byCluster {
			return GroupKey{}, false
		}
	}
	f, err := index.CompileFilter(ft.Where)
	if err != nil {
		return GroupKey{}, false
	}
	b := f.BindWatch()
	return FuncKey("where:"+ft.Where, func(_ string, obj any) []string { return b.Values(obj) }), true
}

// askLearned records a summary by k and returns its count index when one answers for every
// cluster of members: a kept key's (KeepCounts) from the start, another's from its second ask,
// which starts it.
func (a *Aggregate) askLearned(k GroupKey, members []*member) *countIndex {
	l := a.learn
	l.mu.Lock()
	if idx, ok := l.kept[k.text]; ok {
		l.mu.Unlock()
		if idx.isGivenUp() {
			return nil // read objects; nor is it learned, which would outgrow the bound too
		}
		if idx.isRemoved() { // its backlog overflowed: counted again from now on
			l.runKept(a)
			return nil
		}
		if !idx.covers(members) {
			return nil
		}
		idx.answers.Add(1)
		return idx
	}
	if l.max == 0 {
		l.mu.Unlock()
		return nil
	}
	e := l.askLocked(k.text)
	start := l.startsLocked(e)
	if start {
		l.makeRoomLocked(e, 0)
		e.idx = &countIndex{key: k, agg: a, counts: map[string]*clusterCounts{}}
	}
	idx := e.idx
	l.mu.Unlock()
	if start {
		if err := a.startCounting(idx, DefaultMaxPending); err != nil {
			l.mu.Lock()
			e.idx = nil
			l.mu.Unlock()
			return nil
		}
		l.bound()
		return nil // it has not had any list yet
	}
	if idx == nil || !idx.covers(members) {
		return nil
	}
	l.bound() // the index grew since it started, maybe
	idx.answers.Add(1)
	return idx
}

// startCounting adds idx's handler. Every event, in order: a count moves from the value it was
// told to the new one, which merged events (an update then a delete, told as one delete of the
// newest state) would not say. A backlog past its bound loses events: the index removes itself
// and is counted again from its next ask. Its backlog starts with every object held (the
// initial adds), so it may hold that many and spare more.
func (a *Aggregate) startCounting(idx *countIndex, spare int) error {
	return a.startCountingAll([]*countIndex{idx}, idx, spare, nil)
}

// startCountingAll adds h, the handler of idxs, as startCounting does; an overflow removes
// them all, then calls overflowed if set.
func (a *Aggregate) startCountingAll(idxs []*countIndex, h Handler, spare int, overflowed func()) error {
	held := 0
	for _, c := range a.Clusters() {
		if n, ok := a.Len(c); ok {
			held += n
		}
	}
	removeAll := func() {
		for _, idx := range idxs {
			idx.remove()
		}
	}
	onOverflow := removeAll
	if overflowed != nil {
		onOverflow = func() { removeAll(); overflowed() }
	}
	reg, err := a.AddEventHandlerWithOptions(h, HandlerOptions{EveryEvent: true, MaxPending: held + spare, OnOverflow: onOverflow})
	if err != nil {
		removeAll()
		return err
	}
	for _, idx := range idxs {
		idx.mu.Lock()
		if idx.removed {
			reg.Remove() // evicted meanwhile
		} else {
			idx.reg = reg
		}
		idx.mu.Unlock()
	}
	return nil
}

// keptHandler is the one handler of every kept index: each event is told to each of them in
// turn, so that more kept keys add a count per event, not a queue and a goroutine each.
type keptHandler []*countIndex

func (h keptHandler) OnAdd(cluster string, obj any, initial bool) {
	for _, idx := range h {
		idx.OnAdd(cluster, obj, initial)
	}
}
func (h keptHandler) OnUpdate(cluster string, oldObj, newObj any) {
	for _, idx := range h {
		idx.OnUpdate(cluster, oldObj, newObj)
	}
}
func (h keptHandler) OnDelete(cluster string, obj any) {
	for _, idx := range h {
		idx.OnDelete(cluster, obj)
	}
}
func (h keptHandler) OnListed(cluster string) {
	for _, idx := range h {
		idx.OnListed(cluster)
	}
}
func (h keptHandler) OnLeft(cluster string) {
	for _, idx := range h {
		idx.OnLeft(cluster)
	}
}

// ParseCountedKey reads a key whose counts can be kept (KeepCounts): one that reads the object
// itself, namespace, label:K, field:PATH or index:NAME. Its error names the key.
func ParseCountedKey(by string) (GroupKey, error) {
	k, err := ParseGroupKey(by)
	if err != nil {
		return k, err
	}
	if _, ok := learnable([]GroupKey{k}); !ok {
		return k, fmt.Errorf("key %q: counts are kept of a key that reads the object itself (namespace, label:K, field:PATH or index:NAME)", by)
	}
	return k, nil
}

// IndexName is the index an index:NAME key reads, and whether k is one.
func (k GroupKey) IndexName() (string, bool) { return k.arg, k.kind == byIndex }

// KeepCounts keeps the counts of summary key by (ParseGroupKey's text; one key, not cluster,
// that reads the object itself: namespace, label:K, field:PATH or index:NAME of an index
// added already) from now on, per cluster and value, as a learned index that is never
// evicted: a summary by it (alone or with cluster, with no filter but clusters) reads counts,
// not objects, from its first ask once the index has had every cluster's list. Its handler
// runs while the Aggregate has members (it stops when the last leaves, and starts over at the
// next join). Its memory is per cluster and distinct value, as a learned index's, and shows in
// LearnedIndexes; it is not counted against the learned indexes' bounds, but one kept index
// that alone outgrows LearnedIndexBytes (a key with about a value per object, a name or a
// uid) gives up: it drops its counts, says so in the log and LearnedIndex.GivenUp, and
// summaries by its key read objects from then on, while the key is kept. Keeping a key kept
// already does nothing.
func (a *Aggregate) KeepCounts(by string) error {
	k, err := ParseCountedKey(by)
	if err != nil {
		return err
	}
	if k.kind == byIndex {
		if _, err := a.indexSpec(k.arg); err != nil {
			return fmt.Errorf("key %q: %w", by, err)
		}
	}
	l := a.learn
	l.mu.Lock()
	if _, ok := l.kept[k.text]; !ok {
		l.kept[k.text] = &countIndex{key: k, agg: a, kept: true, removed: true, limit: l.maxBytes} // runKept starts it
	}
	l.mu.Unlock()
	l.runKept(a)
	return nil
}

// runKept starts the kept indexes' handler, if the Aggregate has members, unless it runs with
// every kept key (it was not started yet, stopped when the last member left, lost to an
// overflow, or a key was added): then every kept index starts over, under one new handler. A
// handler that overflows starts over keptRestartAfter later, its backlog bound then counting
// every object held.
func (l *learner) runKept(a *Aggregate) {
	l.mu.Lock()
	restart := false
	for _, idx := range l.kept {
		restart = restart || idx.isRemoved() && !idx.isGivenUp()
	}
	if l.closed || !restart || len(a.Clusters()) == 0 {
		l.mu.Unlock()
		return
	}
	var h keptHandler
	var old []*countIndex
	for _, key := range slices.Sorted(maps.Keys(l.kept)) {
		idx := l.kept[key]
		if idx.isGivenUp() {
			continue // stays given up, out of the handler
		}
		old = append(old, idx)
		idx = &countIndex{key: idx.key, agg: a, counts: map[string]*clusterCounts{}, kept: true, limit: idx.limit}
		l.kept[key] = idx
		h = append(h, idx)
	}
	l.mu.Unlock()
	for _, idx := range old {
		idx.remove()
	}
	// On an error the indexes stay removed: tried again at the next join or ask. (A
	// stopKeptIfEmpty meanwhile marks them removed; the handler is then removed once added.)
	_ = a.startCountingAll(h, h, keptMaxPending, func() { time.AfterFunc(keptRestartAfter, func() { l.runKept(a) }) })
}

// stopKeptIfEmpty removes the kept indexes' handler once the Aggregate has no member (checked
// under l.mu, so that a join that publishes its member meanwhile starts them again): an
// Aggregate its owner has done with leaves no kept index running. Their counts go with it.
func (l *learner) stopKeptIfEmpty(a *Aggregate) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(a.Clusters()) > 0 {
		return
	}
	for key, idx := range l.kept {
		idx.remove()
		if !idx.isGivenUp() {
			l.kept[key] = &countIndex{key: idx.key, agg: a, kept: true, removed: true, limit: idx.limit}
		}
	}
}

// close removes every kept and learned index's handler, for good (Membership.Close).
func (l *learner) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	for key, idx := range l.kept {
		idx.remove()
		if !idx.isGivenUp() {
			l.kept[key] = &countIndex{key: idx.key, agg: idx.agg, kept: true, removed: true, limit: idx.limit}
		}
	}
	l.closeLocked()
}

// LearnedIndexes lists the kept indexes (KeepCounts), then the learned ones, least recently
// asked first.
func (a *Aggregate) LearnedIndexes() []LearnedIndex {
	a.learn.mu.Lock()
	var idxs []*countIndex
	for _, k := range slices.Sorted(maps.Keys(a.learn.kept)) {
		idxs = append(idxs, a.learn.kept[k])
	}
	idxs = append(idxs, a.learn.indexesLocked()...)
	a.learn.mu.Unlock()
	out := make([]LearnedIndex, 0, len(idxs))
	for _, idx := range idxs {
		idx.mu.Lock()
		n := 0
		for _, cc := range idx.counts {
			if cc.listed {
				n++
			}
		}
		givenUp := idx.givenUp
		idx.mu.Unlock()
		out = append(out, LearnedIndex{Key: idx.key.text, Bytes: idx.size.Load(), Clusters: n, Answers: idx.answers.Load(), Kept: idx.kept, GivenUp: givenUp})
	}
	return out
}

// countIndex counts, per cluster, the objects with each value of one key.
type countIndex struct {
	key  GroupKey
	agg  *Aggregate
	kept bool // KeepCounts'
	// limit bounds a kept index's estimated bytes (the learned indexes' byte bound): past it,
	// the index gives up (givenUp) and counts no more. 0: no bound (a learned index, which the
	// learner's bound evicts instead).
	limit int64

	mu      sync.Mutex
	givenUp bool          // under mu; a given-up index stays so, across restarts, while its key is kept
	reg     *Registration // nil until added
	removed bool          // evicted: its handler is removed, or will be once added
	counts  map[string]*clusterCounts
	vals    []*string // scratch
	answers atomic.Int64
	size    atomic.Int64 // estimated bytes, kept as values come and go
}

func (ci *countIndex) bytes() int64 { return ci.size.Load() }

// isGivenUp reports whether the index outgrew its limit and counts no more.
func (ci *countIndex) isGivenUp() bool {
	ci.mu.Lock()
	defer ci.mu.Unlock()
	return ci.givenUp
}

// giveUpLocked drops the counts of an index past its limit, for good. Callers hold ci.mu.
func (ci *countIndex) giveUpLocked() {
	ci.givenUp = true
	ci.agg.log.Warn("kept counts given up: over the byte bound, summaries by the key read objects",
		zap.String("key", ci.key.text), zap.Int64("bytes", ci.size.Load()), zap.Int64("bound", ci.limit))
	ci.counts = map[string]*clusterCounts{}
	ci.size.Store(0)
}

func (ci *countIndex) isRemoved() bool {
	ci.mu.Lock()
	defer ci.mu.Unlock()
	return ci.removed
}

// remove removes the index's handler.
func (ci *countIndex) remove() {
	ci.mu.Lock()
	defer ci.mu.Unlock()
	ci.removed = true
	if ci.reg != nil {
		ci.reg.Remove()
	}
}

// clusterCounts is one cluster's counts: objects per value ("" holds the objects without one,
// under the key noValue), and objects.
type clusterCounts struct {
	values  map[string]int
	objects int
	listed  bool
}

// noValue is the count key of objects without a value: no value a key reads can be it.
const noValue = "\x00"

func (ci *countIndex) OnAdd(cluster string, obj any, _ bool) { ci.change(cluster, obj, 1) }
func (ci *countIndex) OnUpdate(cluster string, oldObj, newObj any) {
	ci.change(cluster, oldObj, -1)
	ci.change(cluster, newObj, 1)
}
func (ci *countIndex) OnDelete(cluster string, obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	ci.change(cluster, obj, -1)
}
func (ci *countIndex) OnListed(cluster string) {
	ci.mu.Lock()
	if !ci.givenUp {
		ci.cluster(cluster).listed = true
	}
	ci.mu.Unlock()
}
func (ci *countIndex) OnLeft(cluster string) {
	ci.mu.Lock()
	if cc := ci.counts[cluster]; cc != nil && !ci.givenUp {
		n := countClusterOverheadBytes + int64(len(cluster))
		for v := range cc.values {
			n += countEntryBytes + int64(len(v))
		}
		ci.size.Add(-n)
		delete(ci.counts, cluster)
	}
	ci.mu.Unlock()
}

func (ci *countIndex) cluster(c string) *clusterCounts {
	cc := ci.counts[c]
	if cc == nil {
		cc = &clusterCounts{values: map[string]int{}}
		ci.counts[c] = cc
		ci.size.Add(countClusterOverheadBytes + int64(len(c)))
	}
	return cc
}

// change adds d to the counts of obj's values in cluster.
func (ci *countIndex) change(cluster string, obj any, d int) {
	ci.mu.Lock()
	defer ci.mu.Unlock()
	if ci.givenUp {
		return
	}
	cc := ci.cluster(cluster)
	cc.objects += d
	ci.vals = ci.key.appendValues(ci.agg, cluster, obj, ci.vals[:0])
	if len(ci.vals) == 0 {
		ci.vals = append(ci.vals, nil)
	}
	for _, v := range ci.vals {
		k := noValue
		if v != nil {
			k = *v
		}
		old := cc.values[k]
		switch n := old + d; {
		case n > 0:
			if old == 0 {
				ci.size.Add(countEntryBytes + int64(len(k)))
			}
			cc.values[k] = n
		case old > 0:
			ci.size.Add(-countEntryBytes - int64(len(k)))
			delete(cc.values, k)
		}
	}
	if ci.limit > 0 && ci.size.Load() > ci.limit {
		ci.giveUpLocked()
	}
}

// covers reports whether the index has had the whole list of every member's cluster.
func (ci *countIndex) covers(members []*member) bool {
	ci.mu.Lock()
	defer ci.mu.Unlock()
	for _, m := range members {
		if cc := ci.counts[m.cluster]; cc == nil || !cc.listed {
			return false
		}
	}
	return true
}

// passing answers a summary by cluster of the objects a where index's filter passes.
func (ci *countIndex) passing(members []*member, sum *Summary) {
	ci.mu.Lock()
	defer ci.mu.Unlock()
	for _, m := range members {
		cc := ci.counts[m.cluster]
		if cc == nil || cc.values["true"] == 0 {
			continue
		}
		cluster, n := m.cluster, cc.values["true"]
		sum.Total += n
		key := make([]*string, len(sum.By))
		for i := range key {
			key[i] = &cluster
		}
		sum.Groups = append(sum.Groups, Group{Key: key, Count: n})
	}
}

// summary answers a summary by keys (k, and cluster if asked) of the members' clusters.
func (ci *countIndex) summary(keys []GroupKey, members []*member, sum *Summary) {
	ci.mu.Lock()
	defer ci.mu.Unlock()
	merged := map[string]*Group{}
	for _, m := range members {
		cc := ci.counts[m.cluster]
		if cc == nil {
			continue
		}
		sum.Total += cc.objects
		cluster := m.cluster
		for v, n := range cc.values {
			var val *string
			if v != noValue {
				s := v
				val = &s
			}
			key := make([]*string, len(keys))
			id := v
			for i, k := range keys {
				if k.kind == byCluster {
					key[i] = &cluster
					id = cluster + "\x00" + v
				} else {
					key[i] = val
				}
			}
			if g := merged[id]; g != nil {
				g.Count += n
				continue
			}
			merged[id] = &Group{Key: key, Count: n}
		}
	}
	for _, g := range merged {
		sum.Groups = append(sum.Groups, *g)
	}
}
