package server

import (
	"container/heap"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/filters"
	"github.com/multicache/multicache/pkg/watchcache"
)

// item is one object of an answer, with the watch cache's sequence of the event that made
// it when known (watchcache.Cache.Sequence).
type item = watchcache.Item

// less orders keys as every answer does: cluster, namespace, name.
func less(a, b aggregate.Key) bool { return watchcache.CompareKeys(a, b) < 0 }

// request is a parsed list or watch request on one resource.
type request struct {
	resource string
	agg      *aggregate.Aggregate
	query    aggregate.Query
	// leftOut are the clusters of the fleet the caller may not read.
	leftOut []string
}

// parseRequest resolves the resource and parses the query; it writes the error answer when it
// fails.
func (s *Server) parseRequest(w http.ResponseWriter, r *http.Request) (request, bool) {
	res, agg, ok := s.aggregate(w, r)
	if !ok {
		return request{}, false
	}
	q, err := parseQuery(agg, r.URL.Query())
	if err != nil {
		filters.WriteError(w, http.StatusBadRequest, err.Error())
		return request{}, false
	}
	// A namespace filter on a cluster-scoped resource is ignored, as kubectl ignores -n.
	if q.Namespace != "" && q.Index != aggregate.IndexNamespace && !s.namespaced(res) {
		q.Namespace = ""
	}
	only := s.partOf(r.URL.Query())
	named := q.Clusters
	if named != nil {
		if named = narrow(named, only); len(named) == 0 {
			q.Clusters = []string{noCluster} // the clusters named are none of this part's
			return request{resource: res, agg: agg, query: q}, true
		}
	}
	// A part's clusters are its plan's, started here yet or not (planguard.go).
	scoped := s.reg.Clusters()
	if only != nil {
		scoped = s.plannedFor(res, only)
	}
	clusters, leftOut, err := s.scope(r.Context(), res, named, scoped)
	if err != nil {
		writeScopeError(w, err)
		return request{}, false
	}
	if clusters != nil {
		q.Clusters = clusters
	}
	if q.Clusters = narrow(q.Clusters, only); only != nil && len(q.Clusters) == 0 {
		q.Clusters = []string{noCluster} // narrowed to none of this part's: never "every cluster"
	}
	return request{resource: res, agg: agg, query: q, leftOut: leftOut}, true
}

