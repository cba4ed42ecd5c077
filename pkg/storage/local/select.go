package local

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/auth"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/index"
	"github.com/multicache/multicache/pkg/storage"
	"github.com/multicache/multicache/pkg/watchcache"
)

// selected is a Selection resolved against this replica, for the caller of the request: one
// meaning for every read of both APIs.
type selected struct {
	resource string
	agg      *aggregate.Aggregate
	hub      *watchcache.Cache
	info     resourceInfo // nil once a watch is open: a running watch reads no status (Storage.Watch)
	// query selects the objects. Its Clusters are the clusters read, nil for every cluster
	// (a caller who may read all of them, outside a plan), when byCluster then selects among
	// them, per object.
	query     aggregate.Query
	byCluster storage.ClusterSelector
	// none: the selection spans no cluster (query.Clusters is [noCluster]).
	none bool
	// planned: the read is a part of a plan (Selection.Part): its clusters must be complete
	// here.
	planned bool
	// leftOut are the clusters of the fleet the caller may not read.
	leftOut []string
	// secrets: the resource is core Secrets; allowSecretData: served with their data.
	secrets, allowSecretData bool
	// where is the request's where filter, nil without one: an answer it failed for is a 400
	// (whereFailed).
	where *index.Bound
	// reads is query.Clusters as a set, nil when they are nil: the selection's clusters may
	// be a thousand, and a search of the list per cluster or per event grows with their square.
	reads sets.Set[string]
}

// readsCluster reports whether the selection's clusters, when named, include c.
func (sel *selected) readsCluster(c string) bool {
	return sel.reads == nil || sel.reads.Has(c)
}

// selectFor resolves sel for the caller of ctx. Its errors are 400 (a bad selector or name),
// 403 (a named cluster the caller may not read), 404 (a resource not cached) and 503 (an
// access check that failed).
func (s *Storage) selectFor(ctx context.Context, v *view, sel storage.Selection) (*selected, error) {
	return s.selectForWatch(ctx, v, sel, false)
}

// selectForWatch is selectFor; watch says the selection serves a watch (its where filter
// judges each event on its own: compileWhere).
func (s *Storage) selectForWatch(ctx context.Context, v *view, sel storage.Selection, watch bool) (*selected, error) {
	agg, ok := s.reg.Aggregate(sel.Resource)
	if !ok {
		return nil, s.NotCached(sel.Resource)
	}
	if err := validNames(sel.Clusters); err != nil {
		return nil, err
	}
	if err := validNames(sel.Part); err != nil {
		return nil, err
	}
	clusterSel, objects, err := storage.SplitSelector(sel.LabelSelector)
	if err != nil {
		return nil, err
	}
	where, err := compileWhere(sel.Where, watch)
	if err != nil {
		return nil, err
	}
	info := v.info(sel.Resource)
	secrets := info.secrets(sel.Resource)
	q, err := query(agg, sel, where, readView(secrets, s.opts.AllowSecretData))
	if err != nil {
		return nil, err
	}
	if !objects.Empty() {
		q.Labels = objects
	}
	if sel.Owner != "" {
		if err := validOwner(sel.Owner); err != nil {
			return nil, err
		}
		if watch {
			// A chain changes above an object without an event of its own (an owner
			// deleted first, an adoption): a watch would miss its dependents' DELETED.
			return nil, storage.Error(http.StatusBadRequest, "owner: lists and summaries only, not watches (an owner's change or deletion sends no event for its dependents)")
		}
		q.Fields = append(q.Fields, ownerTerm(v.owners(s.reg), sel.Owner))
	}
	// A namespace on a cluster-scoped resource is ignored, as kubectl ignores -n.
	if q.Namespace != "" && q.Index != aggregate.IndexNamespace && !info.namespaced() {
		q.Namespace = ""
	}
	out := &selected{resource: sel.Resource, agg: agg, hub: s.hubs[sel.Resource], info: info, planned: sel.Part != nil, where: where,
		secrets: secrets, allowSecretData: s.opts.AllowSecretData}
	none := func() (*selected, error) {
		q.Clusters = []string{noCluster}
		out.setQuery(q)
		out.none = true
		return out, nil
	}
	named := sel.Clusters
	var planned []string // the plan's clusters that may hold objects of the resource
	if out.planned {
		planned = info.plannedFor(sel.Part)
		if watch {
			// A watch outlives the resolution: a cluster that does not serve the resource now
			// may later (a definition installed, a cluster its source held back started), and
			// its objects then come as events. Its part holds nothing until then.
			planned = slices.Clone(sel.Part)
		}
		if named != nil {
			// The clusters named that are this part's, no others (each part answers for its own).
			if named = narrow(named, sel.Part); len(named) == 0 {
				return none()
			}
		}
	}
	candidates := v.clusters()
	if out.planned {
		candidates = planned
	}
	allowed, leftOut, err := Scope(ctx, auth.AccessOf(ctx), info.secrets(sel.Resource), named, candidates)
	if err != nil {
		return nil, err
	}
	out.leftOut = leftOut
	switch {
	case named != nil:
		q.Clusters = clusterSel.Select(named)
	case allowed != nil:
		q.Clusters = clusterSel.Select(allowed)
	case out.planned:
		q.Clusters = clusterSel.Select(planned)
	default:
		// Every cluster the caller may read, present and future: a cluster selector is judged
		// per object, so that a cluster that joins comes to match, as kube-apiserver's label
		// selector watches deliver objects that come to match.
		out.byCluster = clusterSel
	}
	if out.planned && q.Clusters != nil {
		q.Clusters = narrow(q.Clusters, planned)
	}
	if q.Clusters != nil && len(q.Clusters) == 0 {
		return none()
	}
	out.setQuery(q)
	return out, nil
}

