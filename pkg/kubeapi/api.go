package kubeapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/auth"
	"github.com/multicache/multicache/pkg/filters"
	"github.com/multicache/multicache/pkg/kubeapi/discovery"
	"github.com/multicache/multicache/pkg/storage"
	"github.com/multicache/multicache/pkg/storage/local"
	"github.com/multicache/multicache/pkg/table"
)

// Options configures the API.
type Options struct {
	// Reader and Status read the fleet (storage/fanout with replicas, storage/local alone).
	Reader storage.Reader
	Status storage.Status
	// Catalog is the fleet's: what the API serves. Documents answers its discovery.
	Catalog   *discovery.Catalog
	Documents *discovery.Documents
	// OpenAPI serves the documents of this replica's clusters.
	OpenAPI *discovery.OpenAPI
	// Resources are the configured resources.
	Resources []string
	// Fleet lists every cluster of the fleet (nil: the catalog's); Here reports whether this
	// replica runs a cluster (nil: every one); Relay answers a request of a cluster this replica
	// does not run at its owner (its OpenAPI documents).
	Fleet func() []string
	Here  func(cluster string) bool
	Relay func(w http.ResponseWriter, r *http.Request, cluster string)
	// Tables supplies the Table columns of built-in kinds (Kubernetes' own printers).
	Tables table.Provider
	// Limits, RequestTimeout: every request but a watch takes a request slot and is bounded by
	// the timeout; a watch takes a watch slot.
	Limits         *filters.Limits
	RequestTimeout time.Duration
	// MaxPageSize caps a list's limit: a client that sets one gets at most this many items per
	// page, and the rest by continue. A list without a limit answers every item, streamed.
	MaxPageSize int
	// Watches counts the open watches.
	Watches prometheus.Gauge
	Logger  *zap.Logger
}

// API is the Kubernetes API, read-only, at the root (the fleet) and under /clusters/{name}
// (one cluster): discovery, {Kind}Lists, objects, Tables with a CLUSTER column, watches and
// watch-lists, as kubectl and client-go informers expect, errors as metav1.Status. It decodes a
// request once, reads it through one Reader call, and encodes it once.
type API struct {
	opts   Options
	tables *table.Set
	events *eventCache // watch events' encodings, shared (events.go)
}

// New makes the API.
func New(opts Options) *API {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	return &API{opts: opts, tables: table.NewSet(opts.Tables), events: newEventCache()}
}

// request is a request of the Kubernetes API on a resource, decoded once.
type request struct {
	p    path
	kr   *discovery.Resource
	enc  storage.Encoding
	sel  storage.Selection
	list listOptions
}

// ServeHTTP answers a GET (or HEAD) of the Kubernetes API; writes are 405. Every error is
// written by writeError.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p, ok, err := parsePath(r.URL.Path)
	switch {
	case strings.HasPrefix(strings.TrimPrefix(r.URL.Path, "/clusters/"+p.cluster), "/openapi/"):
		a.openAPI(w, r, p.cluster)
		return
	case !ok:
		writeError(w, storage.Errorf(http.StatusNotFound, "no route for %s %s", r.Method, r.URL.Path))
		return
	case err != nil:
		writeError(w, storage.Error(http.StatusNotFound, "the server could not find the requested resource: "+err.Error()))
		return
	}
	// A list or a get reads under one read scope (storage.WithReadScope), from the catalog on:
	// every read of this replica's part in it sees one status of its clusters. A watch never
	// does: it reads from r's context.
	ctx := storage.WithReadScope(r.Context())
	view, err := a.view(ctx, p.cluster)
	if err != nil {
		writeError(w, err)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		what := r.URL.Path
		if p.resource != "" {
			what = p.resource
		}
		if p.subresource != "" {
			what += "/" + p.subresource
		}
		writeError(w, storage.Errorf(http.StatusMethodNotAllowed, "%s is not supported on %s: multicache serves reads only (get, list, watch)", strings.ToLower(r.Method), what))
		return
	}
	if p.what != "object" {
		a.opts.Limits.Request(w, func() { a.opts.Documents.Serve(w, r, view, p.cluster, p.what, p.group, p.version) })
		return
	}
	rq, err := a.decode(r, p, view)
	if err != nil {
		writeError(w, err)
		return
	}
	switch {
	case rq.kr == discovery.ClustersResource:
		a.clusters(ctx, w, rq)
	case rq.kr == discovery.DefinitionsResource:
		a.definitions(ctx, w, r, rq)
	case rq.list.watch:
		a.opts.Limits.Watch(w, func() { a.watch(w, r, rq) })
	case p.name != "":
		a.limited(ctx, w, func(ctx context.Context) { a.get(ctx, w, rq) })
	default:
		a.limited(ctx, w, func(ctx context.Context) { a.list(ctx, w, rq) })
	}
}

