package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/filters"
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
	if cat, _ := s.catalog(""); isCRDPath(p) && cat.find(p.group, p.version, p.resource) == crdsResource {
		if kq, ok := s.parseKube(w, r); ok {
			s.serveCRDs(w, r, kq, s.fleetCRDs)
		}
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
		s.fanoutKubeWatch(w, r, pl)
	case p.name != "":
		s.fanoutKubeGet(w, r, pl)
	default:
		s.fanoutKubeList(w, r, pl)
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

// fanoutKubeList answers a list (or Table) of the fleet: the first part's fields, the fleet's
// metadata, then the elements as their owners wrote them, streamed, never encoded again.
func (s *Server) fanoutKubeList(w http.ResponseWriter, r *http.Request, pl plan) {
	l, err := s.fleet(r, pl).list(r.Context(), partQuery{kube: true, path: r.URL.Path, query: r.URL.Query(), kind: "list"})
	if err != nil {
		writePeerFailure(w, err)
		return
	}
	addWarnings(w.Header(), l.warnings)
	md := metav1.ListMeta{ResourceVersion: l.rv, Continue: l.cont}
	first := l
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
	for i, el := range l.elements {
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

// fanoutKubeGet answers a get by name in the fleet view.
func (s *Server) fanoutKubeGet(w http.ResponseWriter, r *http.Request, pl plan) {
	g, err := s.fleet(r, pl).get(r.Context(), partQuery{kube: true, path: r.URL.Path, query: r.URL.Query(), kind: "get"})
	if err != nil {
		writePeerFailure(w, err)
		return
	}
	addWarnings(w.Header(), g.warnings)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(g.body)
}

func asPeerError(err error, pe **peerError) bool {
	e, ok := err.(*peerError)
	if ok {
		*pe = e
	}
	return ok
}
