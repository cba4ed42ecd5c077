package fanout

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/multicache/multicache/pkg/shard"
	"github.com/multicache/multicache/pkg/watchcache"
)

// Fleet says which replica owns each cluster when replicas share the fleet (a
// shard.Coordinator).
type Fleet interface {
	// Identity is this replica's name among its peers.
	Identity() string
	// Owners lists every cluster of the fleet with its owner, sorted by cluster.
	Owners() []shard.Owner
	// WaitChange is closed when Owners may answer differently.
	WaitChange() <-chan struct{}
}

// part is the share of a read one replica answers: the clusters it owns.
type part struct {
	peer     string
	url      string
	self     bool
	clusters []string // sorted
}

// set identifies the clusters of a part: a position of the part is valid for the same set only.
func (p part) set() string { return watchcache.ClusterSet(p.clusters) }

// plan splits the fleet's clusters that keep accepts among their owners, fixed when a read
// starts. A cluster whose owner is not live (or that no replica holds) is down.
//
// Invariants (docs/ARCHITECTURE.md, "Moves"):
//   - each cluster is asked of exactly one replica, its owner as this replica sees the fence
//     Leases, and a part's clusters are exactly its plan's: a cluster its owner has not
//     started yet, or whose list is not complete there, makes the read 429 there, never an
//     answer without its objects, which a relisting client would take for deletes;
//   - a cluster that is down makes a list or a watch that starts with the current objects 503,
//     never an answer without it;
//   - every watch ends with 410 when its plan changes in any way: a cluster moves, joins,
//     leaves, goes down or comes back. The client lists again and sees the fleet as it is.
type plan struct {
	parts []part
	down  map[string]string // cluster → why no replica answers for it
	// owner of every planned cluster, to tell when one moves.
	owner map[string]string
	// keep is the filter the plan was made with, to make it again and compare (changeFrom).
	keep func(cluster string) bool
}

// planOf splits the owners of the clusters keep accepts.
func planOf(owners []shard.Owner, keep func(cluster string) bool) plan {
	pl := plan{down: map[string]string{}, owner: map[string]string{}, keep: keep}
	byPeer := map[string]int{}
	for _, o := range owners {
		if keep != nil && !keep(o.Cluster) {
			continue
		}
		pl.owner[o.Cluster] = o.Holder
		switch {
		case o.Holder == "":
			pl.down[o.Cluster] = "no replica owns it yet"
			continue
		case !o.Live && !o.Self:
			pl.down[o.Cluster] = fmt.Sprintf("its owner, replica %q, is down", o.Holder)
			continue
		case !o.Self && o.URL == "":
			pl.down[o.Cluster] = fmt.Sprintf("its owner, replica %q, advertises no URL", o.Holder)
			continue
		}
		i, ok := byPeer[o.Holder]
		if !ok {
			i = len(pl.parts)
			byPeer[o.Holder] = i
			pl.parts = append(pl.parts, part{peer: o.Holder, url: strings.TrimSuffix(o.URL, "/"), self: o.Self})
		}
		pl.parts[i].clusters = append(pl.parts[i].clusters, o.Cluster)
	}
	return pl
}

// withSelf gives a plan no replica could answer a part of this replica's, with no cluster in
// it: the answer then has the resource's own shape (an empty list, a watch of bookmarks).
func (pl plan) withSelf(id string) plan {
	if len(pl.parts) == 0 {
		pl.parts = []part{{peer: id, self: true, clusters: []string{}}}
	}
	return pl
}

// local reports whether this replica alone answers the plan.
func (pl plan) local() bool {
	return len(pl.down) == 0 && (len(pl.parts) == 0 || (len(pl.parts) == 1 && pl.parts[0].self))
}

// single is the one part that answers the whole plan, when one replica (another than this
// one) owns every cluster of it and none is down. Its answer is then the fleet's as that
// replica gives it, positions and all: each object keeps its own resourceVersion, which a watch
// through this replica resumes from as long as the plan holds (a read of /clusters/{name}).
func (pl plan) single() (part, bool) {
	if len(pl.down) == 0 && len(pl.parts) == 1 && !pl.parts[0].self {
		return pl.parts[0], true
	}
	return part{}, false
}

