package discovery

import (
	"context"
	"errors"
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
	"github.com/multicache/multicache/pkg/storage"
)

// ClustersGroupVersion is the group and version of the read-only resource clusters.multicache.io.
var ClustersGroupVersion = schema.GroupVersion{Group: "multicache.io", Version: "v1"}

// ReadVerbs are the verbs every resource served supports.
var ReadVerbs = metav1.Verbs{"get", "list", "watch"}

// Resource is a resource as the Kubernetes API serves it: named, versioned and scoped as the
// first cluster (by name) that resolved it serves it.
type Resource struct {
	Name     string // the configured resource; "" for clusters.multicache.io and the definitions
	GVK      schema.GroupVersionKind
	Versions []string // every version a cluster resolved it at
	API      metav1.APIResource
	Columns  []apiextensionsv1.CustomResourceColumnDefinition
	Mode     clusterset.Mode
	Clusters []string // the clusters that resolved it, sorted
	// Synced lists those of Clusters whose resource is synced.
	Synced []string
}

// Cached reports whether r is served from the clusters' caches: not clusters.multicache.io
// nor the definitions, which the daemon makes up from its clusters' status.
func (r *Resource) Cached() bool { return r != ClustersResource && r != DefinitionsResource }

// GroupResource is r's group and plural.
func (r *Resource) GroupResource() schema.GroupResource {
	return schema.GroupResource{Group: r.GVK.Group, Resource: r.API.Name}
}

// ClustersResource is clusters.multicache.io: the fleet's clusters as objects.
var ClustersResource = &Resource{
	GVK:      ClustersGroupVersion.WithKind("Cluster"),
	Versions: []string{ClustersGroupVersion.Version},
	API:      metav1.APIResource{Name: "clusters", SingularName: "cluster", Kind: "Cluster", Verbs: metav1.Verbs{"get", "list"}},
}

// DefinitionsResource is customresourcedefinitions.apiextensions.k8s.io: the definitions of the
// custom resources the daemon caches.
var DefinitionsResource = &Resource{
	GVK:      apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"),
	Versions: []string{apiextensionsv1.SchemeGroupVersion.Version},
	API: metav1.APIResource{Name: "customresourcedefinitions", SingularName: "customresourcedefinition", Kind: "CustomResourceDefinition",
		Verbs: ReadVerbs, ShortNames: []string{"crd", "crds"}, Categories: []string{"api-extensions"}},
}

// View is what the Kubernetes API serves: in the fleet view, or in one cluster's.
type View struct {
	Resources []*Resource
	Clusters  []string // every cluster, sorted
}

// Statuses lists how the clusters serve the configured resources.
type Statuses func(ctx context.Context) ([]clusterset.ClusterStatus, error)

// Catalog keeps the fleet's statuses for a second: discovery and every request read it.
type Catalog struct {
	statuses Statuses
	mu       sync.Mutex
	at       time.Time
	all      []clusterset.ClusterStatus
	fleet    *View
	// unanswered are the clusters the last read could not ask (storage.Unanswered): their
	// owners did not answer, or they have none live.
	unanswered storage.Unanswered
}

// NewCatalog reads statuses from s.
func NewCatalog(s Statuses) *Catalog { return &Catalog{statuses: s} }

// read is the statuses, read again when older than a second.
func (c *Catalog) read(ctx context.Context, fresh bool) ([]clusterset.ClusterStatus, *View) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fleet == nil || time.Since(c.at) > time.Second || (fresh && time.Since(c.at) > time.Millisecond) {
		all, err := c.statuses(ctx)
		var unanswered storage.Unanswered
		if errors.As(err, &unanswered) {
			err = nil // what the others said is the catalog
		}
		if err == nil || c.fleet == nil {
			sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
			c.all, c.fleet, c.at, c.unanswered = all, build(all, ""), time.Now(), unanswered
		}
	}
	return c.all, c.fleet
}

// Unanswered says why the last read of the statuses has none for cluster ("" when it has, or
// the cluster is not in the fleet): its owner did not answer, or it has no live owner.
func (c *Catalog) Unanswered(cluster string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.unanswered[cluster]
}

// View returns the fleet's view, or cluster's when cluster is not "" (false when no such
// cluster exists). fresh reads the statuses again unless they were read within a
// millisecond: a cluster that just joined, or a resource a cluster just resolved, is not
// missing for up to a second.
func (c *Catalog) View(ctx context.Context, cluster string, fresh bool) (*View, bool) {
	all, fleet := c.read(ctx, fresh)
	if cluster == "" {
		return fleet, true
	}
	if !slices.Contains(fleet.Clusters, cluster) && !fresh {
		all, fleet = c.read(ctx, true) // perhaps it joined within the second
	}
	if !slices.Contains(fleet.Clusters, cluster) {
		return nil, false
	}
	return build(all, cluster), true
}

