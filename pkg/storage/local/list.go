package local

import (
	"context"
	"fmt"
	"math"
	"net/http"

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
	v := s.view(ctx)
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
	if opts.CountOnly {
		limit = 0 // what the page reads is counted; none of it is answered
	}
	srt, err := sortingOf(opts, sel)
	if err != nil {
		return nil, err
	}
	if err := s.awaitPlanned(ctx, sel); err != nil {
		return nil, err
	}
	lp, err := listPosition(sel.hub, opts)
	if err != nil {
		return nil, err
	}
	var cur *sortedItem // the item the page continues after
	if lp.after != nil {
		cur = &sortedItem{Item: watchcache.Item{Key: *lp.after}, sort: lp.sort}
	}
	var pg page
	switch {
	case sel.none:
	case lp.exact:
		items, err := sel.hub.Snapshot(lp.pos, sel.query.Clusters)
		if err != nil {
			return nil, storage.Error(http.StatusGone, "resourceVersion expired: "+err.Error())
		}
		pg = pageOf(items, func(it watchcache.Item) bool { return sel.matches(it.Key.Cluster, it.Object) }, srt, cur, limit)
	case srt != nil:
		pg, err = sortedPage(ctx, sel, srt, cur, limit)
	default:
		pg, err = selectPage(ctx, sel, lp.after, limit, opts.Count || opts.CountOnly)
	}
	if ctx.Err() != nil {
		return nil, storage.Error(http.StatusGatewayTimeout, "request timed out")
	}
	if err != nil {
		return nil, storage.Error(http.StatusBadRequest, err.Error())
	}
	if err := whereFailed(sel.where); err != nil {
		return nil, err
	}
	if err := s.recheckPlanned(sel); err != nil {
		return nil, err
	}
	out := &storage.List{ResourceVersion: lp.pos.String(), Epoch: lp.pos.Epoch}
	if opts.Count || opts.CountOnly {
		out.Count = &storage.Count{Total: pg.total, Before: pg.before}
	}
	out.Freshness = sel.freshness(pg.fresh)
	if opts.CountOnly {
		return out, nil
	}
	if !lp.exact {
		sel.hub.Sequence(pg.items) // a snapshot's items have theirs
	}
	out.Items = make([]storage.Item, len(pg.items))
	for i, it := range pg.items {
		out.Items[i] = storage.Item{Key: it.Key, Object: sel.redact(it.Object), Seq: min(it.Seq, lp.pos.Seq)}
		if pg.sorts != nil {
			out.Items[i].Sort = pg.sorts[i]
		}
	}
	if pg.more {
		c := watchcache.Continue{Last: pg.items[len(pg.items)-1].Key.String(), Position: lp.pos, Exact: lp.exact}
		if srt != nil {
			c.SortBy, c.Desc, c.Sort = srt.by, srt.desc, pg.sorts[len(pg.sorts)-1]
		}
		out.Continue = c.String()
	}
	return out, nil
}