// selfClusters lists the clusters of this replica's own part (none when it has none).
func (pl plan) selfClusters() []string {
	for _, p := range pl.parts {
		if p.self {
			return p.clusters
		}
	}
	return []string{}
}

// downNames are the down clusters, sorted, each with why.
func (pl plan) downNames() []string {
	out := make([]string, 0, len(pl.down))
	for c, why := range pl.down {
		out = append(out, fmt.Sprintf("%s (%s)", c, why))
	}
	slices.Sort(out)
	return out
}

// samePlan reports whether a and b send the same clusters to the same replicas, at the same
// addresses, with the same clusters down for the same reasons: a read made with a then still
// holds. Every fleet watch asks on every change of owners (a move is many), so it compares,
// and spells out nothing.
func samePlan(a, b plan) bool {
	return maps.Equal(a.owner, b.owner) && maps.Equal(a.down, b.down) &&
		slices.EqualFunc(a.parts, b.parts, func(x, y part) bool { return x.peer == y.peer && x.url == y.url })
}

// changeFrom says in words how plan now differs from was, "" when it does not.
func changeFrom(was, now plan) string {
	if samePlan(was, now) {
		return ""
	}
	for c, o := range now.owner {
		prev, ok := was.owner[c]
		switch {
		case !ok:
			return fmt.Sprintf("cluster %q joined the fleet", c)
		case prev != o:
			return fmt.Sprintf("cluster %q moved from replica %q to %q", c, prev, o)
		}
		_, wasDown := was.down[c]
		if _, down := now.down[c]; down != wasDown {
			if down {
				return fmt.Sprintf("cluster %q went down: %s", c, now.down[c])
			}
			return fmt.Sprintf("cluster %q is served again", c)
		}
	}
	for c := range was.owner {
		if _, ok := now.owner[c]; !ok {
			return fmt.Sprintf("cluster %q left the fleet", c)
		}
	}
	return "the replicas that answer for the fleet changed"
}

// guard tells a watch that its plan changed (watchcache.Guard).
type guard struct {
	fleet Fleet
	was   plan
}

// Changed is closed when the plan may have changed.
func (g *guard) Changed() <-chan struct{} { return g.fleet.WaitChange() }

// Why says how the plan changed, "" while it has not.
func (g *guard) Why() string { return changeFrom(g.was, planOf(g.fleet.Owners(), g.was.keep)) }

// partPosition is p's own position in the merged position t: "" when t holds none for it, or
// one for another set of clusters (the part then answers from now).
func partPosition(t watchcache.Position, p part) (string, bool) {
	return t.Part(p.peer, p.set())
}

// partContinue is the continue token of part p's own page of the merged list c continues:
// after the same key, at p's position in c when c holds one for p's clusters, and from now
// otherwise (the order of keys is the fleet's, so the walk stays whole when clusters move).
func partContinue(c watchcache.Continue, p part) string {
	pc := watchcache.Continue{Last: c.Last, Exact: c.Exact, SortBy: c.SortBy, Desc: c.Desc, Sort: c.Sort}
	if rv, ok := partPosition(c.Position, p); ok && rv != "" {
		if pos, err := watchcache.ParsePosition(rv); err == nil {
			pc.Position = pos
		}
	}
	return pc.String()
}

// resumable says why t cannot resume a read of plan pl: every part must have its position, for
// the same clusters.
func resumable(t watchcache.Position, pl plan) error {
	for _, p := range pl.parts {
		if _, ok := partPosition(t, p); !ok {
			return fmt.Errorf("the clusters of replica %q changed since this resourceVersion", p.peer)
		}
	}
	if len(t.Parts) != len(pl.parts) {
		return fmt.Errorf("the fleet's owners changed since this resourceVersion")
	}
	return nil
}

// parseMerged returns a merged answer's position (watchcache.Position with Parts); ok is false
// for anything else (one replica's position, "0", "").
func parseMerged(s string) (watchcache.Position, bool) {
	if s == "" || s == "0" {
		return watchcache.Position{}, false
	}
	t, err := watchcache.ParsePosition(s)
	return t, err == nil && t.Merged()
}
