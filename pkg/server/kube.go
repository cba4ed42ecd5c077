package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/filters"
	"github.com/multicache/multicache/pkg/watchcache"
)

// kubeRequest is a Kubernetes API request on a resource, parsed and checked.
type kubeRequest struct {
	p     kubePath
	kr    *kubeResource
	f     form
	vals  url.Values
	watch bool
	// The query decoded once, as kube-apiserver decodes it (params.go): opts for lists and
	// watches, get for gets, table for every answer.
	opts  metav1.ListOptions
	get   metav1.GetOptions
	table metav1.TableOptions
}

// handleKube answers the Kubernetes API: discovery, and get, list and watch of every cached
// resource, in the fleet view at the root or in one cluster's under /clusters/{name}. Writes
// get 405; everything is served from memory.
func (s *Server) handleKube(w http.ResponseWriter, r *http.Request) {
	kq, ok := s.parseKube(w, r)
	if !ok {
		return
	}
	if kq.kr == crdsResource {
		s.serveCRDs(w, r, kq, s.localCRDs)
		return
	}
	if kq.watch {
		s.limits.Watch(w, func() { s.kubeWatch(w, r, kq) })
		return
	}
	s.limits.Request(w, func() {
		ctx, cancel := context.WithTimeout(r.Context(), s.opts.RequestTimeout)
		defer cancel()
		if kq.p.name != "" {
			s.kubeGet(ctx, w, kq)
			return
		}
		if l, ok := s.kubeListAnswer(ctx, w, kq); ok {
			if err := s.writeKubeList(ctx, w, kq.f, l); err != nil {
				filters.WriteError(w, http.StatusInternalServerError, err.Error())
			}
		}
	})
}

// parseKube parses and checks a Kubernetes API request on a resource, and answers everything
// else (errors, 405 for writes, discovery) itself: ok is false when it did.
func (s *Server) parseKube(w http.ResponseWriter, r *http.Request) (kubeRequest, bool) {
	p, ok, err := parseKubePath(r.URL.Path)
	if !ok {
		filters.WriteError(w, http.StatusNotFound, fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path))
		return kubeRequest{}, false
	}
	if err != nil {
		filters.WriteError(w, http.StatusNotFound, "the server could not find the requested resource: "+err.Error())
		return kubeRequest{}, false
	}
	cat, ok := s.catalog(p.cluster)
	part := s.partOf(r.URL.Query())
	planned := p.cluster != "" && slices.Contains(part, p.cluster)
	if !ok {
		if planned {
			// The fence moved here before the Registry started the cluster: it is in the
			// fleet, and answers once started.
			w.Header().Set("Retry-After", "1")
			filters.WriteError(w, http.StatusTooManyRequests, fmt.Sprintf("cluster %q is starting on this replica (it moved here); retry", p.cluster))
			return kubeRequest{}, false
		}
		filters.WriteError(w, http.StatusNotFound, fmt.Sprintf("cluster %q is not in the fleet", p.cluster))
		return kubeRequest{}, false
	}
	if p.cluster != "" {
		if _, _, err := s.scope(r.Context(), "", []string{p.cluster}, nil); err != nil {
			writeScopeError(w, err)
			return kubeRequest{}, false
		}
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		what := r.URL.Path
		if p.resource != "" {
			what = p.resource
		}
		if p.subresource != "" {
			what += "/" + p.subresource
		}
		filters.WriteError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s is not supported on %s: multicache serves reads only (get, list, watch)", strings.ToLower(r.Method), what))
		return kubeRequest{}, false
	}
	var kr *kubeResource
	if p.what == "object" {
		kr = cat.find(p.group, p.version, p.resource)
		if kr == nil && s.staleCatalog() {
			// The catalog is rebuilt at most once a second; a resource a cluster resolved
			// since (one that just moved here) must not answer 404 meanwhile.
			cat, _ = s.catalog(p.cluster)
			kr = cat.find(p.group, p.version, p.resource)
		}
		if kr == nil {
			// A resource a planned cluster has not resolved yet may still come: retry,
			// rather than a 404 that a client takes for "no such resource".
			if waiting := slices.DeleteFunc(slices.Clone(part), func(c string) bool { return !s.resolving(c) }); len(waiting) > 0 {
				w.Header().Set("Retry-After", "1")
				filters.WriteError(w, http.StatusTooManyRequests, fmt.Sprintf("clusters %s are still resolving their resources on this replica; retry", strings.Join(waiting, ", ")))
				return kubeRequest{}, false
			}
		}
		if kr == nil {
			gv := p.version
			if p.group != "" {
				gv = p.group + "/" + p.version
			}
			filters.WriteError(w, http.StatusNotFound, fmt.Sprintf("the server could not find the requested resource: %s %s is not cached (see the discovery at /api and /apis)", gv, p.resource))
			return kubeRequest{}, false
		}
	}
	if p.what != "object" {
		s.limits.Request(w, func() { s.handleDiscovery(w, r, p, cat) })
		return kubeRequest{}, false
	}
	switch {
	case p.subresource != "":
		filters.WriteError(w, http.StatusNotFound, fmt.Sprintf("the server could not find the requested resource: subresource %q of %s is not served (multicache serves the objects themselves)", p.subresource, kr.groupResource()))
		return kubeRequest{}, false
	case p.namespacedPath && !kr.api.Namespaced:
		filters.WriteError(w, http.StatusNotFound, fmt.Sprintf("the server could not find the requested resource: %s is cluster-scoped", kr.groupResource()))
		return kubeRequest{}, false
	}
	f, err := negotiate(r)
	if err != nil {
		filters.WriteError(w, http.StatusNotAcceptable, err.Error())
		return kubeRequest{}, false
	}
	vals := r.URL.Query()
	watch, opts, ok := kubeOptions(w, p, vals)
	if !ok {
		return kubeRequest{}, false
	}
	kq := kubeRequest{p: p, kr: kr, f: f, vals: vals, watch: watch, opts: opts}
	if !watch && p.name != "" {
		kq.get, err = getOptions(vals)
	}
	if err == nil && f.as == "Table" { // as kube-apiserver, which reads them for a Table only
		kq.table, err = tableOptions(vals)
	}
	if err != nil {
		filters.WriteError(w, http.StatusBadRequest, err.Error())
		return kubeRequest{}, false
	}
	if watch && p.name != "" {
		// The deprecated watch of one object: a watch of the collection, by name.
		fs := "metadata.name=" + p.name
		if kq.opts.FieldSelector != "" {
			fs += "," + kq.opts.FieldSelector
		}
		kq.opts.FieldSelector = fs
	}
	return kq, true
}

