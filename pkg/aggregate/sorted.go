package aggregate

import (
	"container/heap"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tidwall/btree"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"
)

// Sort indexes: an order that sorted lists ask for again becomes a live index, per cluster, of
// every object in that order (a B-tree of its sort value, namespace and name), kept by the
// Aggregate's events as every handler is. A sorted page then walks the clusters' trees from
// its cursor and reads only the objects it answers, and counts what comes before the cursor
// by rank, instead of reading and ordering every object the list selects. An index answers
// only lists that read every object of their clusters (no namespace, label, field or index
// filter), once it has had every one of their clusters' lists.
//
// An index's order is what its handler has been told, which trails the stores by the
// handler's lag: an object changed within that lag is answered in its new state at its old
// place, as it would be by a list taken a moment earlier. Indexes cost memory per object (an
// entry of about sortEntryBytes and the sort value; namespace and name are the object's own
// strings) and are evicted least recently asked beyond SortIndexes or SortIndexBytes.

// Defaults of Options.SortIndexes and Options.SortIndexBytes.
const (
	DefaultSortIndexes    = 4
	DefaultSortIndexBytes = 512 << 20
	// sortEntryBytes is an entry's share of its tree, measured (104 bytes per entry of a
	// million in random order), besides its sort value.
	sortEntryBytes = 104
	// sortValueGuess is a sort value's bytes as learning estimates them, before it has read
	// any: a name's, a phase's, a timestamp's.
	sortValueGuess = 24
	// MaxSortedPage is the largest page a sort index answers: a page holds the index's read
	// lock while it reads its objects, which a list of everything would hold for long.
	MaxSortedPage = 10000
)

// Sorter is an order of sorted lists: Value reads an object's sort value, which orders the
// objects (descending with Desc), then their keys, ascending either way, as CompareSorted in
// pkg/storage does. Name identifies the order (its path and direction): the index of one
// Name serves every list that asks for it.
type Sorter struct {
	Name  string
	Value func(obj any) string
	Desc  bool
}

// SortPosition is a sorted list's cursor: the sort value and key of the item a page continues
// after.
type SortPosition struct {
	Value string
	Key   Key
}

// SortedItem is an item of a sorted page.
type SortedItem struct {
	Key    Key
	Object any
	Value  string // the sort value the index holds it under
}

// SortedPage is a page of a sorted list read from a sort index.
type SortedPage struct {
	Items []SortedItem
	// More says items follow the page.
	More bool
	// Total counts every object of the clusters; Before those at or before the cursor.
	Total, Before int64
}

// sortEntry is one object in a sort index: bound is 0 for an object, and -1 or +1 in a
// pivot that comes before or after every object of its value.
type sortEntry struct {
	value, ns, name string
	bound           int8
}

// sorts keeps the sort indexes of one Aggregate.
type sorts = indexSet[*sortIndex]

func newSorts(maxIndexes int, maxBytes int64) *sorts {
	return newIndexSet[*sortIndex](maxIndexes, maxBytes, true)
}

// sortIndex is one order's index: per cluster, a B-tree of its objects.
type sortIndex struct {
	sorter Sorter
	less   func(a, b sortEntry) bool

	mu       sync.RWMutex
	reg      *Registration
	removed  bool
	clusters map[string]*sortCluster
	answers  atomic.Int64
	size     atomic.Int64
}

type sortCluster struct {
	tree   *btree.BTreeG[sortEntry]
	listed bool
}

func newSortIndex(s Sorter) *sortIndex {
	idx := &sortIndex{sorter: s, clusters: map[string]*sortCluster{}}
	idx.less = func(a, b sortEntry) bool { return idx.compare(a, b) < 0 }
	return idx
}

// compare orders entries as a sorted list does within one cluster: value (descending with
// Desc), then namespace and name.
func (idx *sortIndex) compare(a, b sortEntry) int {
	if c := strings.Compare(a.value, b.value); c != 0 {
		if idx.sorter.Desc {
			return -c
		}
		return c
	}
	if a.bound != b.bound {
		return int(a.bound) - int(b.bound)
	}
	if c := strings.Compare(a.ns, b.ns); c != 0 {
		return c
	}
	return strings.Compare(a.name, b.name)
}

func (idx *sortIndex) remove() {
	idx.mu.Lock()
	defer idx.mu.Unlock()
	idx.removed = true
	if idx.reg != nil {
		idx.reg.Remove()
	}
}

func (idx *sortIndex) bytes() int64 { return idx.size.Load() }

func (idx *sortIndex) isRemoved() bool {
	idx.mu.RLock()
	defer idx.mu.RUnlock()
	return idx.removed
}

func (idx *sortIndex) entry(obj any) (sortEntry, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return sortEntry{}, false
	}
	return sortEntry{value: idx.sorter.Value(obj), ns: m.GetNamespace(), name: m.GetName()}, true
}

