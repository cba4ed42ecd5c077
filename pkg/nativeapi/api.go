package nativeapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/filters"
	"github.com/multicache/multicache/pkg/storage"
)

// Options configures the API.
type Options struct {
	// Reader and Status read the fleet.
	Reader storage.Reader
	Status storage.Status
	// Resolve maps a resource as a user wrote it to its configured name; NotCached is the
	// refusal of one that is not.
	Resolve   func(ctx context.Context, name string) (string, bool)
	NotCached func(name string) error
	// Info is, per cluster this replica runs, how it serves a resource (its kind, group and
	// version): what its objects are encoded with. It reads under ctx's read scope.
	Info func(ctx context.Context, resource string) map[string]clusterset.ResourceStatus
	// Limits, RequestTimeout: every request but a watch takes a request slot and is bounded by
	// the timeout; a watch takes a watch slot.
	Limits         *filters.Limits
	RequestTimeout time.Duration
	// MaxPageSize caps limit; it is also the page size when no limit is given.
	MaxPageSize int
	// Watches counts the open watches.
	Watches prometheus.Gauge
}

// API is the native API under /multicache/v1/, in the wire types of package api: fleet-wide
// lists with Kubernetes-style selectors and stable paging, single-object reads, a multi-cluster
// watch with resumable positions, and the clusters' status. It only translates: it decodes a
// request once, calls one Reader, and encodes once; errors are written by writeError.
type API struct {
	opts Options
}

// New makes the API.
func New(opts Options) *API { return &API{opts: opts} }

// writeError answers err: the front's one writer of errors.
func writeError(w http.ResponseWriter, err error) { filters.WriteAPIError(w, err) }

