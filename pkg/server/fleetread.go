package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/filters"
	"github.com/multicache/multicache/pkg/watchcache"
)

// fanout is the fleet as a partReader: it splits a request over its plan's parts, reads each
// through its own partReader (localPart or peerPart), and merges their answers into the one
// a replica that ran every cluster would give, with the fleet's positions (watchcache.Position
// with Parts). The fronts write what it answers as they write a part's: they cannot tell the
// two apart.
//
// Invariant: each cluster is asked of exactly one replica, its owner as this replica sees the
// fence Leases; a cluster without a live owner is reported unsynced, never silently dropped.
type fanout struct {
	s  *Server
	r  *http.Request // the caller's
	pl plan
}

// fleet is the fan-out of pl for the request r.
func (s *Server) fleet(r *http.Request, pl plan) fanout {
	return fanout{s: s, r: r, pl: pl.withSelf(s.opts.Fleet.Identity())}
}

// refusal is an answer that is not 200, as the fan-out gives it: a Status with its code.
// retry adds Retry-After (writePeerFailure).
func refusal(code int, msg string, retry bool, warnings ...string) *peerError {
	st, _ := json.Marshal(filters.StatusOf(code, msg))
	return &peerError{code: code, status: st, msg: msg, retry: retry, warnings: warnings}
}

func (f fanout) list(ctx context.Context, q partQuery) (partList, error) {
	if q.kube {
		return f.kubeList(ctx, q)
	}
	return f.nativeList(ctx, q)
}

// kubeList merges the owners' lists (or Tables) in key order, a page at a time: the continue
// token carries the last key and every owner's position.
func (f fanout) kubeList(ctx context.Context, q partQuery) (partList, error) {
	s, pl, vals := f.s, f.pl, q.query
	opts, err := listOptions(vals)
	if err != nil {
		return partList{}, refusal(http.StatusBadRequest, err.Error(), false)
	}
	if opts.Limit < 0 {
		return partList{}, refusal(http.StatusBadRequest, fmt.Sprintf("limit %q: want a non-negative integer", vals.Get("limit")), false)
	}
	limit := int(min(opts.Limit, int64(s.opts.KubeMaxPageSize))) // 0, no limit, answers everything
	exact := opts.ResourceVersionMatch == metav1.ResourceVersionMatchExact
	var from watchcache.Position
	var cont *watchcache.Continue
	if opts.Continue != "" {
		fc, err := watchcache.ParseContinue(opts.Continue)
		if err != nil {
			return partList{}, refusal(http.StatusBadRequest, err.Error(), false)
		}
		cont, from, exact = &fc, fc.Position, fc.Exact
		// A page of an exact list reads every part at its position; any other page of any
		// list continues after its key, each part at its position or from now (partContinue).
		if err := resumable(from, pl); exact && err != nil {
			return partList{}, refusal(http.StatusGone, "continue expired: "+err.Error()+"; list again", false)
		}
	} else if rv := opts.ResourceVersion; rv != "" && rv != "0" {
		t, ok := parseMerged(rv)
		if exact && (!ok || resumable(t, pl) != nil) {
			return partList{}, refusal(http.StatusGone, "resourceVersion expired: the clusters moved between replicas since; list again", false)
		}
		from = t
	}
	// read reads part p's page: the request narrowed to the clusters clustersOf(p), at most n
	// elements (n 0: the request's own limit), after c's key at p's position in c, or, without
	// c, from the request's resourceVersion.
	var read pageReader = func(c *watchcache.Continue, n int, clustersOf func(part) []string) func(context.Context, partReader, part) (partList, error) {
		return func(ctx context.Context, rd partReader, p part) (partList, error) {
			pq := restrictTo(vals, clustersOf(p))
			pq.Del("continue")
			pq.Del("resourceVersion")
			pq.Del("resourceVersionMatch")
			if n > 0 {
				pq.Set("limit", strconv.Itoa(n))
			}
			rv, ok := partPosition(from, p)
			switch {
			case c != nil:
				pq.Set("continue", partContinue(*c, p))
			case ok && rv != "":
				pq.Set("resourceVersion", rv)
				if m := vals.Get("resourceVersionMatch"); m != "" {
					pq.Set("resourceVersionMatch", m)
				}
			}
			return rd.list(ctx, partQuery{kube: true, path: q.path, query: pq, kind: "list"})
		}
	}
	var answers []answer[partList]
	var mp mergedPage
	keyOrdered := false
	if limit > 0 && !exact && opts.LabelSelector == "" && opts.FieldSelector == "" && len(pl.parts) > 1 && s.cachedPath(q.path) {
		var err error
		if answers, mp, keyOrdered, err = f.pageInKeyOrder(ctx, cont, limit, read); err != nil {
			return partList{}, err
		}
	}
	if !keyOrdered {
		answers = gather(ctx, s, f.r, pl, read(cont, 0, func(p part) []string { return p.clusters }))
		if err := refused(answers, true, len(pl.down)); err != nil {
			return partList{}, err
		}
		mp = mergePages(answers, limit)
	}
	i := slices.IndexFunc(answers, func(a answer[partList]) bool { return a.err == nil })
	if i < 0 {
		var errs []string
		for _, a := range answers {
			errs = append(errs, a.err.Error())
		}
		return partList{}, refusal(http.StatusServiceUnavailable, "no replica could answer: "+strings.Join(errs, "; "), false)
	}
	l := partList{head: answers[i].val.head, table: answers[i].val.table, elements: mp.elements, rv: watchcache.Position{Parts: mp.rvs}.String()}
	if mp.more && len(mp.elements) > 0 {
		l.cont = watchcache.Continue{Last: mp.elements[len(mp.elements)-1].key.String(), Position: watchcache.Position{Parts: mp.rvs}, Exact: exact}.String()
	}
	for _, a := range answers {
		for _, wv := range a.val.warnings {
			if !slices.Contains(l.warnings, wv) {
				l.warnings = append(l.warnings, wv)
			}
		}
	}
	l.warnings = append(l.warnings, s.downWarnings(ctx, pl.down, mp.failed)...)
	return l, nil
}

