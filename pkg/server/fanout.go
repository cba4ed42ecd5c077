package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/filters"
	"github.com/multicache/multicache/pkg/watchcache"
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
		if r.Header.Get(peerHeader) != "" || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
			next.ServeHTTP(w, r)
			return
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
		res, _ := s.resolve(rest[0])
		s.fanoutNativeList(w, r, pl, res, opts)
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

// answer is one replica's reply to its part of a list.
type answer[T any] struct {
	part part
	val  T
	err  error
}

// gather calls every part at once, with the peer timeout, and decodes each 200 answer. local,
// when set, answers this replica's own part in process instead: no HTTP, no encoding to decode.
func gather[T any](ctx context.Context, s *Server, r *http.Request, pl plan, path string, query func(part) url.Values, kind string, decode func(*http.Response) (T, error), local func(context.Context, *http.Request, part, url.Values) (T, error)) []answer[T] {
	ctx, cancel := context.WithTimeout(ctx, s.peers.timeout)
	defer cancel()
	out := make([]answer[T], len(pl.parts))
	var wg sync.WaitGroup
	for i, p := range pl.parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i].part = p
			if p.self && local != nil {
				out[i].val, out[i].err = local(ctx, r, p, query(p))
				return
			}
			resp, err := s.peers.call(ctx, r, p, path, query(p), kind)
			if err == nil {
				err = checkAnswer(p, resp)
			}
			if err != nil {
				out[i].err = err
				return
			}
			defer drain(resp.Body)
			out[i].val, out[i].err = decode(resp)
			if out[i].err != nil {
				out[i].err = fmt.Errorf("replica %q: %w", p.peer, out[i].err)
			}
		}()
	}
	wg.Wait()
	return out
}

// mustRetry answers a part's 429 as it gave it, and reports whether it did. A part answers 429
// when a cluster of its plan is not complete there yet (a move under way, a first sync): an
// answer without that cluster's objects would read as their deletes to a client that relists.
// whole (the Kubernetes API, whose lists are never partial) also turns a part that could not
// be reached, or failed with a 5xx, into 503 with Retry-After, for the same reason; the native
// API answers without it and names it unsynced in clusters[].
func mustRetry[T any](w http.ResponseWriter, answers []answer[T], whole bool) bool {
	var unreachable error
	for _, a := range answers {
		var pe *peerError
		switch {
		case a.err == nil:
		case asPeerError(a.err, &pe) && (pe.code == http.StatusTooManyRequests || pe.code == http.StatusGone || pe.code == http.StatusBadRequest):
			// 429: a planned cluster is not complete there yet; 410: the part's position is
			// gone (an exact list or continue page); 400: the request is bad everywhere. Any
			// of them makes the whole answer so, never a partial one.
			writePeerFailure(w, a.err)
			return true
		case !asPeerError(a.err, &pe) || pe.code >= 500:
			unreachable = a.err
		}
	}
	if whole && unreachable != nil {
		w.Header().Set("Retry-After", "1")
		filters.WriteError(w, http.StatusServiceUnavailable, "a replica that owns clusters of this answer did not answer: "+unreachable.Error()+"; retry")
		return true
	}
	return false
}

// failedAll answers the error every part failed with when none answered, and reports whether
// it did: a fleet-wide answer fails only when no replica could answer (401 for all, say).
func failedAll[T any](w http.ResponseWriter, answers []answer[T], down int) bool {
	if len(answers) == 0 || down > 0 {
		return false
	}
	for _, a := range answers {
		if a.err == nil {
			return false
		}
	}
	writePeerFailure(w, answers[0].err)
	return true
}

// writePeerFailure answers a replica's refusal as it gave it (its code and Status), and any
// other failure to reach it as 503.
func writePeerFailure(w http.ResponseWriter, err error) {
	var pe *peerError
	if asPeerError(err, &pe) {
		if pe.code == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "1") // the part's own advice; client-go waits for it
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(pe.code)
		_, _ = w.Write(pe.status)
		return
	}
	filters.WriteError(w, http.StatusServiceUnavailable, err.Error())
}