// Clusters answers GET /multicache/v1/clusters: api.Clusters.
func (a *API) Clusters(w http.ResponseWriter, r *http.Request) {
	a.limited(r.Context(), w, func(ctx context.Context) {
		cl, err := a.opts.Status.Clusters(ctx, storage.ClusterOptions{})
		if err != nil {
			writeError(w, err)
			return
		}
		if cl == nil {
			cl = []api.Cluster{}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(api.Clusters{Clusters: cl})
	})
}

// limited runs f in a request slot, within the request timeout, under ctx's read scope or one
// of its own (storage.WithReadScope): every read of this replica's part in it sees one status of
// its clusters. A watch never runs here.
func (a *API) limited(ctx context.Context, w http.ResponseWriter, f func(ctx context.Context)) {
	a.opts.Limits.Request(w, func() {
		ctx, cancel := context.WithTimeout(storage.WithReadScope(ctx), a.opts.RequestTimeout)
		defer cancel()
		f(ctx)
	})
}

// selection decodes the query of GET /multicache/v1/resources/{resource}: the resource, and
// cluster (repeatable), namespace, labelSelector, fieldSelector, index and value, where (CEL),
// owner (group/Kind/namespace/name); with the
// list options the Kubernetes API's codec decodes (limit, continue, watch, resourceVersion).
func (a *API) selection(ctx context.Context, r *http.Request) (storage.Selection, metav1.ListOptions, error) {
	var opts metav1.ListOptions
	name := r.PathValue("resource")
	res, ok := a.opts.Resolve(ctx, name)
	if !ok {
		return storage.Selection{}, opts, a.opts.NotCached(name)
	}
	q := r.URL.Query()
	if err := filters.DecodeParameters(q, &opts); err != nil {
		return storage.Selection{}, opts, err
	}
	sel := storage.Selection{Resource: res, Clusters: q["cluster"], LabelSelector: q.Get("labelSelector"), FieldSelector: q.Get("fieldSelector"),
		Namespace: q.Get("namespace"), Index: q.Get("index"), Value: q.Get("value"), Where: q.Get("where"), Owner: q.Get("owner")}
	switch {
	case sel.Index != "" && !q.Has("value"):
		return sel, opts, storage.Errorf(http.StatusBadRequest, "index %q: value is required", sel.Index)
	case sel.Index == "" && q.Has("value"):
		return sel, opts, storage.Error(http.StatusBadRequest, "value: given without index")
	case opts.Limit < 0:
		return sel, opts, storage.Errorf(http.StatusBadRequest, "limit %q: want a non-negative integer", q.Get("limit"))
	}
	return sel, opts, nil
}

// List answers GET /multicache/v1/resources/{resource}: a page of the list (an api.List) with
// its total, in key order or by sortBy (a JSONPath) with order asc or desc; or with watch=true a
// watch.
func (a *API) List(w http.ResponseWriter, r *http.Request) {
	// A read scope from the resource's resolution on; a watch reads from r's context.
	ctx := storage.WithReadScope(r.Context())
	sel, opts, err := a.selection(ctx, r)
	if err != nil {
		writeError(w, err)
		return
	}
	if opts.Watch {
		a.opts.Limits.Watch(w, func() { a.watch(w, r, sel, opts) })
		return
	}
	limit := int64(a.opts.MaxPageSize)
	if opts.Limit > 0 && opts.Limit < limit {
		limit = opts.Limit
	}
	q := r.URL.Query()
	desc := false
	switch order := q.Get("order"); order {
	case "", "asc":
	case "desc":
		desc = true
	default:
		writeError(w, storage.Errorf(http.StatusBadRequest, "order %q: want asc or desc", order))
		return
	}
	if q.Has("order") && q.Get("sortBy") == "" {
		writeError(w, storage.Error(http.StatusBadRequest, "order: given without sortBy"))
		return
	}
	a.limited(ctx, w, func(ctx context.Context) {
		l, err := a.opts.Reader.List(ctx, storage.ListOptions{Selection: sel, Limit: limit, Continue: opts.Continue, Encoding: storage.Encoding{API: storage.NativeAPI},
			SortBy: q.Get("sortBy"), Desc: desc, Count: true})
		if err != nil {
			writeError(w, err)
			return
		}
		filters.AddWarnings(w.Header(), l.Warnings)
		if err := a.writeList(ctx, w, sel.Resource, l); err != nil {
			writeError(w, err)
		}
	})
}

// Summary answers GET /multicache/v1/resources/{resource}/summary: the list filters, by (keys,
// comma-separated or repeated), sort (count or key) and limit (on groups): an api.Summary; with
// watch=true, a stream of them as counts change (interval, timeoutSeconds).
func (a *API) Summary(w http.ResponseWriter, r *http.Request) {
	// A read scope from the resource's resolution on; a watch reads from r's context.
	ctx := storage.WithReadScope(r.Context())
	sel, opts, err := a.selection(ctx, r)
	if err != nil {
		writeError(w, err)
		return
	}
	q := r.URL.Query()
	var by []string
	for _, v := range q["by"] {
		by = append(by, aggregate.SplitGroupKeys(v)...)
	}
	byKey := false
	switch sort := q.Get("sort"); sort {
	case "", "count":
	case "key":
		byKey = true
	default:
		writeError(w, storage.Errorf(http.StatusBadRequest, "sort %q: want count or key", sort))
		return
	}
	interval := time.Second
	if v := q.Get("interval"); v != "" {
		d, err := time.ParseDuration(v)
		switch {
		case err != nil:
			writeError(w, storage.Errorf(http.StatusBadRequest, "interval %q: want a duration such as 1s or 500ms", v))
			return
		case d < MinSummaryInterval:
			writeError(w, storage.Errorf(http.StatusBadRequest, "interval %q: want at least %s", v, MinSummaryInterval))
			return
		case !opts.Watch:
			writeError(w, storage.Error(http.StatusBadRequest, "interval: given without watch=true"))
			return
		}
		interval = d
	}
	switch {
	case opts.Continue != "":
		writeError(w, storage.Error(http.StatusBadRequest, "continue: a summary is one answer; use limit"))
		return
	}
	sm, ok := a.opts.Reader.(storage.Summarizer)
	if !ok {
		writeError(w, storage.Error(http.StatusNotImplemented, "summaries are not answered here"))
		return
	}
	so := storage.SummaryOptions{Selection: sel, By: by}
	if opts.Watch {
		var timeout time.Duration
		if opts.TimeoutSeconds != nil {
			timeout = time.Duration(*opts.TimeoutSeconds) * time.Second
		}
		a.opts.Limits.Watch(w, func() {
			a.watchSummary(w, r, sm, storage.SummaryWatchOptions{SummaryOptions: so, Interval: interval, Timeout: timeout}, byKey, int(opts.Limit))
		})
		return
	}
	a.limited(ctx, w, func(ctx context.Context) {
		sum, err := sm.Summarize(ctx, so)
		if err != nil {
			writeError(w, err)
			return
		}
		filters.AddWarnings(w.Header(), sum.Warnings)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(summaryOf(sum, byKey, int(opts.Limit)))
	})
}

// MinSummaryInterval is the shortest interval a streamed summary may ask for.
const MinSummaryInterval = 100 * time.Millisecond

// summaryOf is sum sorted and limited, in the API's form.
func summaryOf(sum *storage.Summary, byKey bool, limit int) api.Summary {
	sum.Sort(byKey)
	sum.Limit(limit)
	out := api.Summary{Kind: "Summary", By: sum.By, Groups: make([]api.SummaryGroup, len(sum.Groups)), Total: sum.Total, Clusters: sum.Freshness}
	for i, g := range sum.Groups {
		key := make(map[string]*string, len(sum.By))
		for j, name := range sum.By {
			key[name] = g.Key[j]
		}
		out.Groups[i] = api.SummaryGroup{Key: key, Count: g.Count}
	}
	if out.Clusters == nil {
		out.Clusters = []api.ClusterFreshness{}
	}
	return out
}

// watchSummary streams summaries as NDJSON api.WatchEvents: SUMMARY with an api.Summary, first
// at once and then whenever the counts change (at most once per interval); an ERROR with a
// Status when the stream cannot go on. A refusal before the first summary is the answer's
// status.
func (a *API) watchSummary(w http.ResponseWriter, r *http.Request, sm storage.Summarizer, opts storage.SummaryWatchOptions, byKey bool, limit int) {
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, storage.Error(http.StatusInternalServerError, "streaming unsupported"))
		return
	}
	a.opts.Watches.Inc()
	defer a.opts.Watches.Dec()
	started := false
	enc := json.NewEncoder(w)
	err := storage.WatchSummary(r.Context(), a.opts.Reader, sm, opts, func(sum *storage.Summary) error {
		if !started {
			started = true
			filters.AddWarnings(w.Header(), sum.Warnings)
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
		}
		b, err := json.Marshal(summaryOf(sum, byKey, limit))
		if err != nil {
			return err
		}
		if err := enc.Encode(api.WatchEvent{Type: api.SummaryEvent, Object: b}); err != nil {
			return err
		}
		fl.Flush()
		return nil
	})
	switch {
	case err == nil || r.Context().Err() != nil:
	case !started:
		writeError(w, err)
	default:
		st := storage.StatusOf(err).ErrStatus
		b, _ := json.Marshal(api.Error{Kind: "Status", Code: int(st.Code), Reason: string(st.Reason), Message: st.Message})
		_ = enc.Encode(api.WatchEvent{Type: api.ErrorEvent, Object: b})
		fl.Flush()
	}
}

