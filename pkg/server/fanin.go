package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/filters"
	"github.com/multicache/multicache/pkg/watchcache"
)

// fanIn is a watch of the fleet that several parts answer, relayed as one: the fan-out's
// watch, in either API. Every part's position is kept, and the fleet's position is all of
// them (watchcache.Position with Parts): a Kubernetes object carries the fleet's position
// after it, so that a reflector resumes from any event, and a BOOKMARK carries it once every
// part has told its own.
//
// It never goes silent: when a cluster moves, joins, leaves, goes down or comes back, or a
// part's watch ends, it ends with 410 and the client lists again.
type fanIn struct {
	pl    plan
	query func(part) partQuery // each part's watch
	// from is where each part resumes, when the client gave a fleet position.
	from      watchcache.Position
	bookmarks bool // relay BOOKMARKs
	// initial: the Kubernetes API's sendInitialEvents. The end of the initial events is one
	// BOOKMARK, once every part sent its own; without it, parts' end BOOKMARKs are not relayed.
	initial     bool
	timeout     time.Duration // 0: none; the parts are asked for a minute more (watchTimeout)
	contentType string
	sink        fanSink
}

// fanSink writes a fan-in's events in its API's wire form.
type fanSink interface {
	// event writes an object's event, or a BOOKMARK, at the fleet's position pos.
	event(w io.Writer, ev partEvent, pos watchcache.Position) error
	// gone writes the ERROR event that ends the watch with 410.
	gone(w io.Writer, msg string)
}

// serve runs the fan-in until the client leaves, its timeout passes, or it ends with 410.
// Its parts' refusals (410, 403, 429) are answered before the stream starts.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, fi fanIn) {
	fl, ok := w.(http.Flusher)
	if !ok {
		filters.WriteError(w, http.StatusInternalServerError, "streaming unsupported")
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	changed := s.opts.Fleet.WaitChange()
	if why := s.moved(fi.pl); why != "" {
		filters.WriteError(w, http.StatusGone, "the fleet changed since this watch started: "+why+"; list again")
		return
	}
	streams, err := s.openStreams(ctx, r, fi.pl, fi.query)
	if err != nil {
		writePeerFailure(w, err)
		return
	}
	s.metrics.watches.Inc()
	defer s.metrics.watches.Dec()
	pos := map[string]watchcache.PartPosition{}
	for _, p := range fi.pl.parts {
		rv, _ := partPosition(fi.from, p)
		pos[p.peer] = watchcache.PartPosition{RV: rv, Set: p.set()}
	}
	w.Header().Set("Content-Type", fi.contentType)
	w.WriteHeader(http.StatusOK)
	fl.Flush()
	end := func(msg string) {
		fi.sink.gone(w, msg)
		fl.Flush()
	}
	initialDone := map[string]bool{}
	in := mergeStreams(ctx, streams)
	var expire <-chan time.Time
	if fi.timeout > 0 {
		t := time.NewTimer(fi.timeout)
		defer t.Stop()
		expire = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-expire:
			return // timeoutSeconds: a clean end, the client resumes from its last position
		case <-changed:
			changed = s.opts.Fleet.WaitChange()
			if why := s.moved(fi.pl); why != "" {
				end("the fleet changed since this watch started: " + why + "; list again")
				return
			}
		case m := <-in:
			if m.done {
				end(fmt.Sprintf("the watch of replica %q ended (%v); list again", m.st.part.peer, m.st.err))
				return
			}
			ev := m.ev
			if ev.typ == api.ErrorEvent {
				if ev.line != nil {
					_, _ = w.Write(append(ev.line, '\n')) // the part's own, in this API's form
					fl.Flush()
				} else {
					end(ev.gone)
				}
				return
			}
			if ev.rv != "" {
				pos[m.st.part.peer] = watchcache.PartPosition{RV: ev.rv, Set: m.st.part.set()}
			}
			if ev.typ == api.Bookmark {
				if ev.initialEnd {
					initialDone[m.st.part.peer] = true
					if !fi.initial || len(initialDone) < len(streams) {
						continue
					}
				} else if !fi.bookmarks || !allPositions(pos) {
					continue
				}
			}
			if err := fi.sink.event(w, ev, watchcache.Position{Parts: pos}); err != nil {
				return
			}
			if len(in) == 0 {
				fl.Flush()
			}
		}
	}
}

