package kubeapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/filters"
	"github.com/multicache/multicache/pkg/storage"
)

// listOptions is a request's query, decoded once.
type listOptions struct {
	watch bool
	opts  metav1.ListOptions // a list's or a watch's
	get   metav1.GetOptions  // a get's
	table metav1.TableOptions
}

// decodeList decodes the query of a request on p: ListOptions for a list or a watch, a
// malformed one being a 400 as in kube-apiserver; GetOptions for a get, which reads none of a
// list's; TableOptions for a Table answer, as kube-apiserver reads them for a Table only.
func decodeList(vals url.Values, p path, asTable bool) (listOptions, error) {
	lo := listOptions{watch: p.watchPath || filters.IsWatch(vals)}
	var err error
	switch {
	case lo.watch || p.name == "":
		err = filters.DecodeParameters(vals, &lo.opts)
	default:
		err = filters.DecodeParameters(vals, &lo.get)
	}
	if err == nil && asTable {
		err = filters.DecodeParameters(vals, &lo.table)
		switch lo.table.IncludeObject {
		case "", metav1.IncludeNone, metav1.IncludeMetadata, metav1.IncludeObject:
		default:
			err = storage.Errorf(http.StatusBadRequest, "includeObject %q: want None, Metadata or Object", lo.table.IncludeObject)
		}
	}
	if err != nil {
		return lo, err
	}
	if lo.opts.Limit < 0 {
		return lo, storage.Errorf(http.StatusBadRequest, "limit %q: want a non-negative integer", vals.Get("limit"))
	}
	if lo.opts.TimeoutSeconds != nil && *lo.opts.TimeoutSeconds < 0 {
		return lo, storage.Errorf(http.StatusBadRequest, "timeoutSeconds %q: want a non-negative integer", vals.Get("timeoutSeconds"))
	}
	if lo.watch && p.name != "" {
		// The deprecated watch of one object: a watch of the collection, by name.
		fs := "metadata.name=" + p.name
		if lo.opts.FieldSelector != "" {
			fs += "," + lo.opts.FieldSelector
		}
		lo.opts.FieldSelector = fs
	}
	return lo, nil
}

// list answers a list: a {Kind}List, a Table or a PartialObjectMetadataList, with a CLUSTER
// column in a Table, written listChunk items at a time.
func (a *API) list(ctx context.Context, w http.ResponseWriter, rq request) {
	opts := rq.list.opts
	limit := opts.Limit
	if limit > 0 {
		limit = min(limit, int64(a.opts.MaxPageSize)) // the rest follows by continue
	}
	// A page without selectors says how many items follow it (remainingItemCount), as
	// kube-apiserver's does, when every part can count it (not one of the previous envelope).
	count := limit > 0 && rq.sel.LabelSelector == "" && rq.sel.FieldSelector == ""
	l, err := a.opts.Reader.List(ctx, storage.ListOptions{Selection: rq.sel, Limit: limit, Continue: opts.Continue,
		ResourceVersion: opts.ResourceVersion, ResourceVersionMatch: opts.ResourceVersionMatch, Encoding: rq.enc, Count: count, CountOptional: true})
	if err == nil && l.Count != nil && l.Continue != "" {
		err = storage.Drain(l) // a page, of at most limit items
	}
	if err != nil {
		writeError(w, err)
		return
	}
	filters.AddWarnings(w.Header(), append(slices.Clone(l.Warnings), freshnessWarnings(l.Freshness, rq.kr.Name)...))
	en, err := a.encoder(ctx, rq.enc, rq.kr)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := a.writeList(w, en, l); err != nil {
		writeError(w, err)
	}
}

// listChunk is how many items of a list are encoded before they are written: a list without a
// limit may hold every cached object, and is streamed so that its encoding never sits in
// memory whole.
const listChunk = 1000