// writeList writes l as an api.List: the same bytes json.Marshal of an api.List gives
// (TestListBytesMatchAPI), each object encoded once, and an object a peer encoded written as it
// is.
func (a *API) writeList(ctx context.Context, w http.ResponseWriter, resource string, l *storage.List) error {
	if err := storage.Drain(l); err != nil {
		return err
	}
	en := a.encoder(ctx, resource)
	buf := storage.GetBuffer()
	defer storage.PutBuffer(buf)
	buf.WriteString(`{"items":[`)
	if err := storage.EncodeEach(buf, len(l.Items), func(b *bytes.Buffer, i int) error { return en.item(b, l.Items[i]) }); err != nil {
		return err
	}
	buf.WriteString(`]`)
	if l.Continue != "" {
		buf.WriteString(`,"continue":`)
		writeString(buf, l.Continue)
	}
	buf.WriteString(`,"resourceVersion":`)
	writeString(buf, l.ResourceVersion)
	buf.WriteString(`,"total":`)
	var total int64
	if l.Count != nil {
		total = l.Count.Total
	}
	buf.WriteString(strconv.FormatInt(total, 10))
	buf.WriteString(`,"clusters":`)
	fresh := l.Freshness
	if fresh == nil {
		fresh = []api.ClusterFreshness{}
	}
	cb, err := json.Marshal(fresh)
	if err != nil {
		return err
	}
	buf.Write(cb)
	buf.WriteString("}\n")
	w.Header().Set("Content-Type", "application/json")
	_, err = w.Write(buf.Bytes())
	return err
}