// limited runs f in a request slot, within the request timeout, under ctx's read scope or one
// of its own. A watch never runs here.
func (a *API) limited(ctx context.Context, w http.ResponseWriter, f func(ctx context.Context)) {
	a.opts.Limits.Request(w, func() {
		ctx, cancel := context.WithTimeout(storage.WithReadScope(ctx), a.opts.RequestTimeout)
		defer cancel()
		f(ctx)
	})
}

// view is the catalog of the fleet, or of cluster: 403 when the caller may not read it, 404
// when it is not in the fleet, 429 while it is in the fleet and no replica has reported it yet
// (it is starting, or moving).
func (a *API) view(ctx context.Context, cluster string) (*discovery.View, error) {
	if cluster != "" {
		if _, _, err := local.Scope(ctx, auth.AccessOf(ctx), false, []string{cluster}, nil); err != nil {
			return nil, err
		}
	}
	v, ok := a.opts.Catalog.View(ctx, cluster, false)
	if ok {
		return v, nil
	}
	if why := a.opts.Catalog.Unanswered(cluster); why != "" {
		return nil, storage.Retry(http.StatusServiceUnavailable, fmt.Sprintf("cluster %q cannot be read now: %s; retry", cluster, why))
	}
	if a.opts.Fleet != nil && slices.Contains(a.opts.Fleet(), cluster) {
		return nil, storage.Retry(http.StatusTooManyRequests, fmt.Sprintf("cluster %q is starting on its replica (or moving to another); retry", cluster))
	}
	return nil, storage.Errorf(http.StatusNotFound, "cluster %q is not in the fleet", cluster)
}

// decode checks a request on a resource and decodes it, once: the resource, its form, and its
// query as kube-apiserver decodes it.
func (a *API) decode(r *http.Request, p path, view *discovery.View) (request, error) {
	kr := view.Find(p.group, p.version, p.resource)
	if kr == nil {
		// The catalog is read at most once a second; a resource a cluster resolved since (one
		// that just moved here) must not answer 404 meanwhile.
		if v, ok := a.opts.Catalog.View(r.Context(), p.cluster, true); ok {
			view, kr = v, v.Find(p.group, p.version, p.resource)
		}
	}
	if kr == nil {
		if waiting := a.resolving(r.Context(), view, p.cluster); len(waiting) > 0 {
			// A resource a cluster has not resolved yet may still come: retry, rather than a
			// 404 that a client takes for "no such resource".
			return request{}, storage.Retry(http.StatusTooManyRequests, fmt.Sprintf("clusters %s are still resolving their resources; retry", strings.Join(waiting, ", ")))
		}
		gv := p.version
		if p.group != "" {
			gv = p.group + "/" + p.version
		}
		return request{}, storage.Errorf(http.StatusNotFound, "the server could not find the requested resource: %s %s is not cached (see the discovery at /api and /apis)", gv, p.resource)
	}
	switch {
	case p.subresource != "":
		return request{}, storage.Errorf(http.StatusNotFound, "the server could not find the requested resource: subresource %q of %s is not served (multicache serves the objects themselves)", p.subresource, kr.GroupResource())
	case p.namespacedPath && !kr.API.Namespaced:
		return request{}, storage.Errorf(http.StatusNotFound, "the server could not find the requested resource: %s is cluster-scoped", kr.GroupResource())
	}
	enc, err := negotiate(r)
	if err != nil {
		return request{}, err
	}
	lo, err := decodeList(r.URL.Query(), p, enc.As == "Table")
	if err != nil {
		return request{}, err
	}
	enc.IncludeObject = string(lo.table.IncludeObject)
	rq := request{p: p, kr: kr, enc: enc, list: lo}
	rq.sel = storage.Selection{Resource: kr.Name, LabelSelector: lo.opts.LabelSelector, FieldSelector: lo.opts.FieldSelector}
	if p.cluster != "" {
		rq.sel.Clusters = []string{p.cluster}
	}
	if kr.API.Namespaced {
		rq.sel.Namespace = p.namespace
	}
	return rq, nil
}

