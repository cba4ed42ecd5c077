package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/filters"
)

// fanout answers, for the whole fleet, the requests that name clusters this replica may not
// own: native lists, watches and gets, the clusters list, and the Kubernetes API's. It hands
// everything else, and every request another replica sends (peerHeader), to next: this
// replica's own API.
//
// Invariant: each cluster is asked of exactly one replica, its owner as this replica sees the
// fence Leases; a cluster without a live owner is reported unsynced, never silently dropped.
func (s *Server) fanout(next http.Handler) http.Handler {
	native := s.authn.Wrap(s.fanoutNative)
	kube := s.authn.Wrap(s.fanoutKube)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			next.ServeHTTP(w, r)
			return
		}
		if r.Header.Get(peerHeader) != "" {
			if s.fromPeer(r) {
				// A replica's own part of a plan: answered here, once this replica is
				// coordinated (its part is its plan's then).
				if !s.notCoordinated(w) {
					next.ServeHTTP(w, r)
				}
				return
			}
			r.Header.Del(peerHeader) // a caller's: it skips nothing
		}
		switch {
		case r.URL.Path == api.ClustersPath:
			native(w, r)
		case strings.HasPrefix(r.URL.Path, api.ResourcesPath+"/"):
			native(w, r)
		case r.URL.Path == "/healthz" || r.URL.Path == "/readyz" || r.URL.Path == "/metrics" || strings.HasPrefix(r.URL.Path, "/multicache/"):
			next.ServeHTTP(w, r)
		default:
			kube(w, r)
		}
	})
}

// fromPeer reports whether r comes from another replica: under a peer certificate, or from
// anyone when auth is off (replicas then run on loopback, and every caller reads everything).
func (s *Server) fromPeer(r *http.Request) bool {
	if s.authn.Authorizer == nil {
		return true
	}
	if s.opts.PeerAuthenticator == nil {
		return false
	}
	// On a copy: the authenticator removes the identity headers it reads, which the
	// authentication of the request itself reads again.
	_, ok, err := s.opts.PeerAuthenticator.AuthenticateRequest(r.Clone(r.Context()))
	return ok && err == nil
}

// fanoutNative routes the native API.
func (s *Server) fanoutNative(w http.ResponseWriter, r *http.Request) {
	if s.notCoordinated(w) {
		return
	}
	if r.URL.Path == api.ClustersPath {
		s.fanoutClusters(w, r)
		return
	}
	rest := strings.Split(strings.TrimPrefix(r.URL.Path, api.ResourcesPath+"/"), "/")
	switch len(rest) {
	case 1:
		q := r.URL.Query()
		wanted := q["cluster"]
		pl := s.plan(func(c string) bool { return len(wanted) == 0 || slices.Contains(wanted, c) })
		if pl.local() {
			s.serveLocal(w, r, pl)
			return
		}
		opts, err := listOptions(q)
		if err != nil {
			filters.WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		if opts.Watch {
			s.fanoutNativeWatch(w, r, pl)
			return
		}
		s.fanoutNativeList(w, r, pl)
	case 4:
		s.routeToOwner(w, r, rest[1])
	default:
		s.local.ServeHTTP(w, r)
	}
}

// routeToOwner hands a request about one cluster to its owner, as it is.
func (s *Server) routeToOwner(w http.ResponseWriter, r *http.Request, cluster string) {
	pl := s.plan(func(c string) bool { return c == cluster })
	if pl.local() {
		s.serveLocal(w, r, pl)
		return
	}
	if why, ok := pl.down[cluster]; ok {
		filters.WriteError(w, http.StatusServiceUnavailable, fmt.Sprintf("cluster %q cannot be read now: %s", cluster, why))
		return
	}
	p := pl.parts[0]
	// The owner answers for its plan's cluster, started there yet or not (planguard.go).
	resp, err := s.peers.call(r.Context(), r, p, r.URL.Path, restrictTo(r.URL.Query(), p.clusters), "proxy")
	if err != nil {
		filters.WriteError(w, http.StatusServiceUnavailable, fmt.Sprintf("cluster %q: %v", cluster, err))
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	kp, isKube, _ := parseKubePath(r.URL.Path)
	isKube = isKube && kp.cluster != ""
	if resp.StatusCode == http.StatusOK && (isWatch(r.URL.Query()) || (isKube && kp.watchPath)) {
		s.proxyWatch(w, resp.Body, pl, isKube)
		return
	}
	copyFlushing(w, resp.Body)
}

// copyFlushing copies a (possibly streaming) body, flushing after every read.
func copyFlushing(w http.ResponseWriter, body io.Reader) {
	fl, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if fl != nil {
				fl.Flush()
			}
		}
		if err != nil {
			return
		}
	}
}

