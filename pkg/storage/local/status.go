package local

import (
	"context"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/auth"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/storage"
)

// statusScope is the clusters a status read spans, of statuses, that the caller may read.
// Named clusters the caller may not read are 403; in a plan, only its clusters.
func statusScope(ctx context.Context, statuses []clusterset.ClusterStatus, opts storage.ClusterOptions) ([]clusterset.ClusterStatus, labels.Selector, error) {
	if err := validNames(opts.Clusters); err != nil {
		return nil, nil, err
	}
	clusterSel, objects, err := storage.SplitSelector(opts.LabelSelector)
	if err != nil {
		return nil, nil, err
	}
	named, part := storage.FilterOf(opts.Clusters), storage.FilterOf(opts.Part)
	var names []string
	for _, cs := range statuses {
		if named.Has(cs.Name) && part.Has(cs.Name) && clusterSel.Matches(cs.Name) {
			names = append(names, cs.Name)
		}
	}
	a := auth.AccessOf(ctx)
	if opts.Clusters != nil {
		if _, _, err := Scope(ctx, a, false, opts.Clusters, nil); err != nil {
			return nil, nil, err
		}
	} else if names, err = Readable(ctx, a, names); err != nil {
		return nil, nil, err
	}
	// names are in the order of statuses, and a part of them.
	out := make([]clusterset.ClusterStatus, 0, len(names))
	for i := 0; i < len(statuses) && len(out) < len(names); i++ {
		if statuses[i].Name == names[len(out)] {
			out = append(out, statuses[i])
		}
	}
	return out, objects, nil
}

