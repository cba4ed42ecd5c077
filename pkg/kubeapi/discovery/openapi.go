package discovery

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	cgdiscovery "k8s.io/client-go/discovery"
	"k8s.io/client-go/openapi"
	"k8s.io/kube-openapi/pkg/handler3"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"k8s.io/client-go/rest"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/storage"
)

// OpenAPI v3, for `kubectl explain` and other clients that read schemas. Each view (the fleet,
// or one cluster under /clusters/{name}) serves, for each group-version its catalog serves,
// the document of a cluster that serves it, as that cluster's API server publishes it, with a
// note that objects carry the cluster annotation. kube-openapi's OpenAPIService serves them:
// the /openapi/v3 index with each document's hash, ETags, and JSON or protobuf.
//
// A view's documents follow its catalog: a group-version that appears, disappears or changes
// the cluster it is read from is updated on the next request; every document is read again
// from its cluster after openAPIMaxAge, so that a CRD's new schema shows. No document is
// fetched until a client asks for OpenAPI.

// openAPIMaxAge is how long a group-version's document is served before it is read again.
const openAPIMaxAge = 5 * time.Minute

// openAPINote is added to every document's description.
const openAPINote = "Served by multicache from the member cluster %q. Every object multicache serves carries the annotation " +
	api.ClusterAnnotation + ": the name of the cluster it lives in; its resourceVersion is a multicache position, and its cluster's own is in the annotation " +
	api.ResourceVersionAnnotation + "."

// OpenAPI serves the OpenAPI documents of the views of this replica's clusters.
type OpenAPI struct {
	// Catalog is this replica's own: a document is read from a cluster it runs.
	Catalog *Catalog
	// Configs reaches a cluster this replica runs (clusterset.Registry.RESTConfig).
	Configs func(cluster string) (*rest.Config, bool)
	// Timeout bounds each read of a member's document.
	Timeout time.Duration
	Logger  *zap.Logger

	mu    sync.Mutex
	views map[string]*openAPIView   // by cluster; "" is the fleet
	v2    map[string]*openAPIV2View // by cluster; "" is the fleet
}

// openAPIView is one view's documents.
type openAPIView struct {
	svc *handler3.OpenAPIService // safe for concurrent use

	mu      sync.Mutex               // held while the view is brought up to date
	sources map[string]openAPISource // group-version path (api/v1, apis/apps/v1) → where it came from
}

type openAPISource struct {
	cluster string
	at      time.Time
}

// ServeV3 serves /openapi/v3 and /openapi/v3/{group-version} (path, without a cluster prefix) of
// cluster's view ("" for the fleet); the caller may read it.
func (o *OpenAPI) ServeV3(w http.ResponseWriter, r *http.Request, cluster, path string) {
	gv := strings.TrimPrefix(strings.TrimPrefix(path, "/openapi/v3"), "/")
	svc, served, ok := o.view(r.Context(), cluster, gv)
	if !ok {
		writeError(w, storage.Errorf(http.StatusNotFound, "cluster %q is not in the fleet", cluster))
		return
	}
	r2 := r.Clone(r.Context())
	r2.URL.Path = path
	if gv == "" {
		svc.HandleDiscovery(w, r2)
		return
	}
	if !served {
		writeError(w, storage.Errorf(http.StatusNotFound, "no OpenAPI document for %s here: the group-version is not served by the clusters of this view (see /openapi/v3)", gv))
		return
	}
	svc.HandleGroupVersion(w, r2)
}

// wantedOpenAPI is, for a view, each group-version path its catalog serves and the cluster
// to read its document from: the one that serves the most of its resources there (ties: the
// first by name), or the view's own cluster.
func (o *OpenAPI) wanted(ctx context.Context, cluster string) (map[string]string, bool) {
	cat, ok := o.Catalog.View(ctx, cluster, false)
	if !ok {
		return nil, false
	}
	count := map[string]map[string]int{} // gv → cluster → resources
	for _, kr := range cat.Resources {
		if !kr.Cached() || len(kr.Clusters) == 0 {
			continue
		}
		gv := "api/" + kr.GVK.Version
		if kr.GVK.Group != "" {
			gv = "apis/" + kr.GVK.Group + "/" + kr.GVK.Version
		}
		if count[gv] == nil {
			count[gv] = map[string]int{}
		}
		for _, c := range kr.Clusters {
			if cluster == "" || c == cluster {
				count[gv][c]++
			}
		}
	}
	out := map[string]string{}
	for gv, by := range count {
		names := make([]string, 0, len(by))
		for c := range by {
			names = append(names, c)
		}
		sort.Slice(names, func(i, j int) bool {
			if by[names[i]] != by[names[j]] {
				return by[names[i]] > by[names[j]]
			}
			return names[i] < names[j]
		})
		if len(names) > 0 {
			out[gv] = names[0]
		}
	}
	return out, true
}

