package local

import (
	"container/heap"
	"context"
	"math"
	"net/http"
	"slices"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/storage"
	"github.com/multicache/multicache/pkg/watchcache"
)

// List reads a page of a list: from the stores, or, for an exact position, from the watch
// cache's snapshot at it (410 once the events after it are gone).
//
// Its position is read before the stores are, so a watch from it may repeat a change the list
// showed and never misses one; an item whose newest event the cache has put after that
// position (the stores run ahead of the cache) shows the list's position, so that no item is
// newer than its list.
func (s *Storage) List(ctx context.Context, opts storage.ListOptions) (*storage.List, error) {
	v := s.view()
	sel, err := s.selectFor(ctx, v, opts.Selection)
	if err != nil {
		return nil, err
	}
	if opts.Limit < 0 {
		return nil, storage.Errorf(http.StatusBadRequest, "limit %d: want a non-negative integer", opts.Limit)
	}
	limit := math.MaxInt32
	if opts.Limit > 0 {
		limit = int(min(opts.Limit, math.MaxInt32))
	}
	if err := s.awaitPlanned(ctx, sel); err != nil {
		return nil, err
	}
	lp, err := listPosition(sel.hub, opts)
	if err != nil {
		return nil, err
	}
	var pg page
	switch {
	case sel.none:
	case lp.exact:
		items, err := sel.hub.Snapshot(lp.pos, sel.query.Clusters)
		if err != nil {
			return nil, storage.Error(http.StatusGone, "resourceVersion expired: "+err.Error())
		}
		pg = pageOf(items, func(it watchcache.Item) bool { return sel.matches(it.Key.Cluster, it.Object) }, lp.after, limit)
	default:
		if pg, err = selectPage(sel, lp.after, limit); err != nil {
			return nil, storage.Error(http.StatusBadRequest, err.Error())
		}
	}
	if ctx.Err() != nil {
		return nil, storage.Error(http.StatusGatewayTimeout, "request timed out")
	}
	if err := whereFailed(sel.where); err != nil {
		return nil, err
	}
	if err := s.recheckPlanned(sel); err != nil {
		return nil, err
	}
	if !lp.exact {
		sel.hub.Sequence(pg.items) // a snapshot's items have theirs
	}
	out := &storage.List{Items: make([]storage.Item, len(pg.items)), ResourceVersion: lp.pos.String(), Epoch: lp.pos.Epoch}
	for i, it := range pg.items {
		out.Items[i] = storage.Item{Key: it.Key, Object: sel.redact(it.Object), Seq: min(it.Seq, lp.pos.Seq)}
	}
	if pg.more {
		out.Continue = watchcache.Continue{Last: pg.items[len(pg.items)-1].Key.String(), Position: lp.pos, Exact: lp.exact}.String()
	}
	out.Freshness = sel.freshness(pg.fresh)
	return out, nil
}

// listAt is where a list reads: at the watch cache's position now (from the stores, which may
// be ahead of it), or exactly at an earlier one (from the watch cache's snapshot).
type listAt struct {
	pos   watchcache.Position
	exact bool
	after *aggregate.Key // continue after this key
}

// listPosition reads the resourceVersion, resourceVersionMatch and continue of opts, as
// kube-apiserver validates them. A resourceVersion of another run is 410. A continue token of
// any list continues after its key: at its own position when it is this replica's, from now
// when it is a merged answer's, which an exact list cannot do (410).
func listPosition(h *watchcache.Cache, opts storage.ListOptions) (listAt, error) {
	rv, rvm, cont := opts.ResourceVersion, opts.ResourceVersionMatch, opts.Continue
	switch rvm {
	case "", metav1.ResourceVersionMatchNotOlderThan, metav1.ResourceVersionMatchExact:
	default:
		return listAt{}, storage.Errorf(http.StatusBadRequest, "resourceVersionMatch %q: want NotOlderThan or Exact", rvm)
	}
	if rvm != "" && rv == "" {
		return listAt{}, storage.Error(http.StatusBadRequest, "resourceVersionMatch is forbidden unless resourceVersion is provided")
	}
	if cont != "" {
		if rv != "" && rv != "0" {
			return listAt{}, storage.Error(http.StatusBadRequest, "specifying resourceVersion is not allowed when using continue")
		}
		c, err := watchcache.ParseContinue(cont)
		if err != nil {
			return listAt{}, storage.Error(http.StatusBadRequest, err.Error())
		}
		after := c.After()
		if c.Merged() || c.Epoch == "" {
			if c.Exact {
				return listAt{}, storage.Error(http.StatusGone, "continue expired: the list was answered by other replicas, and this one answers it alone now; list again")
			}
			return listAt{pos: h.Position(), after: &after}, nil
		}
		return listAt{pos: c.Position, exact: c.Exact, after: &after}, nil
	}
	if rvm == metav1.ResourceVersionMatchExact {
		if rv == "0" {
			return listAt{}, storage.Error(http.StatusBadRequest, "resourceVersionMatch Exact is forbidden for resourceVersion 0")
		}
		t, err := watchcache.ParseSingle(rv)
		if err != nil {
			return listAt{}, positionError(err)
		}
		return listAt{pos: t, exact: true}, nil
	}
	if rv != "" && rv != "0" {
		// NotOlderThan (or the legacy unset match): the cache now is at least as new as any
		// position of this run. A position of another run cannot be compared: 410, relist.
		t, err := watchcache.ParseSingle(rv)
		if err != nil {
			return listAt{}, positionError(err)
		}
		if t.Epoch != h.Position().Epoch {
			return listAt{}, storage.Errorf(http.StatusGone, "resourceVersion %s comes from an earlier run of the daemon, or the watch cache was reset since; list again", rv)
		}
	}
	return listAt{pos: h.Position()}, nil
}