// nativeList answers a page of a native list from the owners' pages, with every cluster's
// freshness: those no replica answered for are unsynced.
func (f fanout) nativeList(ctx context.Context, q partQuery) (partList, error) {
	s, pl, vals := f.s, f.pl, q.query
	opts, err := listOptions(vals)
	if err != nil {
		return partList{}, refusal(http.StatusBadRequest, err.Error(), false)
	}
	limit, err := nativeLimit(opts, vals, s.opts.MaxPageSize)
	if err != nil {
		return partList{}, refusal(http.StatusBadRequest, err.Error(), false)
	}
	var cont *watchcache.Continue
	if tok := vals.Get("continue"); tok != "" {
		c, err := watchcache.ParseContinue(tok)
		if err != nil {
			return partList{}, refusal(http.StatusBadRequest, err.Error(), false)
		}
		cont = &c
	}
	answers := gather(ctx, s, f.r, pl, func(ctx context.Context, rd partReader, p part) (partList, error) {
		pq := restrictTo(vals, p.clusters)
		pq.Set("limit", strconv.Itoa(limit))
		pq.Del("continue")
		if cont != nil {
			pq.Set("continue", partContinue(*cont, p))
		}
		return rd.list(ctx, partQuery{path: q.path, query: pq, kind: "list"})
	})
	if err := refused(answers, false, len(pl.down)); err != nil {
		return partList{}, err
	}
	mp := mergePages(answers, limit)
	l := partList{elements: mp.elements, rv: watchcache.Position{Parts: mp.rvs}.String()}
	if mp.more && len(mp.elements) > 0 {
		l.cont = watchcache.Continue{Last: mp.elements[len(mp.elements)-1].key.String(), Position: watchcache.Position{Parts: mp.rvs}}.String()
	}
	for _, a := range answers {
		l.fresh = append(l.fresh, a.val.fresh...)
	}
	res, _ := s.resolve(strings.TrimPrefix(q.path, api.ResourcesPath+"/"))
	l.fresh = append(l.fresh, s.downFreshness(ctx, res, pl.down, mp.failed)...)
	sort.Slice(l.fresh, func(i, j int) bool { return l.fresh[i].Name < l.fresh[j].Name })
	return l, nil
}

