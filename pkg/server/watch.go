package server

import (
	"encoding/json"
	"net/http"
	"slices"
	"time"

	"github.com/multicache/multicache/pkg/api"
)

// watchBatch is how many hub events a watch takes per read.
const watchBatch = 256

// handleWatch streams api.WatchEvents as NDJSON: first the current objects as ADDED (or, with a
// resourceVersion token, the kept events after it), then live events, with periodic BOOKMARKs
// carrying a token to resume from. A watch reads the hub's ring at its own pace; it ends with
// 410 Expired only when events it needs were evicted before it read them.
func (s *Server) handleWatch(w http.ResponseWriter, r *http.Request, req request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, "streaming unsupported")
		return
	}
	h := s.hubs[req.resource]
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
		if _, _, err := h.next(pos, req.query.Clusters, make([]event, 0, 1)); err != nil {
			writeError(w, http.StatusGone, "resourceVersion expired: "+err.Error())
			return
		}
	} else {
		// It starts with the current objects: a planned cluster whose whole list this replica
		// does not hold yet (a move under way) would be missing from them, and a client
		// rebuilding its state from them would lose its objects. As in the Kubernetes API: 429.
		if s.partOf(q) != nil && retryUnready(w, req.resource, s.unready(req.resource, req.query.Clusters)) {
			return
		}
		pos = h.position() // before the stores are read
	}
	s.metrics.watches.Inc()
	defer s.metrics.watches.Dec()

	info := s.info(req.resource)
	refreshed := time.Now()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	line := getBuffer()
	defer putBuffer(line)
	// enc writes one api.WatchEvent for obj.
	enc := func(typ, cluster string, obj any) error {
		rs, ok := info[cluster]
		if !ok && time.Since(refreshed) > time.Second {
			// A cluster that joined since: look again, at most once a second (the deletes of
			// a cluster that left would otherwise each read the whole status).
			info, refreshed = s.info(req.resource), time.Now()
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
		writeName(line, typ)
		line.WriteString(`,"cluster":`)
		writeName(line, cluster)
		line.WriteString(`,"object":`)
		if err := s.appendEncoded(line, obj, rs); err != nil {
			return err
		}
		line.WriteString("}\n")
		_, err := w.Write(line.Bytes())
		return err
	}
	// control writes a BOOKMARK or an ERROR event.
	control := func(typ string, obj any) error {
		b, _ := json.Marshal(obj)
		return json.NewEncoder(w).Encode(api.WatchEvent{Type: typ, Object: b})
	}
	if !resume {
		// The current objects, one cluster at a time, so that memory stays bounded by one
		// cluster's selection.
		for _, c := range req.agg.Clusters() {
			if len(req.query.Clusters) > 0 && !slices.Contains(req.query.Clusters, c) {
				continue
			}
			cq := req.query
			cq.Clusters = []string{c}
			result, err := req.agg.Select(cq)
			if err != nil {
				_ = control(api.ErrorEvent, errorObject(http.StatusBadRequest, err.Error()))
				return
			}
			for _, it := range result.Items {
				if err := enc(api.Added, it.Cluster, it.Object); err != nil {
					return
				}
			}
			fl.Flush()
		}
	}
	// send relays one hub event through the query, translating its transitions: an object that
	// starts matching is ADDED, one that stops is DELETED.
	send := func(ev event) error {
		if ev.typ == handedOff {
			return nil // of a cluster this watch does not span: next ends the others with 410
		}
		now := req.agg.Matches(req.query, ev.cluster, ev.obj)
		switch ev.typ {
		case api.Modified:
			was := ev.prev != nil && req.agg.Matches(req.query, ev.cluster, ev.prev)
			switch {
			case now && !was:
				return enc(api.Added, ev.cluster, ev.obj)
			case !now && was:
				return enc(api.Deleted, ev.cluster, ev.obj)
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
		var b api.BookmarkObject
		b.Kind = "Bookmark"
		b.Metadata.ResourceVersion = pos.encode()
		return control(api.Bookmark, b)
	}
	tick := time.NewTicker(s.opts.BookmarkInterval)
	defer tick.Stop()
	if bookmarks {
		if bookmark() != nil {
			return
		}
	}
	fl.Flush()
	// In a sharded fleet the watch ends with 410 once its plan changes (planguard.go).
	replanned := guardOf(r.Context()).track()
	moved := func() bool {
		why := replanned.check()
		if why != "" {
			_ = control(api.ErrorEvent, errorObject(http.StatusGone, "the fleet changed since this watch started: "+why+"; list again"))
			fl.Flush()
		}
		return why != ""
	}
	if moved() {
		return
	}
	buf := make([]event, 0, watchBatch)
	flushed := time.Now()
	for {
		select {
		case <-replanned.C:
			if moved() {
				return
			}
		default:
		}
		evs, wake, err := h.next(pos, req.query.Clusters, buf[:0])
		if err != nil {
			_ = control(api.ErrorEvent, errorObject(http.StatusGone, err.Error()))
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
		case <-replanned.C:
			if moved() {
				return
			}
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

// errorObject is the object of an ERROR event: the error, as a Status.
func errorObject(code int, msg string) api.Error {
	return api.Error{Kind: "Status", Code: code, Reason: string(reasons[code]), Message: msg}
}