// Clusters lists the clusters this replica runs that the selection spans and the caller may
// read, with each resource's state, objects and list progress.
func (s *Storage) Clusters(ctx context.Context, opts storage.ClusterOptions) ([]api.Cluster, error) {
	statuses, _, err := statusScope(ctx, s.statuses(ctx), opts)
	if err != nil {
		return nil, err
	}
	out := make([]api.Cluster, 0, len(statuses))
	for _, cs := range statuses {
		v := api.Cluster{Name: cs.Name, State: string(cs.State), Error: cs.Error, Restarts: cs.Restarts, Resources: []api.Resource{}}
		if !cs.LastSync.IsZero() {
			t := cs.LastSync.UTC().Truncate(time.Second)
			v.LastSync = &t
		}
		for _, rs := range cs.Resources {
			r := api.Resource{Resource: rs.Resource, State: string(rs.State), Objects: s.objects(rs.Resource, cs.Name), Error: rs.Error}
			if p := rs.Progress; p.Listing || p.Loaded > 0 || p.Expected > 0 {
				r.Progress = &api.Progress{Loaded: p.Loaded, Expected: p.Expected, Listing: p.Listing}
			}
			v.Resources = append(v.Resources, r)
		}
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// objects is how many objects of resource the aggregate holds of cluster (Aggregate.Len), 0
// when none.
func (s *Storage) objects(resource, cluster string) int {
	agg, ok := s.reg.Aggregate(resource)
	if !ok {
		return 0
	}
	n, _ := agg.Len(cluster)
	return n
}

// ObjectCounts is, per cluster and resource, the objects the aggregates hold (Aggregate.Len:
// O(1) per synced cluster, so that status and metrics cost nothing per object).
func (s *Storage) ObjectCounts() map[string]map[string]int {
	out := map[string]map[string]int{}
	for _, res := range s.reg.Resources() {
		agg, _ := s.reg.Aggregate(res)
		for _, c := range agg.Clusters() {
			if n, ok := agg.Len(c); ok {
				if out[c] == nil {
					out[c] = map[string]int{}
				}
				out[c][res] = n
			}
		}
	}
	return out
}

// Definitions lists the definitions of the custom resources this replica's clusters serve,
// among the clusters the selection spans that the caller may read: one per name, shown from
// the first cluster by name whose definition the label selector's other requirements select
// (so that it is shown from the same cluster wherever parts are merged), with every cluster
// that serves it. In a plan, a planned cluster that has not started here, or not resolved its
// resources yet (it is moving here), would be missing, as if its definitions were gone: 503,
// retry.
func (s *Storage) Definitions(ctx context.Context, opts storage.ClusterOptions) ([]storage.Definition, error) {
	all := s.statuses(ctx) // sorted by name
	statuses, objects, err := statusScope(ctx, all, opts)
	if err != nil {
		return nil, err
	}
	if opts.Part != nil {
		clusterSel, _, _ := storage.SplitSelector(opts.LabelSelector)
		var waiting []string
		compareName := func(cs clusterset.ClusterStatus, c string) int { return strings.Compare(cs.Name, c) }
		resources := s.reg.Resources()
		for _, c := range clusterSel.Select(opts.Part) {
			// Both sorted by name: statuses is a part of all.
			i, scoped := slices.BinarySearchFunc(statuses, c, compareName)
			_, started := slices.BinarySearchFunc(all, c, compareName)
			if !started || (scoped && statuses[i].Resolving(resources)) {
				waiting = append(waiting, c)
			}
		}
		if len(waiting) > 0 {
			return nil, storage.Retry(http.StatusServiceUnavailable, "clusters "+strings.Join(waiting, ", ")+" are moving between replicas or starting; retry")
		}
	}
	byName := map[string]*storage.Definition{}
	for _, cs := range statuses {
		for _, rs := range cs.Resources {
			if rs.Definition == nil || rs.State == clusterset.NotServed || !objects.Matches(labels.Set(rs.Definition.Labels)) {
				continue
			}
			e := byName[rs.Definition.Name]
			if e == nil {
				e = &storage.Definition{Def: rs.Definition, From: cs.Name}
				byName[rs.Definition.Name] = e
			}
			// statuses are sorted by name: a cluster that serves the definition twice (two
			// resources of it) is the last one named.
			if n := len(e.Clusters); n == 0 || e.Clusters[n-1] != cs.Name {
				e.Clusters = append(e.Clusters, cs.Name)
			}
		}
	}
	return SortedDefinitions(byName), nil
}

// SortedDefinitions are the definitions of byName, sorted by name, each one's clusters sorted.
func SortedDefinitions(byName map[string]*storage.Definition) []storage.Definition {
	out := make([]storage.Definition, 0, len(byName))
	for _, e := range byName {
		sort.Strings(e.Clusters)
		out = append(out, *e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Def.Name < out[j].Def.Name })
	return out
}

// Resolving reports whether cluster may still resolve a configured resource (not started here,
// or resolving): a request for a resource its catalog lacks is then to be retried, not 404.
func (s *Storage) Resolving(cluster string) bool {
	cs, ok := s.reg.ClusterStatus(cluster)
	return !ok || cs.Resolving(s.reg.Resources())
}

// Resources lists how this replica's clusters the selection spans serve the configured
// resources, their definitions left out.
func (s *Storage) Resources(ctx context.Context, opts storage.ClusterOptions) ([]clusterset.ClusterStatus, error) {
	clusterSel, _, err := storage.SplitSelector(opts.LabelSelector)
	if err != nil {
		return nil, err
	}
	named, part := storage.FilterOf(opts.Clusters), storage.FilterOf(opts.Part)
	var out []clusterset.ClusterStatus
	for _, cs := range s.statuses(ctx) {
		if !named.Has(cs.Name) || !part.Has(cs.Name) || !clusterSel.Matches(cs.Name) {
			continue
		}
		cs.Resources = slices.Clone(cs.Resources)
		for i := range cs.Resources {
			cs.Resources[i].Definition = nil
		}
		out = append(out, cs)
	}
	return out, nil
}

// Info is, per cluster this replica runs, how it serves resource, read under ctx's read scope.
func (s *Storage) Info(ctx context.Context, resource string) map[string]clusterset.ResourceStatus {
	ri := s.view(ctx).info(resource)
	out := make(map[string]clusterset.ResourceStatus, len(ri))
	for c, rs := range ri {
		out[c] = *rs
	}
	return out
}
