package server

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/api"
)

// clusterItems are the clusters as objects of clusters.multicache.io (only one when only is
// not ""), in name order: their state and each resource's, as `multicache clusters` shows.
func (s *Server) clusterItems(only string) []item {
	counts := s.objectCounts()
	var out []item
	for _, cs := range s.reg.Status() {
		if only != "" && cs.Name != only {
			continue
		}
		var resources []any
		var progress []api.Progress
		synced, objects := 0, int64(0)
		for _, rs := range cs.Resources {
			n := int64(counts[cs.Name][rs.Resource])
			objects += n
			if rs.State == "Synced" || rs.State == "NotServed" {
				synced++
			}
			r := map[string]any{"resource": rs.Resource, "state": string(rs.State), "objects": n}
			if rs.Error != "" {
				r["error"] = rs.Error
			}
			if p := rs.Progress; p.Listing || p.Loaded > 0 || p.Expected > 0 {
				ap := api.Progress{Loaded: p.Loaded, Expected: p.Expected, Listing: p.Listing}
				r["progress"] = map[string]any{"loaded": p.Loaded, "expected": p.Expected, "listing": p.Listing}
				if (api.Resource{State: string(rs.State), Progress: &ap}).Syncing() {
					progress = append(progress, ap)
				}
			}
			resources = append(resources, r)
		}
		status := map[string]any{"state": string(cs.State), "restarts": int64(cs.Restarts), "resources": resources,
			"syncedResources": fmt.Sprintf("%d/%d", synced, len(cs.Resources)), "objects": objects,
			"progress": api.ProgressText(progress...)}
		if !cs.LastSync.IsZero() {
			status["lastSync"] = cs.LastSync.UTC().Format(time.RFC3339)
		}
		if cs.Error != "" {
			status["error"] = cs.Error
		}
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": ClustersGroupVersion.String(), "kind": "Cluster",
			"metadata": map[string]any{"name": cs.Name, "creationTimestamp": nil},
			"status":   status,
		}}
		out = append(out, item{Key: aggregate.Key{Cluster: cs.Name, Name: cs.Name}, Object: obj})
	}
	return out
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
