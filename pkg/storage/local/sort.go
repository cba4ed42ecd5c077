package local

import (
	"container/heap"
	"context"
	"net/http"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/index"
	"github.com/multicache/multicache/pkg/storage"
	"github.com/multicache/multicache/pkg/watchcache"
)

// sorting is a sorted list's order: the values its path reads of an object (of what the caller
// may read of it), ascending or descending (storage.CompareSorted).
type sorting struct {
	by   string
	path string // by in one spelling: metadata.name for {.metadata.name} or .metadata.name
	desc bool
	read cache.IndexFunc
	view func(any) any
}

// sortingOf compiles opts' order; nil without SortBy. A path that does not parse is a 400 that
// names sortBy.
func sortingOf(opts storage.ListOptions, sel *selected) (*sorting, error) {
	by := strings.TrimSpace(opts.SortBy)
	if by == "" && opts.SortBy != "" {
		return nil, storage.Error(http.StatusBadRequest, "sortBy: empty path")
	}
	if by == "" {
		if opts.Desc {
			return nil, storage.Error(http.StatusBadRequest, "order: desc needs sortBy")
		}
		return nil, nil
	}
	srt := &sorting{by: opts.SortBy, path: barePath(by), desc: opts.Desc, view: readView(sel.secrets, sel.allowSecretData)}
	path := by
	if !strings.HasPrefix(path, "{") && !strings.HasPrefix(path, ".") && !strings.HasPrefix(path, "$") {
		path = "." + path // metadata.name, as kubectl's --sort-by takes it
	}
	// Every path is parsed, those metaSort reads too, so that one that does not parse
	// ({.metadata.name, its brace unclosed) is refused whichever way it would be read.
	read, err := index.Compile(index.Spec{Name: "sortBy", JSONPath: path})
	if err != nil {
		return nil, storage.Errorf(http.StatusBadRequest, "sortBy %q: %v", opts.SortBy, err)
	}
	if fast, ok := metaSort(by); ok {
		read = fast
	}
	srt.read = read
	return srt, nil
}

// metaSort reads the paths lists sort by most through the object's accessor or a typed Pod's
// fields (PathFields), not by reflection: the same values the JSONPath gives.
func metaSort(path string) (cache.IndexFunc, bool) {
	var get func(m metav1.Object) string
	bare := barePath(path)
	switch bare {
	case "metadata.name":
		get = metav1.Object.GetName
	case "metadata.namespace":
		get = metav1.Object.GetNamespace
	case "metadata.creationTimestamp":
		get = func(m metav1.Object) string {
			t := m.GetCreationTimestamp()
			if t.IsZero() {
				return ""
			}
			return t.UTC().Format(time.RFC3339)
		}
	default:
		if read, ok := PathFields[bare]; ok {
			// spec.nodeName, status.phase: read without reflection ("" is no value).
			return func(obj any) ([]string, error) {
				vals := read(obj)
				if len(vals) == 0 || vals[0] == "" {
					return nil, nil
				}
				return vals, nil
			}, true
		}
		return nil, false
	}
	return func(obj any) ([]string, error) {
		m, err := meta.Accessor(obj)
		if err != nil {
			return nil, nil
		}
		if v := get(m); v != "" {
			return []string{v}, nil
		}
		return nil, nil
	}, true
}

// barePath is a sort path without its JSONPath braces, root and leading dot.
func barePath(path string) string {
	return strings.TrimPrefix(strings.TrimPrefix(strings.Trim(path, "{}"), "$"), ".")
}

// value is obj's sort value.
func (s *sorting) value(obj any) string {
	if s.view != nil {
		obj = s.view(obj)
	}
	vals, _ := s.read(obj)
	return storage.SortValue(vals)
}

// sortedItem is an item of a sorted page with its sort value.
type sortedItem struct {
	watchcache.Item
	sort string
}

func (it sortedItem) cmp(o sortedItem, desc bool) int {
	return storage.CompareSorted(storage.Item{Key: it.Key, Sort: it.sort}, storage.Item{Key: o.Key, Sort: o.sort}, desc)
}

// sortedPage answers a sorted page: the first limit items after the cursor in the list's
// order, of every selected object, from the order's sort index when one answers (indexedPage);
// otherwise every selected object is read (any cluster may hold the next one), keeping only
// the limit+1 first in a bounded heap. It counts what it reads: total, and before the cursor.
func sortedPage(ctx context.Context, sel *selected, srt *sorting, cur *sortedItem, limit int) (page, error) {
	if pg, ok := indexedPage(sel, srt, cur, limit); ok {
		return pg, nil
	}
	return scanSortedPage(ctx, sel, srt, cur, limit)
}

