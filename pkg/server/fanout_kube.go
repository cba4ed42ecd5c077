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

// localKubeList answers this replica's part of a fan-out list in process: read as any list
// request here is (parseKube, kubeListAnswer), each element encoded once, with its key as read.
// No second authentication, and nothing decoded.
func (s *Server) localKubeList(ctx context.Context, req *http.Request, p part) (partList, error) {
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
		return partList{}, err
	}
	d := partList{warnings: rec.header.Values("Warning"), head: map[string]json.RawMessage{}, rv: l.rv, cont: l.cont}
	if kq.f.as == "Table" {
		t, err := s.kubeTable(ctx, l.kr, l.items, l.epoch, false, l.includeObject, kq.f.tableVersion)
		if err != nil {
			return partList{}, fmt.Errorf("replica %q: %w", p.peer, err)
		}
		rows := t.Rows
		t.Rows = nil
		head, err := json.Marshal(t)
		if err == nil {
			err = json.Unmarshal(head, &d.head)
		}
		if err != nil {
			return partList{}, fmt.Errorf("replica %q: encode table: %w", p.peer, err)
		}
		delete(d.head, "rows")
		delete(d.head, "metadata")
		d.table = true
		for i, row := range rows {
			b, err := json.Marshal(row)
			if err != nil {
				return partList{}, fmt.Errorf("replica %q: encode row: %w", p.peer, err)
			}
			var key aggregate.Key
			if len(rows) == len(l.items) {
				key = l.items[i].Key
			} else {
				key = keyOfElement(b)
			}
			d.elements = append(d.elements, element{key: key, raw: b})
		}
		return d, nil
	}
	kind, apiVersion := l.kr.gvk.Kind+"List", l.kr.gvk.GroupVersion().String()
	if kq.f.as == "PartialObjectMetadata" {
		kind, apiVersion = "PartialObjectMetadataList", metav1.SchemeGroupVersion.String()
	}
	d.head["kind"], _ = json.Marshal(kind)
	d.head["apiVersion"], _ = json.Marshal(apiVersion)
	// Every element into one buffer, then sliced: one encoding, no copy per element.
	var buf bytes.Buffer
	ends := make([]int, len(l.items))
	for i, it := range l.items {
		if err := s.appendKubeObject(&buf, kq.f, l.kr, it, l.epoch, false); err != nil {
			return partList{}, fmt.Errorf("replica %q: %w", p.peer, err)
		}
		ends[i] = buf.Len()
	}
	d.elements = splitElements(buf.Bytes(), ends, l.items)
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
	answers := gather(r.Context(), s, r, pl, func(ctx context.Context, rd partReader, p part) (partList, error) {
		return rd.list(ctx, partQuery{kube: true, path: r.URL.Path, query: query(p), kind: "list"})
	})
	if mustRetry(w, answers, true) || failedAll(w, answers, len(pl.down)) {
		return
	}
	i := slices.IndexFunc(answers, func(a answer[partList]) bool { return a.err == nil })
	if i < 0 {
		var errs []string
		for _, a := range answers {
			errs = append(errs, a.err.Error())
		}
		filters.WriteError(w, http.StatusServiceUnavailable, "no replica could answer: "+strings.Join(errs, "; "))
		return
	}
	first := answers[i].val
	for _, a := range answers {
		for _, wv := range a.val.warnings {
			if !slices.Contains(w.Header().Values("Warning"), wv) {
				w.Header().Add("Warning", wv)
			}
		}
	}
	mp := mergePages(answers, limit)
	s.warnDown(w, r.Context(), pl.down, mp.failed)
	md := metav1.ListMeta{ResourceVersion: watchcache.Position{Parts: mp.rvs}.String()}
	if mp.more && len(mp.elements) > 0 {
		md.Continue = watchcache.Continue{Last: mp.elements[len(mp.elements)-1].key.String(), Position: watchcache.Position{Parts: mp.rvs}, Exact: exact}.String()
	}
	// The first answer's fields, its metadata replaced, then the elements as their owners
	// wrote them: streamed, never encoded again.
	field := "items"
	if first.table {
		field = "rows"
	}
	names := make([]string, 0, len(first.head))
	for k := range first.head {
		names = append(names, k)
	}
	sort.Strings(names)
	buf := getBuffer()
	defer putBuffer(buf)
	buf.WriteByte('{')
	for _, k := range names {
		kb, _ := json.Marshal(k)
		buf.Write(kb)
		buf.WriteByte(':')
		buf.Write(first.head[k])
		buf.WriteByte(',')
	}
	mdb, _ := json.Marshal(md)
	buf.WriteString(`"metadata":`)
	buf.Write(mdb)
	buf.WriteString(`,"` + field + `":[`)
	w.Header().Set("Content-Type", "application/json")
	for i, el := range mp.elements {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(el.raw)
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
		body  []byte
		table bool
		head  map[string]json.RawMessage
		rows  []json.RawMessage
	}
	// Each owner answers for its part's clusters only: one not started there yet is 429, and
	// a cluster two replicas hold for a moment answers once.
	answers := gather(r.Context(), s, r, pl, func(ctx context.Context, rd partReader, p part) (got, error) {
		b, err := rd.get(ctx, partQuery{kube: true, path: r.URL.Path, query: restrictTo(r.URL.Query(), p.clusters), kind: "get"})
		if err != nil {
			return got{}, err
		}
		g := got{body: b}
		if json.Unmarshal(b, &g.head) == nil {
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
	case found[0].table:
		var rows []json.RawMessage
		for _, g := range found {
			rows = append(rows, g.rows...)
		}
		sort.SliceStable(rows, func(i, j int) bool { return less(keyOfElement(rows[i]), keyOfElement(rows[j])) })
		out := found[0].head
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
