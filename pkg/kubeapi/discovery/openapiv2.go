package discovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	cgdiscovery "k8s.io/client-go/discovery"
	"k8s.io/kube-openapi/pkg/aggregator"
	"k8s.io/kube-openapi/pkg/handler"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/multicache/multicache/pkg/storage"
)

// OpenAPI v2, for clients that still read the single Swagger document (/openapi/v2). A view's
// document is made of the same sources as its v3 documents (wantedOpenAPI): from each cluster
// chosen for some group-versions, the paths of those group-versions and the definitions they
// use, merged by kube-openapi's aggregator as kube-aggregator merges its APIs' documents
// (conflicting definitions renamed, the first path kept). kube-openapi's OpenAPIService serves
// it: JSON or protobuf, ETags, gzip.
//
// The document is built on the first request and again when the view's sources change or it
// is older than openAPIMaxAge. A source that cannot be read is left out, and the document is
// built again 30 seconds later; when none can be read, the last document is served (503
// before there is one).

type openAPIV2View struct {
	mu      sync.Mutex // held while the document is built
	mux     *http.ServeMux
	svc     *handler.OpenAPIService
	sources string // the sources the document was built from (wantedOpenAPI, rendered)
	at      time.Time
}

// ServeV2 serves /openapi/v2 of cluster's view ("" for the fleet); the caller may read it.
func (o *OpenAPI) ServeV2(w http.ResponseWriter, r *http.Request, cluster string) {
	want, ok := o.wanted(r.Context(), cluster)
	if !ok {
		writeError(w, storage.Errorf(http.StatusNotFound, "cluster %q is not in the fleet", cluster))
		return
	}
	v, err := o.viewV2(r.Context(), cluster, want)
	if err != nil {
		writeError(w, storage.Error(http.StatusServiceUnavailable, "openapi/v2: "+err.Error()))
		return
	}
	r2 := r.Clone(r.Context())
	r2.URL.Path = "/openapi/v2"
	v.mux.ServeHTTP(w, r2)
}

// viewV2 returns cluster's view with a document built from want, building it when it has
// none, its sources changed or it is older than openAPIMaxAge. Requests for the same view wait
// for one build.
func (o *OpenAPI) viewV2(ctx context.Context, cluster string, want map[string]string) (*openAPIV2View, error) {
	o.mu.Lock()
	if o.v2 == nil {
		o.v2 = map[string]*openAPIV2View{}
	}
	v := o.v2[cluster]
	if v == nil {
		v = &openAPIV2View{}
		o.v2[cluster] = v
	}
	o.mu.Unlock()
	v.mu.Lock()
	defer v.mu.Unlock()
	sources := renderSources(want)
	if v.svc != nil && v.sources == sources && time.Since(v.at) < openAPIMaxAge {
		return v, nil
	}
	// Built for every request waiting on this view, not for the first one's context.
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*o.Timeout)
	defer cancel()
	doc, failed, err := o.buildV2(bctx, want)
	// A document that lacks a source's paths, or none built, is tried again in 30 seconds
	// rather than on every request.
	retryAt := time.Now().Add(30*time.Second - openAPIMaxAge)
	if err != nil {
		if v.svc != nil {
			o.Logger.Warn("openapi/v2: serving the last document", zap.String("view", cluster), zap.Error(err))
			v.at = retryAt
			return v, nil
		}
		return nil, err
	}
	if v.svc == nil {
		v.svc, v.mux = handler.NewOpenAPIService(doc), http.NewServeMux()
		v.svc.RegisterOpenAPIVersionedService("/openapi/v2", v.mux)
	} else if err := v.svc.UpdateSpec(doc); err != nil {
		return nil, err
	}
	v.sources, v.at = sources, time.Now()
	if len(failed) > 0 {
		o.Logger.Warn("openapi/v2: some members' documents could not be read: their group-versions are left out", zap.String("view", cluster), zap.Strings("clusters", failed))
		v.at = retryAt
	}
	return v, nil
}

// renderSources renders want (group-version path → cluster) in a stable order.
func renderSources(want map[string]string) string {
	keys := make([]string, 0, len(want))
	for gv, c := range want {
		keys = append(keys, gv+"="+c)
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

// buildV2 reads each source cluster's /openapi/v2 once, keeps the paths of the
// group-versions chosen from it, and merges them, the clusters taken by name. A source that
// cannot be read is left out (failed); err only when none could be read.
func (o *OpenAPI) buildV2(ctx context.Context, want map[string]string) (*spec.Swagger, []string, error) {
	prefixes := map[string][]string{} // cluster → path prefixes of its group-versions
	for gv, c := range want {
		prefixes[c] = append(prefixes[c], "/"+gv+"/")
	}
	clusters := make([]string, 0, len(prefixes))
	for c := range prefixes {
		clusters = append(clusters, c)
	}
	sort.Strings(clusters)
	merged := &spec.Swagger{SwaggerProps: spec.SwaggerProps{Swagger: "2.0", Paths: &spec.Paths{Paths: map[string]spec.PathItem{}},
		Definitions: spec.Definitions{}, Info: &spec.Info{InfoProps: spec.InfoProps{Title: "multicache", Version: ServerVersion().GitVersion}}}}
	var read, failed []string
	var errs []error
	for _, c := range clusters {
		doc, err := o.fetchV2(ctx, c)
		if err == nil {
			err = aggregator.MergeSpecsIgnorePathConflictRenamingDefinitionsAndParameters(merged, aggregator.FilterSpecByPathsWithoutSideEffects(doc, prefixes[c]))
		}
		if err != nil {
			failed, errs = append(failed, c), append(errs, err)
			continue
		}
		read = append(read, c)
	}
	if len(read) == 0 && len(clusters) > 0 {
		return nil, failed, errors.Join(errs...)
	}
	note := "Served by multicache from the member clusters " + strings.Join(read, ", ") + "."
	if len(read) == 1 {
		note = fmt.Sprintf(openAPINote, read[0])
	} else {
		note += " " + strings.TrimPrefix(fmt.Sprintf(openAPINote, ""), `Served by multicache from the member cluster "". `)
	}
	merged.Info.Description = note
	return merged, failed, nil
}

// fetchV2 reads a member cluster's /openapi/v2, as JSON.
func (o *OpenAPI) fetchV2(ctx context.Context, cluster string) (*spec.Swagger, error) {
	cfg, ok := o.Configs(cluster)
	if !ok {
		return nil, fmt.Errorf("cluster %q: not running here", cluster)
	}
	cfg.Timeout = o.Timeout
	dc, err := cgdiscovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster %q: %w", cluster, err)
	}
	b, err := dc.RESTClient().Get().AbsPath("/openapi/v2").SetHeader("Accept", "application/json").Do(ctx).Raw()
	if err != nil {
		return nil, fmt.Errorf("cluster %q: openapi/v2: %w", cluster, err)
	}
	var doc spec.Swagger
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("cluster %q: openapi/v2: %w", cluster, err)
	}
	return &doc, nil
}