// writeList answers l in en's form. An error before the first write is returned (the caller
// answers it); after it, the response is aborted, so that the client sees a failed transfer
// rather than a truncated list.
func (a *API) writeList(w http.ResponseWriter, en *encoder, l *storage.List) error {
	buf := storage.GetBuffer()
	defer storage.PutBuffer(buf)
	if l.More != nil {
		defer l.More.Close()
	}
	var remaining *int64
	if l.Count != nil && l.Continue != "" && l.More == nil {
		n := l.Count.Remaining(len(l.Items))
		remaining = &n
	}
	started := false
	fail := func(err error) error {
		if started {
			a.opts.Logger.Warn("list aborted mid-answer", zap.String("resource", en.kr.API.Name), zap.Error(err))
			panic(http.ErrAbortHandler)
		}
		return err
	}
	if en.e.As == "Table" {
		t := en.table(false)
		t.ResourceVersion, t.Continue, t.RemainingItemCount = l.ResourceVersion, l.Continue, remaining
		head, err := json.Marshal(t)
		if err != nil || !bytes.HasSuffix(head, []byte(`"rows":null}`)) {
			return fail(fmt.Errorf("encode table of %s: %v", en.kr.API.Name, err))
		}
		// The table without its rows, then the rows one by one: "rows" is its last field, and
		// is never omitted.
		buf.Write(head[:len(head)-len(`null}`)])
		buf.WriteByte('[')
	} else {
		kind, apiVersion := en.kr.GVK.Kind+"List", en.kr.GVK.GroupVersion().String()
		if en.e.As == "PartialObjectMetadata" {
			kind, apiVersion = "PartialObjectMetadataList", metav1.SchemeGroupVersion.String()
		}
		md, _ := json.Marshal(metav1.ListMeta{ResourceVersion: l.ResourceVersion, Continue: l.Continue, RemainingItemCount: remaining})
		fmt.Fprintf(buf, `{"kind":%q,"apiVersion":%q,"metadata":%s,"items":[`, kind, apiVersion, md)
	}
	w.Header().Set("Content-Type", "application/json")
	n := 0
	write := func(items []storage.Item) error {
		if len(items) == 0 {
			return nil
		}
		if n > 0 {
			buf.WriteByte(',')
		}
		n += len(items)
		err := storage.EncodeEach(buf, len(items), func(b *bytes.Buffer, i int) error {
			return en.Append(b, items[i], items[i].ResourceVersion(l.Epoch))
		})
		if err != nil {
			return fail(err)
		}
		started = true
		_, _ = w.Write(buf.Bytes())
		buf.Reset()
		return nil
	}
	for start := 0; start < len(l.Items); start += listChunk {
		if err := write(l.Items[start:min(len(l.Items), start+listChunk)]); err != nil {
			return err
		}
	}
	if l.More != nil {
		chunk := make([]storage.Item, 0, listChunk)
		for {
			it, ok, err := l.More.Next()
			if err != nil {
				return fail(err)
			}
			if ok {
				chunk = append(chunk, it)
			}
			if len(chunk) == listChunk || (!ok && len(chunk) > 0) {
				if err := write(chunk); err != nil {
					return err
				}
				chunk = chunk[:0]
			}
			if !ok {
				break
			}
		}
	}
	buf.WriteString("]}\n")
	_, _ = w.Write(buf.Bytes())
	return nil
}

// get answers one object by name. In the fleet view a name may exist in several clusters: a
// Table gets one row per cluster; any other answer is 409 naming them.
func (a *API) get(ctx context.Context, w http.ResponseWriter, rq request) {
	enc := rq.enc
	enc.TypeMeta = true
	l, err := a.opts.Reader.Get(ctx, storage.GetOptions{Selection: rq.sel, Name: rq.p.name, Encoding: enc})
	if err != nil {
		writeError(w, err)
		return
	}
	filters.AddWarnings(w.Header(), append(slices.Clone(l.Warnings), freshnessWarnings(l.Freshness, rq.kr.Name)...))
	gr := rq.kr.GroupResource()
	en, err := a.encoder(ctx, enc, rq.kr)
	if err != nil {
		writeError(w, err)
		return
	}
	switch {
	case len(l.Items) == 0:
		writeError(w, storage.NotFound(gr, rq.p.name, fmt.Sprintf("%s %q not found", gr, rq.p.name)))
		return
	case enc.As == "Table":
		l.More, l.Continue = nil, ""
		if err := a.writeList(w, en, l); err != nil {
			writeError(w, err)
		}
		return
	case len(l.Items) > 1:
		var names, paths []string
		for _, it := range l.Items {
			names = append(names, it.Key.Cluster)
			paths = append(paths, "/clusters/"+it.Key.Cluster+rq.p.objectPath())
		}
		e := storage.Errorf(http.StatusConflict, "%s %q exists in %d clusters (%s): read it from one of them, at %s", gr, rq.p.name, len(l.Items), strings.Join(names, ", "), strings.Join(paths, " or "))
		e.ErrStatus.Details = &metav1.StatusDetails{Name: rq.p.name, Group: gr.Group, Kind: gr.Resource}
		writeError(w, e)
		return
	}
	buf := storage.GetBuffer()
	defer storage.PutBuffer(buf)
	it := l.Items[0]
	if err := en.Append(buf, it, it.ResourceVersion(l.Epoch)); err != nil {
		writeError(w, storage.Error(http.StatusInternalServerError, err.Error()))
		return
	}
	buf.WriteByte('\n')
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(buf.Bytes())
}