// mustRetry is the refusal a whole answer must be when a part refused so: a part answers 429
// when a cluster of its plan is not complete there yet (a move under way, a first sync), and
// an answer without that cluster's objects would read as their deletes to a client that
// relists. whole (the Kubernetes API, whose lists are never partial) also turns a part that
// could not be reached, or failed with a 5xx, into 503 with Retry-After, for the same reason;
// the native API answers without it and names it unsynced in clusters[].
func mustRetry[T any](answers []answer[T], whole bool) error {
	var unreachable error
	for _, a := range answers {
		var pe *peerError
		switch {
		case a.err == nil:
		case asPeerError(a.err, &pe) && (pe.code == http.StatusTooManyRequests || pe.code == http.StatusGone || pe.code == http.StatusBadRequest):
			// 429: a planned cluster is not complete there yet; 410: the part's position is
			// gone (an exact list or continue page); 400: the request is bad everywhere. Any
			// of them makes the whole answer so, never a partial one.
			return pe
		case !asPeerError(a.err, &pe) || pe.code >= 500:
			unreachable = a.err
		}
	}
	if whole && unreachable != nil {
		return refusal(http.StatusServiceUnavailable, "a replica that owns clusters of this answer did not answer: "+unreachable.Error()+"; retry", true)
	}
	return nil
}

// refused is what a fan-out answers instead of merging answers, nil when it merges them:
// mustRetry's refusal, or failedAll's error. down is how many planned clusters have no owner.
func refused[T any](answers []answer[T], whole bool, down int) error {
	if err := mustRetry(answers, whole); err != nil {
		return err
	}
	return failedAll(answers, down)
}

// failedAll is the error every part failed with when none answered: a fleet-wide answer fails
// only when no replica could answer (401 for all, say).
func failedAll[T any](answers []answer[T], down int) error {
	if len(answers) == 0 || down > 0 {
		return nil
	}
	for _, a := range answers {
		if a.err == nil {
			return nil
		}
	}
	return answers[0].err
}

// writePeerFailure answers a refusal as it was given (its code and Status), and any other
// failure to reach a replica as 503.
func writePeerFailure(w http.ResponseWriter, err error) {
	var pe *peerError
	if asPeerError(err, &pe) {
		if pe.code == http.StatusTooManyRequests || pe.retry {
			w.Header().Set("Retry-After", "1") // the part's own advice; client-go waits for it
		}
		addWarnings(w.Header(), pe.warnings)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(pe.code)
		_, _ = w.Write(pe.status)
		return
	}
	filters.WriteError(w, http.StatusServiceUnavailable, err.Error())
}

// downFreshness reports the clusters no replica answered for, as unsynced, leaving out those
// the caller may not read.
func (s *Server) downFreshness(ctx context.Context, resource string, down map[string]string, failed map[string]error) []api.ClusterFreshness {
	names := make([]string, 0, len(down))
	for c := range down {
		names = append(names, c)
	}
	for c := range failed {
		names = append(names, c)
	}
	allowed, _, err := s.scope(ctx, resource, nil, names)
	if err != nil {
		return nil
	}
	var out []api.ClusterFreshness
	for _, c := range names {
		if allowed != nil && !slices.Contains(allowed, c) {
			continue
		}
		why := down[c]
		if e, ok := failed[c]; ok {
			why = e.Error()
		}
		out = append(out, api.ClusterFreshness{Name: c, Error: "unavailable: " + why})
	}
	return out
}

// fanoutNativeList answers a native list of the fleet.
func (s *Server) fanoutNativeList(w http.ResponseWriter, r *http.Request, pl plan) {
	l, err := s.fleet(r, pl).list(r.Context(), partQuery{path: r.URL.Path, query: r.URL.Query(), kind: "list"})
	if err != nil {
		writePeerFailure(w, err)
		return
	}
	list := api.List{Items: make([]api.Item, len(l.elements)), ResourceVersion: l.rv, Continue: l.cont, Clusters: l.fresh}
	for i, el := range l.elements {
		list.Items[i] = api.Item{Cluster: el.key.Cluster, Object: el.raw}
	}
	if err := writeRawList(w, list); err != nil {
		filters.WriteError(w, http.StatusInternalServerError, err.Error())
	}
}

