package server

import (
	"bytes"
	"container/heap"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/tools/cache"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/index"
)

// fieldReq is one term of a field selector.
type fieldReq struct {
	field, value string
	not          bool
}

// filter is a parsed request: the part answered by an index (query) and the rest, checked per
// object.
type filter struct {
	query    aggregate.Query
	fields   []fieldReq
	clusters []string
	resource string
}

var knownFields = map[string]bool{"metadata.name": true, "metadata.namespace": true, "spec.nodeName": true, "status.phase": true}

func (s *Server) parseFilter(resource string, q url.Values) (filter, error) {
	f := filter{resource: resource}
	f.clusters = q["cluster"]
	for _, c := range f.clusters {
		if err := aggregate.ValidateClusterName(c); err != nil {
			return f, fmt.Errorf("cluster: %w", err)
		}
	}
	f.query.Clusters = f.clusters
	f.query.Namespace = q.Get("namespace")
	if ls := q.Get("labelSelector"); ls != "" {
		sel, err := labels.Parse(ls)
		if err != nil {
			return f, fmt.Errorf("labelSelector %q: %v", ls, err)
		}
		f.query.Labels = sel
	}
	if ix := q.Get("index"); ix != "" {
		if !q.Has("value") {
			return f, fmt.Errorf("index %q: value is required", ix)
		}
		f.query.Index, f.query.Value = ix, q.Get("value")
	} else if q.Has("value") {
		return f, errors.New("value: given without index")
	}
	if fs := q.Get("fieldSelector"); fs != "" {
		sel, err := fields.ParseSelector(fs)
		if err != nil {
			return f, fmt.Errorf("fieldSelector %q: %v", fs, err)
		}
		for _, r := range sel.Requirements() {
			if !knownFields[r.Field] && s.opts.IndexFuncs[resource][r.Field] == nil {
				return f, fmt.Errorf("fieldSelector: field %q is not supported (use metadata.name, metadata.namespace, spec.nodeName, status.phase or an index name)", r.Field)
			}
			fr := fieldReq{field: r.Field, value: r.Value, not: r.Operator == selection.NotEquals}
			// Equality on an indexed field narrows through the index when nothing else does.
			switch {
			case !fr.not && fr.field == "metadata.namespace" && f.query.Namespace == "":
				f.query.Namespace = fr.value
				continue
			case !fr.not && f.query.Index == "" && fr.field == "spec.nodeName" && s.opts.IndexFuncs[resource][index.NodeName] != nil:
				f.query.Index, f.query.Value = index.NodeName, fr.value
				continue
			case !fr.not && f.query.Index == "" && s.opts.IndexFuncs[resource][fr.field] != nil:
				f.query.Index, f.query.Value = fr.field, fr.value
				continue
			}
			f.fields = append(f.fields, fr)
		}
	}
	return f, nil
}

// fieldValues returns what an object has for a field: one value for paths, any number for an
// index name.
func (s *Server) fieldValues(resource, field string, obj any) []string {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil
	}
	switch field {
	case "metadata.name":
		return []string{m.GetName()}
	case "metadata.namespace":
		return []string{m.GetNamespace()}
	case "spec.nodeName", "status.phase":
		switch o := obj.(type) {
		case *corev1.Pod:
			if field == "spec.nodeName" {
				return []string{o.Spec.NodeName}
			}
			return []string{string(o.Status.Phase)}
		case *unstructured.Unstructured:
			v, _, _ := unstructured.NestedString(o.Object, strings.Split(field, ".")...)
			return []string{v}
		}
		return []string{""}
	}
	if fn := s.opts.IndexFuncs[resource][field]; fn != nil {
		vals, _ := fn(obj)
		return vals
	}
	return nil
}

func (f filter) matches(s *Server, cluster string, obj any) bool {
	if len(f.clusters) > 0 && !slices.Contains(f.clusters, cluster) {
		return false
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return false
	}
	if f.query.Namespace != "" && m.GetNamespace() != f.query.Namespace {
		return false
	}
	if f.query.Labels != nil && !f.query.Labels.Matches(labels.Set(m.GetLabels())) {
		return false
	}
	if f.query.Index != "" {
		switch f.query.Index {
		case aggregate.IndexCluster:
			if cluster != f.query.Value {
				return false
			}
		case aggregate.IndexClusterNamespace:
			if cluster+"/"+m.GetNamespace() != f.query.Value {
				return false
			}
		case aggregate.IndexNamespace:
			if m.GetNamespace() != f.query.Value {
				return false
			}
		default:
			if !slices.Contains(s.fieldValues(f.resource, f.query.Index, obj), f.query.Value) {
				return false
			}
		}
	}
	for _, fr := range f.fields {
		if slices.Contains(s.fieldValues(f.resource, fr.field, obj), fr.value) == fr.not {
			return false
		}
	}
	return true
}