// resolving lists the clusters of a view that may still resolve a configured resource: not
// reported on yet by their replica, or resolving there.
func (a *API) resolving(ctx context.Context, view *discovery.View, cluster string) []string {
	candidates := view.Clusters
	if cluster == "" && a.opts.Fleet != nil {
		candidates = a.opts.Fleet()
	}
	return a.opts.Catalog.Resolving(ctx, candidates, a.opts.Resources)
}

// openAPI serves the OpenAPI documents of a view, from this replica's clusters, or, for a
// cluster another replica runs, from its owner.
func (a *API) openAPI(w http.ResponseWriter, r *http.Request, cluster string) {
	if cluster != "" {
		if _, _, err := local.Scope(r.Context(), auth.AccessOf(r.Context()), false, []string{cluster}, nil); err != nil {
			writeError(w, err)
			return
		}
		if a.opts.Here != nil && !a.opts.Here(cluster) && a.opts.Relay != nil {
			a.opts.Relay(w, r, cluster)
			return
		}
	}
	path := strings.TrimPrefix(r.URL.Path, "/clusters/"+cluster)
	a.limited(r.Context(), w, func(ctx context.Context) {
		r := r.WithContext(ctx)
		switch {
		case path == "/openapi/v2":
			a.opts.OpenAPI.ServeV2(w, r, cluster)
		case path == "/openapi/v3" || strings.HasPrefix(path, "/openapi/v3/"):
			a.opts.OpenAPI.ServeV3(w, r, cluster, path)
		default:
			writeError(w, storage.Errorf(http.StatusNotFound, "no route for %s %s", r.Method, r.URL.Path))
		}
	})
}

// writeError answers err: the front's one writer of errors (a metav1.Status, with Retry-After
// when it says).
func writeError(w http.ResponseWriter, err error) { filters.WriteAPIError(w, err) }

// freshnessWarnings are the warnings kubectl prints for an answer's clusters: those left out
// because the caller may not read them, those no replica could answer for, and those not in
// step with their API server (syncing, failing, or serving their last state).
func freshnessWarnings(fresh []api.ClusterFreshness, resource string) []string {
	var out, leftOut []string
	for _, f := range fresh {
		switch {
		case f.Forbidden:
			leftOut = append(leftOut, f.Name)
		case f.Synced || f.NotServed:
		case strings.HasPrefix(f.Error, "unavailable: "):
			out = append(out, fmt.Sprintf("cluster %q: %s", f.Name, f.Error))
		case f.Error == "":
			out = append(out, fmt.Sprintf("cluster %q: %s not synced yet", f.Name, resource))
		default:
			out = append(out, fmt.Sprintf("cluster %q: %s may be stale or incomplete (%s)", f.Name, resource, f.Error))
		}
	}
	if len(leftOut) > 0 {
		out = append([]string{fmt.Sprintf("%d clusters left out: you may not read %s", len(leftOut), strings.Join(leftOut, ", "))}, out...)
	}
	return out
}

// writeJSON writes v as the answer.
func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