// view brings the view's documents in line with its catalog, and returns its service and
// whether it has a document for gv. It reads the documents it lacks under the view's lock:
// requests for the same view's OpenAPI wait for one another while a member answers (each read
// is bounded by Timeout); other views do not wait.
func (o *OpenAPI) view(ctx context.Context, cluster, gv string) (*handler3.OpenAPIService, bool, bool) {
	want, ok := o.wanted(ctx, cluster)
	if !ok {
		return nil, false, false
	}
	o.mu.Lock()
	if o.views == nil {
		o.views = map[string]*openAPIView{}
	}
	v := o.views[cluster]
	if v == nil {
		v = &openAPIView{svc: handler3.NewOpenAPIService(), sources: map[string]openAPISource{}}
		o.views[cluster] = v
	}
	o.mu.Unlock()
	v.mu.Lock()
	defer v.mu.Unlock()
	for path := range v.sources {
		if _, ok := want[path]; !ok {
			v.svc.DeleteGroupVersion(path)
			delete(v.sources, path)
		}
	}
	now := time.Now()
	indexes := map[string]map[string]openapi.GroupVersion{} // per cluster, read once per refresh
	for path, from := range want {
		if src, ok := v.sources[path]; ok && src.cluster == from && now.Sub(src.at) < openAPIMaxAge {
			continue
		}
		doc, err := o.fetch(indexes, from, path)
		if err != nil {
			// Served from the last document read, if any, and read again on the next request.
			o.Logger.Warn("openapi: cannot read a member's document", zap.String("cluster", from), zap.String("groupVersion", path), zap.Error(err))
			continue
		}
		v.svc.UpdateGroupVersion(path, doc)
		v.sources[path] = openAPISource{cluster: from, at: now}
	}
	_, served := v.sources[gv]
	return v.svc, served, true
}

// fetch reads the OpenAPI v3 document of a group-version from a member cluster, and
// notes where it came from. indexes keeps each cluster's /openapi/v3 index once read.
func (o *OpenAPI) fetch(indexes map[string]map[string]openapi.GroupVersion, cluster, gv string) (*spec3.OpenAPI, error) {
	paths, ok := indexes[cluster]
	if !ok {
		cfg, ok := o.Configs(cluster)
		if !ok {
			return nil, fmt.Errorf("cluster %q: not running here", cluster)
		}
		cfg.Timeout = o.Timeout
		dc, err := cgdiscovery.NewDiscoveryClientForConfig(cfg)
		if err != nil {
			return nil, fmt.Errorf("cluster %q: %w", cluster, err)
		}
		if paths, err = dc.OpenAPIV3().Paths(); err != nil {
			return nil, fmt.Errorf("cluster %q: openapi/v3: %w", cluster, err)
		}
		indexes[cluster] = paths
	}
	p, ok := paths[gv]
	if !ok {
		return nil, fmt.Errorf("cluster %q: publishes no OpenAPI document for %s", cluster, gv)
	}
	b, err := p.Schema("application/json")
	if err != nil {
		return nil, fmt.Errorf("cluster %q: openapi/v3/%s: %w", cluster, gv, err)
	}
	var doc spec3.OpenAPI
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("cluster %q: openapi/v3/%s: %w", cluster, gv, err)
	}
	if doc.Info == nil {
		doc.Info = &spec.Info{}
	}
	note := fmt.Sprintf(openAPINote, cluster)
	if doc.Info.Description != "" {
		note = doc.Info.Description + " " + note
	}
	doc.Info.Description = note
	return &doc, nil
}
