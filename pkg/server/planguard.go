package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/filters"
	"github.com/multicache/multicache/pkg/watchcache"
)

// A request's plan is fixed when it starts: the clusters it spans, each with its owner and
// whether that owner can answer. The invariants that keep moves as safe as the steady state
// (docs/ARCHITECTURE.md, "Moves"):
//
//   - A part's clusters are exactly its plan's. A planned cluster its owner has not started
//     yet, or whose initial list the watch cache does not hold yet, is not left out: a list
//     or an initial-events watch that spans it answers 429 (client-go retries), never an
//     answer without its objects, which a relisting client would take for deletes.
//   - Every watch ends with 410 when its plan changes in any way: a cluster moves, joins,
//     leaves, goes down or comes back under the same owner. The client relists and sees the
//     fleet as it is now. A guard (planGuard) watches for that; every kind of watch holds one
//     in sharded mode: fan-in, local-only, proxied /clusters/{name} and native cluster=.

// signature is what a plan depends on, in words: two plans with equal signatures send the same
// clusters to the same replicas, which can answer for them.
func (pl plan) signature() string {
	names := make([]string, 0, len(pl.owner))
	for c := range pl.owner {
		names = append(names, c)
	}
	slices.Sort(names)
	var b strings.Builder
	for _, c := range names {
		fmt.Fprintf(&b, "%s=%s", c, pl.owner[c])
		if why, ok := pl.down[c]; ok {
			b.WriteString(" down:" + why)
		}
		b.WriteByte(';')
	}
	for _, p := range pl.parts {
		fmt.Fprintf(&b, "|%s@%s", p.peer, p.url)
	}
	return b.String()
}

// changeFrom says in words how plan now differs from was, "" when it does not.
func changeFrom(was, now plan) string {
	if was.signature() == now.signature() {
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
		if _, down := now.down[c]; down != hasKey(was.down, c) {
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

func hasKey[V any](m map[string]V, k string) bool {
	_, ok := m[k]
	return ok
}

// planGuard tells a watch that its plan changed. The zero of *planGuard (nil) never fires:
// without a Fleet, one replica answers for everything and plans do not change.
type planGuard struct {
	s   *Server
	was plan // made with was.keep, which the guard makes again to compare
}

type planGuardKey struct{}

// guardPlan returns r with a guard of pl in its context, for the local answer to read.
func (s *Server) guardPlan(r *http.Request, pl plan) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), planGuardKey{}, &planGuard{s: s, was: pl}))
}

// guardOf is the guard of a request's plan, nil when it has none.
func guardOf(ctx context.Context) *planGuard {
	g, _ := ctx.Value(planGuardKey{}).(*planGuard)
	return g
}

// Changed returns a channel closed when the plan may have changed; nil (never) for a nil guard.
func (g *planGuard) Changed() <-chan struct{} {
	if g == nil {
		return nil
	}
	return g.s.opts.Fleet.WaitChange()
}

// Why says how the plan changed, "" while it has not. Call it before waiting on Changed, and
// again once Changed fires.
func (g *planGuard) Why() string {
	if g == nil {
		return ""
	}
	return changeFrom(g.was, g.s.plan(g.was.keep))
}

// orNil is g as a watchcache.Guard: none at all for a nil guard.
func (g *planGuard) orNil() watchcache.Guard {
	if g == nil {
		return nil
	}
	return g
}

// replan is what a watch loop holds of its guard: C to select on, and check once it fires.
type replan struct {
	g *planGuard
	C <-chan struct{}
}

// track starts following the plan; for a nil guard, C never fires.
func (g *planGuard) track() *replan { return &replan{g: g, C: g.Changed()} }

// check says how the plan changed, "" while it has not; then C waits for the next change.
func (rp *replan) check() string {
	next := rp.g.Changed() // before Why: a change in between is not missed
	why := rp.g.Why()
	if why == "" {
		rp.C = next
	}
	return why
}

// selfClusters lists the clusters of this replica's own part of pl (none when it has none).
func (pl plan) selfClusters() []string {
	for _, p := range pl.parts {
		if p.self {
			return p.clusters
		}
	}
	return []string{}
}

