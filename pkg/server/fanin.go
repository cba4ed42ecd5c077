package server

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/filters"
)

// fanSink writes a watch of a partReader (the fleet's, here) in its API's wire form.
type fanSink interface {
	// event writes an object's event, or a BOOKMARK, at the position ev.rv.
	event(w io.Writer, ev partEvent) error
	// gone writes the ERROR event that ends the watch with 410.
	gone(w io.Writer, msg string)
}

// writeWatch streams st until it ends or the client leaves: the front of every fan-out watch.
func (s *Server) writeWatch(w http.ResponseWriter, r *http.Request, fl http.Flusher, st *partStream, contentType string, sink fanSink) {
	s.metrics.watches.Inc()
	defer s.metrics.watches.Dec()
	addWarnings(w.Header(), st.warnings)
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(http.StatusOK)
	fl.Flush()
	for {
		select {
		case <-r.Context().Done():
			return
		case ev, ok := <-st.events:
			if !ok {
				return // its timeout: a clean end, the client resumes from its last position
			}
			if ev.typ == api.ErrorEvent {
				if ev.line != nil {
					_, _ = w.Write(append(ev.line, '\n')) // a part's own, in this API's form
				} else {
					sink.gone(w, ev.gone)
				}
				fl.Flush()
				return
			}
			if err := sink.event(w, ev); err != nil {
				// The client went away, or an object could not be encoded: end with 410
				// rather than cleanly, so that a client relists instead of resuming into
				// the same event.
				sink.gone(w, "this watch cannot go on ("+err.Error()+"); list again")
				fl.Flush()
				return
			}
			if len(st.events) == 0 {
				fl.Flush()
			}
		}
	}
}

// watchFleet answers a fan-out watch of either API: the fleet's stream, written by sink.
func (s *Server) watchFleet(w http.ResponseWriter, r *http.Request, pl plan, kube bool, contentType string, sink fanSink) {
	fl, ok := w.(http.Flusher)
	if !ok {
		filters.WriteError(w, http.StatusInternalServerError, "streaming unsupported")
		return
	}
	release, ok := s.limits.AcquireWatch(w)
	if !ok {
		return
	}
	defer release()
	st, err := s.fleet(r, pl).watch(r.Context(), partQuery{kube: kube, path: r.URL.Path, query: r.URL.Query(), kind: "watch"})
	if err != nil {
		writePeerFailure(w, err)
		return
	}
	s.writeWatch(w, r, fl, st, contentType, sink)
}

// fanoutNativeWatch is the native API's fan-out watch.
func (s *Server) fanoutNativeWatch(w http.ResponseWriter, r *http.Request, pl plan) {
	buf := getBuffer()
	defer putBuffer(buf)
	s.watchFleet(w, r, pl, false, "application/x-ndjson", &nativeFanSink{buf: buf})
}

// nativeFanSink writes a native fan-in: events as their part wrote them, BOOKMARKs of the
// fleet's position.
type nativeFanSink struct{ buf *bytes.Buffer }

func (k *nativeFanSink) event(w io.Writer, ev partEvent) error {
	buf := k.buf
	buf.Reset()
	switch {
	case ev.typ == api.Bookmark:
		var b api.BookmarkObject
		b.Kind = "Bookmark"
		b.Metadata.ResourceVersion = ev.rv
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

// fanoutKubeWatch is the Kubernetes API's fan-out watch.
func (s *Server) fanoutKubeWatch(w http.ResponseWriter, r *http.Request, pl plan) {
	buf := getBuffer()
	defer putBuffer(buf)
	s.watchFleet(w, r, pl, true, "application/json", &kubeFanSink{buf: buf})
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

func (k *kubeFanSink) event(w io.Writer, ev partEvent) error {
	buf := k.buf
	buf.Reset()
	if ev.render != nil {
		if err := ev.render(buf, ev.rv, k.columnsSent); err != nil {
			return err
		}
	} else if err := k.rewrite(buf, ev); err != nil {
		return err
	}
	if ev.typ != api.Bookmark {
		k.columnsSent = true // a Table watch's first object carries them
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// rewrite appends a peer's event with the fleet's position (ev.rv) as its object's
// resourceVersion. The position the peer gave it is a token of base64 characters: in the
// object's JSON, `"resourceVersion":"<token>"` is a key and its value (inside a string value
// the quotes would be escaped). When it occurs once, it is the object's own, and it is replaced
// where it is: nothing is re-encoded. Otherwise (another field holds the same key and token, or
// the object has none, as a Table's metadata), and for a Table whose columns were sent already,
// the object is decoded, changed and encoded again.
func (k *kubeFanSink) rewrite(buf *bytes.Buffer, ev partEvent) error {
	buf.WriteString(`{"type":`)
	writeString(buf, ev.typ) // the peer's, escaped
	buf.WriteString(`,"object":`)
	old := []byte(`"resourceVersion":"` + ev.sent + `"`)
	// Only where the token is the key's value once: a field of the object that holds the same
	// key and token (written to match it) takes the decoding path.
	if i := bytes.Index(ev.object, old); ev.sent != "" && i >= 0 && bytes.Count(ev.object, old) == 1 && !(ev.table && k.columnsSent) {
		buf.Write(ev.object[:i])
		buf.WriteString(`"resourceVersion":`)
		writeName(buf, ev.rv)
		buf.Write(ev.object[i+len(old):])
		buf.WriteString("}\n")
		return nil
	}
	var obj, meta map[string]json.RawMessage
	if err := json.Unmarshal(ev.object, &obj); err != nil {
		return err
	}
	if k.columnsSent {
		delete(obj, "columnDefinitions")
	}
	_ = json.Unmarshal(obj["metadata"], &meta)
	if meta == nil {
		meta = map[string]json.RawMessage{}
	}
	meta["resourceVersion"], _ = json.Marshal(ev.rv)
	obj["metadata"], _ = json.Marshal(meta)
	ob, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	buf.Write(ob)
	buf.WriteString("}\n")
	return nil
}

func (k *kubeFanSink) gone(w io.Writer, msg string) {
	st, _ := json.Marshal(filters.StatusOf(http.StatusGone, msg))
	_ = json.NewEncoder(w).Encode(rawKubeEvent{Type: string(api.ErrorEvent), Object: st})
}
