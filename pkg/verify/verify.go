package verify

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/multicache/multicache/pkg/aggregate"
)

// Kind of divergence.
type Kind string

const (
	Missing Kind = "missing" // the server has it, the cache does not
	Extra   Kind = "extra"   // the cache has it, the server does not
	Stale   Kind = "stale"   // both have it, with another UID or resourceVersion
)

// Diverged is one object that differs.
type Diverged struct {
	Kind         Kind
	Key          aggregate.Key
	Cache, Truth string // "uid/resourceVersion"
}

// String is "missing KEY", "extra KEY" or "stale KEY: cache STATE, server STATE".
func (d Diverged) String() string {
	switch d.Kind {
	case Stale:
		return fmt.Sprintf("stale %s: cache %s, server %s", d.Key, d.Cache, d.Truth)
	default:
		return fmt.Sprintf("%s %s", d.Kind, d.Key)
	}
}

// Report is the result for one resource over some clusters.
type Report struct {
	Resource string
	Objects  int // objects the servers list
	Diverged []Diverged
}

// Summary is one line.
func (r Report) Summary() string {
	if len(r.Diverged) == 0 {
		return fmt.Sprintf("%s: %d objects, converged", r.Resource, r.Objects)
	}
	var first []string
	for _, d := range r.Diverged[:min(5, len(r.Diverged))] {
		first = append(first, d.String())
	}
	return fmt.Sprintf("%s: %d objects, %d diverged: %s", r.Resource, r.Objects, len(r.Diverged), strings.Join(first, "; "))
}

// Compare lists gvr in each cluster of servers (cluster name → rest.Config) and compares with
// agg's members of the same names. namespace limits both sides when set.
func Compare(ctx context.Context, agg *aggregate.Aggregate, gvr schema.GroupVersionResource, namespace string, servers map[string]*rest.Config) (Report, error) {
	truth, err := Truth(ctx, gvr, namespace, servers)
	if err != nil {
		return Report{Resource: gvr.Resource}, err
	}
	cached := map[aggregate.Key]string{}
	for cluster := range servers {
		idx, ok := agg.Cluster(cluster)
		if !ok {
			continue
		}
		for _, obj := range idx.List() {
			m, err := meta.Accessor(obj)
			if err != nil || (namespace != "" && m.GetNamespace() != namespace) {
				continue
			}
			cached[aggregate.Key{Cluster: cluster, Namespace: m.GetNamespace(), Name: m.GetName()}] = State(string(m.GetUID()), m.GetResourceVersion())
		}
	}
	return Diff(gvr.Resource, cached, truth), nil
}

// State is how an object's identity and version are compared: "uid/resourceVersion".
func State(uid, resourceVersion string) string { return uid + "/" + resourceVersion }

// Truth lists gvr in each cluster of servers, metadata only, and returns every object's State.
func Truth(ctx context.Context, gvr schema.GroupVersionResource, namespace string, servers map[string]*rest.Config) (map[aggregate.Key]string, error) {
	truth := map[aggregate.Key]string{}
	for cluster, cfg := range servers {
		mc, err := metadata.NewForConfig(cfg)
		if err != nil {
			return nil, fmt.Errorf("cluster %q: %w", cluster, err)
		}
		list, err := mc.Resource(gvr).Namespace(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("cluster %q: list %s: %w", cluster, gvr.Resource, err)
		}
		for _, o := range list.Items {
			truth[aggregate.Key{Cluster: cluster, Namespace: o.Namespace, Name: o.Name}] = State(string(o.UID), o.ResourceVersion)
		}
	}
	return truth, nil
}

// Diff compares a cache's object states with the truth. Callers pass cached entries only for
// the clusters truth was listed from.
func Diff(resource string, cached, truth map[aggregate.Key]string) Report {
	rep := Report{Resource: resource, Objects: len(truth)}
	for k, got := range cached {
		want, ok := truth[k]
		switch {
		case !ok:
			rep.Diverged = append(rep.Diverged, Diverged{Kind: Extra, Key: k, Cache: got})
		case want != got:
			rep.Diverged = append(rep.Diverged, Diverged{Kind: Stale, Key: k, Cache: got, Truth: want})
		}
	}
	for k, want := range truth {
		if _, ok := cached[k]; !ok {
			rep.Diverged = append(rep.Diverged, Diverged{Kind: Missing, Key: k, Truth: want})
		}
	}
	sort.Slice(rep.Diverged, func(i, j int) bool { return rep.Diverged[i].Key.String() < rep.Diverged[j].Key.String() })
	return rep
}
