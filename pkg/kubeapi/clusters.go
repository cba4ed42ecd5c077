package kubeapi

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/filters"
	"github.com/multicache/multicache/pkg/kubeapi/discovery"
	"github.com/multicache/multicache/pkg/storage"
)

// clusters answers clusters.multicache.io, read-only: the clusters as objects, their state and
// each resource's, as `multicache clusters` shows. A list takes the label selector's cluster
// requirements and a metadata.name field selector; it has no watch.
func (a *API) clusters(ctx context.Context, w http.ResponseWriter, rq request) {
	if rq.list.watch {
		writeError(w, storage.Error(http.StatusMethodNotAllowed, "watch is not supported on clusters.multicache.io: list it again, or run `multicache clusters --watch`"))
		return
	}
	a.limited(ctx, w, func(ctx context.Context) {
		opts := storage.ClusterOptions{LabelSelector: rq.list.opts.LabelSelector}
		switch {
		case rq.p.name != "":
			opts.Clusters = []string{rq.p.name}
			if rq.p.cluster != "" && rq.p.cluster != rq.p.name {
				opts.Clusters = []string{} // in one cluster's view, only that cluster
			}
		case rq.p.cluster != "":
			opts.Clusters = []string{rq.p.cluster}
		}
		if fs := rq.list.opts.FieldSelector; fs != "" && rq.p.name == "" {
			name, ok := strings.CutPrefix(fs, "metadata.name=")
			if !ok || strings.ContainsAny(name, ",=!") {
				writeError(w, storage.Errorf(http.StatusBadRequest, "fieldSelector %q: clusters support metadata.name=NAME only", fs))
				return
			}
			if opts.Clusters == nil {
				opts.Clusters = []string{name}
			} else if !slices.Contains(opts.Clusters, name) {
				opts.Clusters = []string{}
			}
		}
		var cl []api.Cluster
		var err error
		if opts.Clusters == nil || len(opts.Clusters) > 0 {
			if cl, err = a.opts.Status.Clusters(ctx, opts); err != nil {
				writeError(w, err)
				return
			}
		}
		l := &storage.List{}
		shown := sets.New[string]()
		for _, c := range cl {
			l.Items = append(l.Items, storage.Item{Key: aggregate.Key{Cluster: c.Name, Name: c.Name}, Object: newClusterObject(c)})
			shown.Insert(c.Name)
		}
		if opts.Clusters == nil {
			// Those the caller may not read, left out.
			v, _ := a.opts.Catalog.View(ctx, "", false)
			clusterSel, _, _ := storage.SplitSelector(rq.list.opts.LabelSelector)
			for _, c := range clusterSel.Select(a.fleet(v)) {
				if !shown.Has(c) {
					l.Freshness = append(l.Freshness, api.ClusterFreshness{Name: c, Forbidden: true})
				}
			}
		}
		filters.AddWarnings(w.Header(), freshnessWarnings(l.Freshness, "clusters"))
		enc := rq.enc
		enc.TypeMeta = true // a list's items too, as kube-apiserver lists custom resources
		en, err := a.encoder(ctx, enc, discovery.ClustersResource)
		if err != nil {
			writeError(w, err)
			return
		}
		if rq.p.name == "" || enc.As == "Table" {
			if rq.p.name != "" && len(l.Items) == 0 {
				writeError(w, storage.NotFound(discovery.ClustersResource.GroupResource(), rq.p.name, fmt.Sprintf("%s %q not found", discovery.ClustersResource.GroupResource(), rq.p.name)))
				return
			}
			if err := a.writeList(w, en, l); err != nil {
				writeError(w, err)
			}
			return
		}
		if len(l.Items) == 0 {
			writeError(w, storage.NotFound(discovery.ClustersResource.GroupResource(), rq.p.name, fmt.Sprintf("%s %q not found", discovery.ClustersResource.GroupResource(), rq.p.name)))
			return
		}
		buf := storage.GetBuffer()
		defer storage.PutBuffer(buf)
		if err := en.Append(buf, l.Items[0], ""); err != nil {
			writeError(w, storage.Error(http.StatusInternalServerError, err.Error()))
			return
		}
		buf.WriteByte('\n')
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(buf.Bytes())
	})
}

// fleet is every cluster of the fleet: the Fleet's, else the view's.
func (a *API) fleet(v *discovery.View) []string {
	if a.opts.Fleet != nil {
		return a.opts.Fleet()
	}
	return v.Clusters
}