// mergedPage is the fleet's page of a list: its parts' elements merged in key order, cut at
// the limit.
type mergedPage struct {
	elements []element
	more     bool
	rvs      map[string]watchcache.PartPosition // each part's position
	failed   map[string]error                   // the clusters of parts that did not answer
}

// mergePages merges the parts' pages: each holds up to limit elements after the same key, so
// the first limit of their merge, in key order, are the fleet's next page. limit 0 keeps all.
func mergePages(answers []answer[partList], limit int) mergedPage {
	mp := mergedPage{rvs: map[string]watchcache.PartPosition{}, failed: map[string]error{}}
	for _, a := range answers {
		if a.err != nil {
			for _, c := range a.part.clusters {
				mp.failed[c] = a.err
			}
			continue
		}
		mp.rvs[a.part.peer] = watchcache.PartPosition{RV: a.val.rv, Set: a.part.set()}
		mp.more = mp.more || a.val.cont != ""
		mp.elements = append(mp.elements, a.val.elements...)
	}
	sort.SliceStable(mp.elements, func(i, j int) bool { return less(mp.elements[i].key, mp.elements[j].key) })
	if limit > 0 && len(mp.elements) > limit {
		mp.more, mp.elements = true, mp.elements[:limit]
	}
	return mp
}

// get asks every owner for the object by name (the Kubernetes API). One answer is relayed; a
// Table gets every cluster's row; several objects are 409, as in one replica's fleet view.
func (f fanout) get(ctx context.Context, q partQuery) (partGot, error) {
	type got struct {
		partGot
		table bool
		head  map[string]json.RawMessage
		rows  []json.RawMessage
	}
	s, pl := f.s, f.pl
	// Each owner answers for its part's clusters only: one not started there yet is 429, and
	// a cluster two replicas hold for a moment answers once.
	answers := gather(ctx, s, f.r, pl, func(ctx context.Context, rd partReader, p part) (got, error) {
		pg, err := rd.get(ctx, partQuery{kube: true, path: q.path, query: restrictTo(q.query, p.clusters), kind: "get"})
		if err != nil {
			return got{}, err
		}
		g := got{partGot: pg}
		if json.Unmarshal(pg.body, &g.head) == nil {
			if rows, ok := g.head["rows"]; ok {
				g.table = true
				_ = json.Unmarshal(rows, &g.rows)
			}
		}
		return g, nil
	})
	var found []got
	var notFound *peerError
	failed := map[string]error{}
	for _, a := range answers {
		var pe *peerError
		switch {
		case a.err == nil:
			found = append(found, a.val)
		case asPeerError(a.err, &pe) && pe.code == http.StatusNotFound:
			notFound = pe
		case asPeerError(a.err, &pe) && (pe.code == http.StatusConflict || pe.code == http.StatusTooManyRequests || pe.code == http.StatusBadRequest):
			// 409: two of its clusters hold the name; 429: a planned cluster is not complete
			// there yet; 400: the request is bad everywhere.
			return partGot{}, pe
		default:
			for _, c := range a.part.clusters {
				failed[c] = a.err
			}
		}
	}
	warnings := s.downWarnings(ctx, pl.down, failed)
	for _, g := range found {
		warnings = append(warnings, g.warnings...)
	}
	switch {
	case len(found) == 0 && (len(failed) > 0 || len(pl.down) > 0):
		// Not found where replicas answered; the others may hold it.
		return partGot{}, refusal(http.StatusServiceUnavailable, fmt.Sprintf("not found in the clusters that answered; %d clusters could not be read now (see the Warning headers)", len(failed)+len(pl.down)), false, warnings...)
	case len(found) == 0 && notFound != nil:
		return partGot{}, notFound
	case len(found) == 0:
		return partGot{}, refusal(http.StatusNotFound, "not found in any cluster", false)
	case len(found) == 1:
		return partGot{body: found[0].body, warnings: warnings}, nil
	case found[0].table:
		var rows []json.RawMessage
		for _, g := range found {
			rows = append(rows, g.rows...)
		}
		sort.SliceStable(rows, func(i, j int) bool { return less(keyOfElement(rows[i]), keyOfElement(rows[j])) })
		out := found[0].head
		out["rows"], _ = json.Marshal(rows)
		b, err := json.Marshal(out)
		if err != nil {
			return partGot{}, refusal(http.StatusInternalServerError, err.Error(), false)
		}
		return partGot{body: b, warnings: warnings}, nil
	default:
		var names []string
		for _, g := range found {
			names = append(names, keyOfElement(g.body).Cluster)
		}
		sort.Strings(names)
		p, _, _ := parseKubePath(q.path)
		var paths []string
		for _, c := range names {
			paths = append(paths, "/clusters/"+c+p.objectPath())
		}
		return partGot{}, refusal(http.StatusConflict, fmt.Sprintf("%q exists in %d clusters (%s): read it from one of them, at %s", p.name, len(names), strings.Join(names, ", "), strings.Join(paths, " or ")), false, warnings...)
	}
}