// Get answers GET /multicache/v1/resources/{resource}/{cluster}/{namespace}/{name}: one object
// as an api.Item ("_" is the namespace of a cluster-scoped one).
func (a *API) Get(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("resource")
	ctx := storage.WithReadScope(r.Context())
	res, ok := a.opts.Resolve(ctx, name)
	if !ok {
		writeError(w, a.opts.NotCached(name))
		return
	}
	ns := r.PathValue("namespace")
	if ns == "_" {
		ns = ""
	}
	k := aggregate.Key{Cluster: r.PathValue("cluster"), Namespace: ns, Name: r.PathValue("name")}
	if err := k.Validate(); err != nil {
		writeError(w, storage.Error(http.StatusBadRequest, err.Error()))
		return
	}
	a.limited(ctx, w, func(ctx context.Context) {
		l, err := a.opts.Reader.Get(ctx, storage.GetOptions{Selection: storage.Selection{Resource: res, Clusters: []string{k.Cluster}, Namespace: ns},
			Name: k.Name, Encoding: storage.Encoding{API: storage.NativeAPI, TypeMeta: true}})
		if err != nil {
			writeError(w, err)
			return
		}
		filters.AddWarnings(w.Header(), l.Warnings)
		if len(l.Items) == 0 {
			msg := fmt.Sprintf("%s %q not found in cluster %q", res, k.ObjectKey(), k.Cluster)
			if !serves(l.Freshness, k.Cluster) {
				msg = fmt.Sprintf("cluster %q does not serve %s here (unknown cluster or resource not served)", k.Cluster, res)
			}
			writeError(w, storage.Error(http.StatusNotFound, msg))
			return
		}
		buf := storage.GetBuffer()
		defer storage.PutBuffer(buf)
		if err := a.encoder(ctx, res).item(buf, l.Items[0]); err != nil {
			writeError(w, storage.Error(http.StatusInternalServerError, err.Error()))
			return
		}
		buf.WriteByte('\n')
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(buf.Bytes())
	})
}

// serves reports whether the freshness of an answer says cluster serves its resource.
func serves(fresh []api.ClusterFreshness, cluster string) bool {
	for _, f := range fresh {
		if f.Name == cluster {
			return !f.NotServed && f.Error != "unknown cluster"
		}
	}
	return false
}

// watch streams api.WatchEvents as NDJSON: first the current objects as ADDED (or, with a
// resourceVersion, the events after it), then live events, with periodic BOOKMARKs carrying a
// position to resume from (unless allowWatchBookmarks=false). A position gone already is 410
// before the stream starts; one that goes while it runs ends it with an ERROR 410 event.
func (a *API) watch(w http.ResponseWriter, r *http.Request, sel storage.Selection, opts metav1.ListOptions) {
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, storage.Error(http.StatusInternalServerError, "streaming unsupported"))
		return
	}
	bookmarks := !r.URL.Query().Has("allowWatchBookmarks") || opts.AllowWatchBookmarks
	rv := opts.ResourceVersion
	wt, err := a.opts.Reader.Watch(r.Context(), storage.WatchOptions{Selection: sel, ResourceVersion: rv, Initial: rv == "" || rv == "0",
		StartBookmark: bookmarks, Bookmarks: bookmarks, Encoding: storage.Encoding{API: storage.NativeAPI, TypeMeta: true}})
	if err != nil {
		writeError(w, err)
		return
	}
	ws := wt.Warnings()
	if down := downWarning(wt.Freshness()); down != "" {
		ws = append(slices.Clone(ws), down)
	}
	filters.AddWarnings(w.Header(), ws)
	a.opts.Watches.Inc()
	defer a.opts.Watches.Dec()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	fl.Flush()
	sink := &watchSink{w: w, fl: fl, en: a.encoder(r.Context(), sel.Resource), line: storage.GetBuffer()}
	defer storage.PutBuffer(sink.line)
	if err := wt.Run(r.Context(), sink); err != nil && r.Context().Err() == nil {
		sink.fail(err)
	}
}

// downWarning names the clusters of a watch that no live replica owns, what that means first:
// a long list is cut (filters.AddWarnings).
func downWarning(fresh []api.ClusterFreshness) string {
	var names []string
	for _, f := range fresh {
		if strings.HasPrefix(f.Error, "unavailable: ") && len(f.Error) > len("unavailable: ") {
			names = append(names, f.Name)
		}
	}
	if len(names) == 0 {
		return ""
	}
	return fmt.Sprintf("%d clusters with no live replica to own them (this watch ends with 410 when one does): %s", len(names), strings.Join(names, ", "))
}

// watchSink writes a native watch: api.WatchEvents, one per line.
type watchSink struct {
	w    http.ResponseWriter
	fl   http.Flusher
	en   *encoder
	line *bytes.Buffer
}

