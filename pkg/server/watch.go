package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/filters"
	"github.com/multicache/multicache/pkg/watchcache"
)

// handleWatch streams api.WatchEvents as NDJSON: first the current objects as ADDED (the watch
// cache's snapshot now; or, with a resourceVersion, the kept events after it), then live
// events, with periodic BOOKMARKs carrying a position to resume from. A watch reads the cache
// at its own pace (watchcache.Watcher); it ends with 410 Expired only when events it needs
// were evicted before it read them, or when its plan changed.
func (s *Server) handleWatch(w http.ResponseWriter, r *http.Request, req request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		filters.WriteError(w, http.StatusInternalServerError, "streaming unsupported")
		return
	}
	lw, ok := s.openNativeWatch(r.Context(), w, r.URL.Query(), req)
	if !ok {
		return
	}
	s.metrics.watches.Inc()
	defer s.metrics.watches.Dec()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	sink := s.newNativeSink(w, fl, req.resource)
	defer putBuffer(sink.line)
	if err := lw.run(r.Context(), sink); watchcache.IsGone(err) {
		sink.gone(err)
	}
}

// openNativeWatch checks a native watch of this replica's stores (q its query) and opens it,
// or answers why not to w (ok false): a bad position, 410 when it is gone already, or 429
// while a planned cluster it starts with is not synced.
func (s *Server) openNativeWatch(ctx context.Context, w http.ResponseWriter, q url.Values, req request) (*localWatch, bool) {
	h := s.caches[req.resource]
	lw := &localWatch{bookmarks: q.Get("allowWatchBookmarks") != "false", guard: guardOf(ctx).orNil(), interval: s.opts.BookmarkInterval}
	lw.initialEnd = lw.bookmarks // the native API's first BOOKMARK: the position it starts from
	wo := watchcache.WatchOptions{Clusters: req.query.Clusters, Matches: func(c string, obj any) bool { return req.agg.Matches(req.query, c, obj) }}
	if tok := q.Get("resourceVersion"); tok != "" && tok != "0" {
		t, err := watchcache.ParseSingle(tok)
		if err != nil {
			filters.WriteError(w, codeOf(err), err.Error())
			return nil, false
		}
		wo.From = t
	} else {
		// It starts with the current objects: a planned cluster whose whole list this replica
		// does not hold yet (a move under way) would be missing from them, and a client
		// rebuilding its state from them would lose its objects. As in the Kubernetes API: 429.
		if s.partOf(q) != nil && retryUnready(w, req.resource, s.unreadyAwait(ctx, req.resource, req.query.Clusters)) {
			return nil, false
		}
		wo.From, wo.Initial = h.Position(), true
	}
	// Fail before the stream starts when the position is gone already.
	wch, err := h.Watch(wo)
	if err != nil {
		filters.WriteError(w, http.StatusGone, "resourceVersion expired: "+err.Error())
		return nil, false
	}
	lw.wch, lw.from = wch, wo.From
	return lw, true
}

// nativeSink writes a native watch: api.WatchEvents, one per line.
type nativeSink struct {
	s         *Server
	w         io.Writer
	fl        http.Flusher
	resource  string
	info      resourceInfo
	refreshed time.Time
	line      *bytes.Buffer
}

// newNativeSink is the sink of a native watch of resource. Its line buffer is the pool's.
func (s *Server) newNativeSink(w io.Writer, fl http.Flusher, resource string) *nativeSink {
	k := s.nativeEncoder(resource)
	k.w, k.fl, k.line = w, fl, getBuffer()
	return k
}

// nativeEncoder is a nativeSink that only encodes: a fan-in's local part.
func (s *Server) nativeEncoder(resource string) *nativeSink {
	return &nativeSink{s: s, resource: resource, info: s.info(resource), refreshed: time.Now()}
}

func (k *nativeSink) Event(typ string, it watchcache.Item) error {
	k.line.Reset()
	if err := k.appendEvent(k.line, typ, it); err != nil {
		return err
	}
	_, err := k.w.Write(k.line.Bytes())
	return err
}

// appendEvent appends the line of an object's event to buf.
func (k *nativeSink) appendEvent(buf *bytes.Buffer, typ string, it watchcache.Item) error {
	cluster := it.Key.Cluster
	rs, ok := k.info[cluster]
	if !ok && time.Since(k.refreshed) > time.Second {
		// A cluster that joined since: look again, at most once a second (the deletes of a
		// cluster that left would otherwise each read the whole status).
		k.info, k.refreshed = k.s.info(k.resource), time.Now()
		rs, ok = k.info[cluster]
	}
	if !ok {
		// A cluster that left: the resource's kind as another cluster serves it.
		for _, other := range k.info {
			if other.Kind != "" {
				rs = other
				break
			}
		}
	}
	buf.WriteString(`{"type":`)
	writeName(buf, typ)
	buf.WriteString(`,"cluster":`)
	writeName(buf, cluster)
	buf.WriteString(`,"object":`)
	if err := k.s.appendEncoded(buf, it.Object, rs); err != nil {
		return err
	}
	buf.WriteString("}\n")
	return nil
}

func (k *nativeSink) Bookmark(pos watchcache.Position, _ bool) error {
	return k.bookmarkAt(pos.String())
}

// bookmarkAt writes a BOOKMARK at the position rv.
func (k *nativeSink) bookmarkAt(rv string) error {
	var b api.BookmarkObject
	b.Kind = "Bookmark"
	b.Metadata.ResourceVersion = rv
	return k.control(api.Bookmark, b)
}

func (k *nativeSink) Flush() { k.fl.Flush() }

// gone ends the stream with an ERROR event: 410, list again.
func (k *nativeSink) gone(err error) {
	_ = k.control(api.ErrorEvent, errorObject(http.StatusGone, err.Error()))
	k.fl.Flush()
}

// control writes a BOOKMARK or an ERROR event.
func (k *nativeSink) control(typ string, obj any) error {
	b, _ := json.Marshal(obj)
	return json.NewEncoder(k.w).Encode(api.WatchEvent{Type: typ, Object: b})
}

// errorObject is the object of an ERROR event: the error, as a Status.
func errorObject(code int, msg string) api.Error {
	return api.Error{Kind: "Status", Code: code, Reason: string(filters.Reasons[code]), Message: msg}
}