// watch opens every owner's watch and relays them as one stream: each object with the fleet's
// position after it (the Kubernetes API: a reflector resumes from any event), and a BOOKMARK
// once every part has told its position. The stream never goes silent: when a cluster moves,
// joins, leaves, goes down or comes back, or a part's watch ends, it ends with 410 and the
// client lists again. A position of one replica's answer, or from before a cluster moved, is
// 410 before it starts.
func (f fanout) watch(ctx context.Context, q partQuery) (*partStream, error) {
	s, pl, vals := f.s, f.pl, q.query
	opts, err := listOptions(vals)
	if err != nil {
		return nil, refusal(http.StatusBadRequest, err.Error(), false)
	}
	from, resume, err := watchFrom(vals, pl)
	if err != nil {
		return nil, err
	}
	bookmarks := opts.AllowWatchBookmarks
	initial := q.kube && opts.SendInitialEvents != nil && *opts.SendInitialEvents
	timeout, pq0 := watchTimeout(vals, opts.TimeoutSeconds)
	if !q.kube {
		// The native API's BOOKMARKs are on unless turned off, and it has no timeout.
		bookmarks, timeout, pq0 = vals.Get("allowWatchBookmarks") != "false", 0, vals
	}
	changed := s.opts.Fleet.WaitChange()
	if why := s.moved(pl); why != "" {
		return nil, refusal(http.StatusGone, "the fleet changed since this watch started: "+why+"; list again", false)
	}
	ctx, cancel := context.WithCancel(ctx)
	streams, err := s.openStreams(ctx, f.r, pl, func(p part) partQuery {
		pq := restrictTo(pq0, p.clusters)
		pq.Del("resourceVersion")
		if !q.kube {
			pq.Set("allowWatchBookmarks", "true") // the fleet's BOOKMARK needs every part's
		}
		if resume {
			rv, _ := partPosition(from, p)
			pq.Set("resourceVersion", rv)
		} else if rv := vals.Get("resourceVersion"); rv != "" && q.kube {
			pq.Set("resourceVersion", rv)
		}
		return partQuery{kube: q.kube, path: q.path, query: pq, kind: "watch"}
	})
	if err != nil {
		cancel()
		return nil, err
	}
	out := &partStream{events: make(chan partEvent, 64)}
	if q.kube {
		out.warnings = s.downWarnings(ctx, pl.down, nil)
	} else if len(pl.down) > 0 {
		names := make([]string, 0, len(pl.down))
		for c := range pl.down {
			names = append(names, c)
		}
		sort.Strings(names)
		if hv, err := utilnet.NewWarningHeader(299, "-", fmt.Sprintf("clusters %s: no live replica owns them; this watch ends with 410 when one does", strings.Join(names, ", "))); err == nil {
			out.warnings = []string{hv}
		}
	}
	pos := map[string]watchcache.PartPosition{}
	for _, p := range pl.parts {
		rv, _ := partPosition(from, p)
		pos[p.peer] = watchcache.PartPosition{RV: rv, Set: p.set()}
	}
	go func() {
		defer cancel()
		defer close(out.events)
		send := func(ev partEvent) bool {
			select {
			case out.events <- ev:
				return true
			case <-ctx.Done():
				return false
			}
		}
		end := func(msg string) { send(partEvent{typ: api.ErrorEvent, gone: msg}) }
		initialDone := map[string]bool{}
		in := mergeStreams(ctx, streams)
		var expire <-chan time.Time
		if timeout > 0 {
			t := time.NewTimer(timeout)
			defer t.Stop()
			expire = t.C
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-expire:
				return // timeoutSeconds: a clean end, the client resumes from its last position
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
				ev := m.ev
				if ev.typ == api.ErrorEvent {
					send(ev) // the part's own 410, 500…
					return
				}
				if ev.rv != "" {
					pos[m.st.part.peer] = watchcache.PartPosition{RV: ev.rv, Set: m.st.part.set()}
				}
				if ev.typ == api.Bookmark {
					if ev.initialEnd {
						initialDone[m.st.part.peer] = true
						if !initial || len(initialDone) < len(streams) {
							continue
						}
					} else if !bookmarks || !allPositions(pos) {
						continue
					}
				}
				// The fleet's position, on every Kubernetes object and every BOOKMARK; a
				// native object carries none.
				if ev.rv = ""; q.kube || ev.typ == api.Bookmark {
					ev.rv = watchcache.Position{Parts: pos}.String()
				}
				if !send(ev) {
					return
				}
			}
		}
	}()
	return out, nil
}