// Resolving lists the clusters of clusters, in their order, that may still resolve a
// configured resource: those with no status yet, and those with a resource pending or syncing
// without a kind. A resource missing from their view may then still come. The catalog is
// read once, and each cluster found by name.
func (c *Catalog) Resolving(ctx context.Context, clusters, resources []string) []string {
	all, _ := c.read(ctx, false)
	byName := make(map[string]*clusterset.ClusterStatus, len(all))
	for i := range all {
		byName[all[i].Name] = &all[i]
	}
	var out []string
	for _, cluster := range clusters {
		if cs, ok := byName[cluster]; !ok || cs.Resolving(resources) {
			out = append(out, cluster)
		}
	}
	return out
}

// build lists the resources the statuses show resolved, in one cluster's view when only is not
// "". The clusters are taken by name, whatever order the statuses come in: the first by name
// shows a resource its clusters serve in different versions.
func build(statuses []clusterset.ClusterStatus, only string) *View {
	statuses = slices.Clone(statuses)
	slices.SortFunc(statuses, func(a, b clusterset.ClusterStatus) int { return strings.Compare(a.Name, b.Name) })
	v := &View{}
	byName := map[string]*Resource{}
	var order []string
	for _, cs := range statuses {
		if only != "" && cs.Name != only {
			continue
		}
		v.Clusters = append(v.Clusters, cs.Name)
		for _, rs := range cs.Resources {
			if rs.Kind == "" || rs.Plural == "" || rs.State == clusterset.NotServed {
				continue
			}
			r, ok := byName[rs.Resource]
			if !ok {
				r = &Resource{Name: rs.Resource, GVK: schema.GroupVersionKind{Group: rs.Group, Version: rs.Version, Kind: rs.Kind},
					API: metav1.APIResource{Name: rs.Plural, SingularName: rs.Singular, Namespaced: rs.Namespaced, Kind: rs.Kind,
						Verbs: ReadVerbs, ShortNames: rs.ShortNames, Categories: rs.Categories},
					Columns: rs.PrinterColumns, Mode: rs.Mode}
				byName[rs.Resource] = r
				order = append(order, rs.Resource)
			}
			if !slices.Contains(r.Versions, rs.Version) {
				r.Versions = append(r.Versions, rs.Version)
			}
			r.Clusters = append(r.Clusters, cs.Name)
			if rs.State == clusterset.Synced {
				r.Synced = append(r.Synced, cs.Name)
			}
		}
	}
	for _, name := range order {
		v.Resources = append(v.Resources, byName[name])
	}
	v.Resources = append(v.Resources, ClustersResource)
	if !slices.ContainsFunc(v.Resources, func(r *Resource) bool { return r.GroupResource() == DefinitionsResource.GroupResource() }) {
		// Unless the definitions are cached as a resource of their own (configured).
		v.Resources = append(v.Resources, DefinitionsResource)
	}
	return v
}

// Find returns the resource served as group/version/resource.
func (v *View) Find(group, version, resource string) *Resource {
	for _, r := range v.Resources {
		if r.GVK.Group == group && r.API.Name == resource && slices.Contains(r.Versions, version) {
			return r
		}
	}
	return nil
}

// FindResource is the resource of gr, at any version.
func (v *View) FindResource(gr schema.GroupResource) *Resource {
	for _, r := range v.Resources {
		if r.GroupResource() == gr {
			return r
		}
	}
	return nil
}

// Groups lists each group served with its versions, preferred first.
func (v *View) Groups() []metav1.APIGroup {
	var out []metav1.APIGroup
	index := map[string]int{}
	for _, r := range v.Resources {
		if r.GVK.Group == "" {
			continue
		}
		i, ok := index[r.GVK.Group]
		if !ok {
			i = len(out)
			index[r.GVK.Group] = i
			out = append(out, metav1.APIGroup{Name: r.GVK.Group})
		}
		for _, ver := range r.Versions {
			gv := metav1.GroupVersionForDiscovery{GroupVersion: r.GVK.Group + "/" + ver, Version: ver}
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

// ResourcesOf lists the resources served in group/version.
func (v *View) ResourcesOf(group, version string) []metav1.APIResource {
	out := []metav1.APIResource{}
	for _, r := range v.Resources {
		if r.GVK.Group == group && slices.Contains(r.Versions, version) {
			out = append(out, r.API)
		}
	}
	return out
}

// ServerVersion is the Kubernetes version whose API the daemon serves: that of the client-go
// it is built with (v0.X.Y serves v1.X.Y).
func ServerVersion() version.Info {
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

// ByName is the cached resource configured as name, nil when no cluster of the view serves it.
func (v *View) ByName(name string) *Resource {
	for _, r := range v.Resources {
		if r.Name == name && r.Cached() {
			return r
		}
	}
	return nil
}

// Resolve maps a resource as a user wrote it (plural, singular, kind, short name,
// plural.group, group/version/resource, or the configured name) to its configured name, by the
// aliases the clusters' discovery gave it. configured are the configured names.
func (c *Catalog) Resolve(ctx context.Context, name string, configured []string) (string, bool) {
	if slices.Contains(configured, name) {
		return name, true
	}
	key := strings.ToLower(name)
	for _, fresh := range []bool{false, true} {
		all, _ := c.read(ctx, fresh)
		for _, cs := range all {
			for _, rs := range cs.Resources {
				for _, a := range rs.Aliases {
					if strings.ToLower(a) == key {
						return rs.Resource, true
					}
				}
			}
		}
	}
	return "", false
}