// listAt is where a list reads: at the watch cache's position now (from the stores, which may
// be ahead of it), or exactly at an earlier one (from the watch cache's snapshot).
type listAt struct {
	pos   watchcache.Position
	exact bool
	after *aggregate.Key // continue after this key
	sort  string         // and, in a sorted list, after this sort value
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
		if c.SortBy != opts.SortBy || c.Desc != opts.Desc {
			return listAt{}, storage.Errorf(http.StatusBadRequest, "continue: the token continues a list %s; ask with the same sortBy and order", orderText(c.SortBy, c.Desc))
		}
		after := c.After()
		if c.Merged() || c.Epoch == "" {
			if c.Exact {
				return listAt{}, storage.Error(http.StatusGone, "continue expired: the list was answered by other replicas, and this one answers it alone now; list again")
			}
			return listAt{pos: h.Position(), after: &after, sort: c.Sort}, nil
		}
		return listAt{pos: c.Position, exact: c.Exact, after: &after, sort: c.Sort}, nil
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

// orderText says in words how a list is sorted.
func orderText(sortBy string, desc bool) string {
	switch {
	case sortBy == "":
		return "in key order (no sortBy)"
	case desc:
		return fmt.Sprintf("sorted by %q, descending", sortBy)
	}
	return fmt.Sprintf("sorted by %q, ascending", sortBy)
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
	items []watchcache.Item // in the list's order
	sorts []string          // of a sorted list: each item's sort value
	more  bool              // items follow the last one
	// fresh is, per cluster read, whether its selection was fresh (aggregate.Result.Unsynced).
	fresh map[string]bool
	// total counts the items the list spans, before those at or before its cursor, when
	// counted.
	total, before int64
}

// selectPage answers sel from the aggregate: the first limit items after the key after (all
// keys when nil), in key order. It looks at each selected object once and keeps only the
// limit+1 smallest keys in a bounded heap, so a page of 100 out of 500,000 objects costs no
// sort of 500,000. Keys sort by cluster first, so it reads the clusters in order and stops at
// the first cluster that completes the page: later clusters cannot contribute. Within a
// cluster, keys sort by namespace next: where namespaceWalk allows, it reads the cluster's
// namespaces in order through the namespace index, from the cursor's, and stops at the first
// that completes the page (a first page of 500 over clusters of 20 namespaces of 1,000 reads
// 1,000 objects, not 20,000). With count, the clusters and namespaces it did not read are
// counted without reading their objects (countClusters, namespaceCounts; without a filter, the
// aggregate's counts).
func selectPage(ctx context.Context, sel *selected, after *aggregate.Key, limit int, count bool) (page, error) {
	pg := page{fresh: map[string]bool{}}
	h := &sortHeap{} // no sort value: key order
	var unread []string
	for _, c := range sel.candidates() {
		// A count alone (limit 0) reads only the cursor's cluster, whose items are split
		// around it; the others are counted whole.
		countOnly := limit == 0 && (after == nil || c != after.Cluster)
		if (after != nil && c < after.Cluster) || h.Len() > limit || countOnly {
			unread = append(unread, c)
			continue
		}
		q := sel.query
		q.Clusters = []string{c}
		read := func(q aggregate.Query) error {
			result, err := sel.agg.Select(q)
			if err != nil {
				return err
			}
			if f, seen := pg.fresh[c]; !seen || f {
				pg.fresh[c] = len(result.Unsynced) == 0
			}
			for it := range keyed(result) {
				pg.total++
				if after != nil && !less(*after, it.Key) {
					pg.before++
					continue
				}
				h.offer(sortedItem{Item: it}, limit)
			}
			return nil
		}
		namespaces := namespaceWalk(sel, c, limit, count)
		if namespaces == nil {
			if err := read(q); err != nil {
				return page{}, err
			}
			continue
		}
		// One namespace at a time, in key order: a namespace after the one that completes
		// the page, or before the cursor's, holds no key the page can answer, and is counted
		// without a look at its objects.
		var counts map[string]int64
		if count {
			var err error
			if counts, err = namespaceCounts(ctx, sel, c); err != nil {
				return page{}, err
			}
		}
		for _, ns := range namespaces {
			switch {
			case after != nil && c == after.Cluster && ns < after.Namespace:
				pg.total += counts[ns]
				pg.before += counts[ns]
			case h.Len() > limit:
				pg.total += counts[ns]
			default:
				q.Namespace = ns
				if err := read(q); err != nil {
					return page{}, err
				}
			}
		}
	}
	if count {
		if err := countClusters(ctx, sel, &pg, unread, after); err != nil {
			return page{}, err
		}
	}
	pg.setSorted(h.items, false, limit)
	pg.sorts = nil
	return pg, nil
}

// namespaceWalk is cluster c's namespaces in key order when selectPage may read them one at a
// time through the namespace index, and nil when it reads the cluster whole: for a list
// without a limit (it reads every namespace anyway, and one read of the cluster is one moment
// of it), a resource that is not namespaced, a selection that already names a namespace or an
// index, a cluster with fewer than two namespaces (or objects without one), and, when the page
// is counted (count), a selection that filters objects (a namespace the page skips would then
// be counted by reading its objects).
//
// Each namespace is then read at its own moment, not the cluster at one: a namespace that
// appears after Namespaces is not read by this page, as an object created after a cluster was
// read is not. Either's events come after the list's position, so a watch from it sees them.
func namespaceWalk(sel *selected, c string, limit int, count bool) []string {
	q := sel.query
	if limit >= math.MaxInt32 || q.Index != "" || q.Namespace != "" || !sel.info.namespaced() {
		return nil
	}
	if count && ((q.Labels != nil && !q.Labels.Empty()) || len(q.Fields) > 0) {
		return nil
	}
	// "" is no namespace to Select (every object): a store holding objects without one is read
	// whole.
	if ns := sel.agg.Namespaces(c); len(ns) > 1 && ns[0] != "" {
		return ns
	}
	return nil
}

// namespaceCounts is how many objects of cluster c the selection spans in each namespace: from
// the aggregate's namespace counts (kept by default: one entry per namespace, trailing the
// store by what its handler has not had yet, as the counts of clusters a page does not read
// do), or else its namespace index (a key per object), reading no object (namespaceWalk asks
// only for a selection that filters none). A counted page is an answer of those counts.
func namespaceCounts(ctx context.Context, sel *selected, c string) (map[string]int64, error) {
	byNamespace, err := aggregate.ParseGroupKey("namespace")
	if err != nil {
		return nil, err
	}
	q := sel.query
	q.Clusters = []string{c}
	sum, err := sel.agg.SummarizeKeysContext(ctx, q, []aggregate.GroupKey{byNamespace})
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(sum.Groups))
	for _, g := range sum.Groups {
		if g.Key[0] != nil {
			out[*g.Key[0]] += int64(g.Count)
		}
	}
	return out, nil
}

// pageOf is the page of items that keep accepts after the cursor cur, in the list's order (srt,
// or key order when nil), counted.
func pageOf(items []watchcache.Item, keep func(watchcache.Item) bool, srt *sorting, cur *sortedItem, limit int) page {
	pg := page{}
	desc := srt != nil && srt.desc
	var kept []sortedItem
	for _, it := range items {
		if !keep(it) {
			continue
		}
		si := sortedItem{Item: it}
		if srt != nil {
			si.sort = srt.value(it.Object)
		}
		pg.total++
		if cur != nil && si.cmp(*cur, desc) <= 0 {
			pg.before++
			continue
		}
		kept = append(kept, si)
	}
	pg.setSorted(kept, desc, limit)
	if srt == nil {
		pg.sorts = nil
	}
	return pg
}

// less orders keys as every answer does: cluster, namespace, name.
func less(a, b aggregate.Key) bool { return watchcache.CompareKeys(a, b) < 0 }

// Get reads the objects of a name in the clusters the selection spans. In a plan, a cluster
// of it not complete here is 429, before and after the read.
func (s *Storage) Get(ctx context.Context, opts storage.GetOptions) (*storage.List, error) {
	v := s.view(ctx)
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
		if exists && sel.matches(c, obj) {
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