// item is one object of an answer.
type item struct {
	key     aggregate.Key
	cluster string
	obj     any
}

func less(a, b aggregate.Key) bool {
	if a.Cluster != b.Cluster {
		return a.Cluster < b.Cluster
	}
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	return a.Name < b.Name
}

// cont is the continue token: the last key served and the list's watch position.
type cont struct {
	Last string `json:"k"`
	RV   string `json:"rv"`
}

func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	res, agg, ok := s.aggregate(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	f, err := s.parseFilter(res, q)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	s.dropNamespaceIfClusterScoped(res, &f)
	if q.Get("watch") == "true" || q.Get("watch") == "1" {
		s.handleWatch(w, r, res, agg, f)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.RequestTimeout)
	defer cancel()
	limit := s.opts.MaxPageSize
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit %q: want a non-negative integer", l))
			return
		}
		if n > 0 && n < limit {
			limit = n
		}
	}
	var after *aggregate.Key
	var c cont
	if tok := q.Get("continue"); tok != "" {
		b, err := base64.RawURLEncoding.DecodeString(tok)
		if err == nil {
			err = json.Unmarshal(b, &c)
		}
		var k aggregate.Key
		if err == nil {
			k, err = aggregate.ParseKey(c.Last)
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("continue %q: malformed token", tok))
			return
		}
		after = &k
	}
	views, info := s.views(res, f.clusters)
	applied := s.hubs[res].appliedSnapshot()
	pg, err := s.selectPage(agg, f, after, limit)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if ctx.Err() != nil {
		writeError(w, http.StatusGatewayTimeout, "request timed out")
		return
	}
	page := pg.items
	rv := c.RV
	if rv == "" {
		rv = s.tokenOf(pg.maxRV, applied)
	}
	buf := getBuffer()
	defer putBuffer(buf)
	buf.WriteString(`{"items":[`)
	if err := s.encodeItems(buf, page, info); err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	buf.WriteString(`]`)
	if pg.more {
		b, _ := json.Marshal(cont{Last: page[len(page)-1].key.String(), RV: rv})
		fmt.Fprintf(buf, `,"continue":%q`, base64.RawURLEncoding.EncodeToString(b))
	}
	fmt.Fprintf(buf, `,"resourceVersion":%q`, rv)
	vb, _ := json.Marshal(views)
	buf.WriteString(`,"clusters":`)
	buf.Write(vb)
	buf.WriteString("}\n")
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(buf.Bytes())
}

// dropNamespaceIfClusterScoped ignores a namespace filter on a cluster-scoped resource, as kubectl
// does.
func (s *Server) dropNamespaceIfClusterScoped(res string, f *filter) {
	if f.query.Namespace == "" || f.query.Index == aggregate.IndexNamespace {
		return
	}
	_, info := s.views(res, nil)
	for _, rs := range info {
		if rs.Kind != "" {
			if !rs.Namespaced {
				f.query.Namespace = ""
			}
			return
		}
	}
}

// selectItems answers f from the aggregate, sorted by key.
func (s *Server) selectItems(agg *aggregate.Aggregate, f filter) ([]item, error) {
	result, err := agg.Select(f.query)
	if err != nil {
		return nil, err
	}
	items := make([]item, 0, len(result.Items))
	for it := range s.matching(f, result) {
		items = append(items, it)
	}
	sort.Slice(items, func(i, j int) bool { return less(items[i].key, items[j].key) })
	return items, nil
}

// matching yields the items of result that pass f's per-object field terms, with their keys.
func (s *Server) matching(f filter, result aggregate.Result) iter.Seq[item] {
	return func(yield func(item) bool) {
		for _, it := range result.Items {
			if len(f.fields) > 0 && !f.matches(s, it.Cluster, it.Object) {
				continue
			}
			k, err := aggregate.KeyOf(it.Cluster, it.Object)
			if err != nil {
				continue
			}
			if !yield(item{key: k, cluster: it.Cluster, obj: it.Object}) {
				return
			}
		}
	}
}