func (idx *sortIndex) cluster(c string) *sortCluster {
	sc := idx.clusters[c]
	if sc == nil {
		sc = &sortCluster{tree: btree.NewBTreeGOptions(idx.less, btree.Options{NoLocks: true})}
		idx.clusters[c] = sc
	}
	return sc
}

func (idx *sortIndex) put(sc *sortCluster, e sortEntry) {
	if _, replaced := sc.tree.Set(e); !replaced {
		idx.size.Add(sortEntryBytes + int64(len(e.value)))
	}
}

func (idx *sortIndex) drop(sc *sortCluster, e sortEntry) {
	if _, ok := sc.tree.Delete(e); ok {
		idx.size.Add(-sortEntryBytes - int64(len(e.value)))
	}
}

func (idx *sortIndex) OnAdd(cluster string, obj any, _ bool) {
	e, ok := idx.entry(obj)
	if !ok {
		return
	}
	idx.mu.Lock()
	idx.put(idx.cluster(cluster), e)
	idx.mu.Unlock()
}

func (idx *sortIndex) OnUpdate(cluster string, oldObj, newObj any) {
	o, okOld := idx.entry(oldObj)
	n, okNew := idx.entry(newObj)
	idx.mu.Lock()
	sc := idx.cluster(cluster)
	if okOld {
		idx.drop(sc, o)
	}
	if okNew {
		idx.put(sc, n)
	}
	idx.mu.Unlock()
}

func (idx *sortIndex) OnDelete(cluster string, obj any) {
	e, ok := idx.entry(obj)
	if !ok {
		return
	}
	idx.mu.Lock()
	idx.drop(idx.cluster(cluster), e)
	idx.mu.Unlock()
}

func (idx *sortIndex) OnListed(cluster string) {
	idx.mu.Lock()
	idx.cluster(cluster).listed = true
	idx.mu.Unlock()
}

func (idx *sortIndex) OnLeft(cluster string) {
	idx.mu.Lock()
	if sc := idx.clusters[cluster]; sc != nil {
		sc.tree.Scan(func(e sortEntry) bool {
			idx.size.Add(-sortEntryBytes - int64(len(e.value)))
			return true
		})
		delete(idx.clusters, cluster)
	}
	idx.mu.Unlock()
}

// SortedAfter answers a page of a sorted list from the sort index of s: the first limit
// objects of q's clusters after the cursor (nil: from the first) in s's order, with what they
// total and what comes at or before the cursor. ok is false when no index answers (q filters
// more than clusters, the order has not been asked for often enough, or its index has not had
// every cluster's list yet): the caller reads the objects. Each ask counts towards learning
// the order.
func (a *Aggregate) SortedAfter(q Query, s Sorter, after *SortPosition, limit int) (SortedPage, bool) {
	if limit > MaxSortedPage {
		return SortedPage{}, false
	}
	p, err := a.planSelect(q)
	if err != nil || !p.plain() {
		return SortedPage{}, false
	}
	idx := a.askSorted(s)
	if idx == nil {
		return SortedPage{}, false
	}
	pg, ok := idx.page(a, p.members, after, limit)
	if ok {
		idx.answers.Add(1)
		a.sorts.bound()
	}
	return pg, ok
}

// askSorted records an ask of s and returns its index once started; the second ask starts it.
func (a *Aggregate) askSorted(s Sorter) *sortIndex {
	l := a.sorts
	l.mu.Lock()
	if l.max == 0 {
		l.mu.Unlock()
		return nil
	}
	e := l.askLocked(s.Name)
	held := 0
	for _, c := range a.Clusters() {
		if n, ok := a.Len(c); ok {
			held += n
		}
	}
	start := l.startsLocked(e)
	if start {
		// Room for one more, in number and, at sortEntryBytes an object, in bytes: an order
		// whose index alone would pass maxBytes is not learned.
		need := int64(held) * (sortEntryBytes + sortValueGuess)
		start = need <= l.maxBytes
		if start {
			l.makeRoomLocked(e, need)
			e.idx = newSortIndex(s)
		}
	}
	idx := e.idx
	l.mu.Unlock()
	if !start {
		return idx
	}
	// Every event, in order, as a count index has them: an entry moves from the state it was
	// told.
	reg, err := a.AddEventHandlerWithOptions(idx, HandlerOptions{EveryEvent: true, MaxPending: held + DefaultMaxPending, OnOverflow: idx.remove})
	if err != nil {
		idx.remove()
		return nil
	}
	idx.mu.Lock()
	if idx.removed {
		reg.Remove()
	} else {
		idx.reg = reg
	}
	idx.mu.Unlock()
	return nil // it has not had any list yet
}

// SortIndex describes one sort index.
type SortIndex struct {
	Name     string
	Bytes    int64 // an estimate of its memory
	Clusters int   // how many clusters it answers for
	Answers  int64 // pages it answered
}

