package server

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/clusterset"
)

// resourceInfo is, per cluster, how it serves a resource (kind, group, version, scope, state).
type resourceInfo map[string]clusterset.ResourceStatus

// info returns how every cluster serves resource.
func (s *Server) info(resource string) resourceInfo {
	out := resourceInfo{}
	for _, cs := range s.reg.Status() {
		for _, rs := range cs.Resources {
			if rs.Resource == resource {
				out[cs.Name] = rs
			}
		}
	}
	return out
}

// namespaced reports whether resource is namespaced where it is resolved (true when unknown).
func (s *Server) namespaced(resource string) bool {
	for _, rs := range s.info(resource) {
		if rs.Kind != "" {
			return rs.Namespaced
		}
	}
	return true
}

// freshness says how fresh each cluster an answer to req spans is, with its last sync and its
// error: for a cluster the answer read, what its selection said (fresh, from
// aggregate.Result.Unsynced); for one it did not need to read, what the aggregate says now. A
// cluster whose status is not Synced is never fresh. Clusters the query names that do not
// exist are listed as unknown.
func (s *Server) freshness(req request, fresh map[string]bool) ([]api.ClusterFreshness, resourceInfo) {
	info := s.info(req.resource)
	out := make([]api.ClusterFreshness, 0, len(info))
	wanted := func(c string) bool { return len(req.query.Clusters) == 0 || slices.Contains(req.query.Clusters, c) }
	for c, rs := range info {
		if !wanted(c) {
			continue
		}
		f, read := fresh[c]
		if !read {
			// Not read by this answer (the page was complete before it), or not a member
			// (not served, failing before it joined): what the aggregate says now.
			f = req.agg.HasSynced(c)
		}
		out = append(out, freshnessOf(c, rs, f))
	}
	for _, c := range req.query.Clusters {
		if _, ok := info[c]; !ok && c != noCluster {
			why := "unknown cluster"
			if s.opts.Fleet != nil {
				why = "not started on this replica yet: it is planned here (a move under way)"
			}
			out = append(out, api.ClusterFreshness{Name: c, Error: why})
		}
	}
	for _, c := range req.leftOut {
		out = append(out, api.ClusterFreshness{Name: c, Forbidden: true, Error: "forbidden: left out, you may not read this cluster"})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, info
}

func freshnessOf(cluster string, rs clusterset.ResourceStatus, fresh bool) api.ClusterFreshness {
	v := api.ClusterFreshness{Name: cluster, Synced: fresh && rs.State == clusterset.Synced, NotServed: rs.State == clusterset.NotServed}
	if !rs.LastSync.IsZero() {
		t := rs.LastSync.UTC().Truncate(time.Second)
		v.LastSync = &t
	}
	if rs.State != clusterset.Synced {
		v.Error = strings.TrimSpace(string(rs.State) + ": " + rs.Error)
	}
	return v
}

// handleClusters answers api.Clusters.
func (s *Server) handleClusters(w http.ResponseWriter, r *http.Request) {
	out := api.Clusters{Clusters: []api.Cluster{}}
	counts := s.objectCounts()
	statuses, err := s.readableStatus(r.Context())
	if err != nil {
		writeScopeError(w, err)
		return
	}
	for _, cs := range statuses {
		v := api.Cluster{Name: cs.Name, State: string(cs.State), Error: cs.Error, Resources: []api.Resource{}}
		if s.opts.Fleet != nil {
			v.Owner = s.opts.Fleet.Identity()
		}
		if !cs.LastSync.IsZero() {
			t := cs.LastSync.UTC().Truncate(time.Second)
			v.LastSync = &t
		}
		for _, rs := range cs.Resources {
			r := api.Resource{Resource: rs.Resource, State: string(rs.State), Objects: counts[cs.Name][rs.Resource], Error: rs.Error}
			if p := rs.Progress; p.Listing || p.Loaded > 0 || p.Expected > 0 {
				r.Progress = &api.Progress{Loaded: p.Loaded, Expected: p.Expected, Listing: p.Listing}
			}
			v.Resources = append(v.Resources, r)
		}
		out.Clusters = append(out.Clusters, v)
	}
	writeJSON(w, out)
}

// readableStatus is the status of every cluster the caller may read.
func (s *Server) readableStatus(ctx context.Context) ([]clusterset.ClusterStatus, error) {
	all := s.reg.Status()
	names := make([]string, len(all))
	for i, cs := range all {
		names[i] = cs.Name
	}
	ok, err := s.allowedClusters(ctx, names)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(cs clusterset.ClusterStatus) bool { return !slices.Contains(ok, cs.Name) }), nil
}

