package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/filters"
	"github.com/multicache/multicache/pkg/watchcache"
)

// fanoutKube routes the Kubernetes API: a request in one cluster's view goes to its owner; a
// fleet-view list, get or watch of a resource goes to every owner; discovery is answered here.
func (s *Server) fanoutKube(w http.ResponseWriter, r *http.Request) {
	if s.notCoordinated(w) {
		return
	}
	p, ok, err := parseKubePath(r.URL.Path)
	if p.cluster != "" && strings.HasPrefix(strings.TrimPrefix(r.URL.Path, "/clusters/"+p.cluster), "/openapi/") {
		s.routeToOwner(w, r, p.cluster) // its documents are its owner's to read
		return
	}
	if !ok || err != nil {
		s.local.ServeHTTP(w, r)
		return
	}
	if p.cluster != "" {
		s.routeToOwner(w, r, p.cluster)
		return
	}
	if p.what != "object" {
		s.fanoutDiscovery(w, r)
		return
	}
	if p.subresource != "" {
		s.local.ServeHTTP(w, r)
		return
	}
	vals := r.URL.Query()
	reqs, _, err := clusterRequirements(vals.Get("labelSelector"))
	if err != nil {
		s.local.ServeHTTP(w, r) // it answers the error
		return
	}
	pl := s.plan(func(c string) bool { return len(selectClusters([]string{c}, reqs)) == 1 })
	if pl.local() {
		s.serveLocal(w, r, pl)
		return
	}
	watch, opts, ok := kubeOptions(w, p, vals)
	if !ok {
		return
	}
	if len(pl.down) > 0 && (!watch || initialEvents(opts)) {
		// A cluster without a live owner is moving to another replica (its owner died, and
		// the others take its clusters within a lease duration): a list without its objects
		// would read as their deletes to every client that relists now, as clients do when
		// their owner's watch ends. The native API answers with the cluster unsynced instead.
		down := make([]string, 0, len(pl.down))
		for c, why := range pl.down {
			down = append(down, fmt.Sprintf("%s (%s)", c, why))
		}
		sort.Strings(down)
		w.Header().Set("Retry-After", "1")
		filters.WriteError(w, http.StatusServiceUnavailable, "no live replica answers for "+strings.Join(down, ", ")+" yet; retry")
		return
	}
	switch {
	case watch:
		s.fanoutKubeWatch(w, r, pl, opts)
	case p.name != "":
		s.fanoutKubeGet(w, r, pl)
	default:
		s.fanoutKubeList(w, r, pl, opts)
	}
}

// fanoutDiscovery answers discovery here when this replica's clusters resolve every configured
// resource; otherwise a replica whose clusters do answers it, since the fleet view serves what
// any cluster resolves.
func (s *Server) fanoutDiscovery(w http.ResponseWriter, r *http.Request) {
	cat, _ := s.catalog("")
	complete := true
	for _, res := range s.reg.Resources() {
		complete = complete && slices.ContainsFunc(cat.resources, func(kr *kubeResource) bool { return kr.name == res })
	}
	if !complete {
		for _, p := range s.plan(nil).parts {
			if p.self {
				continue
			}
			resp, err := s.peers.call(r.Context(), r, p, r.URL.Path, r.URL.Query(), "discovery")
			if err != nil {
				continue
			}
			defer resp.Body.Close()
			for k, v := range resp.Header {
				w.Header()[k] = v
			}
			w.WriteHeader(resp.StatusCode)
			copyFlushing(w, resp.Body)
			return
		}
	}
	s.local.ServeHTTP(w, r)
}

// kubeDoc is a list or Table answer, kept as raw fields so that it is relayed as the owner
// wrote it.
type kubeDoc struct {
	fields   map[string]json.RawMessage // without the items or rows
	elements []json.RawMessage          // items, or a Table's rows
	keys     []aggregate.Key            // of each element
	table    bool
	warnings []string
}

func decodeKubeDoc(resp *http.Response) (kubeDoc, error) {
	d := kubeDoc{warnings: resp.Header.Values("Warning")}
	if err := json.NewDecoder(resp.Body).Decode(&d.fields); err != nil {
		return d, err
	}
	field := "items"
	if _, ok := d.fields["rows"]; ok {
		field, d.table = "rows", true
	}
	if raw, ok := d.fields[field]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &d.elements); err != nil {
			return d, fmt.Errorf("%s: %w", field, err)
		}
	}
	delete(d.fields, field)
	d.keys = make([]aggregate.Key, len(d.elements))
	for i, el := range d.elements {
		d.keys[i] = keyOfElement(el)
	}
	return d, nil
}