// watch streams a watch: {"type":…,"object":…} events, objects in the form asked for (a Table
// watch's first object carries the columns). Where it starts:
//   - sendInitialEvents=true: ADDED for every current object (the snapshot of the watch
//     cache, so exactly the state the events after it continue), then a BOOKMARK carrying
//     that position and the k8s.io/initial-events-end annotation (client-go's watch-list);
//   - no resourceVersion, or "0": the same ADDED events, without that BOOKMARK;
//   - a resourceVersion: the events after it, or an ERROR 410 once they are gone;
//   - sendInitialEvents=false without a resourceVersion: the events from now.
//
// A watch that starts with the current objects gets 429 (client-go retries) while a cluster it
// spans is not complete. allowWatchBookmarks adds BOOKMARKs now and then; timeoutSeconds ends
// the watch cleanly.
func (a *API) watch(w http.ResponseWriter, r *http.Request, rq request) {
	opts := rq.list.opts
	rv, rvm := opts.ResourceVersion, string(opts.ResourceVersionMatch)
	sieSet := opts.SendInitialEvents != nil
	sie := sieSet && *opts.SendInitialEvents
	// As kube-apiserver validates them.
	switch {
	case sieSet && rvm != string(metav1.ResourceVersionMatchNotOlderThan):
		writeError(w, storage.Error(http.StatusBadRequest, "sendInitialEvents requires resourceVersionMatch=NotOlderThan"))
		return
	case !sieSet && rvm != "":
		writeError(w, storage.Error(http.StatusBadRequest, "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"))
		return
	case sie && !opts.AllowWatchBookmarks:
		writeError(w, storage.Error(http.StatusBadRequest, "sendInitialEvents requires allowWatchBookmarks=true"))
		return
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, storage.Error(http.StatusInternalServerError, "streaming unsupported"))
		return
	}
	enc := rq.enc
	enc.TypeMeta = true
	wo := storage.WatchOptions{Selection: rq.sel, ResourceVersion: rv, Initial: sie || (!sieSet && (rv == "" || rv == "0")),
		StartBookmark: sie, Bookmarks: opts.AllowWatchBookmarks, Encoding: enc}
	if opts.TimeoutSeconds != nil {
		wo.Timeout = time.Duration(*opts.TimeoutSeconds) * time.Second
	}
	en, err := a.encoder(r.Context(), enc, rq.kr)
	if err != nil {
		writeError(w, err)
		return
	}
	wt, err := a.opts.Reader.Watch(r.Context(), wo)
	var gone error
	if err != nil {
		if storage.Code(err) != http.StatusGone {
			writeError(w, err)
			return
		}
		gone = err // a position already gone opens a watch that ends at once, as kube-apiserver's
	} else {
		filters.AddWarnings(w.Header(), append(slices.Clone(wt.Warnings()), freshnessWarnings(wt.Freshness(), rq.kr.Name)...))
	}
	a.opts.Watches.Inc()
	defer a.opts.Watches.Dec()
	w.Header().Set("Content-Type", "application/json;stream=watch")
	w.WriteHeader(http.StatusOK)
	sink := newWatchSink(w, fl, en, wo)
	defer storage.PutBuffer(sink.line)
	if gone == nil {
		fl.Flush()
		if err := wt.Run(r.Context(), sink); err != nil && r.Context().Err() == nil {
			gone = err
		}
	}
	if gone != nil {
		// The client went away, the watch's position is gone, its plan changed, or an object
		// could not be encoded: end with an ERROR (410 but for a part's own refusal) rather
		// than cleanly, so that a client lists again instead of resuming into the same event.
		sink.fail(gone)
	}
}

