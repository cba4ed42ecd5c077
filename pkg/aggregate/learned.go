package aggregate

import (
	"sync"
	"sync/atomic"

	"github.com/multicache/multicache/pkg/index"

	lru "github.com/hashicorp/golang-lru/v2"
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
	DefaultLearnedIndexes     = 16
	DefaultLearnedIndexBytes  = 64 << 20
	learnAfterAsks            = 2 // the ask that starts an index; the next ones read it
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
}

// learner keeps the learned indexes of one Aggregate.
type learner struct {
	mu       sync.Mutex // taken before any countIndex's mu, never after
	asked    *lru.Cache[string, *learned]
	max      int
	maxBytes int64
}

// learned is one key's record: how often it was asked, and its index once started.
type learned struct {
	asks int
	idx  *countIndex
}

func newLearner(max int, maxBytes int64) *learner {
	l := &learner{maxBytes: maxBytes}
	// Keys asked once are remembered too (to learn them at their next ask), in twice the
	// room; an index evicted is removed with its handler.
	l.asked, _ = lru.NewWithEvict(2*max, func(_ string, v *learned) {
		if v.idx != nil {
			v.idx.remove()
		}
	})
	l.max = max
	return l
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

// ask records a summary by k and returns its index when it answers for every cluster of
// members; the second ask starts the index.
func (a *Aggregate) askLearned(k GroupKey, members []*member) *countIndex {
	l := a.learn
	if l == nil {
		return nil
	}
	l.mu.Lock()
	e, ok := l.asked.Get(k.text)
	if !ok {
		e = &learned{}
		l.asked.Add(k.text, e)
	}
	e.asks++
	if e.idx != nil && e.idx.isRemoved() {
		e.idx = nil // it overflowed: learned again from this ask on
	}
	start := e.idx == nil && e.asks >= learnAfterAsks
	if start {
		l.makeRoomLocked(e)
		e.idx = &countIndex{key: k, agg: a, counts: map[string]*clusterCounts{}}
	}
	idx := e.idx
	l.mu.Unlock()
	if start {
		// Every event, in order: a count moves from the value it was told to the new one,
		// which merged events (an update then a delete, told as one delete of the newest
		// state) would not say. A backlog past MaxPending loses events: the index removes
		// itself and is learned again.
		// Its backlog starts with every object held (the initial adds), so it may hold that
		// many and DefaultMaxPending more.
		held := 0
		for _, c := range a.Clusters() {
			if n, ok := a.Len(c); ok {
				held += n
			}
		}
		reg, err := a.AddEventHandlerWithOptions(idx, HandlerOptions{EveryEvent: true, MaxPending: held + DefaultMaxPending, OnOverflow: idx.remove})
		if err != nil {
			l.mu.Lock()
			e.idx = nil
			l.mu.Unlock()
			return nil
		}
		idx.mu.Lock()
		if idx.removed {
			reg.Remove() // evicted meanwhile
		} else {
			idx.reg = reg
		}
		idx.mu.Unlock()
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

// makeRoomLocked evicts the least recently asked indexes (other than keep's) until one more
// fits under max.
func (l *learner) makeRoomLocked(keep *learned) {
	for {
		var oldest string
		n := 0
		for _, k := range l.asked.Keys() { // oldest first
			if e, ok := l.asked.Peek(k); ok && e.idx != nil && e != keep {
				if n == 0 {
					oldest = k
				}
				n++
			}
		}
		if n < l.max {
			return
		}
		l.asked.Remove(oldest)
	}
}

// bound evicts the least recently asked indexes while the indexes' memory passes maxBytes.
func (l *learner) bound() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		var total int64
		for _, e := range l.asked.Values() {
			if e.idx != nil {
				total += e.idx.size.Load()
			}
		}
		if total <= l.maxBytes {
			return
		}
		if _, _, ok := l.asked.RemoveOldest(); !ok {
			return
		}
	}
}

// LearnedIndexes lists the learned indexes, least recently asked first.
func (a *Aggregate) LearnedIndexes() []LearnedIndex {
	if a.learn == nil {
		return nil
	}
	a.learn.mu.Lock()
	var idxs []*countIndex
	for _, e := range a.learn.asked.Values() {
		if e.idx != nil {
			idxs = append(idxs, e.idx)
		}
	}
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
		idx.mu.Unlock()
		out = append(out, LearnedIndex{Key: idx.key.text, Bytes: idx.size.Load(), Clusters: n, Answers: idx.answers.Load()})
	}
	return out
}

// countIndex counts, per cluster, the objects with each value of one key.
type countIndex struct {
	key GroupKey
	agg *Aggregate

	mu      sync.Mutex
	reg     *Registration // nil until added
	removed bool          // evicted: its handler is removed, or will be once added
	counts  map[string]*clusterCounts
	vals    []*string // scratch
	answers atomic.Int64
	size    atomic.Int64 // estimated bytes, kept as values come and go
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
	ci.cluster(cluster).listed = true
	ci.mu.Unlock()
}
func (ci *countIndex) OnLeft(cluster string) {
	ci.mu.Lock()
	if cc := ci.counts[cluster]; cc != nil {
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