// SortIndexes lists the sort indexes, least recently asked first.
func (a *Aggregate) SortIndexes() []SortIndex {
	a.sorts.mu.Lock()
	idxs := a.sorts.indexesLocked()
	a.sorts.mu.Unlock()
	out := make([]SortIndex, 0, len(idxs))
	for _, idx := range idxs {
		idx.mu.RLock()
		n := 0
		for _, sc := range idx.clusters {
			if sc.listed {
				n++
			}
		}
		idx.mu.RUnlock()
		out = append(out, SortIndex{Name: idx.sorter.Name, Bytes: idx.size.Load(), Clusters: n, Answers: idx.answers.Load()})
	}
	return out
}

// head is a cluster's next entry in a page's merge.
type head struct {
	cluster string
	it      btree.IterG[sortEntry]
	e       sortEntry
}

type heads struct {
	idx *sortIndex
	hs  []*head
}

func (h *heads) Len() int { return len(h.hs) }
func (h *heads) Less(i, j int) bool {
	a, b := h.hs[i], h.hs[j]
	if c := strings.Compare(a.e.value, b.e.value); c != 0 {
		return (c < 0) != h.idx.sorter.Desc
	}
	if a.cluster != b.cluster {
		return a.cluster < b.cluster
	}
	return h.idx.compare(a.e, b.e) < 0
}
func (h *heads) Swap(i, j int) { h.hs[i], h.hs[j] = h.hs[j], h.hs[i] }
func (h *heads) Push(x any)    { h.hs = append(h.hs, x.(*head)) }
func (h *heads) Pop() any {
	x := h.hs[len(h.hs)-1]
	h.hs = h.hs[:len(h.hs)-1]
	return x
}

// page reads a page of members' objects: each cluster's tree from the cursor, merged in the
// list's order (sort value, then cluster, namespace and name), each object read from its
// member's store. An entry whose object the store no longer holds (deleted within the
// handler's lag) is skipped. The index's read lock is held throughout (lock order: the
// index, then the Aggregate, as remove has it).
func (idx *sortIndex) page(a *Aggregate, members []*member, after *SortPosition, limit int) (SortedPage, bool) {
	var pg SortedPage
	idx.mu.RLock()
	defer idx.mu.RUnlock()
	if idx.removed {
		return pg, false
	}
	h := &heads{idx: idx}
	defer func() {
		for _, hd := range h.hs {
			hd.it.Release()
		}
	}()
	for _, m := range members {
		sc := idx.clusters[m.cluster]
		if sc == nil || !sc.listed {
			return SortedPage{}, false
		}
		pg.Total += int64(sc.tree.Len())
		hd := &head{cluster: m.cluster, it: sc.tree.Iter()}
		var ok bool
		if after == nil {
			ok = hd.it.First()
		} else {
			pivot, inclusive := pivotFor(m.cluster, after)
			pg.Before += int64(rank(sc.tree, idx.less, pivot, inclusive))
			ok = hd.it.Seek(pivot)
			if ok && inclusive && idx.compare(hd.it.Item(), pivot) == 0 {
				ok = hd.it.Next() // the cursor's own item
			}
		}
		if !ok {
			hd.it.Release()
			continue
		}
		hd.e = hd.it.Item()
		h.hs = append(h.hs, hd)
	}
	heap.Init(h)
	for h.Len() > 0 {
		hd := h.hs[0]
		k := Key{Cluster: hd.cluster, Namespace: hd.e.ns, Name: hd.e.name}
		if obj, ok, err := a.Get(k); err == nil && ok {
			if len(pg.Items) == limit {
				pg.More = true
				break
			}
			pg.Items = append(pg.Items, SortedItem{Key: k, Object: obj, Value: hd.e.value})
		}
		if hd.it.Next() {
			hd.e = hd.it.Item()
			heap.Fix(h, 0)
		} else {
			hd.it.Release()
			heap.Pop(h)
		}
	}
	return pg, true
}

// pivotFor is where cluster's tree continues after the cursor, and whether the pivot is the
// cursor's own item (then it and what precedes it are before the page): a cluster before the
// cursor's continues after every object of the cursor's value, one after it at the first.
func pivotFor(cluster string, after *SortPosition) (sortEntry, bool) {
	switch {
	case cluster < after.Key.Cluster:
		return sortEntry{value: after.Value, bound: 1}, false
	case cluster > after.Key.Cluster:
		return sortEntry{value: after.Value, bound: -1}, false
	}
	return sortEntry{value: after.Value, ns: after.Key.Namespace, name: after.Key.Name}, true
}

// rank is how many entries of tree come before pivot (and, inclusive, equal it): a binary
// search over positions.
func rank(tree *btree.BTreeG[sortEntry], less func(a, b sortEntry) bool, pivot sortEntry, inclusive bool) int {
	lo, hi := 0, tree.Len()
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		e, _ := tree.GetAt(mid)
		before := less(e, pivot) || (inclusive && !less(pivot, e))
		if before {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}