// localKubeList answers this replica's part of a fan-out list in process: read as any list
// request here is (parseKube, kubeListAnswer), each element encoded once, with its key as read.
// No pipe, no second authentication, and nothing decoded.
func (s *Server) localKubeList(ctx context.Context, r *http.Request, p part, q url.Values) (kubeDoc, error) {
	req := r.Clone(filters.InProcess(ctx))
	req.URL.RawQuery = q.Encode()
	req.Header.Set(peerHeader, "1")
	var kq kubeRequest
	var l kubeList
	rec, err := s.inProcess(ctx, p, "list", func(ctx context.Context, rec *answerRecorder) bool {
		var ok bool
		if kq, ok = s.parseKube(rec, req); ok {
			l, ok = s.kubeListAnswer(ctx, rec, kq)
		}
		return ok
	})
	if err != nil {
		return kubeDoc{}, err
	}
	d := kubeDoc{warnings: rec.header.Values("Warning"), fields: map[string]json.RawMessage{}}
	md, _ := json.Marshal(metav1.ListMeta{ResourceVersion: l.rv, Continue: l.cont})
	if kq.f.as == "Table" {
		t, err := s.kubeTable(ctx, l.kr, l.items, l.epoch, false, l.includeObject, kq.f.tableVersion)
		if err != nil {
			return kubeDoc{}, fmt.Errorf("replica %q: %w", p.peer, err)
		}
		rows := t.Rows
		t.Rows = nil
		head, err := json.Marshal(t)
		if err == nil {
			err = json.Unmarshal(head, &d.fields)
		}
		if err != nil {
			return kubeDoc{}, fmt.Errorf("replica %q: encode table: %w", p.peer, err)
		}
		delete(d.fields, "rows")
		d.table = true
		for i, row := range rows {
			b, err := json.Marshal(row)
			if err != nil {
				return kubeDoc{}, fmt.Errorf("replica %q: encode row: %w", p.peer, err)
			}
			d.elements = append(d.elements, b)
			if len(rows) == len(l.items) {
				d.keys = append(d.keys, l.items[i].Key)
			} else {
				d.keys = append(d.keys, keyOfElement(b))
			}
		}
		d.fields["metadata"] = md
		return d, nil
	}
	kind, apiVersion := l.kr.gvk.Kind+"List", l.kr.gvk.GroupVersion().String()
	if kq.f.as == "PartialObjectMetadata" {
		kind, apiVersion = "PartialObjectMetadataList", metav1.SchemeGroupVersion.String()
	}
	d.fields["kind"], _ = json.Marshal(kind)
	d.fields["apiVersion"], _ = json.Marshal(apiVersion)
	d.fields["metadata"] = md
	// Every element into one buffer, then sliced: one encoding, no copy per element.
	var buf bytes.Buffer
	ends := make([]int, len(l.items))
	d.keys = make([]aggregate.Key, len(l.items))
	for i, it := range l.items {
		if err := s.appendKubeObject(&buf, kq.f, l.kr, it, l.epoch, false); err != nil {
			return kubeDoc{}, fmt.Errorf("replica %q: %w", p.peer, err)
		}
		ends[i], d.keys[i] = buf.Len(), it.Key
	}
	d.elements = make([]json.RawMessage, len(l.items))
	all, start := buf.Bytes(), 0
	for i, end := range ends {
		d.elements[i] = all[start:end:end]
		start = end
	}
	return d, nil
}

// elementMeta is what orders an item or a Table row in the fleet: its object's metadata.
type elementMeta struct {
	Metadata struct {
		Name            string            `json:"name"`
		Namespace       string            `json:"namespace"`
		Annotations     map[string]string `json:"annotations"`
		ResourceVersion string            `json:"resourceVersion"`
	} `json:"metadata"`
	Object *elementMeta `json:"object"`
	Cells  []any        `json:"cells"`
}

// keyOfElement is the fleet key of an item or row: cluster, namespace, name.
func keyOfElement(raw json.RawMessage) aggregate.Key {
	var m elementMeta
	_ = json.Unmarshal(raw, &m)
	md := m.Metadata
	if m.Object != nil {
		md = m.Object.Metadata
	}
	k := aggregate.Key{Cluster: md.Annotations[api.ClusterAnnotation], Namespace: md.Namespace, Name: md.Name}
	if k.Cluster == "" && len(m.Cells) > 0 {
		k.Cluster, _ = m.Cells[0].(string)
	}
	return k
}

