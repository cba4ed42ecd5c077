package server

import (
	"bytes"
	"encoding/json"
	"net/http"
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
	h := s.caches[req.resource]
	q := r.URL.Query()
	bookmarks := q.Get("allowWatchBookmarks") != "false"
	wo := watchcache.WatchOptions{Clusters: req.query.Clusters, Matches: func(c string, obj any) bool { return req.agg.Matches(req.query, c, obj) }}
	if tok := q.Get("resourceVersion"); tok != "" && tok != "0" {
		t, err := watchcache.ParseSingle(tok)
		if err != nil {
			filters.WriteError(w, codeOf(err), err.Error())
			return
		}
		wo.From = t
	} else {
		// It starts with the current objects: a planned cluster whose whole list this replica
		// does not hold yet (a move under way) would be missing from them, and a client
		// rebuilding its state from them would lose its objects. As in the Kubernetes API: 429.
		if s.partOf(q) != nil && retryUnready(w, req.resource, s.unready(req.resource, req.query.Clusters)) {
			return
		}
		wo.From, wo.Initial = h.Position(), true
	}
	// Fail before the stream starts when the position is gone already.
	wch, err := h.Watch(wo)
	if err != nil {
		filters.WriteError(w, http.StatusGone, "resourceVersion expired: "+err.Error())
		return
	}
	s.metrics.watches.Inc()
	defer s.metrics.watches.Dec()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	sink := &nativeSink{s: s, w: w, fl: fl, resource: req.resource, info: s.info(req.resource), refreshed: time.Now(), line: getBuffer()}
	defer putBuffer(sink.line)
	ro := watchcache.RunOptions{FirstBookmark: bookmarks, Guard: guardOf(r.Context()).orNil()}
	if bookmarks {
		tick := time.NewTicker(s.opts.BookmarkInterval)
		defer tick.Stop()
		ro.Bookmarks = tick.C
	}
	if err := wch.Run(r.Context(), sink, ro); watchcache.IsGone(err) {
		_ = sink.control(api.ErrorEvent, errorObject(http.StatusGone, err.Error()))
		fl.Flush()
	}
}

// nativeSink writes a native watch: api.WatchEvents, one per line.
type nativeSink struct {
	s         *Server
	w         http.ResponseWriter
	fl        http.Flusher
	resource  string
	info      resourceInfo
	refreshed time.Time
	line      *bytes.Buffer
}

func (k *nativeSink) Event(typ string, it watchcache.Item) error {
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
	line := k.line
	line.Reset()
	line.WriteString(`{"type":`)
	writeName(line, typ)
	line.WriteString(`,"cluster":`)
	writeName(line, cluster)
	line.WriteString(`,"object":`)
	if err := k.s.appendEncoded(line, it.Object, rs); err != nil {
		return err
	}
	line.WriteString("}\n")
	_, err := k.w.Write(line.Bytes())
	return err
}

func (k *nativeSink) Bookmark(pos watchcache.Position, _ bool) error {
	var b api.BookmarkObject
	b.Kind = "Bookmark"
	b.Metadata.ResourceVersion = pos.String()
	return k.control(api.Bookmark, b)
}

func (k *nativeSink) Flush() { k.fl.Flush() }

// control writes a BOOKMARK or an ERROR event.
func (k *nativeSink) control(typ string, obj any) error {
	b, _ := json.Marshal(obj)
	return json.NewEncoder(k.w).Encode(api.WatchEvent{Type: typ, Object: b})
}

// errorObject is the object of an ERROR event: the error, as a Status.
func errorObject(code int, msg string) api.Error {
	return api.Error{Kind: "Status", Code: code, Reason: string(filters.Reasons[code]), Message: msg}
}
