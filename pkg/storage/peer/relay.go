package peer

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/multicache/multicache/pkg/storage"
)

// A relay asks a replica for one of its own answers that no Reader reads: the OpenAPI
// documents of a cluster it runs, which it reads from the cluster. The relayed request is a
// GET of the path, with the caller's Accept headers, answered by the replica's Handler.Relay
// as it would answer its own caller.

// relayRequest is a relayed request on the wire.
type relayRequest struct {
	Path   string      `json:"path"`
	Query  string      `json:"query,omitempty"`
	Header http.Header `json:"header,omitempty"`
}

// relayed are the request headers a relay passes on.
var relayed = []string{"Accept", "Accept-Encoding", "If-None-Match", "User-Agent"}

// Relay answers r at the replica, writing its answer to w as it came.
func (c *Client) Relay(w http.ResponseWriter, r *http.Request) {
	rr := relayRequest{Path: r.URL.Path, Query: r.URL.RawQuery, Header: http.Header{}}
	for _, h := range relayed {
		if v := r.Header.Values(h); len(v) > 0 {
			rr.Header[h] = v
		}
	}
	resp, err := c.call(r.Context(), RelayPath, "relay", rr)
	if err != nil {
		writeError(w, err)
		return
	}
	defer resp.Body.Close()
	inner, err := http.ReadResponse(bufio.NewReader(resp.Body), nil)
	if err != nil {
		writeError(w, storage.Errorf(http.StatusServiceUnavailable, "replica %q: relay: %v", c.ID, err))
		return
	}
	defer inner.Body.Close()
	for k, v := range inner.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(inner.StatusCode)
	_, _ = io.Copy(w, inner.Body)
}

// relay answers a relayed request with h.Relay, its whole answer (status, headers, body) the
// body of a 200.
func (h *Handler) relay(w http.ResponseWriter, r *http.Request) {
	if h.Relay == nil {
		writeError(w, storage.Error(http.StatusNotFound, "this replica relays nothing"))
		return
	}
	var rr relayRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&rr); err != nil {
		writeError(w, storage.Errorf(http.StatusBadRequest, "relay: %v", err))
		return
	}
	if !strings.HasPrefix(rr.Path, "/") {
		writeError(w, storage.Errorf(http.StatusBadRequest, "relay: path %q", rr.Path))
		return
	}
	inner := r.Clone(r.Context())
	inner.Method, inner.Body, inner.ContentLength = http.MethodGet, http.NoBody, 0
	inner.URL = &url.URL{Path: rr.Path, RawQuery: rr.Query}
	inner.RequestURI = inner.URL.RequestURI()
	inner.Header = rr.Header.Clone()
	if inner.Header == nil {
		inner.Header = http.Header{}
	}
	rec := &recorded{header: http.Header{}}
	h.Relay.ServeHTTP(rec, inner)
	if rec.code == 0 {
		rec.code = http.StatusOK
	}
	out := &http.Response{StatusCode: rec.code, ProtoMajor: 1, ProtoMinor: 1, Header: rec.header,
		Body: io.NopCloser(bytes.NewReader(rec.body.Bytes())), ContentLength: int64(rec.body.Len())}
	w.Header().Set("Content-Type", "application/http")
	_ = out.Write(w)
}

// recorded is the answer of a relayed request, held: a document, not a stream.
type recorded struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (rec *recorded) Header() http.Header { return rec.header }
func (rec *recorded) WriteHeader(code int) {
	if rec.code == 0 {
		rec.code = code
	}
}
func (rec *recorded) Write(b []byte) (int, error) {
	rec.WriteHeader(http.StatusOK)
	return rec.body.Write(b)
}