// unready lists the clusters of clusters that a list or an initial-events watch cannot answer
// completely here, in words: planned here but not started (the fence moved before the
// Registry started the cluster), or whose whole list the watch cache does not hold yet (a
// first sync, or a synced informer whose initial list the hub, fed asynchronously, has not
// taken yet). A cluster the hub holds a whole list of is complete, even while its informer
// restarts (queries then read the replaced store). A cluster that failed before it ever
// synced counts as unready for DeadClusterTimeout, as for readiness.
func (s *Server) unready(resource string, clusters []string) []string {
	out, _ := s.unreadyWhy(resource, clusters)
	return out
}

// hubCatchUp bounds how long a request waits for the watch cache to take the initial list of
// a cluster whose informer has synced: the hub is fed by the informer, so it follows within
// moments, and a client that came as soon as the cluster said Synced is answered instead of
// told to retry.
const hubCatchUp = 2 * time.Second

// unreadyAwait is unready, after waiting (up to hubCatchUp, and while ctx lasts) as long as
// every cluster in it is synced and only the watch cache's intake of its list is pending.
func (s *Server) unreadyAwait(ctx context.Context, resource string, clusters []string) []string {
	out, catchingUp := s.unreadyWhy(resource, clusters)
	if len(out) == 0 || !catchingUp {
		return out
	}
	// Each look reads every stack's status: often enough to answer soon after the watch
	// cache has the list, rarely enough that many waiting requests cost little.
	t := time.NewTicker(25 * time.Millisecond)
	defer t.Stop()
	deadline := time.After(hubCatchUp)
	for {
		select {
		case <-ctx.Done():
			return out
		case <-deadline:
			return out
		case <-t.C:
		}
		if out, catchingUp = s.unreadyWhy(resource, clusters); len(out) == 0 || !catchingUp {
			return out
		}
	}
}

// unreadyWhy is unready; catchingUp reports that every cluster it lists is synced and waits
// only for the watch cache to hold its whole list.
func (s *Server) unreadyWhy(resource string, clusters []string) (out []string, catchingUp bool) {
	reg := s.cacheRegs[resource]
	info := s.info(resource)
	if len(clusters) == 0 { // every cluster this replica runs
		for c := range info {
			clusters = append(clusters, c)
		}
	}
	catchingUp = true
	now := time.Now()
	for _, c := range clusters {
		rs, ok := info[c]
		switch {
		case !ok:
			out, catchingUp = append(out, c+" (not started on this replica yet)"), false
		case rs.State == clusterset.NotServed:
		case reg != nil && reg.HasListOf(c):
		case rs.State == clusterset.Pending || rs.State == clusterset.Syncing:
			out, catchingUp = append(out, c+" (syncing)"), false
		case rs.State == clusterset.Failed && now.Sub(rs.Since) < s.opts.DeadClusterTimeout:
			out, catchingUp = append(out, c+" (failing since it started: "+rs.Error+")"), false
		case rs.State == clusterset.Synced || rs.State == clusterset.Degraded:
			if reg != nil {
				out = append(out, c+" (the watch cache is still taking its initial list)")
			}
		}
	}
	slices.Sort(out)
	return out, catchingUp
}

// plannedFor keeps the planned clusters a resource may have objects in: all but those whose
// resolution found the resource not served. A planned cluster not started yet stays.
func (s *Server) plannedFor(resource string, planned []string) []string {
	info := s.info(resource)
	return slices.DeleteFunc(slices.Clone(planned), func(c string) bool {
		rs, ok := info[c]
		return ok && rs.State == clusterset.NotServed
	})
}

// retryUnready answers 429 with Retry-After when some clusters are unready, and reports
// whether it did. client-go and kubectl retry such an answer by themselves.
func retryUnready(w http.ResponseWriter, resource string, waiting []string) bool {
	if len(waiting) == 0 {
		return false
	}
	w.Header().Set("Retry-After", "1")
	filters.WriteError(w, http.StatusTooManyRequests, fmt.Sprintf("the cache of %s is not complete yet in %s; retry", resource, strings.Join(waiting, ", ")))
	return true
}

