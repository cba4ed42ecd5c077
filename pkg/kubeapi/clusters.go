package kubeapi

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
			l.Items = append(l.Items, storage.Item{Key: aggregate.Key{Cluster: c.Name, Name: c.Name}, Object: clusterObject(c)})
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
		enc.TypeMeta = rq.p.name != ""
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

// clusterObject is a cluster as an object of clusters.multicache.io.
func clusterObject(c api.Cluster) *unstructured.Unstructured {
	var resources []any
	var progress []api.Progress
	synced, objects := 0, int64(0)
	for _, rs := range c.Resources {
		n := int64(rs.Objects)
		objects += n
		if rs.State == "Synced" || rs.State == "NotServed" {
			synced++
		}
		r := map[string]any{"resource": rs.Resource, "state": rs.State, "objects": n}
		if rs.Error != "" {
			r["error"] = rs.Error
		}
		if p := rs.Progress; p != nil && (p.Listing || p.Loaded > 0 || p.Expected > 0) {
			r["progress"] = map[string]any{"loaded": p.Loaded, "expected": p.Expected, "listing": p.Listing}
			if rs.Syncing() {
				progress = append(progress, *p)
			}
		}
		resources = append(resources, r)
	}
	status := map[string]any{"state": c.State, "restarts": int64(c.Restarts), "resources": resources,
		"syncedResources": fmt.Sprintf("%d/%d", synced, len(c.Resources)), "objects": objects,
		"progress": api.ProgressText(progress...)}
	if c.LastSync != nil {
		status["lastSync"] = c.LastSync.UTC().Format(time.RFC3339)
	}
	if c.Error != "" {
		status["error"] = c.Error
	}
	if c.Owner != "" {
		status["owner"] = c.Owner
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": discovery.ClustersGroupVersion.String(), "kind": "Cluster",
		"metadata": map[string]any{"name": c.Name, "creationTimestamp": nil},
		"status":   status,
	}}
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
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("not a cluster: %T", obj)
	}
	str := func(f string) string { v, _, _ := unstructured.NestedString(u.Object, "status", f); return v }
	n, _, _ := unstructured.NestedInt64(u.Object, "status", "objects")
	last := "<none>"
	if t, err := time.Parse(time.RFC3339, str("lastSync")); err == nil {
		last = duration.HumanDuration(time.Since(t))
	}
	return []any{str("state"), str("syncedResources"), n, str("progress"), last, str("error")}, nil
}