// scanSortedPage is sortedPage without an index.
func scanSortedPage(ctx context.Context, sel *selected, srt *sorting, cur *sortedItem, limit int) (page, error) {
	pg := page{fresh: map[string]bool{}}
	h := &sortHeap{desc: srt.desc}
	for _, c := range sel.candidates() {
		q := sel.query
		q.Clusters = []string{c}
		result, err := sel.agg.Select(q)
		if err != nil {
			return page{}, err
		}
		pg.fresh[c] = len(result.Unsynced) == 0
		for it := range keyed(result) {
			si := sortedItem{Item: it, sort: srt.value(it.Object)}
			pg.total++
			if cur != nil && si.cmp(*cur, srt.desc) <= 0 {
				pg.before++
				continue
			}
			h.offer(si, limit)
		}
		if ctx.Err() != nil {
			return page{}, ctx.Err()
		}
	}
	pg.setSorted(h.items, srt.desc, limit)
	return pg, nil
}

// indexedPage answers a sorted page from the aggregate's sort index of its order, when it has
// one that answers (aggregate.SortedAfter: an order asked again, a list with no filter but
// clusters), and not where the sort value is read of a redacted view (Secrets), which is the
// caller's, nor for pages over aggregate.MaxSortedPage. Each ask counts towards learning the
// order.
func indexedPage(sel *selected, srt *sorting, cur *sortedItem, limit int) (page, bool) {
	clusters := sel.candidates()
	if srt.view != nil || len(clusters) == 0 {
		return page{}, false
	}
	q := sel.query
	q.Clusters = clusters
	order := "asc"
	if srt.desc {
		order = "desc"
	}
	var after *aggregate.SortPosition
	if cur != nil {
		after = &aggregate.SortPosition{Value: cur.sort, Key: cur.Key}
	}
	ip, ok := sel.agg.SortedAfter(q, aggregate.Sorter{Name: order + " " + srt.path, Value: srt.value, Desc: srt.desc}, after, limit)
	if !ok {
		return page{}, false
	}
	pg := page{more: ip.More, total: ip.Total, before: ip.Before, fresh: map[string]bool{},
		items: make([]watchcache.Item, len(ip.Items)), sorts: make([]string, len(ip.Items))}
	for i, it := range ip.Items {
		pg.items[i], pg.sorts[i] = watchcache.Item{Key: it.Key, Object: it.Object}, it.Value
	}
	return pg, true
}

// setSorted makes items, in any order, the page: sorted, cut at limit.
func (pg *page) setSorted(items []sortedItem, desc bool, limit int) {
	slices.SortFunc(items, func(a, b sortedItem) int { return a.cmp(b, desc) })
	if len(items) > limit {
		pg.more, items = true, items[:limit]
	}
	pg.items = make([]watchcache.Item, len(items))
	pg.sorts = make([]string, len(items))
	for i, it := range items {
		pg.items[i], pg.sorts[i] = it.Item, it.sort
	}
}

// sortHeap keeps the first items of a list in its order (key order when no item has a sort
// value): a max-heap in that order, whose root is the last item kept.
type sortHeap struct {
	desc  bool
	items []sortedItem
}

// offer keeps it if it is among the limit+1 first seen.
func (h *sortHeap) offer(it sortedItem, limit int) {
	if len(h.items) <= limit {
		heap.Push(h, it)
	} else if it.cmp(h.items[0], h.desc) < 0 {
		h.items[0] = it
		heap.Fix(h, 0)
	}
}

func (h *sortHeap) Len() int           { return len(h.items) }
func (h *sortHeap) Less(i, j int) bool { return h.items[j].cmp(h.items[i], h.desc) < 0 }
func (h *sortHeap) Swap(i, j int)      { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *sortHeap) Push(x any)         { h.items = append(h.items, x.(sortedItem)) }
func (h *sortHeap) Pop() any {
	x := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	return x
}

// countClusters adds to pg the objects sel selects in clusters, which the page did not read:
// to total, and to before those of clusters the page's cursor is past.
func countClusters(ctx context.Context, sel *selected, pg *page, clusters []string, after *aggregate.Key) error {
	if len(clusters) == 0 {
		return nil
	}
	byCluster, err := aggregate.ParseGroupKey("cluster")
	if err != nil {
		return err
	}
	q := sel.query
	q.Clusters = clusters
	sum, err := sel.agg.SummarizeKeysContext(ctx, q, []aggregate.GroupKey{byCluster})
	if err != nil {
		return err
	}
	for _, g := range sum.Groups {
		pg.total += int64(g.Count)
		if after != nil && g.Key[0] != nil && *g.Key[0] < after.Cluster {
			pg.before += int64(g.Count)
		}
	}
	return nil
}
