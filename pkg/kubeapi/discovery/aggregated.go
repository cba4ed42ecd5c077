package discovery

import (
	"encoding/json"
	"net/http"
	"slices"
	"sync"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/endpoints/discovery/aggregated"

	"github.com/multicache/multicache/pkg/filters"
	"github.com/multicache/multicache/pkg/storage"
)

// writeError answers err: the package's one writer of errors (a metav1.Status, as
// kube-apiserver answers them).
func writeError(w http.ResponseWriter, err error) { filters.WriteAPIError(w, err) }

// Documents answers the discovery documents of a view: /version, /api, /apis, /apis/{g},
// /api/v1 and /apis/{g}/{v}. /api and /apis are also served aggregated (apidiscovery.k8s.io/v2),
// which client-go prefers since 1.30: one request to each describes every group, version and
// resource. k8s.io/apiserver's ResourceManager serves those (negotiation, ETags, JSON and
// protobuf) from the same view as the legacy documents, which a client that does not ask for
// them still gets. A group-version whose resources are served only by clusters that are not
// synced is marked Stale.
type Documents struct {
	mu    sync.Mutex
	views map[string]*aggregatedView // by cluster; "" is the fleet
}

type aggregatedView struct {
	// The documents as last set: the ResourceManagers are told only of changes (each set
	// logs every group-version it adds).
	apiGroups, apisGroups []apidiscoveryv2.APIGroupDiscovery
	api, apis             aggregated.ResourceManager
}

// Serve answers what ("version", "api", "apis", "group" or "resources") of group and version
// in cluster's view v ("" for the fleet).
func (d *Documents) Serve(w http.ResponseWriter, r *http.Request, v *View, cluster, what, group, version string) {
	switch what {
	case "version":
		writeJSON(w, ServerVersion())
	case "api":
		av := d.aggregated(cluster, v)
		aggregated.WrapAggregatedDiscoveryToHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{"v1"},
				ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{{ClientCIDR: "0.0.0.0/0", ServerAddress: r.Host}}})
		}), av.api, nil).ServeHTTP(w, r)
	case "apis":
		av := d.aggregated(cluster, v)
		aggregated.WrapAggregatedDiscoveryToHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: v.Groups()})
		}), av.apis, nil).ServeHTTP(w, r)
	case "group":
		for _, g := range v.Groups() {
			if g.Name == group {
				g.Kind, g.APIVersion = "APIGroup", "v1"
				writeJSON(w, g)
				return
			}
		}
		writeError(w, storage.Error(http.StatusNotFound, "the server could not find the requested resource: group "+group+" is not served"))
	case "resources":
		gv := version
		if group != "" {
			gv = group + "/" + version
		}
		res := v.ResourcesOf(group, version)
		if len(res) == 0 && !(group == "" && version == "v1") {
			writeError(w, storage.Error(http.StatusNotFound, "the server could not find the requested resource: "+gv+" is not served"))
			return
		}
		writeJSON(w, metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: gv, APIResources: res})
	}
}

// aggregated brings a view's aggregated documents in line with v, and returns them.
func (d *Documents) aggregated(cluster string, v *View) *aggregatedView {
	stale := staleGroupVersions(v)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.views == nil {
		d.views = map[string]*aggregatedView{}
	}
	av := d.views[cluster]
	if av == nil {
		av = &aggregatedView{api: aggregated.NewResourceManager("api"), apis: aggregated.NewResourceManager("apis")}
		d.views[cluster] = av
	}
	groups := v.Groups()
	var apisGroups []apidiscoveryv2.APIGroupDiscovery
	for _, g := range groups {
		gd := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: g.Name}}
		for _, gv := range g.Versions {
			gd.Versions = append(gd.Versions, versionDiscovery(v, g.Name, gv.Version, stale))
		}
		apisGroups = append(apisGroups, gd)
	}
	if !equality.Semantic.DeepEqual(apisGroups, av.apisGroups) {
		for i, g := range groups {
			for j, gv := range g.Versions {
				// The legacy order: groups by name, each one's preferred version first.
				av.apis.SetGroupVersionPriority(metav1.GroupVersion{Group: g.Name, Version: gv.Version}, 10000-i, 1000-j)
			}
		}
		av.apis.SetGroups(apisGroups)
		av.apisGroups = apisGroups
	}
	apiGroups := []apidiscoveryv2.APIGroupDiscovery{{Versions: []apidiscoveryv2.APIVersionDiscovery{versionDiscovery(v, "", "v1", stale)}}}
	if !equality.Semantic.DeepEqual(apiGroups, av.apiGroups) {
		av.api.SetGroups(apiGroups)
		av.apiGroups = apiGroups
	}
	return av
}

// versionDiscovery is one group-version's resources as aggregated discovery lists them.
func versionDiscovery(v *View, group, version string, stale []string) apidiscoveryv2.APIVersionDiscovery {
	vd := apidiscoveryv2.APIVersionDiscovery{Version: version, Resources: []apidiscoveryv2.APIResourceDiscovery{},
		Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent}
	if slices.Contains(stale, metav1.GroupVersion{Group: group, Version: version}.String()) {
		vd.Freshness = apidiscoveryv2.DiscoveryFreshnessStale
	}
	for _, r := range v.ResourcesOf(group, version) {
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

// staleGroupVersions lists, sorted, the group-versions of v none of whose resources a synced
// cluster serves.
func staleGroupVersions(v *View) []string {
	fresh, all := map[string]bool{}, map[string]bool{}
	for _, r := range v.Resources {
		if !r.Cached() {
			continue
		}
		for _, ver := range r.Versions {
			gv := metav1.GroupVersion{Group: r.GVK.Group, Version: ver}.String()
			all[gv] = true
			fresh[gv] = fresh[gv] || len(r.Synced) > 0
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

// writeJSON writes v as the answer.
func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
