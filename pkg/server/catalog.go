package server

import (
	"net/http"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"

	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/filters"
)

// ClustersGroupVersion is the group and version of the read-only resource clusters.multicache.io.
var ClustersGroupVersion = schema.GroupVersion{Group: "multicache.io", Version: "v1"}

// readVerbs are the verbs every resource served supports.
var readVerbs = metav1.Verbs{"get", "list", "watch"}

// kubeResource is a cached resource as the Kubernetes API serves it: named, versioned and
// scoped as the first cluster (by name) that resolved it serves it.
type kubeResource struct {
	name     string // the configured resource; "" for clusters.multicache.io
	gvk      schema.GroupVersionKind
	versions []string // every version a cluster resolved it at
	api      metav1.APIResource
	columns  []apiextensionsv1.CustomResourceColumnDefinition
	mode     clusterset.Mode
	clusters []string // the clusters that resolved it, sorted
}

// cached reports whether k is served from the clusters' caches: not clusters.multicache.io
// nor the definitions (crds.go), which the daemon makes up from its clusters' status.
func (k *kubeResource) cached() bool { return k != clustersResource && k != crdsResource }

func (k *kubeResource) groupResource() schema.GroupResource {
	return schema.GroupResource{Group: k.gvk.Group, Resource: k.api.Name}
}

// catalog is what the Kubernetes API serves: in the fleet view, or in one cluster's.
type catalog struct {
	resources []*kubeResource
	clusters  []string // every cluster, sorted
}

var clustersResource = &kubeResource{
	gvk:      ClustersGroupVersion.WithKind("Cluster"),
	versions: []string{ClustersGroupVersion.Version},
	api:      metav1.APIResource{Name: "clusters", SingularName: "cluster", Kind: "Cluster", Verbs: metav1.Verbs{"get", "list"}},
}

// catalogCache keeps the fleet catalog for a second: discovery and every request read it.
type catalogCache struct {
	mu    sync.Mutex
	at    time.Time
	fleet *catalog
}

// catalog returns the fleet's catalog, or cluster's when cluster is not "" (false when no such
// cluster exists).
func (s *Server) catalog(cluster string) (*catalog, bool) {
	s.cat.mu.Lock()
	if s.cat.fleet == nil || time.Since(s.cat.at) > time.Second {
		s.cat.fleet, s.cat.at = buildCatalog(s.reg.Status(), ""), time.Now()
	}
	fleet := s.cat.fleet
	s.cat.mu.Unlock()
	if cluster == "" {
		return fleet, true
	}
	if !slices.Contains(fleet.clusters, cluster) {
		// Perhaps it joined within the second.
		statuses := s.reg.Status()
		return buildCatalog(statuses, cluster), slices.ContainsFunc(statuses, func(cs clusterset.ClusterStatus) bool { return cs.Name == cluster })
	}
	return buildCatalog(s.reg.Status(), cluster), true
}

// staleCatalog drops the fleet's catalog if it is older than now, so that the next catalog call
// builds it anew, and reports whether it did.
func (s *Server) staleCatalog() bool {
	s.cat.mu.Lock()
	defer s.cat.mu.Unlock()
	if s.cat.fleet == nil || time.Since(s.cat.at) < time.Millisecond {
		return false
	}
	s.cat.fleet = nil
	return true
}

// buildCatalog lists the resources the statuses show resolved, in one cluster's view when
// only is not "".
func buildCatalog(statuses []clusterset.ClusterStatus, only string) *catalog {
	sort.Slice(statuses, func(i, j int) bool { return statuses[i].Name < statuses[j].Name })
	c := &catalog{}
	byName := map[string]*kubeResource{}
	var order []string
	for _, cs := range statuses {
		if only != "" && cs.Name != only {
			continue
		}
		c.clusters = append(c.clusters, cs.Name)
		for _, rs := range cs.Resources {
			if rs.Kind == "" || rs.Plural == "" || rs.State == clusterset.NotServed {
				continue
			}
			kr, ok := byName[rs.Resource]
			if !ok {
				kr = &kubeResource{name: rs.Resource, gvk: schema.GroupVersionKind{Group: rs.Group, Version: rs.Version, Kind: rs.Kind},
					api: metav1.APIResource{Name: rs.Plural, SingularName: rs.Singular, Namespaced: rs.Namespaced, Kind: rs.Kind,
						Verbs: readVerbs, ShortNames: rs.ShortNames, Categories: rs.Categories},
					columns: rs.PrinterColumns, mode: rs.Mode}
				byName[rs.Resource] = kr
				order = append(order, rs.Resource)
			}
			if !slices.Contains(kr.versions, rs.Version) {
				kr.versions = append(kr.versions, rs.Version)
			}
			kr.clusters = append(kr.clusters, cs.Name)
		}
	}
	for _, name := range order {
		c.resources = append(c.resources, byName[name])
	}
	c.resources = append(c.resources, clustersResource)
	if !slices.ContainsFunc(c.resources, func(kr *kubeResource) bool { return kr.groupResource() == crdsResource.groupResource() }) {
		// Unless the definitions are cached as a resource of their own (configured).
		c.resources = append(c.resources, crdsResource)
	}
	return c
}