// streamEvent is what a fan-in receives: an event of one part's stream, or its end.
type streamEvent struct {
	st   *partStream
	ev   partEvent
	done bool
}

// mergeStreams forwards every stream's events to one channel until ctx ends.
func mergeStreams(ctx context.Context, streams []*partStream) <-chan streamEvent {
	out := make(chan streamEvent, 64)
	for _, st := range streams {
		go func() {
			for ev := range st.events {
				select {
				case out <- streamEvent{st: st, ev: ev}:
				case <-ctx.Done():
					for range st.events {
					}
					return
				}
			}
			select {
			case out <- streamEvent{st: st, done: true}:
			case <-ctx.Done():
			}
		}()
	}
	return out
}

// allPositions reports whether every part has told its position.
func allPositions(pos map[string]watchcache.PartPosition) bool {
	for _, p := range pos {
		if p.RV == "" {
			return false
		}
	}
	return true
}

// watchFrom reads a fan-in watch's resourceVersion: where each part resumes (resume false:
// from now, or as "0" asks). A position of one replica's answer, or one from before a
// cluster moved, is 410, answered here (ok false).
func watchFrom(w http.ResponseWriter, q url.Values, pl plan) (from watchcache.Position, resume, ok bool) {
	rv := q.Get("resourceVersion")
	if rv == "" || rv == "0" {
		return watchcache.Position{}, false, true
	}
	t, isFleet := parseMerged(rv)
	if !isFleet {
		filters.WriteError(w, http.StatusGone, "resourceVersion expired: it comes from one replica's answer and the fleet's clusters are now spread over several; list again")
		return watchcache.Position{}, false, false
	}
	if err := resumable(t, pl); err != nil {
		filters.WriteError(w, http.StatusGone, "resourceVersion expired: "+err.Error()+"; list again")
		return watchcache.Position{}, false, false
	}
	return t, true, true
}

// fanoutNativeWatch is the native API's fan-in. Each part's BOOKMARK moves its position, and
// the watch then sends a BOOKMARK of the fleet's.
func (s *Server) fanoutNativeWatch(w http.ResponseWriter, r *http.Request, pl plan) {
	pl = pl.withSelf(s.opts.Fleet.Identity())
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
	if len(pl.down) > 0 {
		names := make([]string, 0, len(pl.down))
		for c := range pl.down {
			names = append(names, c)
		}
		sort.Strings(names)
		if hv, err := utilnet.NewWarningHeader(299, "-", fmt.Sprintf("clusters %s: no live replica owns them; this watch ends with 410 when one does", strings.Join(names, ", "))); err == nil {
			w.Header().Add("Warning", hv)
		}
	}
	buf := getBuffer()
	defer putBuffer(buf)
	s.serve(w, r, fanIn{
		pl: pl, from: from, bookmarks: q.Get("allowWatchBookmarks") != "false", contentType: "application/x-ndjson",
		sink: &nativeFanSink{buf: buf},
		query: func(p part) partQuery {
			pq := restrictTo(q, p.clusters)
			pq.Set("allowWatchBookmarks", "true")
			pq.Del("resourceVersion")
			if resume {
				rv, _ := partPosition(from, p)
				pq.Set("resourceVersion", rv)
			}
			return partQuery{path: r.URL.Path, query: pq, kind: "watch"}
		},
	})
}

// nativeFanSink writes a native fan-in: events as their part wrote them, BOOKMARKs of the
// fleet's position.
type nativeFanSink struct{ buf *bytes.Buffer }