// serveLocal answers a request whose plan this replica answers alone: narrowed to the plan's
// clusters (partParam, as a peer's request is) and guarded, so that a watch ends with 410 when
// the plan changes and a planned cluster not started yet is reported, not left out.
func (s *Server) serveLocal(w http.ResponseWriter, r *http.Request, pl plan) {
	r = s.guardPlan(r, pl)
	u := *r.URL
	q := u.Query()
	q.Set(partParam, strings.Join(pl.selfClusters(), ","))
	u.RawQuery = q.Encode()
	r.URL = &u
	s.local.ServeHTTP(w, r)
}

// proxyWatch relays a watch one owner answers (a /clusters/{name} watch this replica does not
// own) event by event, and ends it with a 410 ERROR event once the plan changes: the owner may
// then no longer hold the cluster, and its stream would go silent. kube picks the framing of
// the ERROR event: a metav1.Status, or the native API's error.
func (s *Server) proxyWatch(w http.ResponseWriter, body io.Reader, pl plan, kube bool) {
	fl, _ := w.(http.Flusher)
	flush := func() {
		if fl != nil {
			fl.Flush()
		}
	}
	end := func(why string) {
		msg := "the fleet changed since this watch started: " + why + "; list again"
		if kube {
			b, _ := json.Marshal(filters.StatusOf(http.StatusGone, msg))
			_ = json.NewEncoder(w).Encode(rawKubeEvent{Type: api.ErrorEvent, Object: b})
		} else {
			b, _ := json.Marshal(errorObject(http.StatusGone, msg))
			_ = json.NewEncoder(w).Encode(api.WatchEvent{Type: api.ErrorEvent, Object: b})
		}
		flush()
	}
	replanned := (&planGuard{s: s, was: pl}).track()
	if why := replanned.check(); why != "" {
		end(why) // it changed while the owner was being asked
		return
	}
	// The client has its answer's headers now, not with the first event: a watch of an empty
	// namespace may have none for a long time, and client-go's Watch returns only once the
	// headers are in.
	flush()
	lines := make(chan []byte)
	done := make(chan struct{})
	defer close(done)
	go func() {
		defer close(lines)
		rd := bufio.NewReaderSize(body, 64<<10)
		for {
			line, err := rd.ReadBytes('\n')
			if len(line) > 0 {
				select {
				case lines <- line:
				case <-done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				return
			}
			if _, err := w.Write(line); err != nil {
				return
			}
			flush()
		case <-replanned.C:
			if why := replanned.check(); why != "" {
				end(why)
				return
			}
		}
	}
}

// resolving reports whether cluster has a configured resource that its discovery has not
// resolved yet (no status at all, just engaged, or Pending/Syncing without a kind): a resource
// missing from its catalog may then still come.
func (s *Server) resolving(cluster string) bool {
	cs, ok := s.reg.ClusterStatus(cluster)
	if !ok {
		return true
	}
	for _, res := range s.reg.Resources() {
		i := slices.IndexFunc(cs.Resources, func(rs clusterset.ResourceStatus) bool { return rs.Resource == res })
		if i < 0 {
			return true
		}
		if rs := cs.Resources[i]; rs.Kind == "" && (rs.State == clusterset.Pending || rs.State == clusterset.Syncing) {
			return true
		}
	}
	return false
}

// notCoordinated answers 429 when the Fleet says this replica cannot answer for its share yet
// (not coordinated with its peers, or self-fenced), and reports whether it did: until it knows
// the fleet's owners, a replica cannot tell which clusters an answer spans, and an empty answer
// would read as deletes to every client. kube-apiserver answers the same way while its watch
// cache initializes; clients retry. It runs after authentication.
func (s *Server) notCoordinated(w http.ResponseWriter) bool {
	f, ok := s.opts.Fleet.(interface{ Ready() error })
	if !ok {
		return false
	}
	err := f.Ready()
	if err == nil {
		return false
	}
	w.Header().Set("Retry-After", "1")
	filters.WriteError(w, http.StatusTooManyRequests, "this replica cannot answer yet: "+err.Error()+"; retry")
	return true
}