// find returns the resource served as group/version/resource.
func (c *catalog) find(group, version, resource string) *kubeResource {
	for _, kr := range c.resources {
		if kr.gvk.Group == group && kr.api.Name == resource && slices.Contains(kr.versions, version) {
			return kr
		}
	}
	return nil
}

// groups lists each group served with its versions, preferred first.
func (c *catalog) groups() []metav1.APIGroup {
	var out []metav1.APIGroup
	index := map[string]int{}
	for _, kr := range c.resources {
		if kr.gvk.Group == "" {
			continue
		}
		i, ok := index[kr.gvk.Group]
		if !ok {
			i = len(out)
			index[kr.gvk.Group] = i
			out = append(out, metav1.APIGroup{Name: kr.gvk.Group})
		}
		for _, v := range kr.versions {
			gv := metav1.GroupVersionForDiscovery{GroupVersion: kr.gvk.Group + "/" + v, Version: v}
			if !slices.Contains(out[i].Versions, gv) {
				out[i].Versions = append(out[i].Versions, gv)
			}
		}
	}
	for i := range out {
		out[i].PreferredVersion = out[i].Versions[0]
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// resourcesOf lists the resources served in group/version.
func (c *catalog) resourcesOf(group, version string) []metav1.APIResource {
	out := []metav1.APIResource{}
	for _, kr := range c.resources {
		if kr.gvk.Group == group && slices.Contains(kr.versions, version) {
			out = append(out, kr.api)
		}
	}
	return out
}

// serverVersion is the Kubernetes version whose API the daemon serves: that of the client-go
// it is built with (v0.X.Y serves v1.X.Y).
func serverVersion() version.Info {
	v := version.Info{Major: "1", GitVersion: "v1.0.0-multicache", GoVersion: runtime.Version(),
		Compiler: runtime.Compiler, Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == "k8s.io/client-go" && strings.HasPrefix(m.Version, "v0.") {
				minor, _, _ := strings.Cut(strings.TrimPrefix(m.Version, "v0."), ".")
				v.Minor = minor
				v.GitVersion = "v1." + strings.TrimPrefix(m.Version, "v0.") + "+multicache"
			}
		}
	}
	return v
}

// handleDiscovery answers /version, /api, /apis, /apis/{g}, /api/v1 and /apis/{g}/{v}, legacy
// discovery only: a client asking for aggregated discovery gets these documents, recognises
// their content type and reads them as legacy discovery.
func (s *Server) handleDiscovery(w http.ResponseWriter, r *http.Request, p kubePath, cat *catalog) {
	switch p.what {
	case "version":
		writeJSON(w, serverVersion())
	case "api":
		s.aggregatedDiscovery(w, r, p.cluster, cat, func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{"v1"},
				ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{{ClientCIDR: "0.0.0.0/0", ServerAddress: r.Host}}})
		}, false)
	case "apis":
		s.aggregatedDiscovery(w, r, p.cluster, cat, func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: cat.groups()})
		}, true)
	case "group":
		for _, g := range cat.groups() {
			if g.Name == p.group {
				g.Kind, g.APIVersion = "APIGroup", "v1"
				writeJSON(w, g)
				return
			}
		}
		filters.WriteError(w, http.StatusNotFound, "the server could not find the requested resource: group "+p.group+" is not served")
	case "resources":
		gv := p.version
		if p.group != "" {
			gv = p.group + "/" + p.version
		}
		res := cat.resourcesOf(p.group, p.version)
		if len(res) == 0 && !(p.group == "" && p.version == "v1") {
			filters.WriteError(w, http.StatusNotFound, "the server could not find the requested resource: "+gv+" is not served")
			return
		}
		writeJSON(w, metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: gv, APIResources: res})
	}
}