func (k *nativeFanSink) event(w io.Writer, ev partEvent, pos watchcache.Position) error {
	buf := k.buf
	buf.Reset()
	switch {
	case ev.typ == api.Bookmark:
		var b api.BookmarkObject
		b.Kind = "Bookmark"
		b.Metadata.ResourceVersion = pos.String()
		ob, _ := json.Marshal(b)
		_ = json.NewEncoder(buf).Encode(api.WatchEvent{Type: api.Bookmark, Object: ob})
	case ev.render != nil:
		if err := ev.render(buf, "", false); err != nil {
			return err
		}
	default:
		buf.Write(ev.line)
		buf.WriteByte('\n')
	}
	_, err := w.Write(buf.Bytes())
	return err
}

func (k *nativeFanSink) gone(w io.Writer, msg string) {
	b, _ := json.Marshal(errorObject(http.StatusGone, msg))
	_ = json.NewEncoder(w).Encode(api.WatchEvent{Type: api.ErrorEvent, Object: b})
}

// fanoutKubeWatch is the Kubernetes API's fan-in. opts are the query decoded (listOptions).
func (s *Server) fanoutKubeWatch(w http.ResponseWriter, r *http.Request, pl plan, opts metav1.ListOptions) {
	pl = pl.withSelf(s.opts.Fleet.Identity())
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
	timeout, pq0 := watchTimeout(q, opts.TimeoutSeconds)
	s.warnDown(w, r.Context(), pl.down, nil)
	buf := getBuffer()
	defer putBuffer(buf)
	s.serve(w, r, fanIn{
		pl: pl, from: from, bookmarks: opts.AllowWatchBookmarks, initial: opts.SendInitialEvents != nil && *opts.SendInitialEvents,
		timeout: timeout, contentType: "application/json", sink: &kubeFanSink{buf: buf},
		query: func(p part) partQuery {
			pq := restrictTo(pq0, p.clusters)
			pq.Del("resourceVersion")
			if resume {
				rv, _ := partPosition(from, p)
				pq.Set("resourceVersion", rv)
			} else if rv := q.Get("resourceVersion"); rv != "" {
				pq.Set("resourceVersion", rv)
			}
			return partQuery{kube: true, path: r.URL.Path, query: pq, kind: "watch"}
		},
	})
}

// rawKubeEvent is one event of a Kubernetes watch, its object kept raw.
type rawKubeEvent struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

// kubeFanSink writes a Kubernetes fan-in: every object and BOOKMARK with the fleet's position
// as its resourceVersion, and a Table's columns once.
type kubeFanSink struct {
	buf         *bytes.Buffer
	columnsSent bool
}

func (k *kubeFanSink) event(w io.Writer, ev partEvent, pos watchcache.Position) error {
	buf := k.buf
	buf.Reset()
	if ev.render != nil {
		if err := ev.render(buf, pos.String(), k.columnsSent); err != nil {
			return err
		}
	} else {
		obj := ev.obj
		if cd, ok := obj["columnDefinitions"]; ok && k.columnsSent && string(cd) != "null" && string(cd) != "[]" {
			delete(obj, "columnDefinitions")
		}
		ev.meta["resourceVersion"], _ = json.Marshal(pos.String())
		obj["metadata"], _ = json.Marshal(ev.meta)
		ob, err := json.Marshal(obj)
		if err != nil {
			return err
		}
		if err := json.NewEncoder(buf).Encode(rawKubeEvent{Type: ev.typ, Object: ob}); err != nil {
			return err
		}
	}
	if ev.typ != api.Bookmark {
		k.columnsSent = true // a Table watch's first object carries them
	}
	_, err := w.Write(buf.Bytes())
	return err
}

func (k *kubeFanSink) gone(w io.Writer, msg string) {
	st, _ := json.Marshal(filters.StatusOf(http.StatusGone, msg))
	_ = json.NewEncoder(w).Encode(rawKubeEvent{Type: string(api.ErrorEvent), Object: st})
}