// objectCounts is, per cluster and resource, the objects the aggregates hold (Aggregate.Len:
// O(1) per synced cluster, so that status and metrics cost nothing per object).
func (s *Server) objectCounts() map[string]map[string]int {
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

// ready applies the readiness policy: every cluster × resource is Synced or NotServed, except
// dead ones, which have been failing (Failed or Degraded) for DeadClusterTimeout without a
// break. A slow one, syncing without an error, always counts. It returns the others.
func (s *Server) ready() (bool, []string) {
	if !s.reg.Loaded() {
		return false, []string{"the cluster source: not loaded yet"}
	}
	if f, ok := s.opts.Fleet.(interface{ Ready() error }); ok {
		if err := f.Ready(); err != nil {
			return false, []string{err.Error()}
		}
	}
	var waiting []string
	now := time.Now()
	for _, cs := range s.reg.Status() {
		for _, rs := range cs.Resources {
			switch rs.State {
			case clusterset.Synced, clusterset.NotServed:
				continue
			case clusterset.Failed, clusterset.Degraded:
				if now.Sub(rs.Since) >= s.opts.DeadClusterTimeout {
					continue // dead: it no longer holds the fleet back
				}
			}
			w := cs.Name + "/" + rs.Resource + ": " + string(rs.State)
			if rs.Error != "" {
				w += " (" + rs.Error + ")"
			}
			waiting = append(waiting, w)
		}
	}
	return len(waiting) == 0, waiting
}

// initializing lists the clusters (of clusters; every one when empty) whose resource has not
// synced since the daemon started (Pending, Syncing, or Failed for less than
// DeadClusterTimeout). A watch that starts with the
// current objects waits for them (429), so that an informer never takes a half-synced cache for
// the fleet; a Degraded cluster, synced before, serves its last state.
func (s *Server) initializing(resource string, clusters []string) []string {
	var out []string
	now := time.Now()
	for c, rs := range s.info(resource) {
		if len(clusters) > 0 && !slices.Contains(clusters, c) {
			continue
		}
		switch rs.State {
		case clusterset.Pending, clusterset.Syncing:
		case clusterset.Failed:
			if now.Sub(rs.Since) >= s.opts.DeadClusterTimeout {
				continue
			}
		default:
			continue
		}
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// handleReady answers "ok" or "not ready" with a count; ?verbose (behind auth) names what is
// waiting.
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	ok, waiting := s.ready()
	if ok {
		_, _ = w.Write([]byte("ok\n"))
		return
	}
	if r.URL.Query().Has("verbose") {
		// It names clusters: only those the caller may read.
		ok, err := s.allowedClusters(r.Context(), s.reg.Clusters())
		if err != nil {
			writeScopeError(w, err)
			return
		}
		shown := slices.DeleteFunc(slices.Clone(waiting), func(l string) bool {
			c, _, _ := strings.Cut(l, "/")
			return !slices.Contains(ok, c)
		})
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = fmt.Fprintf(w, "not ready; waiting for:\n%s\n", strings.Join(shown, "\n"))
		if n := len(waiting) - len(shown); n > 0 {
			_, _ = fmt.Fprintf(w, "and %d cluster resources you may not read\n", n)
		}
		return
	}
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = fmt.Fprintf(w, "not ready: %d cluster resources are not synced\n", len(waiting))
}
