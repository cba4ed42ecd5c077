package server

import (
	"net/http"
	"slices"
	"sync"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/endpoints/discovery/aggregated"

	"github.com/multicache/multicache/pkg/clusterset"
)

// Aggregated discovery (apidiscovery.k8s.io/v2), which client-go prefers since 1.30: one
// request to /api and one to /apis describe every group, version and resource, instead of one
// request per group-version. k8s.io/apiserver's ResourceManager serves it (negotiation, ETags,
// JSON and protobuf) from the same catalog as the legacy documents, which a client that does
// not ask for it still gets. A group-version whose resources are served only by clusters that
// are not synced is marked Stale.

// discoveryViews keeps the aggregated documents of each view ("" the fleet, or a cluster).
type discoveryViews struct {
	mu    sync.Mutex
	views map[string]*discoveryView
}

type discoveryView struct {
	// The documents as last set: the ResourceManagers are told only of changes (each set
	// logs every group-version it adds).
	apiGroups, apisGroups []apidiscoveryv2.APIGroupDiscovery
	api, apis             aggregated.ResourceManager
	// serveAPI and serveAPIs answer /api and /apis: aggregated when the client asks for it.
	serveAPI, serveAPIs func(legacy http.Handler) http.Handler
}

// aggregatedDiscovery answers /api or /apis of a view (p.what), aggregated when the request
// asks for it, and by legacy otherwise.
func (s *Server) aggregatedDiscovery(w http.ResponseWriter, r *http.Request, cluster string, cat *catalog, legacy http.HandlerFunc, apis bool) {
	v := s.discoveryView(cluster, cat)
	if apis {
		v.serveAPIs(legacy).ServeHTTP(w, r)
		return
	}
	v.serveAPI(legacy).ServeHTTP(w, r)
}

// discoveryView brings a view's aggregated documents in line with cat, and returns them.
func (s *Server) discoveryView(cluster string, cat *catalog) *discoveryView {
	stale := s.staleGroupVersions(cat)
	s.discovery.mu.Lock()
	defer s.discovery.mu.Unlock()
	if s.discovery.views == nil {
		s.discovery.views = map[string]*discoveryView{}
	}
	v := s.discovery.views[cluster]
	if v == nil {
		v = &discoveryView{api: aggregated.NewResourceManager("api"), apis: aggregated.NewResourceManager("apis")}
		v.serveAPI = func(legacy http.Handler) http.Handler {
			return aggregated.WrapAggregatedDiscoveryToHandler(legacy, v.api, nil)
		}
		v.serveAPIs = func(legacy http.Handler) http.Handler {
			return aggregated.WrapAggregatedDiscoveryToHandler(legacy, v.apis, nil)
		}
		s.discovery.views[cluster] = v
	}
	groups := cat.groups()
	var apisGroups []apidiscoveryv2.APIGroupDiscovery
	for _, g := range groups {
		gd := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: g.Name}}
		for _, gv := range g.Versions {
			gd.Versions = append(gd.Versions, versionDiscovery(cat, g.Name, gv.Version, stale))
		}
		apisGroups = append(apisGroups, gd)
	}
	if !equality.Semantic.DeepEqual(apisGroups, v.apisGroups) {
		for i, g := range groups {
			for j, gv := range g.Versions {
				// The legacy order: groups by name, each one's preferred version first.
				v.apis.SetGroupVersionPriority(metav1.GroupVersion{Group: g.Name, Version: gv.Version}, 10000-i, 1000-j)
			}
		}
		v.apis.SetGroups(apisGroups)
		v.apisGroups = apisGroups
	}
	apiGroups := []apidiscoveryv2.APIGroupDiscovery{{Versions: []apidiscoveryv2.APIVersionDiscovery{versionDiscovery(cat, "", "v1", stale)}}}
	if !equality.Semantic.DeepEqual(apiGroups, v.apiGroups) {
		v.api.SetGroups(apiGroups)
		v.apiGroups = apiGroups
	}
	return v
}

// versionDiscovery is one group-version's resources as aggregated discovery lists them.
func versionDiscovery(cat *catalog, group, version string, stale []string) apidiscoveryv2.APIVersionDiscovery {
	vd := apidiscoveryv2.APIVersionDiscovery{Version: version, Resources: []apidiscoveryv2.APIResourceDiscovery{},
		Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent}
	if slices.Contains(stale, metav1.GroupVersion{Group: group, Version: version}.String()) {
		vd.Freshness = apidiscoveryv2.DiscoveryFreshnessStale
	}
	for _, r := range cat.resourcesOf(group, version) {
		scope := apidiscoveryv2.ScopeCluster
		if r.Namespaced {
			scope = apidiscoveryv2.ScopeNamespace
		}
		vd.Resources = append(vd.Resources, apidiscoveryv2.APIResourceDiscovery{
			Resource: r.Name, SingularResource: r.SingularName, Scope: scope,
			ResponseKind: &metav1.GroupVersionKind{Group: group, Version: version, Kind: r.Kind},
			Verbs:        r.Verbs, ShortNames: r.ShortNames, Categories: r.Categories,
		})
	}
	return vd
}

// staleGroupVersions lists, sorted, the group-versions of cat none of whose resources a synced
// cluster serves.
func (s *Server) staleGroupVersions(cat *catalog) []string {
	fresh, all := map[string]bool{}, map[string]bool{}
	for _, kr := range cat.resources {
		if !kr.cached() {
			continue
		}
		info := s.info(kr.name)
		synced := slices.ContainsFunc(kr.clusters, func(c string) bool { return info[c].State == clusterset.Synced })
		for _, v := range kr.versions {
			gv := metav1.GroupVersion{Group: kr.gvk.Group, Version: v}.String()
			all[gv] = true
			fresh[gv] = fresh[gv] || synced
		}
	}
	var out []string
	for gv := range all {
		if !fresh[gv] {
			out = append(out, gv)
		}
	}
	slices.Sort(out)
	return out
}