// clusterObject is a cluster as an object of clusters.multicache.io: the keys and values an
// unstructured object of the same fields would have (the status's keys in the same order, the
// top level's and metadata's in their types' order), typed so that a list of a thousand
// clusters encodes structs, not maps (each map a dozen allocations more).
type clusterObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Status            clusterObjectStatus `json:"status"`
}

// clusterObjectStatus is a cluster's status; its fields are in the order of their JSON keys.
type clusterObjectStatus struct {
	Error           string                  `json:"error,omitempty"`
	LastSync        string                  `json:"lastSync,omitempty"`
	Objects         int64                   `json:"objects"`
	Owner           string                  `json:"owner,omitempty"`
	Progress        string                  `json:"progress"`
	Resources       []clusterObjectResource `json:"resources"`
	Restarts        int64                   `json:"restarts"`
	State           string                  `json:"state"`
	SyncedResources string                  `json:"syncedResources"`
}

// clusterObjectResource is one of its resources.
type clusterObjectResource struct {
	Error    string                 `json:"error,omitempty"`
	Objects  int64                  `json:"objects"`
	Progress *clusterObjectProgress `json:"progress,omitempty"`
	Resource string                 `json:"resource"`
	State    string                 `json:"state"`
}

type clusterObjectProgress struct {
	Expected int64 `json:"expected"`
	Listing  bool  `json:"listing"`
	Loaded   int64 `json:"loaded"`
}

// DeepCopyObject copies c, its resources included.
func (c *clusterObject) DeepCopyObject() runtime.Object {
	out := *c
	c.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Status.Resources = slices.Clone(c.Status.Resources)
	for i, r := range out.Status.Resources {
		if r.Progress != nil {
			p := *r.Progress
			out.Status.Resources[i].Progress = &p
		}
	}
	return &out
}

// newClusterObject is c as an object of clusters.multicache.io.
func newClusterObject(c api.Cluster) *clusterObject {
	st := clusterObjectStatus{State: c.State, Restarts: int64(c.Restarts), Error: c.Error, Owner: c.Owner}
	var progress []api.Progress
	synced := 0
	if len(c.Resources) > 0 {
		st.Resources = make([]clusterObjectResource, 0, len(c.Resources))
	}
	for _, rs := range c.Resources {
		n := int64(rs.Objects)
		st.Objects += n
		if rs.State == "Synced" || rs.State == "NotServed" {
			synced++
		}
		r := clusterObjectResource{Resource: rs.Resource, State: rs.State, Objects: n, Error: rs.Error}
		if p := rs.Progress; p != nil && (p.Listing || p.Loaded > 0 || p.Expected > 0) {
			r.Progress = &clusterObjectProgress{Loaded: p.Loaded, Expected: p.Expected, Listing: p.Listing}
			if rs.Syncing() {
				progress = append(progress, *p)
			}
		}
		st.Resources = append(st.Resources, r)
	}
	st.SyncedResources = fmt.Sprintf("%d/%d", synced, len(c.Resources))
	st.Progress = api.ProgressText(progress...)
	if c.LastSync != nil {
		st.LastSync = c.LastSync.UTC().Format(time.RFC3339)
	}
	return &clusterObject{
		TypeMeta:   metav1.TypeMeta{APIVersion: discovery.ClustersGroupVersion.String(), Kind: "Cluster"},
		ObjectMeta: metav1.ObjectMeta{Name: c.Name},
		Status:     st,
	}
}

// clusterColumns are the Table columns of clusters.multicache.io after CLUSTER, the name.
type clusterColumns struct{}

func (clusterColumns) Columns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		{Name: "State", Type: "string", Description: "Synced, Syncing, Degraded or Failed: the worst of its resources'."},
		{Name: "Synced", Type: "string", Description: "Resources synced (or not served) of those cached."},
		{Name: "Objects", Type: "integer", Description: "Objects cached from the cluster."},
		{Name: "Progress", Type: "string", Description: "Objects loaded of the total the API servers reported, over the lists under way; - when none is."},
		{Name: "Last-Sync", Type: "string", Description: "Since the cache was last known in step with the cluster."},
		{Name: "Error", Type: "string", Description: "The last error, if any."},
	}
}

func (clusterColumns) Cells(_ context.Context, obj runtime.Object) ([]any, error) {
	c, ok := obj.(*clusterObject)
	if !ok {
		return nil, fmt.Errorf("not a cluster: %T", obj)
	}
	st := c.Status
	last := "<none>"
	if t, err := time.Parse(time.RFC3339, st.LastSync); err == nil {
		last = duration.HumanDuration(time.Since(t))
	}
	return []any{st.State, st.SyncedResources, st.Objects, st.Progress, last, st.Error}, nil
}