// kubeSelection is a parsed list or watch request.
type kubeSelection struct {
	query aggregate.Query
	none  bool // the cluster selector selects no cluster
	// planned: the request is one replica's part of a sharded fleet's plan, and its clusters
	// are the plan's: a list or initial-events watch waits (429) for any that is unready.
	planned bool
	// leftOut are the clusters of the fleet the caller may not read.
	leftOut []string
}

// clusterRequirements splits a label selector into its requirements on the cluster key, which
// select clusters, and the others, which select objects.
func clusterRequirements(selector string) (clusters []labels.Requirement, objects labels.Selector, err error) {
	sel, err := labels.Parse(selector)
	if err != nil {
		return nil, nil, fmt.Errorf("labelSelector %q: %v", selector, err)
	}
	reqs, _ := sel.Requirements()
	objects = labels.NewSelector()
	for _, req := range reqs {
		if req.Key() == api.ClusterAnnotation {
			clusters = append(clusters, req)
			continue
		}
		objects = objects.Add(req)
	}
	return clusters, objects, nil
}

// selectClusters keeps the clusters every requirement accepts, as if each cluster were an
// object labelled with its name.
func selectClusters(candidates []string, reqs []labels.Requirement) []string {
	var out []string
	for _, c := range candidates {
		set := labels.Set{api.ClusterAnnotation: c}
		if !slices.ContainsFunc(reqs, func(r labels.Requirement) bool { return !r.Matches(set) }) {
			out = append(out, c)
		}
	}
	return out
}