// tokenOf is the watch position of a list: per cluster, the higher of what the watch hub had
// applied before the list was read (applied) and the newest object listed (maxRV). The stores
// are ahead of the hub, so every event at or below that position is reflected in the list.
func (s *Server) tokenOf(maxRV, applied map[string]uint64) string {
	v := map[string]uint64{}
	for c, rv := range applied {
		v[c] = rv
	}
	for c, rv := range maxRV {
		v[c] = max(v[c], rv)
	}
	return token{Epoch: s.epoch, RVs: v}.encode()
}

// page is one page of a list answer.
type page struct {
	items []item            // sorted by key
	more  bool              // items follow the last one
	maxRV map[string]uint64 // per cluster, the newest resourceVersion of the whole selection
}

// selectPage answers f from the aggregate: the first limit items after the key after (all
// keys when nil), in key order. It looks at each selected object once and keeps only the
// limit+1 smallest keys in a bounded heap, so a page of 100 out of 500,000 objects costs no
// sort of 500,000. Keys sort by cluster first, so it reads the clusters in order and stops
// at the first cluster that completes the page: later clusters cannot contribute.
//
// maxRV covers every cluster read. When it stops early, the token built from it holds the
// watch hub's position for the clusters not read; a watch from it may then repeat events
// already reflected in later pages (which are read later anyway), and never misses one.
func (s *Server) selectPage(agg *aggregate.Aggregate, f filter, after *aggregate.Key, limit int) (page, error) {
	pg := page{maxRV: map[string]uint64{}}
	h := &keyHeap{}
	for _, c := range agg.Clusters() {
		if (len(f.query.Clusters) > 0 && !slices.Contains(f.query.Clusters, c)) || (after != nil && c < after.Cluster) {
			continue
		}
		if len(*h) > limit {
			break
		}
		q := f.query
		q.Clusters = []string{c}
		result, err := agg.Select(q)
		if err != nil {
			return page{}, err
		}
		for it := range s.matching(f, result) {
			if rv := rvOf(it.obj); rv > pg.maxRV[it.cluster] {
				pg.maxRV[it.cluster] = rv
			}
			if after != nil && !less(*after, it.key) {
				continue
			}
			if len(*h) <= limit {
				heap.Push(h, it)
			} else if less(it.key, (*h)[0].key) {
				(*h)[0] = it
				heap.Fix(h, 0)
			}
		}
	}
	items := []item(*h)
	sort.Slice(items, func(i, j int) bool { return less(items[i].key, items[j].key) })
	if len(items) > limit {
		pg.more, items = true, items[:limit]
	}
	pg.items = items
	return pg, nil
}

// keyHeap is a max-heap of items by key: the root is the largest key kept.
type keyHeap []item

