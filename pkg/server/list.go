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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
			// Equality on an indexed field narrows through the index when nothing else does. An
			// empty value selects objects without the field (cluster-scoped ones, unscheduled
			// Pods), which neither the namespace filter nor the node index can express.
			switch {
			case !fr.not && fr.value != "" && fr.field == "metadata.namespace" && f.query.Namespace == "":
				f.query.Namespace = fr.value
				continue
			case !fr.not && fr.value != "" && f.query.Index == "" && fr.field == "spec.nodeName" && s.opts.IndexFuncs[resource][index.NodeName] != nil:
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

// attrs is what a filter reads of an object: its namespace, labels and the values of every
// field a field selector can name. The watch ring keeps attrs, not the object, for the previous
// state of a MODIFIED event.
type attrs struct {
	namespace string
	labels    map[string]string
	fields    map[string][]string
	size      int // approximate bytes, for the ring's bound
}

// attrsOf computes obj's attrs for resource.
func (s *Server) attrsOf(resource string, obj any) *attrs {
	m, err := meta.Accessor(obj)
	if err != nil {
		return &attrs{}
	}
	a := &attrs{namespace: m.GetNamespace(), labels: m.GetLabels(), fields: map[string][]string{}, size: 64}
	for f := range knownFields {
		a.fields[f] = s.fieldValues(resource, f, obj)
	}
	for f := range s.opts.IndexFuncs[resource] {
		a.fields[f] = s.fieldValues(resource, f, obj)
	}
	for f, vs := range a.fields {
		a.size += len(f) + 16
		for _, v := range vs {
			a.size += len(v) + 16
		}
	}
	return a
}

// matches reports whether obj, in cluster, passes f.
func (f filter) matches(s *Server, cluster string, obj any) bool {
	m, err := meta.Accessor(obj)
	if err != nil {
		return false
	}
	return f.matchesAttrs(cluster, m.GetNamespace(), m.GetLabels(), func(field string) []string { return s.fieldValues(f.resource, field, obj) })
}

// matchesPrev reports whether a previous state, kept as attrs, passed f.
func (f filter) matchesPrev(cluster string, a *attrs) bool {
	return f.matchesAttrs(cluster, a.namespace, a.labels, func(field string) []string { return a.fields[field] })
}

func (f filter) matchesAttrs(cluster, namespace string, lbls map[string]string, field func(string) []string) bool {
	if len(f.clusters) > 0 && !slices.Contains(f.clusters, cluster) {
		return false
	}
	if f.query.Namespace != "" && namespace != f.query.Namespace {
		return false
	}
	if f.query.Labels != nil && !f.query.Labels.Matches(labels.Set(lbls)) {
		return false
	}
	if f.query.Index != "" {
		switch f.query.Index {
		case aggregate.IndexCluster:
			if cluster != f.query.Value {
				return false
			}
		case aggregate.IndexClusterNamespace:
			if cluster+"/"+namespace != f.query.Value {
				return false
			}
		case aggregate.IndexNamespace:
			if namespace != f.query.Value {
				return false
			}
		default:
			if !slices.Contains(field(f.query.Index), f.query.Value) {
				return false
			}
		}
	}
	for _, fr := range f.fields {
		if slices.Contains(field(fr.field), fr.value) == fr.not {
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
		release, ok := s.limits.acquireWatch(w)
		if !ok {
			return
		}
		defer release()
		s.handleWatch(w, r, res, agg, f)
		return
	}
	release, ok := s.limits.acquireRequest(w)
	if !ok {
		return
	}
	defer release()
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
	pos := s.hubs[res].position() // before the stores are read: the list reflects every event up to it
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
		rv = pos.encode()
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

// page is one page of a list answer.
type page struct {
	items []item // sorted by key
	more  bool   // items follow the last one
}

// selectPage answers f from the aggregate: the first limit items after the key after (all
// keys when nil), in key order. It looks at each selected object once and keeps only the
// limit+1 smallest keys in a bounded heap, so a page of 100 out of 500,000 objects costs no
// sort of 500,000. Keys sort by cluster first, so it reads the clusters in order and stops
// at the first cluster that completes the page: later clusters cannot contribute.
func (s *Server) selectPage(agg *aggregate.Aggregate, f filter, after *aggregate.Key, limit int) (page, error) {
	var pg page
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
// carry neither), and without Secret data unless allowed (redactSecret). It never modifies
// obj: it is the cache's.
func (s *Server) appendEncoded(buf *bytes.Buffer, obj any, rs clusterset.ResourceStatus) error {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if !s.opts.AllowSecretData {
		obj = redactSecret(obj, rs.Kind == "Secret" && rs.Group == "")
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

// watchBatch is how many hub events a watch takes per read.
const watchBatch = 256

// handleWatch streams NDJSON events: first the current objects as ADDED (or, with a
// resourceVersion token, the kept events after it), then live events, with periodic BOOKMARKs
// carrying a token to resume from. A watch reads the hub's ring at its own pace; it ends with
// 410 Expired only when events it needs were evicted before it read them.
func (s *Server) handleWatch(w http.ResponseWriter, r *http.Request, res string, agg *aggregate.Aggregate, f filter) {
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, "streaming unsupported")
		return
	}
	h := s.hubs[res]
	q := r.URL.Query()
	bookmarks := q.Get("allowWatchBookmarks") != "false"
	var pos token
	resume := false
	if tok := q.Get("resourceVersion"); tok != "" && tok != "0" {
		t, err := parseToken(tok)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		pos, resume = t, true
		// Fail before the stream starts when the position is gone already.
		if _, _, err := h.next(pos, f.clusters, make([]event, 0, 1)); err != nil {
			writeError(w, http.StatusGone, "resourceVersion expired: "+err.Error())
			return
		}
	} else {
		pos = h.position() // before the stores are read
	}
	s.metrics.watches.Inc()
	defer s.metrics.watches.Dec()

	_, info := s.views(res, f.clusters)
	refreshed := time.Now()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	line := getBuffer()
	defer putBuffer(line)
	enc := func(typ, cluster string, obj any) error {
		rs, ok := info[cluster]
		if !ok && time.Since(refreshed) > time.Second {
			// A cluster that joined since: look again, at most once a second (the deletes of
			// a cluster that left would otherwise each read the whole status).
			_, info = s.views(res, f.clusters)
			refreshed = time.Now()
			rs, ok = info[cluster]
		}
		if !ok {
			// A cluster that left: the resource's kind as another cluster serves it.
			for _, other := range info {
				if other.Kind != "" {
					rs = other
					break
				}
			}
		}
		line.Reset()
		line.WriteString(`{"type":`)
		line.WriteString(strconv.Quote(typ))
		line.WriteString(`,"cluster":`)
		line.WriteString(strconv.Quote(cluster))
		line.WriteString(`,"object":`)
		if err := s.appendEncoded(line, obj, rs); err != nil {
			return err
		}
		line.WriteString("}\n")
		_, err := w.Write(line.Bytes())
		return err
	}
	if !resume {
		// The current objects, one cluster at a time, so that memory stays bounded by one
		// cluster's selection.
		for _, c := range agg.Clusters() {
			if len(f.query.Clusters) > 0 && !slices.Contains(f.query.Clusters, c) {
				continue
			}
			q := f.query
			q.Clusters = []string{c}
			result, err := agg.Select(q)
			if err != nil {
				_ = enc("ERROR", "", statusObject(http.StatusBadRequest, err.Error()))
				return
			}
			for it := range s.matching(f, result) {
				if err := enc("ADDED", it.cluster, it.obj); err != nil {
					return
				}
			}
			fl.Flush()
		}
	}
	// send relays one hub event through the filter, translating filter transitions: an object
	// that starts matching is ADDED, one that stops is DELETED.
	send := func(ev event) error {
		now := f.matches(s, ev.cluster, ev.obj)
		switch ev.typ {
		case "MODIFIED":
			was := ev.prev != nil && f.matchesPrev(ev.cluster, ev.prev)
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
	bookmark := func() error {
		_, err := fmt.Fprintf(w, `{"type":"BOOKMARK","cluster":"","object":{"kind":"Bookmark","metadata":{"resourceVersion":%q}}}`+"\n", pos.encode())
		return err
	}
	tick := time.NewTicker(s.opts.BookmarkInterval)
	defer tick.Stop()
	if bookmarks {
		if bookmark() != nil {
			return
		}
	}
	fl.Flush()
	buf := make([]event, 0, watchBatch)
	flushed := time.Now()
	for {
		evs, wake, err := h.next(pos, f.clusters, buf[:0])
		if err != nil {
			_ = enc("ERROR", "", statusObject(http.StatusGone, err.Error()))
			fl.Flush()
			return
		}
		for _, ev := range evs {
			pos.Seq = ev.seq
			if send(ev) != nil {
				return
			}
		}
		clear(evs) // drop references to the objects
		if wake == nil {
			// More is kept: read on, flushing now and then, so that a watch catching up
			// through a long backlog still delivers and still notices its client leaving.
			if r.Context().Err() != nil {
				return
			}
			if time.Since(flushed) > 100*time.Millisecond {
				fl.Flush()
				flushed = time.Now()
			}
			continue
		}
		fl.Flush()
		flushed = time.Now()
		select {
		case <-r.Context().Done():
			return
		case <-wake:
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

// statusObject is a metav1.Status-shaped error object for an ERROR event.
func statusObject(code int, msg string) *metav1.Status {
	return &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
		Code: int32(code), Reason: metav1.StatusReason(reasons[code]), Message: msg}
}

// redactSecret returns obj without what would reveal a Secret's data: data, stringData and
// kubectl's last-applied annotation, which holds a full copy of the Secret as applied. secret
// says the resource is core Secrets (a metadata-only object does not say its kind). obj is
// never modified; a redacted copy shares what it does not change.
func redactSecret(obj any, secret bool) any {
	withoutLastApplied := func(a map[string]string) map[string]string {
		if _, ok := a[clusterset.LastAppliedAnnotation]; !ok {
			return a
		}
		out := make(map[string]string, len(a))
		for k, v := range a {
			if k != clusterset.LastAppliedAnnotation {
				out[k] = v
			}
		}
		return out
	}
	switch o := obj.(type) {
	case *corev1.Secret:
		c := *o
		c.Data, c.StringData = nil, nil
		c.Annotations = withoutLastApplied(o.Annotations)
		return &c
	case *metav1.PartialObjectMetadata:
		if !secret {
			return obj
		}
		c := *o
		c.Annotations = withoutLastApplied(o.Annotations)
		return &c
	case *unstructured.Unstructured:
		if !secret && (o.GetKind() != "Secret" || o.GetAPIVersion() != "v1") {
			return obj
		}
		m := make(map[string]any, len(o.Object))
		for k, v := range o.Object {
			if k != "data" && k != "stringData" {
				m[k] = v
			}
		}
		if md, ok := o.Object["metadata"].(map[string]any); ok {
			if ann, ok := md["annotations"].(map[string]any); ok {
				if _, has := ann[clusterset.LastAppliedAnnotation]; has {
					mdc := make(map[string]any, len(md))
					for k, v := range md {
						mdc[k] = v
					}
					annc := make(map[string]any, len(ann))
					for k, v := range ann {
						if k != clusterset.LastAppliedAnnotation {
							annc[k] = v
						}
					}
					mdc["annotations"] = annc
					m["metadata"] = mdc
				}
			}
		}
		return &unstructured.Unstructured{Object: m}
	}
	return obj
}