// handleList answers a page of a list, or hands a watch to handleWatch.
func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	req, ok := s.parseRequest(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	opts, err := listOptions(q)
	if err != nil {
		filters.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	if opts.Watch {
		s.limits.Watch(w, func() { s.handleWatch(w, r, req) })
		return
	}
	s.limits.Request(w, func() {
		ctx, cancel := context.WithTimeout(r.Context(), s.opts.RequestTimeout)
		defer cancel()
		if pg, list, ok := s.nativeListAnswer(ctx, w, req, q, opts); ok {
			if err := s.writeList(w, pg.items, pg.info, list); err != nil {
				filters.WriteError(w, http.StatusInternalServerError, err.Error())
			}
		}
	})
}

// nativeListAnswer reads a page of a native list: its items, and the list without them. It
// answers errors itself; ok is false when it did.
func (s *Server) nativeListAnswer(ctx context.Context, w http.ResponseWriter, req request, q url.Values, opts metav1.ListOptions) (page, api.List, bool) {
	limit, err := nativeLimit(opts, q, s.opts.MaxPageSize)
	if err != nil {
		filters.WriteError(w, http.StatusBadRequest, err.Error())
		return page{}, api.List{}, false
	}
	var after *aggregate.Key
	var listed *watchcache.Position // the position of the list a continue token resumes
	if tok := q.Get("continue"); tok != "" {
		c, err := watchcache.ParseContinue(tok)
		if err != nil {
			filters.WriteError(w, http.StatusBadRequest, err.Error())
			return page{}, api.List{}, false
		}
		k := c.After()
		after = &k
		if !c.Merged() && c.Epoch != "" {
			listed = &c.Position
		} // a merged list's page, now answered here alone: its position is this one's
	}
	pos := s.caches[req.resource].Position() // before the stores are read: the list reflects every event up to it
	pg, err := s.selectPage(req, after, limit)
	if err != nil {
		filters.WriteError(w, http.StatusBadRequest, err.Error())
		return page{}, api.List{}, false
	}
	if ctx.Err() != nil {
		filters.WriteError(w, http.StatusGatewayTimeout, "request timed out")
		return page{}, api.List{}, false
	}
	if listed != nil {
		pos = *listed
	}
	list := api.List{ResourceVersion: pos.String()}
	if pg.more {
		list.Continue = watchcache.Continue{Last: pg.items[len(pg.items)-1].Key.String(), Position: pos}.String()
	}
	list.Clusters, pg.info = s.freshness(req, pg.fresh)
	return pg, list, true
}

// page is one page of a list answer.
type page struct {
	items []item // sorted by key
	more  bool   // items follow the last one
	// fresh is, per cluster read, whether its selection was fresh (aggregate.Result.Unsynced).
	fresh map[string]bool
	info  resourceInfo
}

// selectPage answers req from the aggregate: the first limit items after the key after (all
// keys when nil), in key order. It looks at each selected object once and keeps only the
// limit+1 smallest keys in a bounded heap, so a page of 100 out of 500,000 objects costs no
// sort of 500,000. Keys sort by cluster first, so it reads the clusters in order and stops
// at the first cluster that completes the page: later clusters cannot contribute.
func (s *Server) selectPage(req request, after *aggregate.Key, limit int) (page, error) {
	pg := page{fresh: map[string]bool{}}
	h := &keyHeap{}
	for _, c := range req.agg.Clusters() {
		if (len(req.query.Clusters) > 0 && !slices.Contains(req.query.Clusters, c)) || (after != nil && c < after.Cluster) {
			continue
		}
		if len(*h) > limit {
			break
		}
		q := req.query
		q.Clusters = []string{c}
		result, err := req.agg.Select(q)
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
	items := []item(*h)
	sort.Slice(items, func(i, j int) bool { return less(items[i].Key, items[j].Key) })
	if len(items) > limit {
		pg.more, items = true, items[:limit]
	}
	pg.items = items
	return pg, nil
}

// keyed yields the items of result with their keys.
func keyed(result aggregate.Result) func(yield func(item) bool) {
	return func(yield func(item) bool) {
		for _, it := range result.Items {
			k, err := aggregate.KeyOf(it.Cluster, it.Object)
			if err != nil {
				continue
			}
			if !yield(item{Key: k, Object: it.Object}) {
				return
			}
		}
	}
}

// keyHeap is a max-heap of items by key: the root is the largest key kept.
type keyHeap []item

func (h keyHeap) Len() int           { return len(h) }
func (h keyHeap) Less(i, j int) bool { return less(h[j].Key, h[i].Key) }
func (h keyHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *keyHeap) Push(x any)        { *h = append(*h, x.(item)) }
func (h *keyHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// handleGet answers one object as an api.Item.
func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) {
	res, agg, ok := s.aggregate(w, r)
	if !ok {
		return
	}
	ns := r.PathValue("namespace")
	if ns == "_" {
		ns = ""
	}
	k := aggregate.Key{Cluster: r.PathValue("cluster"), Namespace: ns, Name: r.PathValue("name")}
	if err := k.Validate(); err != nil {
		filters.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	if _, _, err := s.scope(r.Context(), res, []string{k.Cluster}, nil); err != nil {
		writeScopeError(w, err)
		return
	}
	obj, exists, err := agg.Get(k)
	if err != nil {
		filters.WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	// Planned here and not complete yet (a move under way): not a 404.
	if !exists && slices.Contains(s.partOf(r.URL.Query()), k.Cluster) && retryUnready(w, res, s.unready(res, []string{k.Cluster})) {
		return
	}
	if !exists {
		msg := fmt.Sprintf("%s %q not found in cluster %q", res, k.ObjectKey(), k.Cluster)
		if !slices.Contains(agg.Clusters(), k.Cluster) {
			msg = fmt.Sprintf("cluster %q does not serve %s here (unknown cluster or resource not served)", k.Cluster, res)
		}
		filters.WriteError(w, http.StatusNotFound, msg)
		return
	}
	if err := s.writeItem(w, k.Cluster, obj, s.info(res)[k.Cluster]); err != nil {
		filters.WriteError(w, http.StatusInternalServerError, err.Error())
	}
}
