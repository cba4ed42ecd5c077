package fanout

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/auth"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/storage"
	"github.com/multicache/multicache/pkg/storage/local"
)

// Clusters lists the fleet's clusters the selection spans and the caller may read: each
// owner's as it reports them, with their owner; the others (down, their owner failed, or not
// started there yet) as this replica sees their fence Leases, Unsynced with why. A part's
// refusal is the answer's.
func (r *Reader) Clusters(ctx context.Context, opts storage.ClusterOptions) ([]api.Cluster, error) {
	if err := r.Ready(); err != nil {
		return nil, err
	}
	pl, err := r.planFor(opts.Clusters, opts.LabelSelector)
	if err != nil {
		return nil, err
	}
	if opts.Clusters != nil {
		// Named clusters: 403 for one the caller may not read, whoever owns it.
		if _, _, err := local.Scope(ctx, auth.AccessOf(ctx), false, opts.Clusters, nil); err != nil {
			return nil, err
		}
	}
	answers := gather(ctx, r, pl, func(ctx context.Context, rd ReadStatus, p part) ([]api.Cluster, error) {
		o := opts
		o.Part = slices.Clone(p.clusters)
		return rd.Clusters(ctx, o)
	})
	out := []api.Cluster{}
	seen := map[string]bool{}
	failed := map[string]error{}
	for _, a := range answers {
		if a.err != nil {
			if c := storage.Code(a.err); c < 500 && c != 0 {
				return nil, a.err
			}
			for _, c := range a.part.clusters {
				failed[c] = a.err
			}
			continue
		}
		asked := sets.New(a.part.clusters...)
		for _, c := range a.val {
			if !asked.Has(c.Name) {
				continue // it moved: its owner reports it
			}
			c.Owner = a.part.peer
			seen[c.Name] = true
			out = append(out, c)
		}
	}
	var missing []string
	for c := range pl.owner {
		if !seen[c] {
			missing = append(missing, c)
		}
	}
	sort.Strings(missing)
	if opts.Clusters == nil {
		if missing, err = local.Readable(ctx, auth.AccessOf(ctx), missing); err != nil {
			return nil, err
		}
	}
	for _, c := range missing {
		why := pl.down[c]
		if e, ok := failed[c]; ok {
			why = e.Error()
		}
		if why == "" {
			why = "its owner has not started it yet"
		}
		out = append(out, api.Cluster{Name: c, State: "Unsynced", Owner: pl.owner[c], Error: why, Resources: []api.Resource{}})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Definitions merges every owner's definitions: one per name, shown from the first cluster by
// name, with the union of the clusters. While a cluster has no live owner (it is moving), the
// answer is 503: its definitions would read as gone.
func (r *Reader) Definitions(ctx context.Context, opts storage.ClusterOptions) ([]storage.Definition, error) {
	if err := r.Ready(); err != nil {
		return nil, err
	}
	pl, err := r.planFor(opts.Clusters, opts.LabelSelector)
	if err != nil {
		return nil, err
	}
	if len(pl.down) > 0 {
		return nil, refuseDown(pl)
	}
	pl = pl.withSelf(r.opts.Fleet.Identity())
	answers := gather(ctx, r, pl, func(ctx context.Context, rd ReadStatus, p part) ([]storage.Definition, error) {
		o := opts
		o.Part = slices.Clone(p.clusters)
		if o.Part == nil {
			o.Part = []string{}
		}
		return rd.Definitions(ctx, o)
	})
	if err := refusal(answers); err != nil {
		return nil, err
	}
	byName := map[string]*storage.Definition{}
	clustersOf := map[string]sets.Set[string]{} // byName's clusters, by name
	for _, a := range answers {
		asked := sets.New(a.part.clusters...)
		for _, e := range a.val {
			clusters := slices.DeleteFunc(slices.Clone(e.Clusters), func(c string) bool { return !asked.Has(c) })
			if len(clusters) == 0 {
				continue
			}
			have := byName[e.Def.Name]
			if have == nil {
				byName[e.Def.Name] = &storage.Definition{Def: e.Def, From: e.From, Clusters: clusters}
				clustersOf[e.Def.Name] = sets.New(clusters...)
				continue
			}
			if e.From < have.From {
				have.Def, have.From = e.Def, e.From
			}
			for _, c := range clusters {
				if seen := clustersOf[e.Def.Name]; !seen.Has(c) {
					seen.Insert(c)
					have.Clusters = append(have.Clusters, c)
				}
			}
		}
	}
	return local.SortedDefinitions(byName), nil
}

// Resources merges how every owner's clusters serve the configured resources: each part's
// clusters as their owner reports them. A part that does not answer, and a cluster without a
// live owner, is left out, named in the storage.Unanswered that comes with the others: the
// catalog is then what the others serve, until it answers.
func (r *Reader) Resources(ctx context.Context, opts storage.ClusterOptions) ([]clusterset.ClusterStatus, error) {
	pl, err := r.planFor(opts.Clusters, opts.LabelSelector)
	if err != nil {
		return nil, err
	}
	pl = pl.withSelf(r.opts.Fleet.Identity())
	answers := gather(ctx, r, pl, func(ctx context.Context, rd ReadStatus, p part) ([]clusterset.ClusterStatus, error) {
		o := opts
		o.Part = slices.Clone(p.clusters)
		if o.Part == nil {
			o.Part = []string{}
		}
		return rd.Resources(ctx, o)
	})
	var out []clusterset.ClusterStatus
	unanswered := storage.Unanswered{}
	for c, why := range pl.down {
		unanswered[c] = why
	}
	for _, a := range answers {
		if a.err != nil {
			for _, c := range a.part.clusters {
				unanswered[c] = fmt.Sprintf("its owner, replica %q, did not answer: %v", a.part.peer, a.err)
			}
			continue
		}
		asked := sets.New(a.part.clusters...)
		for _, cs := range a.val {
			if asked.Has(cs.Name) {
				out = append(out, cs)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	if len(unanswered) > 0 {
		return out, unanswered
	}
	return out, nil
}