// kubeSelect parses the selection of a list or watch: path namespace and cluster, label
// selector (its cluster requirements select clusters) and field selector.
func (s *Server) kubeSelect(ctx context.Context, kq kubeRequest, agg *aggregate.Aggregate) (kubeSelection, error) {
	p, kr, vals := kq.p, kq.kr, kq.vals
	clusterReqs, objects, err := clusterRequirements(kq.opts.LabelSelector)
	if err != nil {
		return kubeSelection{}, err
	}
	var named []string
	if p.cluster != "" {
		named = []string{p.cluster}
	}
	// A cluster selector selects among the clusters the caller may read.
	// A part's clusters are its plan's (only), whether or not this replica runs them yet: one
	// not started yet is reported, never silently left out (planguard.go).
	only := s.partOf(vals)
	fleet := kr.clusters
	scoped := s.reg.Clusters()
	if only != nil {
		fleet = s.plannedFor(kr.name, only)
		scoped = only
	}
	allowed, leftOut, err := s.scope(ctx, kr.name, named, scoped)
	if err != nil {
		return kubeSelection{}, err
	}
	native := url.Values{}
	if fs := kq.opts.FieldSelector; fs != "" {
		native.Set("fieldSelector", fs)
	}
	if kr.api.Namespaced {
		native.Set("namespace", p.namespace)
	}
	q, err := parseQuery(agg, native)
	if err != nil {
		return kubeSelection{}, err
	}
	if !objects.Empty() {
		q.Labels = objects
	}
	if p.cluster != "" || len(clusterReqs) > 0 || allowed != nil {
		candidates := fleet
		if p.cluster != "" {
			candidates = []string{p.cluster}
		} else if allowed != nil {
			candidates = slices.DeleteFunc(allowed, func(c string) bool { return c == noCluster })
		}
		q.Clusters = selectClusters(candidates, clusterReqs)
		if len(q.Clusters) == 0 {
			q.Clusters = []string{noCluster}
			return kubeSelection{query: q, none: true, leftOut: leftOut}, nil
		}
	}
	if only != nil {
		if q.Clusters == nil {
			q.Clusters = fleet
		}
		if q.Clusters = narrow(q.Clusters, fleet); len(q.Clusters) == 0 {
			q.Clusters = []string{noCluster}
			return kubeSelection{query: q, none: true, leftOut: leftOut, planned: true}, nil
		}
	}
	return kubeSelection{query: q, leftOut: leftOut, planned: only != nil}, nil
}

// listPosition is how a list reads: at the watch cache's position now (from the stores, which
// may be ahead of it), or exactly at an earlier one (from the watch cache's snapshot).
type listPosition struct {
	pos   watchcache.Position
	exact bool
	after *aggregate.Key // continue after this key
}

// parseListPosition reads resourceVersion, resourceVersionMatch and continue of opts (the
// query as listOptions decodes it), as kube-apiserver validates them. A resourceVersion of
// another run is 410. A continue token of any list continues after its key: at its own
// position when it is this replica's, from now when it is a merged answer's, which an exact
// list cannot do (410).
func parseListPosition(h *watchcache.Cache, opts metav1.ListOptions) (listPosition, int, error) {
	rv, rvm, cont := opts.ResourceVersion, opts.ResourceVersionMatch, opts.Continue
	switch rvm {
	case "", metav1.ResourceVersionMatchNotOlderThan, metav1.ResourceVersionMatchExact:
	default:
		return listPosition{}, http.StatusBadRequest, fmt.Errorf("resourceVersionMatch %q: want NotOlderThan or Exact", rvm)
	}
	if rvm != "" && rv == "" {
		return listPosition{}, http.StatusBadRequest, fmt.Errorf("resourceVersionMatch is forbidden unless resourceVersion is provided")
	}
	if cont != "" {
		if rv != "" && rv != "0" {
			return listPosition{}, http.StatusBadRequest, fmt.Errorf("specifying resourceVersion is not allowed when using continue")
		}
		c, err := watchcache.ParseContinue(cont)
		if err != nil {
			return listPosition{}, http.StatusBadRequest, err
		}
		after := c.After()
		if c.Merged() || c.Epoch == "" {
			if c.Exact {
				return listPosition{}, http.StatusGone, fmt.Errorf("continue expired: the list was answered by other replicas, and this one answers it alone now; list again")
			}
			return listPosition{pos: h.Position(), after: &after}, 0, nil
		}
		return listPosition{pos: c.Position, exact: c.Exact, after: &after}, 0, nil
	}
	if rvm == metav1.ResourceVersionMatchExact {
		if rv == "0" {
			return listPosition{}, http.StatusBadRequest, fmt.Errorf("resourceVersionMatch Exact is forbidden for resourceVersion 0")
		}
		t, err := watchcache.ParseSingle(rv)
		if err != nil {
			return listPosition{}, codeOf(err), err
		}
		return listPosition{pos: t, exact: true}, 0, nil
	}
	if rv != "" && rv != "0" {
		// NotOlderThan (or the legacy unset match): the cache now is at least as new as any
		// position of this run. A position of another run cannot be compared: 410, relist.
		t, err := watchcache.ParseSingle(rv)
		if err != nil {
			return listPosition{}, codeOf(err), err
		}
		if t.Epoch != h.Position().Epoch {
			return listPosition{}, http.StatusGone, fmt.Errorf("resourceVersion %s comes from an earlier run of the daemon, or the watch cache was reset since; list again", rv)
		}
	}
	return listPosition{pos: h.Position()}, 0, nil
}