// streamEvent is what a fan-in receives: an event of one part's stream, or its end.
type streamEvent struct {
	st   *partStream
	ev   partEvent
	done bool
}

// mergeStreams forwards every stream's events to one channel until ctx ends.
func mergeStreams(ctx context.Context, streams []*partStream) <-chan streamEvent {
	out := make(chan streamEvent, 64)
	for _, st := range streams {
		go func() {
			for ev := range st.events {
				select {
				case out <- streamEvent{st: st, ev: ev}:
				case <-ctx.Done():
					for range st.events {
					}
					return
				}
			}
			select {
			case out <- streamEvent{st: st, done: true}:
			case <-ctx.Done():
			}
		}()
	}
	return out
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

// watchFrom reads a fan-in watch's resourceVersion: where each part resumes (resume false:
// from now, or as "0" asks). A position of one replica's answer, or one from before a
// cluster moved, is 410.
func watchFrom(q url.Values, pl plan) (from watchcache.Position, resume bool, err error) {
	rv := q.Get("resourceVersion")
	if rv == "" || rv == "0" {
		return watchcache.Position{}, false, nil
	}
	t, isFleet := parseMerged(rv)
	if !isFleet {
		return watchcache.Position{}, false, refusal(http.StatusGone, "resourceVersion expired: it comes from one replica's answer and the fleet's clusters are now spread over several; list again", false)
	}
	if err := resumable(t, pl); err != nil {
		return watchcache.Position{}, false, refusal(http.StatusGone, "resourceVersion expired: "+err.Error()+"; list again", false)
	}
	return t, true, nil
}

// downWarnings are the Warning headers for every cluster no replica answered for, that the
// caller may read.
func (s *Server) downWarnings(ctx context.Context, down map[string]string, failed map[string]error) []string {
	var out []string
	for _, f := range s.downFreshness(ctx, "", down, failed) {
		if hv, err := utilnet.NewWarningHeader(299, "-", fmt.Sprintf("cluster %q: %s", f.Name, f.Error)); err == nil {
			out = append(out, hv)
		}
	}
	return out
}

// addWarnings adds every Warning header value to h, once.
func addWarnings(h http.Header, warnings []string) {
	for _, hv := range warnings {
		if !slices.Contains(h.Values("Warning"), hv) {
			h.Add("Warning", hv)
		}
	}
}

// cachedPath reports whether path is a collection this replica serves from its clusters'
// caches, whose parts honour their narrowing to clusters, a continue key and a limit (not
// clusters.multicache.io or the definitions, which answer from status).
func (s *Server) cachedPath(path string) bool {
	p, ok, err := parseKubePath(path)
	if !ok || err != nil {
		return false
	}
	cat, ok := s.catalog(p.cluster)
	if !ok {
		return false
	}
	kr := cat.find(p.group, p.version, p.resource)
	return kr != nil && kr.cached()
}

// pageReader reads one part's page: after c's key (from the request's position without c),
// at most n elements, narrowed to the clusters clustersOf gives for the part.
type pageReader func(c *watchcache.Continue, n int, clustersOf func(part) []string) func(context.Context, partReader, part) (partList, error)

// pageInKeyOrder reads a page of limit elements of a paged list without selectors the way its
// keys sort: by cluster first. The clusters from the page's start onward that one owner holds
// in a row (the leading run) come first in the fleet's order, so that owner alone is asked
// for the page, narrowed to them; every other part is asked for its position only (narrowed
// to no cluster, an empty page that costs it no read). Only when the leading run holds fewer
// than limit elements are the parts that own later clusters asked for the rest, at once and
// at the positions they answered, as in a plain fan-out. A fleet of large clusters thus
// answers a page from one owner's encoding, not from one per owner.
//
// Invariant: every part answers at least once, so the page's position holds every part's, as
// in a plain fan-out; a part's position is the first it answered, from which the page's
// elements were read or after which they were (a list may be ahead of its resourceVersion,
// never behind it). When a part fails in the first round, ok is false and nothing is merged:
// the caller asks every part at once, as a plain fan-out, so that failures answer as they
// always have (a part asked for no cluster cannot tell a cluster that is still starting).
func (f fanout) pageInKeyOrder(ctx context.Context, cont *watchcache.Continue, limit int, read pageReader) (answers []answer[partList], mp mergedPage, ok bool, err error) {
	s, pl := f.s, f.pl
	type owned struct {
		cluster string
		part    int
	}
	var order []owned
	for i, p := range pl.parts {
		for _, c := range p.clusters {
			order = append(order, owned{c, i})
		}
	}
	sort.Slice(order, func(i, j int) bool { return order[i].cluster < order[j].cluster })
	start := 0 // order[start] is the first cluster the page can hold
	if cont != nil {
		after := cont.After().Cluster
		start = sort.Search(len(order), func(i int) bool { return order[i].cluster >= after })
	}
	leader, run := -1, []string{}
	end := start // order[start:end] is the leading run
	if start < len(order) {
		leader = order[start].part
		for end < len(order) && order[end].part == leader {
			run = append(run, order[end].cluster)
			end++
		}
	}
	first := gather(ctx, s, f.r, pl, read(cont, limit, func(p part) []string {
		if leader >= 0 && p.peer == pl.parts[leader].peer {
			return run
		}
		return []string{}
	}))
	for _, a := range first {
		if a.err != nil {
			return nil, mergedPage{}, false, nil
		}
	}
	mp = mergePages(first, limit)
	if mp.more || len(mp.elements) >= limit || end == len(order) {
		// The leading run completed the page (its owner has more, or gave a whole page), or
		// no cluster follows it: later clusters' elements come in the next page, which
		// continues after this one's last key.
		mp.more = mp.more || end < len(order)
		return first, mp, true, nil
	}
	// The rest of the page comes from the clusters after the run, each part at the position it
	// answered: a continue after the last key read (or the request's own).
	var next *watchcache.Continue
	switch {
	case len(mp.elements) > 0:
		next = &watchcache.Continue{Last: mp.elements[len(mp.elements)-1].key.String(), Position: watchcache.Position{Parts: mp.rvs}}
	case cont != nil:
		next = &watchcache.Continue{Last: cont.Last, Position: watchcache.Position{Parts: mp.rvs}}
	}
	rest := plan{down: pl.down, owner: pl.owner, keep: pl.keep}
	later := map[string][]string{}
	for _, o := range order[end:] {
		p := pl.parts[o.part]
		if _, ok := later[p.peer]; !ok {
			rest.parts = append(rest.parts, p)
		}
		later[p.peer] = append(later[p.peer], o.cluster)
	}
	second := gather(ctx, s, f.r, rest, read(next, limit-len(mp.elements), func(p part) []string { return later[p.peer] }))
	// The first round answered, so the page fails only on a refusal (mustRetry); a part that
	// fails otherwise leaves its clusters out with a Warning and its position out of the
	// page's, as in a plain fan-out (a watch from it is then 410).
	if err := mustRetry(second, true); err != nil {
		return nil, mergedPage{}, false, err
	}
	mp2 := mergePages(second, limit-len(mp.elements))
	mp.elements = append(mp.elements, mp2.elements...)
	mp.more = mp2.more
	for c, err := range mp2.failed {
		mp.failed[c] = err
	}
	for _, a := range second {
		if a.err != nil {
			delete(mp.rvs, a.part.peer)
		}
	}
	return append(first, second...), mp, true, nil
}
