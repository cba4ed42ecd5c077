package peer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/multicache/multicache/pkg/storage"
)

// Handler answers the envelope: another replica's part of a plan, read from Reader and Status
// (this replica's own) and encoded by Encoders as the request asks. Authentication, limits and
// the coordination gate are the caller's to apply before it.
type Handler struct {
	Reader   storage.Reader
	Status   storage.Status
	Encoders storage.Encoders
	// Relay answers a relayed GET as this replica answers its own callers; nil: none.
	Relay http.Handler
}

// ServeHTTP answers one call.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// A call of a version this release speaks is answered in it (OldestProtocolVersion); one of
	// another version would read the answer in its own form, and is refused naming the newest.
	v := r.Header.Get(ProtocolHeader)
	w.Header().Set(ProtocolHeader, AnswerVersion(v))
	w.Header().Set(NewestProtocolHeader, ProtocolVersion)
	if !Speaks(v) {
		writeError(w, storage.Retry(http.StatusServiceUnavailable, fmt.Sprintf("this replica speaks peer protocol %s, the caller %q; retry once the rolling update is done", strings.Join(spoken, " and "), v)))
		return
	}
	if r.Method != http.MethodPost {
		writeError(w, storage.Errorf(http.StatusMethodNotAllowed, "%s: POST only", r.URL.Path))
		return
	}
	body := io.LimitReader(r.Body, 1<<20)
	decode := func(opts any) bool {
		if err := json.NewDecoder(body).Decode(opts); err != nil {
			writeError(w, storage.Errorf(http.StatusBadRequest, "%s: %v", r.URL.Path, err))
			return false
		}
		if v == ProtocolVersion {
			return true
		}
		// An older caller's call is answered only where both releases answer alike.
		if err := notMeantAlike(v, reflect.ValueOf(opts).Elem().Interface()); err != nil {
			writeError(w, storage.Retry(http.StatusServiceUnavailable, fmt.Sprintf("this replica answers the call differently from the caller: %v; retry once the rolling update is done", err)))
			return false
		}
		return true
	}
	ctx := r.Context()
	switch r.URL.Path {
	case ListPath:
		var opts storage.ListOptions
		if decode(&opts) {
			l, err := h.Reader.List(ctx, opts)
			h.writeList(ctx, w, opts.Encoding, opts.Resource, l, err)
		}
	case GetPath:
		var opts storage.GetOptions
		if decode(&opts) {
			l, err := h.Reader.Get(ctx, opts)
			h.writeList(ctx, w, opts.Encoding, opts.Resource, l, err)
		}
	case WatchPath:
		var opts storage.WatchOptions
		if decode(&opts) {
			h.watch(ctx, w, opts)
		}
	case ClustersPath:
		var opts storage.ClusterOptions
		if decode(&opts) {
			cl, err := h.Status.Clusters(ctx, opts)
			writeJSON(w, cl, err)
		}
	case ResourcesPath:
		var opts storage.ClusterOptions
		if decode(&opts) {
			rs, err := h.Status.Resources(ctx, opts)
			writeJSON(w, rs, err)
		}
	case SummaryPath:
		var opts storage.SummaryOptions
		if decode(&opts) {
			sm, ok := h.Reader.(storage.Summarizer)
			if !ok {
				writeError(w, storage.Error(http.StatusNotImplemented, "this replica does not summarize"))
				return
			}
			sum, err := sm.Summarize(ctx, opts)
			writeJSON(w, sum, err)
		}
	case RelayPath:
		h.relay(w, r)
	case DefinitionsPath:
		var opts storage.ClusterOptions
		if decode(&opts) {
			defs, err := h.Status.Definitions(ctx, opts)
			writeJSON(w, encodeDefinitions(defs), err)
		}
	default:
		writeError(w, storage.Errorf(http.StatusNotFound, "no such peer call: %s", r.URL.Path))
	}
}