// fanoutKubeList merges the owners' lists (or Tables) in key order, a page at a time: the
// continue token carries the last key and every owner's position. opts are the query decoded
// (listOptions).
func (s *Server) fanoutKubeList(w http.ResponseWriter, r *http.Request, pl plan, opts metav1.ListOptions) {
	pl = pl.withSelf(s.opts.Fleet.Identity())
	q := r.URL.Query()
	if opts.Limit < 0 {
		filters.WriteError(w, http.StatusBadRequest, fmt.Sprintf("limit %q: want a non-negative integer", q.Get("limit")))
		return
	}
	limit := int(min(opts.Limit, int64(s.opts.KubeMaxPageSize))) // 0, no limit, answers everything
	exact := q.Get("resourceVersionMatch") == string(metav1.ResourceVersionMatchExact)
	var from watchcache.Position
	var cont *watchcache.Continue
	if c := q.Get("continue"); c != "" {
		fc, err := watchcache.ParseContinue(c)
		if err != nil {
			filters.WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		cont, from, exact = &fc, fc.Position, fc.Exact
		// A page of an exact list reads every part at its position; any other page of any
		// list continues after its key, each part at its position or from now (partContinue).
		if err := resumable(from, pl); exact && err != nil {
			filters.WriteError(w, http.StatusGone, "continue expired: "+err.Error()+"; list again")
			return
		}
	} else if rv := q.Get("resourceVersion"); rv != "" && rv != "0" {
		t, ok := parseMerged(rv)
		if exact && (!ok || resumable(t, pl) != nil) {
			filters.WriteError(w, http.StatusGone, "resourceVersion expired: the clusters moved between replicas since; list again")
			return
		}
		from = t
	}
	query := func(p part) url.Values {
		pq := restrictTo(q, p.clusters)
		pq.Del("continue")
		pq.Del("resourceVersion")
		pq.Del("resourceVersionMatch")
		rv, ok := partPosition(from, p)
		switch {
		case cont != nil:
			pq.Set("continue", partContinue(*cont, p))
		case ok && rv != "":
			pq.Set("resourceVersion", rv)
			if m := q.Get("resourceVersionMatch"); m != "" {
				pq.Set("resourceVersionMatch", m)
			}
		}
		return pq
	}
	answers := gather(r.Context(), s, r, pl, r.URL.Path, query, "list", decodeKubeDoc, s.localKubeList)
	if mustRetry(w, answers, true) || failedAll(w, answers, len(pl.down)) {
		return
	}
	if !slices.ContainsFunc(answers, func(a answer[kubeDoc]) bool { return a.err == nil }) {
		var errs []string
		for _, a := range answers {
			errs = append(errs, a.err.Error())
		}
		filters.WriteError(w, http.StatusServiceUnavailable, "no replica could answer: "+strings.Join(errs, "; "))
		return
	}
	type keyed struct {
		key aggregate.Key
		raw json.RawMessage
	}
	var all []keyed
	var first *kubeDoc
	more := false
	failed := map[string]error{}
	rvs := map[string]watchcache.PartPosition{}
	for i, a := range answers {
		if a.err != nil {
			for _, c := range a.part.clusters {
				failed[c] = a.err
			}
			continue
		}
		if first == nil {
			first = &answers[i].val
		}
		var md metav1.ListMeta
		_ = json.Unmarshal(a.val.fields["metadata"], &md)
		rvs[a.part.peer] = watchcache.PartPosition{RV: md.ResourceVersion, Set: a.part.set()}
		more = more || md.Continue != ""
		for j, el := range a.val.elements {
			all = append(all, keyed{a.val.keys[j], el})
		}
		for _, wv := range a.val.warnings {
			if !slices.Contains(w.Header().Values("Warning"), wv) {
				w.Header().Add("Warning", wv)
			}
		}
	}
	s.warnDown(w, r.Context(), pl.down, failed)
	sort.SliceStable(all, func(i, j int) bool { return less(all[i].key, all[j].key) })
	if limit > 0 && len(all) > limit {
		more, all = true, all[:limit]
	}
	md := metav1.ListMeta{ResourceVersion: watchcache.Position{Parts: rvs}.String()}
	if more && len(all) > 0 {
		md.Continue = watchcache.Continue{Last: all[len(all)-1].key.String(), Position: watchcache.Position{Parts: rvs}, Exact: exact}.String()
	}
	// The first answer's fields, its metadata replaced, then the elements as their owners
	// wrote them: streamed, never encoded again.
	field := "items"
	if first.table {
		field = "rows"
	}
	names := make([]string, 0, len(first.fields))
	for k := range first.fields {
		if k != "metadata" && k != field {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	buf := getBuffer()
	defer putBuffer(buf)
	buf.WriteByte('{')
	for _, k := range names {
		kb, _ := json.Marshal(k)
		buf.Write(kb)
		buf.WriteByte(':')
		buf.Write(first.fields[k])
		buf.WriteByte(',')
	}
	mdb, _ := json.Marshal(md)
	buf.WriteString(`"metadata":`)
	buf.Write(mdb)
	buf.WriteString(`,"` + field + `":[`)
	w.Header().Set("Content-Type", "application/json")
	for i, k := range all {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(k.raw)
		if buf.Len() >= 256<<10 {
			if _, err := w.Write(buf.Bytes()); err != nil {
				return
			}
			buf.Reset()
		}
	}
	buf.WriteString("]}\n")
	_, _ = w.Write(buf.Bytes())
}

// warnDown adds a Warning for every cluster no replica answered for, that the caller may read.
func (s *Server) warnDown(w http.ResponseWriter, ctx context.Context, down map[string]string, failed map[string]error) {
	for _, f := range s.downFreshness(ctx, "", down, failed) {
		if hv, err := utilnet.NewWarningHeader(299, "-", fmt.Sprintf("cluster %q: %s", f.Name, f.Error)); err == nil {
			w.Header().Add("Warning", hv)
		}
	}
}

// fanoutKubeGet asks every owner for the object by name. One answer is relayed; a Table gets
// every cluster's row; several objects are 409, as in one replica's fleet view.
func (s *Server) fanoutKubeGet(w http.ResponseWriter, r *http.Request, pl plan) {
	type got struct {
		code int
		body []byte
		doc  kubeDoc
	}
	// Each owner answers for its part's clusters only: one not started there yet is 429, and
	// a cluster two replicas hold for a moment answers once.
	answers := gather(r.Context(), s, r, pl, r.URL.Path, func(p part) url.Values { return restrictTo(r.URL.Query(), p.clusters) }, "get", func(resp *http.Response) (got, error) {
		var b json.RawMessage
		if err := json.NewDecoder(resp.Body).Decode(&b); err != nil {
			return got{}, err
		}
		g := got{code: resp.StatusCode, body: b}
		var fields map[string]json.RawMessage
		if json.Unmarshal(b, &fields) == nil {
			if _, ok := fields["rows"]; ok {
				g.doc.fields, g.doc.table = fields, true
				_ = json.Unmarshal(fields["rows"], &g.doc.elements)
			}
		}
		return g, nil
	}, nil)
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
			if pe.code == http.StatusTooManyRequests {
				w.Header().Set("Retry-After", "1")
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(pe.code)
			_, _ = w.Write(pe.status)
			return
		default:
			for _, c := range a.part.clusters {
				failed[c] = a.err
			}
		}
	}
	s.warnDown(w, r.Context(), pl.down, failed)
	switch {
	case len(found) == 0 && (len(failed) > 0 || len(pl.down) > 0):
		// Not found where replicas answered; the others may hold it.
		filters.WriteError(w, http.StatusServiceUnavailable, fmt.Sprintf("not found in the clusters that answered; %d clusters could not be read now (see the Warning headers)", len(failed)+len(pl.down)))
	case len(found) == 0 && notFound != nil:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write(notFound.status)
	case len(found) == 0:
		filters.WriteError(w, http.StatusNotFound, "not found in any cluster")
	case len(found) == 1:
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(found[0].body)
	case found[0].doc.table:
		var rows []json.RawMessage
		for _, g := range found {
			rows = append(rows, g.doc.elements...)
		}
		sort.SliceStable(rows, func(i, j int) bool { return less(keyOfElement(rows[i]), keyOfElement(rows[j])) })
		out := found[0].doc.fields
		out["rows"], _ = json.Marshal(rows)
		writeJSON(w, out)
	default:
		var names []string
		for _, g := range found {
			names = append(names, keyOfElement(g.body).Cluster)
		}
		sort.Strings(names)
		p, _, _ := parseKubePath(r.URL.Path)
		var paths []string
		for _, c := range names {
			paths = append(paths, "/clusters/"+c+p.objectPath())
		}
		filters.WriteError(w, http.StatusConflict, fmt.Sprintf("%q exists in %d clusters (%s): read it from one of them, at %s", p.name, len(names), strings.Join(names, ", "), strings.Join(paths, " or ")))
	}
}

func asPeerError(err error, pe **peerError) bool {
	e, ok := err.(*peerError)
	if ok {
		*pe = e
	}
	return ok
}

// rawKubeEvent is one event of a Kubernetes watch, its object kept raw.
type rawKubeEvent struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

// fanoutKubeWatch relays the owners' watches as one. Every object's resourceVersion becomes the
// fleet's position after it (each owner's position, as its last event said), so that a
// reflector resumes from any event. A cluster that moves, or an owner's watch that ends, ends
// the watch with 410: the reflector lists again. opts are the query decoded (listOptions).
func (s *Server) fanoutKubeWatch(w http.ResponseWriter, r *http.Request, pl plan, opts metav1.ListOptions) {
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
	bookmarks := opts.AllowWatchBookmarks
	initial := opts.SendInitialEvents != nil && *opts.SendInitialEvents
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	changed := s.opts.Fleet.WaitChange()
	if why := s.moved(pl); why != "" {
		filters.WriteError(w, http.StatusGone, "the fleet changed since this watch started: "+why+"; list again")
		return
	}
	timeout, pq0 := watchTimeout(q, opts.TimeoutSeconds)
	streams, err := s.openStreams(ctx, r, pl, r.URL.Path, func(p part) url.Values {
		pq := restrictTo(pq0, p.clusters)
		pq.Del("resourceVersion")
		if resume {
			rv, _ := partPosition(from, p)
			pq.Set("resourceVersion", rv)
		} else if rv := q.Get("resourceVersion"); rv != "" {
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
	s.warnDown(w, r.Context(), pl.down, nil)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	fl.Flush()
	enc := json.NewEncoder(w)
	end := func(msg string) {
		st, _ := json.Marshal(filters.StatusOf(http.StatusGone, msg))
		_ = enc.Encode(rawKubeEvent{Type: string(api.ErrorEvent), Object: st})
		fl.Flush()
	}
	initialDone := map[string]bool{}
	columnsSent := false
	in := merge(ctx, streams)
	var expire <-chan time.Time
	if timeout > 0 {
		expire = time.After(timeout)
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
			var ev rawKubeEvent
			var obj, meta map[string]json.RawMessage
			if json.Unmarshal(m.line, &ev) != nil || json.Unmarshal(ev.Object, &obj) != nil {
				end(fmt.Sprintf("replica %q sent a malformed event", m.st.part.peer))
				return
			}
			if ev.Type == api.ErrorEvent {
				_, _ = w.Write(append(m.line, '\n'))
				fl.Flush()
				return
			}
			_ = json.Unmarshal(obj["metadata"], &meta)
			if meta == nil {
				meta = map[string]json.RawMessage{}
			}
			var rv string
			_ = json.Unmarshal(meta["resourceVersion"], &rv)
			if rv != "" {
				pos[m.st.part.peer] = watchcache.PartPosition{RV: rv, Set: m.st.part.set()}
			}
			if ev.Type == api.Bookmark {
				var ann map[string]string
				_ = json.Unmarshal(meta["annotations"], &ann)
				if ann[initialEventsEnd] == "true" {
					initialDone[m.st.part.peer] = true
					if !initial || len(initialDone) < len(streams) {
						continue
					}
				} else if !bookmarks || !allPositions(pos) {
					continue
				}
			}
			if cd, ok := obj["columnDefinitions"]; ok && string(cd) != "null" && string(cd) != "[]" {
				if columnsSent {
					delete(obj, "columnDefinitions")
				}
				columnsSent = true
			}
			meta["resourceVersion"], _ = json.Marshal(watchcache.Position{Parts: pos}.String())
			obj["metadata"], _ = json.Marshal(meta)
			ev.Object, _ = json.Marshal(obj)
			if enc.Encode(ev) != nil {
				return
			}
			if len(in) == 0 {
				fl.Flush()
			}
		}
	}
}