// codeOf is the HTTP code of a position that cannot be read: 410 when it is gone, 400 when it
// is malformed.
func codeOf(err error) int {
	if watchcache.IsGone(err) {
		return http.StatusGone
	}
	return http.StatusBadRequest
}

// kubeListAnswer reads a list: from the stores, or, for an exact resourceVersion, from the watch
// cache's snapshot at it (410 once the events after it are gone). It answers errors itself,
// and puts its warnings in w's header; ok is false when it answered.
func (s *Server) kubeListAnswer(ctx context.Context, w http.ResponseWriter, kq kubeRequest) (l kubeList, ok bool) {
	kr, vals, opts := kq.kr, kq.vals, kq.opts
	// Without a limit (or with 0) a list answers everything, as an API server does: clients
	// that do not page must not get a part. A limit is capped: the rest follows by continue,
	// which a client that sets a limit follows.
	limit := math.MaxInt32
	switch n := opts.Limit; {
	case n < 0:
		filters.WriteError(w, http.StatusBadRequest, fmt.Sprintf("limit %q: want a non-negative integer", vals.Get("limit")))
		return kubeList{}, false
	case n > 0:
		limit = int(min(n, int64(s.opts.KubeMaxPageSize)))
	}
	if kr == clustersResource {
		return s.listClusters(ctx, w, kq)
	}
	agg, _ := s.reg.Aggregate(kr.name)
	h := s.caches[kr.name]
	sel, err := s.kubeSelect(ctx, kq, agg)
	if err != nil {
		writeSelectError(w, err)
		return kubeList{}, false
	}
	warnLeftOut(w, sel.leftOut)
	if sel.planned && !sel.none && retryUnready(w, kr.groupResource().String(), s.unreadyAwait(ctx, kr.name, sel.query.Clusters)) {
		return kubeList{}, false
	}
	lp, code, err := parseListPosition(h, opts)
	if err != nil {
		filters.WriteError(w, code, err.Error())
		return kubeList{}, false
	}
	req := request{resource: kr.name, agg: agg, query: sel.query}
	var pg page
	switch {
	case sel.none:
	case lp.exact:
		items, err := h.Snapshot(lp.pos, sel.query.Clusters)
		if err != nil {
			filters.WriteError(w, http.StatusGone, "resourceVersion expired: "+err.Error())
			return kubeList{}, false
		}
		pg = pageOf(items, func(it item) bool { return agg.Matches(sel.query, it.Key.Cluster, it.Object) }, lp.after, limit)
	default:
		if pg, err = s.selectPage(req, lp.after, limit); err != nil {
			filters.WriteError(w, http.StatusBadRequest, err.Error())
			return kubeList{}, false
		}
	}
	if ctx.Err() != nil {
		filters.WriteError(w, http.StatusGatewayTimeout, "request timed out")
		return kubeList{}, false
	}
	// A planned cluster can leave between the check above and the read (a handoff that
	// completed meanwhile): asked again after the read, it is never missing from a 200.
	if sel.planned && !sel.none && retryUnready(w, kr.groupResource().String(), s.unready(kr.name, sel.query.Clusters)) {
		return kubeList{}, false
	}
	if !lp.exact {
		h.Sequence(pg.items) // a snapshot's items have theirs
	}
	l = kubeList{kr: kr, items: pg.items, rv: lp.pos.String(), epoch: lp.pos.Epoch, includeObject: string(kq.table.IncludeObject)}
	if pg.more {
		l.cont = watchcache.Continue{Last: pg.items[len(pg.items)-1].Key.String(), Position: lp.pos, Exact: lp.exact}.String()
	}
	if !sel.none {
		s.warnUnfresh(w, req, pg.fresh)
	}
	return l, true
}