func (h keyHeap) Len() int           { return len(h) }
func (h keyHeap) Less(i, j int) bool { return less(h[j].key, h[i].key) }
func (h keyHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *keyHeap) Push(x any)        { *h = append(*h, x.(item)) }
func (h *keyHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) {
	res, agg, ok := s.aggregate(w, r)
	if !ok {
		return
	}
	ns := r.PathValue("namespace")
	if ns == "_" {
		ns = ""
	}
	k := aggregate.Key{Cluster: r.PathValue("cluster"), Namespace: ns, Name: r.PathValue("name")}
	if err := k.Validate(); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	obj, exists, err := agg.Get(k)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	if !exists {
		msg := fmt.Sprintf("%s %q not found in cluster %q", res, k.ObjectKey(), k.Cluster)
		if !slices.Contains(agg.Clusters(), k.Cluster) {
			msg = fmt.Sprintf("cluster %q does not serve %s here (unknown cluster or resource not served)", k.Cluster, res)
		}
		writeError(w, http.StatusNotFound, msg)
		return
	}
	_, info := s.views(res, []string{k.Cluster})
	b, err := s.encode(obj, info[k.Cluster])
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"cluster":%q,"object":`, k.Cluster)
	_, _ = w.Write(b)
	_, _ = w.Write([]byte("}\n"))
}

// encode returns obj as JSON; see appendEncoded.
func (s *Server) encode(obj any, rs clusterset.ResourceStatus) ([]byte, error) {
	var buf bytes.Buffer
	if err := s.appendEncoded(&buf, obj, rs); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

var buffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func getBuffer() *bytes.Buffer { return buffers.Get().(*bytes.Buffer) }

// putBuffer recycles buf unless it grew past what a typical page needs.
func putBuffer(buf *bytes.Buffer) {
	if buf.Cap() <= 4<<20 {
		buf.Reset()
		buffers.Put(buf)
	}
}

// parallelItems: pages with at least this many items are encoded by several goroutines.
const parallelItems = 16

// encodeItems appends page as comma-separated {"cluster":…,"object":…} entries. Large pages are
// split into contiguous chunks encoded concurrently (JSON encoding is most of a page's cost),
// then joined in order.
func (s *Server) encodeItems(buf *bytes.Buffer, page []item, info map[string]clusterset.ResourceStatus) error {
	one := func(buf *bytes.Buffer, it item) error {
		buf.WriteString(`{"cluster":`)
		buf.WriteString(strconv.Quote(it.cluster))
		buf.WriteString(`,"object":`)
		if err := s.appendEncoded(buf, it.obj, info[it.cluster]); err != nil {
			return fmt.Errorf("cluster %q: encode %s: %w", it.cluster, it.key, err)
		}
		buf.WriteByte('}')
		return nil
	}
	workers := min(runtime.GOMAXPROCS(0), 4, len(page)/parallelItems*2)
	if workers < 2 {
		for i, it := range page {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := one(buf, it); err != nil {
				return err
			}
		}
		return nil
	}
	chunks := make([]*bytes.Buffer, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	per := (len(page) + workers - 1) / workers
	for w := range workers {
		chunks[w] = getBuffer()
		wg.Go(func() {
			for i := w * per; i < min(len(page), (w+1)*per); i++ {
				if i > w*per {
					chunks[w].WriteByte(',')
				}
				if errs[w] = one(chunks[w], page[i]); errs[w] != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	defer func() {
		for _, c := range chunks {
			putBuffer(c)
		}
	}()
	for w, c := range chunks {
		if errs[w] != nil {
			return errs[w]
		}
		if c.Len() == 0 {
			continue
		}
		if w > 0 {
			buf.WriteByte(',')
		}
		buf.Write(c.Bytes())
	}
	return nil
}

// appendEncoded appends obj as JSON to buf, with apiVersion and kind (typed objects from lists
// carry neither), and without Secret data unless allowed. It never modifies obj: it is the
// cache's.
func (s *Server) appendEncoded(buf *bytes.Buffer, obj any, rs clusterset.ResourceStatus) error {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if !s.opts.AllowSecretData {
		switch o := obj.(type) {
		case *corev1.Secret:
			c := *o
			c.Data, c.StringData = nil, nil
			obj = &c
		case *unstructured.Unstructured:
			if o.GetKind() == "Secret" && o.GetAPIVersion() == "v1" {
				m := make(map[string]any, len(o.Object))
				for k, v := range o.Object {
					if k != "data" && k != "stringData" {
						m[k] = v
					}
				}
				obj = &unstructured.Unstructured{Object: m}
			}
		}
	}
	scratch := getBuffer()
	defer putBuffer(scratch)
	if err := json.NewEncoder(scratch).Encode(obj); err != nil {
		return err
	}
	b := bytes.TrimSuffix(scratch.Bytes(), []byte("\n"))
	if rs.Kind != "" && bytes.HasPrefix(b, []byte(`{"metadata"`)) {
		apiVersion := rs.Version
		if rs.Group != "" {
			apiVersion = rs.Group + "/" + rs.Version
		}
		buf.WriteString(`{"kind":`)
		buf.WriteString(strconv.Quote(rs.Kind))
		buf.WriteString(`,"apiVersion":`)
		buf.WriteString(strconv.Quote(apiVersion))
		buf.WriteByte(',')
		b = b[1:]
	}
	buf.Write(b)
	return nil
}

// handleWatch streams NDJSON events: first the current objects as ADDED (or, with a
// resourceVersion token, the kept events after it), then live events, with periodic BOOKMARKs
// carrying a token to resume from.
func (s *Server) handleWatch(w http.ResponseWriter, r *http.Request, res string, agg *aggregate.Aggregate, f filter) {
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, "streaming unsupported")
		return
	}
	h := s.hubs[res]
	q := r.URL.Query()
	bookmarks := q.Get("allowWatchBookmarks") != "false"
	var pos map[string]uint64
	var replay []event
	var wt *watcher
	var initial []item
	if tok := q.Get("resourceVersion"); tok != "" && tok != "0" {
		t, err := parseToken(tok)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		if t.Epoch != s.epoch {
			writeError(w, http.StatusGone, "resourceVersion expired: it comes from an earlier run of the daemon; list again")
			return
		}
		pos = t.RVs
		if pos == nil {
			pos = map[string]uint64{}
		}
		wt, replay, err = h.subscribe(pos, 4096)
		var ex errExpired
		if errors.As(err, &ex) {
			writeError(w, http.StatusGone, "resourceVersion expired: "+ex.msg)
			return
		}
	} else {
		applied := h.appliedSnapshot()
		wt, _, _ = h.subscribe(nil, 4096)
		var err error
		initial, err = s.selectItems(agg, f)
		if err != nil {
			h.unsubscribe(wt)
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		pos = map[string]uint64{}
		for c, rv := range applied {
			pos[c] = rv
		}
		for _, it := range initial {
			if rv := rvOf(it.obj); rv > pos[it.cluster] {
				pos[it.cluster] = rv
			}
		}
	}
	defer h.unsubscribe(wt)
	s.metrics.watches.Inc()
	defer s.metrics.watches.Dec()

	_, info := s.views(res, f.clusters)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	enc := func(typ, cluster string, obj any) error {
		var b []byte
		if obj != nil {
			rs, ok := info[cluster]
			if !ok {
				_, info = s.views(res, f.clusters)
				rs = info[cluster]
			}
			ob, err := s.encode(obj, rs)
			if err != nil {
				return err
			}
			b = ob
		}
		var line bytes.Buffer
		fmt.Fprintf(&line, `{"type":%q,"cluster":%q`, typ, cluster)
		if b != nil {
			line.WriteString(`,"object":`)
			line.Write(b)
		}
		line.WriteString("}\n")
		_, err := w.Write(line.Bytes())
		return err
	}
	for _, it := range initial {
		if err := enc("ADDED", it.cluster, it.obj); err != nil {
			return
		}
	}
	// send applies one hub event: advance the position, filter, translate filter transitions.
	send := func(ev event) error {
		if ev.rv != 0 {
			if ev.rv <= pos[ev.cluster] {
				return nil // already reflected in what the client has
			}
			pos[ev.cluster] = ev.rv
		}
		now := f.matches(s, ev.cluster, ev.obj)
		switch ev.typ {
		case "MODIFIED":
			was := ev.old != nil && f.matches(s, ev.cluster, ev.old)
			switch {
			case now && !was:
				return enc("ADDED", ev.cluster, ev.obj)
			case !now && was:
				return enc("DELETED", ev.cluster, ev.obj)
			case !now:
				return nil
			}
		default:
			if !now {
				return nil
			}
		}
		return enc(ev.typ, ev.cluster, ev.obj)
	}
	for _, ev := range replay {
		if err := send(ev); err != nil {
			return
		}
	}
	fl.Flush()
	tick := time.NewTicker(s.opts.BookmarkInterval)
	defer tick.Stop()
	bookmark := func() error {
		line := fmt.Sprintf(`{"type":"BOOKMARK","cluster":"","object":{"kind":"Bookmark","metadata":{"resourceVersion":%q}}}`+"\n", token{Epoch: s.epoch, RVs: pos}.encode())
		_, err := w.Write([]byte(line))
		return err
	}
	if bookmarks {
		if bookmark() != nil {
			return
		}
		fl.Flush()
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case ev, ok := <-wt.ch:
			if !ok {
				_, _ = w.Write([]byte(`{"type":"ERROR","cluster":"","object":{"kind":"Status","code":410,"reason":"Expired","message":"watch fell behind and was closed; resume from the last bookmark or list again"}}` + "\n"))
				fl.Flush()
				return
			}
			if send(ev) != nil {
				return
			}
			// Drain what is queued before flushing, to batch writes.
			for drained := false; !drained; {
				select {
				case ev, ok := <-wt.ch:
					if !ok {
						drained = true
						break
					}
					if send(ev) != nil {
						return
					}
				default:
					drained = true
				}
			}
			fl.Flush()
		case <-tick.C:
			if bookmarks {
				if bookmark() != nil {
					return
				}
				fl.Flush()
			}
		}
	}
}