// watchSink writes a watch's stream in the Kubernetes API's form.
type watchSink struct {
	w           http.ResponseWriter
	fl          http.Flusher
	en          *encoder
	line        *bytes.Buffer
	columnsSent bool
	// initial: a watch-list's initial events are under way (until its first bookmark). They
	// are this watch's own snapshot, so their encodings are not shared (appendEvent): each
	// would be copied for no other watch, and tens of thousands of them would evict the live
	// events' encodings that the other watches share.
	initial bool
}

// newWatchSink writes the watch opened with wo to w, its objects in en's encoding. Its line
// buffer is pooled: return it with storage.PutBuffer(k.line) when the watch ends.
func newWatchSink(w http.ResponseWriter, fl http.Flusher, en *encoder, wo storage.WatchOptions) *watchSink {
	return &watchSink{w: w, fl: fl, en: en, line: storage.GetBuffer(), initial: wo.Initial && wo.StartBookmark}
}

func (k *watchSink) Event(typ string, it storage.Item) error {
	buf := k.line
	buf.Reset()
	buf.WriteString(`{"type":`)
	buf.WriteString(`"` + typ + `"`)
	buf.WriteString(`,"object":`)
	if k.en.e.As == "Table" {
		// A Table of one row; its first carries the columns.
		t := k.en.table(k.columnsSent)
		t.ResourceVersion = it.RV
		head, err := json.Marshal(t)
		if err != nil || !bytes.HasSuffix(head, []byte(`"rows":null}`)) {
			return fmt.Errorf("encode table of %s: %v", k.en.kr.API.Name, err)
		}
		buf.Write(head[:len(head)-len(`null}`)])
		buf.WriteByte('[')
		if err := k.en.Append(buf, it, it.RV); err != nil {
			return err
		}
		buf.WriteString("]}")
		k.columnsSent = true
	} else if k.initial {
		if err := k.en.Append(buf, it, it.RV); err != nil {
			return err
		}
	} else if err := k.en.appendEvent(buf, it, it.RV); err != nil {
		return err
	}
	buf.WriteString("}\n")
	_, err := k.w.Write(buf.Bytes())
	return err
}

func (k *watchSink) Bookmark(rv string, initialEnd bool) error {
	k.initial = false
	md := metav1.ObjectMeta{ResourceVersion: rv}
	if initialEnd {
		md.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
	}
	kind, apiVersion := k.en.kr.GVK.Kind, k.en.kr.GVK.GroupVersion().String()
	switch k.en.e.As {
	case "Table":
		kind, apiVersion = "Table", "meta.k8s.io/"+k.en.e.TableVersion
	case "PartialObjectMetadata":
		kind, apiVersion = "PartialObjectMetadata", metav1.SchemeGroupVersion.String()
	}
	return k.control(api.Bookmark, map[string]any{"kind": kind, "apiVersion": apiVersion, "metadata": md})
}

func (k *watchSink) Flush() { k.fl.Flush() }

func (k *watchSink) control(typ string, obj any) error {
	b, _ := json.Marshal(obj)
	_, err := fmt.Fprintf(k.w, `{"type":%q,"object":%s}`+"\n", typ, b)
	return err
}

// fail ends the stream with an ERROR event: err's Status, 410 for anything but a refusal.
func (k *watchSink) fail(err error) {
	st := storage.StatusOf(err).ErrStatus
	if st.Code >= 500 || st.Code == 0 {
		st = storage.Error(http.StatusGone, "this watch cannot go on ("+st.Message+"); list again").ErrStatus
	}
	_ = k.control(api.ErrorEvent, st)
	k.fl.Flush()
}