// watchFrom reads a fan-in watch's resourceVersion: where each part resumes (resume false:
// from now, or as "0" asks). A position of one replica's answer, or one from before a
// cluster moved, is 410, answered here (ok false).
func watchFrom(w http.ResponseWriter, q url.Values, pl plan) (from watchcache.Position, resume, ok bool) {
	rv := q.Get("resourceVersion")
	if rv == "" || rv == "0" {
		return watchcache.Position{}, false, true
	}
	t, isFleet := parseMerged(rv)
	if !isFleet {
		filters.WriteError(w, http.StatusGone, "resourceVersion expired: it comes from one replica's answer and the fleet's clusters are now spread over several; list again")
		return watchcache.Position{}, false, false
	}
	if err := resumable(t, pl); err != nil {
		filters.WriteError(w, http.StatusGone, "resourceVersion expired: "+err.Error()+"; list again")
		return watchcache.Position{}, false, false
	}
	return t, true, true
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

// fanoutNativeList answers a page of a list from the owners' pages: each part returns up to
// limit items after the same key, so the first limit of their merge, in key order, are the
// fleet's next page. opts are the query decoded (listOptions).
func (s *Server) fanoutNativeList(w http.ResponseWriter, r *http.Request, pl plan, resource string, opts metav1.ListOptions) {
	q := r.URL.Query()
	limit, err := nativeLimit(opts, q, s.opts.MaxPageSize)
	if err != nil {
		filters.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	var cont *watchcache.Continue
	if tok := q.Get("continue"); tok != "" {
		c, err := watchcache.ParseContinue(tok)
		if err != nil {
			filters.WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		cont = &c
	}
	query := func(p part) url.Values {
		pq := restrictTo(q, p.clusters)
		pq.Set("limit", strconv.Itoa(limit))
		pq.Del("continue")
		if cont != nil {
			pq.Set("continue", partContinue(*cont, p))
		}
		return pq
	}
	answers := gather(r.Context(), s, r, pl, r.URL.Path, query, "list", decodeNativeDoc, s.localNativeList)
	if mustRetry(w, answers, false) || failedAll(w, answers, len(pl.down)) {
		return
	}
	type keyed struct {
		key  aggregate.Key
		item api.Item
	}
	var all []keyed
	more := false
	failed := map[string]error{}
	rvs := map[string]watchcache.PartPosition{}
	var fresh []api.ClusterFreshness
	for _, a := range answers {
		if a.err != nil {
			for _, c := range a.part.clusters {
				failed[c] = a.err
			}
			continue
		}
		rvs[a.part.peer] = watchcache.PartPosition{RV: a.val.list.ResourceVersion, Set: a.part.set()}
		fresh = append(fresh, a.val.list.Clusters...)
		more = more || a.val.list.Continue != ""
		for i, it := range a.val.list.Items {
			all = append(all, keyed{a.val.keys[i], it})
		}
	}
	sort.Slice(all, func(i, j int) bool { return less(all[i].key, all[j].key) })
	if len(all) > limit {
		more, all = true, all[:limit]
	}
	list := api.List{Items: make([]api.Item, len(all)), ResourceVersion: watchcache.Position{Parts: rvs}.String()}
	for i, k := range all {
		list.Items[i] = k.item
	}
	if more && len(all) > 0 {
		list.Continue = watchcache.Continue{Last: all[len(all)-1].key.String(), Position: watchcache.Position{Parts: rvs}}.String()
	}
	fresh = append(fresh, s.downFreshness(r.Context(), resource, pl.down, failed)...)
	sort.Slice(fresh, func(i, j int) bool { return fresh[i].Name < fresh[j].Name })
	list.Clusters = fresh
	if err := writeRawList(w, list); err != nil {
		filters.WriteError(w, http.StatusInternalServerError, err.Error())
	}
}

// nativeDoc is one part's page of a native list: its items as their owner encoded them, and
// their keys.
type nativeDoc struct {
	list api.List
	keys []aggregate.Key
}

func decodeNativeDoc(resp *http.Response) (nativeDoc, error) {
	var d nativeDoc
	if err := json.NewDecoder(resp.Body).Decode(&d.list); err != nil {
		return d, err
	}
	d.keys = make([]aggregate.Key, len(d.list.Items))
	for i, it := range d.list.Items {
		var m api.ObjectMeta
		_ = json.Unmarshal(it.Object, &m)
		d.keys[i] = aggregate.Key{Cluster: it.Cluster, Namespace: m.Metadata.Namespace, Name: m.Metadata.Name}
	}
	return d, nil
}

// localNativeList answers this replica's part of a fan-out native list in process, as
// localKubeList does the Kubernetes API's: read as any list request here is, each object
// encoded once, nothing decoded.
func (s *Server) localNativeList(ctx context.Context, r *http.Request, p part, q url.Values) (nativeDoc, error) {
	req := r.Clone(filters.InProcess(ctx))
	req.URL.RawQuery = q.Encode()
	req.SetPathValue("resource", strings.TrimPrefix(r.URL.Path, api.ResourcesPath+"/"))
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
		return nativeDoc{}, err
	}
	var buf bytes.Buffer
	ends := make([]int, len(pg.items))
	d := nativeDoc{list: list, keys: make([]aggregate.Key, len(pg.items))}
	for i, it := range pg.items {
		if err := s.appendEncoded(&buf, it.Object, pg.info[it.Key.Cluster]); err != nil {
			return nativeDoc{}, fmt.Errorf("replica %q: cluster %q: encode %s: %w", p.peer, it.Key.Cluster, it.Key, err)
		}
		ends[i], d.keys[i] = buf.Len(), it.Key
	}
	d.list.Items = make([]api.Item, len(pg.items))
	all, start := buf.Bytes(), 0
	for i, end := range ends {
		d.list.Items[i] = api.Item{Cluster: pg.items[i].Key.Cluster, Object: all[start:end:end]}
		start = end
	}
	return d, nil
}

// stream is one replica's watch, read line by line.
type stream struct {
	part  part
	lines chan []byte // closed when the watch ends
	err   error       // why it ended, set before lines closes
}

// openStreams starts a watch on every part. It fails when any part refuses (a 410 for an
// expired position, a 403): the caller answers that before its stream starts.
func (s *Server) openStreams(ctx context.Context, r *http.Request, pl plan, path string, query func(part) url.Values) ([]*stream, error) {
	var out []*stream
	var firstErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, p := range pl.parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := s.peers.call(ctx, r, p, path, query(p), "watch")
			if err == nil {
				err = checkAnswer(p, resp)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			st := &stream{part: p, lines: make(chan []byte, 64)}
			out = append(out, st)
			go st.read(resp.Body)
		}()
	}
	wg.Wait()
	if firstErr != nil {
		for _, st := range out {
			go func() {
				for range st.lines {
				}
			}()
		}
		return nil, firstErr
	}
	return out, nil
}

func (st *stream) read(body io.ReadCloser) {
	defer close(st.lines)
	defer body.Close()
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 256<<20)
	for sc.Scan() {
		line := slices.Clone(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		st.lines <- line
	}
	st.err = sc.Err()
	if st.err == nil {
		st.err = io.EOF
	}
}

// fanIn is what a fan-in watch receives: a line of one stream, or its end.
type fanIn struct {
	st   *stream
	line []byte
	done bool
}

// merge forwards every stream's lines to one channel until ctx ends.
func merge(ctx context.Context, streams []*stream) <-chan fanIn {
	out := make(chan fanIn, 64)
	for _, st := range streams {
		go func() {
			for line := range st.lines {
				select {
				case out <- fanIn{st: st, line: line}:
				case <-ctx.Done():
					for range st.lines {
					}
					return
				}
			}
			select {
			case out <- fanIn{st: st, done: true}:
			case <-ctx.Done():
			}
		}()
	}
	return out
}

// fanoutNativeWatch relays the owners' watches as one. Each part's BOOKMARK moves its position,
// and the watch then sends a BOOKMARK of the fleet's. When a cluster moves, or a part's watch
// ends, the watch ends with 410: the client lists again, and the list says which clusters are
// unsynced. It never goes silent.
func (s *Server) fanoutNativeWatch(w http.ResponseWriter, r *http.Request, pl plan) {
	pl = pl.withSelf(s.opts.Fleet.Identity())
	fl, ok := w.(http.Flusher)
	if !ok {
		filters.WriteError(w, http.StatusInternalServerError, "streaming unsupported")
		return
	}
	release, ok := s.limits.AcquireWatch(w)
	if !ok {
		return
	}
	defer release()
	q := r.URL.Query()
	from, resume, ok := watchFrom(w, q, pl)
	if !ok {
		return
	}
	bookmarks := q.Get("allowWatchBookmarks") != "false"
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	changed := s.opts.Fleet.WaitChange()
	if why := s.moved(pl); why != "" {
		filters.WriteError(w, http.StatusGone, "the fleet changed since this watch started: "+why+"; list again")
		return
	}
	streams, err := s.openStreams(ctx, r, pl, r.URL.Path, func(p part) url.Values {
		pq := restrictTo(q, p.clusters)
		pq.Set("allowWatchBookmarks", "true")
		pq.Del("resourceVersion")
		if resume {
			rv, _ := partPosition(from, p)
			pq.Set("resourceVersion", rv)
		}
		return pq
	})
	if err != nil {
		writePeerFailure(w, err)
		return
	}
	s.metrics.watches.Inc()
	defer s.metrics.watches.Dec()
	pos := map[string]watchcache.PartPosition{}
	for _, p := range pl.parts {
		rv, _ := partPosition(from, p)
		pos[p.peer] = watchcache.PartPosition{RV: rv, Set: p.set()}
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	if len(pl.down) > 0 {
		var names []string
		for c := range pl.down {
			names = append(names, c)
		}
		sort.Strings(names)
		if hv, err := utilnet.NewWarningHeader(299, "-", fmt.Sprintf("clusters %s: no live replica owns them; this watch ends with 410 when one does", strings.Join(names, ", "))); err == nil {
			w.Header().Add("Warning", hv)
		}
	}
	w.WriteHeader(http.StatusOK)
	fl.Flush()
	end := func(msg string) {
		b, _ := json.Marshal(errorObject(http.StatusGone, msg))
		_ = json.NewEncoder(w).Encode(api.WatchEvent{Type: api.ErrorEvent, Object: b})
		fl.Flush()
	}
	in := merge(ctx, streams)
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
			changed = s.opts.Fleet.WaitChange()
			if why := s.moved(pl); why != "" {
				end("the fleet changed since this watch started: " + why + "; list again")
				return
			}
		case m := <-in:
			if m.done {
				end(fmt.Sprintf("the watch of replica %q ended (%v); list again", m.st.part.peer, m.st.err))
				return
			}
			var ev api.WatchEvent
			if err := json.Unmarshal(m.line, &ev); err != nil {
				end(fmt.Sprintf("replica %q sent a malformed event: %v", m.st.part.peer, err))
				return
			}
			switch ev.Type {
			case api.Bookmark:
				var b api.BookmarkObject
				if json.Unmarshal(ev.Object, &b) == nil {
					pos[m.st.part.peer] = watchcache.PartPosition{RV: b.Metadata.ResourceVersion, Set: m.st.part.set()}
				}
				if !bookmarks || !allPositions(pos) {
					continue
				}
				var out api.BookmarkObject
				out.Kind = "Bookmark"
				out.Metadata.ResourceVersion = watchcache.Position{Parts: pos}.String()
				b2, _ := json.Marshal(out)
				if json.NewEncoder(w).Encode(api.WatchEvent{Type: api.Bookmark, Object: b2}) != nil {
					return
				}
			case api.ErrorEvent:
				_, _ = w.Write(append(m.line, '\n'))
				fl.Flush()
				return
			default:
				if _, err := w.Write(append(m.line, '\n')); err != nil {
					return
				}
			}
			if len(in) == 0 {
				fl.Flush()
			}
		}
	}
}

// allPositions reports whether every part has told its position.
func allPositions(pos map[string]watchcache.PartPosition) bool {
	for _, p := range pos {
		if p.RV == "" {
			return false
		}
	}
	return true
}

// fanoutClusters answers api.Clusters for the fleet: each owner's clusters as it reports
// them, with their owner; the others as this replica sees their fence Leases.
func (s *Server) fanoutClusters(w http.ResponseWriter, r *http.Request) {
	pl := s.plan(nil)
	answers := gather(r.Context(), s, r, pl, r.URL.Path, func(part) url.Values { return r.URL.Query() }, "clusters", func(resp *http.Response) (api.Clusters, error) {
		var c api.Clusters
		err := json.NewDecoder(resp.Body).Decode(&c)
		return c, err
	}, nil)
	if mustRetry(w, answers, false) || failedAll(w, answers, len(pl.down)) {
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