// localNativeList answers this replica's part of a fan-out native list in process, as
// localKubeList does the Kubernetes API's: read as any list request here is, each object
// encoded once, nothing decoded.
func (s *Server) localNativeList(ctx context.Context, req *http.Request, p part) (partList, error) {
	q := req.URL.Query()
	var pg page
	var list api.List
	_, err := s.inProcess(ctx, p, "list", func(ctx context.Context, rec *answerRecorder) bool {
		rq, ok := s.parseRequest(rec, req)
		if !ok {
			return false
		}
		opts, err := listOptions(q)
		if err != nil {
			filters.WriteError(rec, http.StatusBadRequest, err.Error())
			return false
		}
		pg, list, ok = s.nativeListAnswer(ctx, rec, rq, q, opts)
		return ok
	})
	if err != nil {
		return partList{}, err
	}
	l := partList{rv: list.ResourceVersion, cont: list.Continue, fresh: list.Clusters}
	var buf bytes.Buffer
	ends := make([]int, len(pg.items))
	for i, it := range pg.items {
		if err := s.appendEncoded(&buf, it.Object, pg.info[it.Key.Cluster]); err != nil {
			return partList{}, fmt.Errorf("replica %q: cluster %q: encode %s: %w", p.peer, it.Key.Cluster, it.Key, err)
		}
		ends[i] = buf.Len()
	}
	l.elements = splitElements(buf.Bytes(), ends, pg.items)
	return l, nil
}

// splitElements slices all, the encodings of items one after another (each ending at ends[i]),
// into elements: one encoding, no copy per element.
func splitElements(all []byte, ends []int, items []item) []element {
	out := make([]element, len(items))
	start := 0
	for i, end := range ends {
		out[i] = element{key: items[i].Key, raw: all[start:end:end]}
		start = end
	}
	return out
}

// fanoutClusters answers api.Clusters for the fleet: each owner's clusters as it reports
// them, with their owner; the others as this replica sees their fence Leases.
func (s *Server) fanoutClusters(w http.ResponseWriter, r *http.Request) {
	pl := s.plan(nil)
	answers := gather(r.Context(), s, r, pl, func(ctx context.Context, rd partReader, p part) (api.Clusters, error) {
		var c api.Clusters
		g, err := rd.get(ctx, partQuery{path: r.URL.Path, query: r.URL.Query(), kind: "clusters"})
		if err == nil {
			err = json.Unmarshal(g.body, &c)
		}
		return c, err
	})
	if err := refused(answers, false, len(pl.down)); err != nil {
		writePeerFailure(w, err)
		return
	}
	out := api.Clusters{Clusters: []api.Cluster{}}
	seen := map[string]bool{}
	failed := map[string]error{}
	for _, a := range answers {
		if a.err != nil {
			for _, c := range a.part.clusters {
				failed[c] = a.err
			}
			continue
		}
		for _, c := range a.val.Clusters {
			if !slices.Contains(a.part.clusters, c.Name) {
				continue // it moved: its owner reports it
			}
			seen[c.Name] = true
			out.Clusters = append(out.Clusters, c)
		}
	}
	owners := map[string]string{}
	var missing []string
	for _, o := range s.opts.Fleet.Owners() {
		owners[o.Cluster] = o.Holder
		if !seen[o.Cluster] {
			missing = append(missing, o.Cluster)
		}
	}
	allowed, _, err := s.scope(r.Context(), "", nil, missing)
	if err != nil {
		writeScopeError(w, err)
		return
	}
	for _, c := range missing {
		if allowed != nil && !slices.Contains(allowed, c) {
			continue
		}
		why := pl.down[c]
		if e, ok := failed[c]; ok {
			why = e.Error()
		}
		if why == "" {
			why = "its owner has not started it yet"
		}
		out.Clusters = append(out.Clusters, api.Cluster{Name: c, State: "Unsynced", Owner: owners[c], Error: why, Resources: []api.Resource{}})
	}
	sort.Slice(out.Clusters, func(i, j int) bool { return out.Clusters[i].Name < out.Clusters[j].Name })
	writeJSON(w, out)
}