// pageOf is the page of items that keep accepts after the key after, in key order.
func pageOf(items []item, keep func(item) bool, after *aggregate.Key, limit int) page {
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

// warnUnfresh adds a Warning header (kubectl prints them) for every cluster the answer spans
// that is not in step with its API server: syncing, failing, or serving its last state.
func (s *Server) warnUnfresh(w http.ResponseWriter, req request, fresh map[string]bool) {
	list, _ := s.freshness(req, fresh)
	for _, c := range list {
		if c.Synced || c.NotServed || c.Forbidden {
			continue
		}
		msg := fmt.Sprintf("cluster %q: %s may be stale or incomplete (%s)", c.Name, req.resource, c.Error)
		if c.Error == "" {
			msg = fmt.Sprintf("cluster %q: %s not synced yet", c.Name, req.resource)
		}
		if hv, err := utilnet.NewWarningHeader(299, "-", msg); err == nil {
			w.Header().Add("Warning", hv)
		}
	}
}

// writeSelectError answers an error of kubeSelect: a scope's answer, else 400.
func writeSelectError(w http.ResponseWriter, err error) {
	var se *scopeError
	if errors.As(err, &se) {
		filters.WriteError(w, se.code, se.msg)
		return
	}
	filters.WriteError(w, http.StatusBadRequest, err.Error())
}

// warnLeftOut adds a Warning header naming the clusters a fleet-wide answer leaves out because
// the caller may not read them.
func warnLeftOut(w http.ResponseWriter, leftOut []string) {
	if len(leftOut) == 0 {
		return
	}
	msg := fmt.Sprintf("%d clusters left out: you may not read %s", len(leftOut), strings.Join(leftOut, ", "))
	if hv, err := utilnet.NewWarningHeader(299, "-", msg); err == nil {
		w.Header().Add("Warning", hv)
	}
}

// readableClusterItems are clusterItems(only) the caller may read, and the names left out.
func (s *Server) readableClusterItems(ctx context.Context, only string) ([]item, []string, error) {
	all := s.clusterItems(only)
	names := make([]string, len(all))
	for i, it := range all {
		names[i] = it.Key.Cluster
	}
	if only != "" {
		_, _, err := s.scope(ctx, "", names, nil)
		return all, nil, err
	}
	_, leftOut, err := s.scope(ctx, "", nil, names)
	if err != nil {
		return nil, nil, err
	}
	return slices.DeleteFunc(all, func(it item) bool { return slices.Contains(leftOut, it.Key.Cluster) }), leftOut, nil
}

// listClusters answers clusters.multicache.io: the label selector's cluster requirements and
// a metadata.name field selector apply.
func (s *Server) listClusters(ctx context.Context, w http.ResponseWriter, kq kubeRequest) (kubeList, bool) {
	p, kr := kq.p, kq.kr
	reqs, _, err := clusterRequirements(kq.opts.LabelSelector)
	if err != nil {
		filters.WriteError(w, http.StatusBadRequest, err.Error())
		return kubeList{}, false
	}
	var name string
	if fs := kq.opts.FieldSelector; fs != "" {
		var ok bool
		if name, ok = strings.CutPrefix(fs, "metadata.name="); !ok || strings.ContainsAny(name, ",=!") {
			filters.WriteError(w, http.StatusBadRequest, fmt.Sprintf("fieldSelector %q: clusters support metadata.name=NAME only", fs))
			return kubeList{}, false
		}
	}
	readable, leftOut, err := s.readableClusterItems(ctx, p.cluster)
	if err != nil {
		writeScopeError(w, err)
		return kubeList{}, false
	}
	warnLeftOut(w, leftOut)
	var items []item
	for _, it := range readable {
		if len(selectClusters([]string{it.Key.Cluster}, reqs)) == 1 && (name == "" || it.Key.Cluster == name) {
			items = append(items, it)
		}
	}
	return kubeList{kr: kr, items: items, includeObject: string(kq.table.IncludeObject)}, true
}

// kubeGet answers one object by name. In the fleet view a name may exist in several clusters:
// a Table gets one row per cluster; any other answer is 409 naming them.
func (s *Server) kubeGet(ctx context.Context, w http.ResponseWriter, kq kubeRequest) {
	p, kr, f, vals := kq.p, kq.kr, kq.f, kq.vals
	gr := kr.groupResource()
	var found []item
	var req request
	epoch := ""
	if kr == clustersResource {
		for _, it := range s.clusterItems(p.cluster) {
			if it.Key.Cluster == p.name {
				if _, _, err := s.scope(ctx, "", []string{it.Key.Cluster}, nil); err != nil {
					writeScopeError(w, err)
					return
				}
				found = append(found, it)
			}
		}
	} else {
		agg, _ := s.reg.Aggregate(kr.name)
		req = request{resource: kr.name, agg: agg}
		var named []string
		if p.cluster != "" {
			named = []string{p.cluster}
		}
		// A part of a sharded fleet's plan answers for its planned clusters only, so that a
		// cluster two replicas hold for a moment answers once.
		only := s.partOf(vals)
		scoped := s.reg.Clusters()
		if only != nil {
			scoped = s.plannedFor(kr.name, only)
		}
		allowed, leftOut, err := s.scope(ctx, kr.name, named, scoped)
		if err != nil {
			writeScopeError(w, err)
			return
		}
		clusters := narrow(agg.Clusters(), only)
		if only != nil {
			clusters = scoped
		}
		if p.cluster != "" {
			clusters = []string{p.cluster}
			req.query.Clusters = clusters
		} else if allowed != nil {
			clusters = slices.DeleteFunc(allowed, func(c string) bool { return c == noCluster })
			req.query.Clusters = allowed
			req.leftOut = leftOut
			warnLeftOut(w, leftOut)
		}
		if only != nil && retryUnready(w, kr.groupResource().String(), s.unreadyAwait(ctx, kr.name, clusters)) {
			return
		}
		for _, c := range clusters {
			k := aggregate.Key{Cluster: c, Namespace: p.namespace, Name: p.name}
			if !kr.api.Namespaced {
				k.Namespace = ""
			}
			obj, exists, err := agg.Get(k)
			if err != nil {
				filters.WriteError(w, http.StatusInternalServerError, err.Error())
				return
			}
			if exists {
				found = append(found, item{Key: k, Object: obj})
			}
		}
		if only != nil && retryUnready(w, kr.groupResource().String(), s.unready(kr.name, clusters)) {
			return // a cluster left between the check and the read
		}
		h := s.caches[kr.name]
		h.Sequence(found)
		epoch = h.Position().Epoch
		s.warnUnfresh(w, req, nil)
	}
	switch {
	case len(found) == 0:
		st := filters.StatusOf(http.StatusNotFound, fmt.Sprintf("%s %q not found", gr, p.name))
		st.Details = &metav1.StatusDetails{Name: p.name, Group: gr.Group, Kind: gr.Resource}
		filters.WriteStatus(w, st)
		return
	case f.as == "Table":
		t, err := s.kubeTable(ctx, kr, found, epoch, false, string(kq.table.IncludeObject), f.tableVersion)
		if err != nil {
			filters.WriteError(w, http.StatusInternalServerError, err.Error())
			return
		}
		writeJSON(w, t)
		return
	case len(found) > 1:
		var names, paths []string
		for _, it := range found {
			names = append(names, it.Key.Cluster)
			paths = append(paths, "/clusters/"+it.Key.Cluster+p.objectPath())
		}
		st := filters.StatusOf(http.StatusConflict, fmt.Sprintf("%s %q exists in %d clusters (%s): read it from one of them, at %s", gr, p.name, len(found), strings.Join(names, ", "), strings.Join(paths, " or ")))
		st.Details = &metav1.StatusDetails{Name: p.name, Group: gr.Group, Kind: gr.Resource}
		filters.WriteStatus(w, st)
		return
	}
	buf := getBuffer()
	defer putBuffer(buf)
	if err := s.appendKubeObject(buf, f, kr, found[0], epoch, true); err != nil {
		filters.WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	buf.WriteByte('\n')
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(buf.Bytes())
}