// writeList writes a list's or get's answer: the head, then each item encoded, flushed as the
// buffer fills. A failure after the head is the answer's last frame.
func (h *Handler) writeList(ctx context.Context, w http.ResponseWriter, e storage.Encoding, resource string, l *storage.List, err error) {
	if err != nil {
		writeError(w, err)
		return
	}
	enc, err := h.Encoders(ctx, e, resource)
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-multicache-peer")
	fw := newWriter(w)
	defer fw.release()
	fw.head(head{ResourceVersion: l.ResourceVersion, Epoch: l.Epoch, Continue: l.Continue, Count: l.Count, Freshness: l.Freshness, Warnings: l.Warnings})
	var raw []byte
	scratch := storage.GetBuffer()
	defer storage.PutBuffer(scratch)
	one := func(it storage.Item) error {
		rv := it.ResourceVersion(l.Epoch)
		if it.Raw != nil {
			raw = it.Raw
		} else {
			scratch.Reset()
			if err := enc.Append(scratch, it, rv); err != nil {
				return fmt.Errorf("cluster %q: encode %s: %w", it.Key.Cluster, it.Key, err)
			}
			raw = scratch.Bytes()
		}
		fw.object("", it, rv, raw)
		if fw.buf.Len() >= 256<<10 {
			return fw.flush()
		}
		return nil
	}
	fail := func(err error) {
		fw.fail(storage.StatusOf(err).ErrStatus)
		_ = fw.flush()
	}
	for _, it := range l.Items {
		if err := one(it); err != nil {
			fail(err)
			return
		}
	}
	if l.More != nil {
		defer l.More.Close()
		for {
			it, ok, err := l.More.Next()
			if err != nil {
				fail(err)
				return
			}
			if !ok {
				break
			}
			if err := one(it); err != nil {
				fail(err)
				return
			}
		}
	}
	fw.end()
	_ = fw.flush()
}

// watch opens the watch and relays it: the head, then each event as it comes, flushed; an end
// that is not clean is its last frame.
func (h *Handler) watch(ctx context.Context, w http.ResponseWriter, opts storage.WatchOptions) {
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, storage.Error(http.StatusInternalServerError, "streaming unsupported"))
		return
	}
	enc, err := h.Encoders(ctx, opts.Encoding, opts.Resource)
	if err != nil {
		writeError(w, err)
		return
	}
	wt, err := h.Reader.Watch(ctx, opts)
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-multicache-peer")
	w.WriteHeader(http.StatusOK)
	s := &frameSink{fw: newWriter(w), fl: fl, enc: enc, scratch: storage.GetBuffer()}
	defer storage.PutBuffer(s.scratch)
	defer s.fw.release()
	s.fw.head(head{Freshness: wt.Freshness(), Warnings: wt.Warnings()})
	s.Flush()
	if err := wt.Run(ctx, s); err != nil && ctx.Err() == nil {
		s.fw.fail(storage.StatusOf(err).ErrStatus)
		s.Flush()
	}
}

// frameSink writes a watch's events as frames.
type frameSink struct {
	fw      *writer
	fl      http.Flusher
	enc     storage.Encoder
	scratch *bytes.Buffer
}

func (s *frameSink) Event(typ string, it storage.Item) error {
	raw := it.Raw
	if raw == nil {
		s.scratch.Reset()
		if err := s.enc.Append(s.scratch, it, it.RV); err != nil {
			return fmt.Errorf("cluster %q: encode %s: %w", it.Key.Cluster, it.Key, err)
		}
		raw = s.scratch.Bytes()
	}
	s.fw.object(typ, it, it.RV, raw)
	if s.fw.buf.Len() >= 64<<10 {
		return s.fw.flush()
	}
	return nil
}

func (s *frameSink) Bookmark(rv string, initialEnd bool) error {
	s.fw.bookmark(rv, initialEnd)
	return nil
}

func (s *frameSink) Flush() {
	_ = s.fw.flush()
	s.fl.Flush()
}

// writeError answers err's Status, with its Retry-After.
func writeError(w http.ResponseWriter, err error) {
	st := storage.StatusOf(err).ErrStatus
	if st.Details != nil && st.Details.RetryAfterSeconds > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(st.Details.RetryAfterSeconds)))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(st.Code))
	_ = json.NewEncoder(w).Encode(st)
}

func writeJSON(w http.ResponseWriter, v any, err error) {
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func encodeDefinitions(defs []storage.Definition) []definition {
	out := make([]definition, len(defs))
	for i, d := range defs {
		b, _ := json.Marshal(d.Def)
		out[i] = definition{Def: b, From: d.From, Clusters: d.Clusters}
	}
	return out
}

func decodeDefinitions(id string, wire []definition) ([]storage.Definition, error) {
	out := make([]storage.Definition, len(wire))
	for i, d := range wire {
		def := &apiextensionsv1.CustomResourceDefinition{}
		if err := json.Unmarshal(d.Def, def); err != nil {
			return nil, storage.Errorf(http.StatusServiceUnavailable, "replica %q: definition %d: %v", id, i, err)
		}
		out[i] = storage.Definition{Def: def, From: d.From, Clusters: d.Clusters}
	}
	return out, nil
}