// positionError is the refusal of a position that cannot be read: 410 when it is gone, 400
// when it is malformed.
func positionError(err error) error {
	if watchcache.IsGone(err) {
		return storage.Error(http.StatusGone, err.Error())
	}
	return storage.Error(http.StatusBadRequest, err.Error())
}

// page is one page of a list answer.
type page struct {
	items []watchcache.Item // sorted by key
	more  bool              // items follow the last one
	// fresh is, per cluster read, whether its selection was fresh (aggregate.Result.Unsynced).
	fresh map[string]bool
}

// selectPage answers sel from the aggregate: the first limit items after the key after (all
// keys when nil), in key order. It looks at each selected object once and keeps only the
// limit+1 smallest keys in a bounded heap, so a page of 100 out of 500,000 objects costs no
// sort of 500,000. Keys sort by cluster first, so it reads the clusters in order and stops at
// the first cluster that completes the page: later clusters cannot contribute.
func selectPage(sel *selected, after *aggregate.Key, limit int) (page, error) {
	pg := page{fresh: map[string]bool{}}
	h := &keyHeap{}
	for _, c := range sel.agg.Clusters() {
		if (sel.query.Clusters != nil && !slices.Contains(sel.query.Clusters, c)) || !sel.byCluster.Matches(c) || (after != nil && c < after.Cluster) {
			continue
		}
		if len(*h) > limit {
			break
		}
		q := sel.query
		q.Clusters = []string{c}
		result, err := sel.agg.Select(q)
		if err != nil {
			return page{}, err
		}
		pg.fresh[c] = len(result.Unsynced) == 0
		for it := range keyed(result) {
			if after != nil && !less(*after, it.Key) {
				continue
			}
			if len(*h) <= limit {
				heap.Push(h, it)
			} else if less(it.Key, (*h)[0].Key) {
				(*h)[0] = it
				heap.Fix(h, 0)
			}
		}
	}
	items := []watchcache.Item(*h)
	sort.Slice(items, func(i, j int) bool { return less(items[i].Key, items[j].Key) })
	if len(items) > limit {
		pg.more, items = true, items[:limit]
	}
	pg.items = items
	return pg, nil
}

// pageOf is the page of items that keep accepts after the key after, in key order.
func pageOf(items []watchcache.Item, keep func(watchcache.Item) bool, after *aggregate.Key, limit int) page {
	pg := page{}
	for _, it := range items {
		if (after == nil || less(*after, it.Key)) && keep(it) {
			pg.items = append(pg.items, it)
		}
	}
	sort.Slice(pg.items, func(i, j int) bool { return less(pg.items[i].Key, pg.items[j].Key) })
	if len(pg.items) > limit {
		pg.more, pg.items = true, pg.items[:limit]
	}
	return pg
}

// less orders keys as every answer does: cluster, namespace, name.
func less(a, b aggregate.Key) bool { return watchcache.CompareKeys(a, b) < 0 }

// keyHeap is a max-heap of items by key: the root is the largest key kept.
type keyHeap []watchcache.Item

func (h keyHeap) Len() int           { return len(h) }
func (h keyHeap) Less(i, j int) bool { return less(h[j].Key, h[i].Key) }
func (h keyHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *keyHeap) Push(x any)        { *h = append(*h, x.(watchcache.Item)) }
func (h *keyHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Get reads the objects of a name in the clusters the selection spans. In a plan, a cluster
// of it not complete here is 429, before and after the read.
func (s *Storage) Get(ctx context.Context, opts storage.GetOptions) (*storage.List, error) {
	v := s.view()
	sel, err := s.selectFor(ctx, v, opts.Selection)
	if err != nil {
		return nil, err
	}
	if opts.Name == "" {
		return nil, storage.Error(http.StatusBadRequest, "name: required")
	}
	out := &storage.List{Epoch: sel.hub.Position().Epoch, ResourceVersion: sel.hub.Position().String()}
	clusters := sel.clusters()
	if sel.none {
		out.Freshness = sel.freshness(nil)
		return out, nil
	}
	if err := s.awaitPlanned(ctx, sel); err != nil {
		return nil, err
	}
	if opts.Selection.Clusters == nil && sel.query.Clusters == nil {
		clusters = sel.byCluster.Select(sel.agg.Clusters())
	}
	var found []watchcache.Item
	for _, c := range clusters {
		k := aggregate.Key{Cluster: c, Namespace: sel.query.Namespace, Name: opts.Name}
		if !sel.info.namespaced() {
			k.Namespace = ""
		}
		obj, exists, err := sel.agg.Get(k)
		if err != nil {
			return nil, storage.Error(http.StatusInternalServerError, err.Error())
		}
		if exists && sel.agg.Matches(sel.query, c, obj) {
			found = append(found, watchcache.Item{Key: k, Object: obj})
		}
	}
	if err := s.recheckPlanned(sel); err != nil {
		return nil, err
	}
	if err := whereFailed(sel.where); err != nil {
		return nil, err
	}
	sel.hub.Sequence(found)
	for _, it := range found {
		out.Items = append(out.Items, storage.Item{Key: it.Key, Object: sel.redact(it.Object), Seq: it.Seq})
	}
	out.Freshness = sel.freshness(nil)
	return out, nil
}