func (k *watchSink) Event(typ string, it storage.Item) error {
	buf := k.line
	buf.Reset()
	buf.WriteString(`{"type":`)
	writeName(buf, typ)
	buf.WriteString(`,"cluster":`)
	writeName(buf, it.Key.Cluster)
	buf.WriteString(`,"object":`)
	if err := k.en.object(buf, it); err != nil {
		return err
	}
	buf.WriteString("}\n")
	_, err := k.w.Write(buf.Bytes())
	return err
}

func (k *watchSink) Bookmark(rv string, _ bool) error {
	var b api.BookmarkObject
	b.Kind = "Bookmark"
	b.Metadata.ResourceVersion = rv
	return k.control(api.Bookmark, b)
}

func (k *watchSink) Flush() { k.fl.Flush() }

// fail ends the stream with an ERROR event: err's Status, 410 for anything but a refusal.
func (k *watchSink) fail(err error) {
	st := storage.StatusOf(err).ErrStatus
	if st.Code >= 500 || st.Code == 0 {
		st = storage.Error(http.StatusGone, "this watch cannot go on ("+st.Message+"); list again").ErrStatus
	}
	_ = k.control(api.ErrorEvent, api.Error{Kind: "Status", Code: int(st.Code), Reason: string(st.Reason), Message: st.Message})
	k.fl.Flush()
}

// control writes a BOOKMARK or an ERROR event.
func (k *watchSink) control(typ string, obj any) error {
	b, _ := json.Marshal(obj)
	return json.NewEncoder(k.w).Encode(api.WatchEvent{Type: typ, Object: b})
}

// encoder writes the objects of one resource in the native API's form.
type encoder struct {
	a         *API
	resource  string
	info      map[string]clusterset.ResourceStatus
	refreshed time.Time
}

func (a *API) encoder(ctx context.Context, resource string) *encoder {
	return &encoder{a: a, resource: resource, info: a.opts.Info(ctx, resource), refreshed: time.Now()}
}

// Encoders makes the encoders a peer answers a request of this API with.
func (a *API) Encoders(ctx context.Context, e storage.Encoding, resource string) (storage.Encoder, error) {
	return a.encoder(ctx, resource), nil
}

// Append appends it's object (a storage.Encoder): rv is not shown.
func (en *encoder) Append(buf *bytes.Buffer, it storage.Item, _ string) error {
	return en.object(buf, it)
}

// item appends it as an api.Item.
func (en *encoder) item(buf *bytes.Buffer, it storage.Item) error {
	buf.WriteString(`{"cluster":`)
	writeName(buf, it.Key.Cluster)
	buf.WriteString(`,"object":`)
	if err := en.object(buf, it); err != nil {
		return fmt.Errorf("cluster %q: encode %s: %w", it.Key.Cluster, it.Key, err)
	}
	buf.WriteByte('}')
	return nil
}

// object appends it's object as JSON, with apiVersion and kind (typed objects from lists carry
// neither), as its cluster serves it; one a peer encoded as it is. It never modifies the object.
func (en *encoder) object(buf *bytes.Buffer, it storage.Item) error {
	if it.Raw != nil {
		buf.Write(it.Raw)
		return nil
	}
	cluster := it.Key.Cluster
	rs, ok := en.info[cluster]
	if !ok && time.Since(en.refreshed) > time.Second {
		// A cluster that joined since: look again, at most once a second (the deletes of a
		// cluster that left would otherwise each read the whole status).
		en.info, en.refreshed = en.a.opts.Info(context.Background(), en.resource), time.Now() // read now
		rs, ok = en.info[cluster]
	}
	if !ok {
		// A cluster that left: the resource's kind as another cluster serves it.
		for _, other := range en.info {
			if other.Kind != "" {
				rs = other
				break
			}
		}
	}
	obj := it.Object
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	scratch := storage.GetBuffer()
	defer storage.PutBuffer(scratch)
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

// writeString appends s as a JSON string, as encoding/json writes it.
func writeString(buf *bytes.Buffer, s string) {
	b, _ := json.Marshal(s)
	buf.Write(b)
}

// writeName appends a cluster name, or an event type, as a JSON string: neither has a character
// JSON escapes (aggregate.ValidateClusterName), so no encoder is needed.
func writeName(buf *bytes.Buffer, s string) {
	buf.WriteByte('"')
	buf.WriteString(s)
	buf.WriteByte('"')
}