// setQuery sets the selection's query, its clusters sorted and each once (a request may name
// a cluster twice, or out of order; a get reads them in this order), and the set of them.
func (sel *selected) setQuery(q aggregate.Query) {
	sel.reads = nil
	if q.Clusters != nil {
		named := slices.Clone(q.Clusters) // sorted apart from any slice it may share; non-nil
		slices.Sort(named)
		q.Clusters = slices.Compact(named)
		sel.reads = sets.New(q.Clusters...)
	}
	sel.query = q
}

// clusters are the clusters the selection reads now, sorted: its explicit clusters, or those
// serving the resource that its cluster selector accepts.
func (sel *selected) clusters() []string {
	if sel.query.Clusters != nil {
		return sel.query.Clusters
	}
	return sel.byCluster.Select(sel.info.names())
}

// candidates are the aggregate's clusters the selection reads, in name order.
func (sel *selected) candidates() []string {
	var out []string
	for _, c := range sel.agg.Clusters() {
		if sel.readsCluster(c) && sel.byCluster.Matches(c) {
			out = append(out, c)
		}
	}
	return out
}

// matches is the query applied to one object of cluster, its cluster selector included.
func (sel *selected) matches(cluster string, obj any) bool {
	if !sel.readsCluster(cluster) || !sel.byCluster.Matches(cluster) {
		return false
	}
	q := sel.query
	q.Clusters = nil // judged above, from the set
	return sel.agg.Matches(q, cluster, obj)
}

// freshness says how fresh each cluster the answer spans is, with its last sync and its
// error: for a cluster the answer read, what its selection said (fresh, from
// aggregate.Result.Unsynced); for one it did not need to read, what the aggregate says now. A
// cluster whose status is not Synced is never fresh. Clusters the selection names that this
// replica does not run are unknown, or, in a plan, planned here and not started yet; those the
// caller may not read are forbidden.
func (sel *selected) freshness(fresh map[string]bool) []api.ClusterFreshness {
	out := make([]api.ClusterFreshness, 0, len(sel.info))
	if !sel.none {
		wanted := func(c string) bool {
			return sel.readsCluster(c) && sel.byCluster.Matches(c)
		}
		for c, rs := range sel.info {
			if !wanted(c) {
				continue
			}
			f, read := fresh[c]
			if !read {
				// Not read by this answer (the page was complete before it), or not a member
				// (not served, failing before it joined): what the aggregate says now.
				f = sel.agg.HasSynced(c)
			}
			out = append(out, FreshnessOf(c, *rs, f))
		}
		for _, c := range sel.query.Clusters {
			if _, ok := sel.info[c]; !ok {
				why := "unknown cluster"
				if sel.planned {
					why = "not started on this replica yet: it is planned here (a move under way)"
				}
				out = append(out, api.ClusterFreshness{Name: c, Error: why})
			}
		}
	}
	for _, c := range sel.leftOut {
		out = append(out, api.ClusterFreshness{Name: c, Forbidden: true, Error: "forbidden: left out, you may not read this cluster"})
	}
	slices.SortFunc(out, func(a, b api.ClusterFreshness) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// FreshnessOf is cluster's freshness as rs says, fresh when the read found it synced.
func FreshnessOf(cluster string, rs clusterset.ResourceStatus, fresh bool) api.ClusterFreshness {
	v := api.ClusterFreshness{Name: cluster, Synced: fresh && rs.State == clusterset.Synced, NotServed: rs.State == clusterset.NotServed}
	if !rs.LastSync.IsZero() {
		t := rs.LastSync.UTC().Truncate(time.Second)
		v.LastSync = &t
	}
	if rs.State != clusterset.Synced {
		v.Error = trimState(rs)
	}
	return v
}

func trimState(rs clusterset.ResourceStatus) string {
	if rs.Error == "" {
		return string(rs.State) + ":"
	}
	return string(rs.State) + ": " + rs.Error
}

// narrow keeps the clusters of list that are in only, in list's order.
func narrow(list, only []string) []string {
	out, keep := []string{}, sets.New(only...)
	for _, c := range list {
		if keep.Has(c) {
			out = append(out, c)
		}
	}
	return out
}

// refusedNotStarted is the 429 of a read whose planned clusters are not complete here.
func refusedNotStarted(resource string, waiting []string) error {
	return storage.Retry(http.StatusTooManyRequests, "the cache of "+resource+" is not complete yet in "+strings.Join(waiting, ", ")+"; retry")
}
