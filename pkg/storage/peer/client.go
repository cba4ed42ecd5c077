package peer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/auth"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/storage"
)

// Paths of the envelope, under a replica's advertised URL. They are the replicas' own, not an
// API for clients: with auth on, only a peer's certificate opens them.
const (
	Path            = "/multicache/v1/peer/"
	ListPath        = Path + "list"
	GetPath         = Path + "get"
	WatchPath       = Path + "watch"
	ClustersPath    = Path + "clusters"
	DefinitionsPath = Path + "definitions"
	ResourcesPath   = Path + "resources"
	RelayPath       = Path + "relay"
	SummaryPath     = Path + "summary"
)

// Client is the Reader and Status of another replica's share of a plan, over the envelope.
// Calls name the caller of their context (its user, groups, UID and extras) when there are peer
// certificates, and carry no credentials ever.
type Client struct {
	// ID and URL are the replica's identity and advertised URL, as its Lease says.
	ID, URL string
	// Clients makes the HTTP client of the calls (Clients.For(ID)).
	Clients *Clients
	// Timeout bounds every read of an answer's body but a watch's (the wait for its headers
	// is bounded by the client); 0: none.
	Timeout time.Duration
	// Latency observes each call until its answer's headers, by kind and code; nil: none.
	Latency *prometheus.HistogramVec
}

var (
	_ storage.Reader = (*Client)(nil)
	_ storage.Status = (*Client)(nil)
)

// call posts opts to path and returns the answer if it is 200; any other answer, and a
// failure to reach the replica, is its error: the replica's own Status, or 503. To a replica
// remembered to speak only an older version (Clients.noteOlder), a call that means the same in
// that version goes in it at once; the replica is forgotten when its answer names a newer
// version it speaks (NewestProtocolHeader: updated in place) or comes in another version (the
// call then goes as to any replica). Any other call goes as callNewest makes it.
func (c *Client) call(ctx context.Context, path, kind string, opts any) (*http.Response, error) {
	if v := c.Clients.olderOf(c.ID, c.URL); v != "" {
		// A replica of the previous release, found so lately: the call goes in its version
		// at once when it means the same there.
		if older, err := olderCall(v, opts); err == nil {
			resp, err := c.callIn(ctx, v, path, kind, older)
			switch {
			case err != nil:
				return nil, err
			case resp.Header.Get(NewestProtocolHeader) == ProtocolVersion:
				// Updated in place since: this answer is right in v, and the next call goes
				// in this release's version.
				c.Clients.forgetOlder(c.ID, c.URL)
			case resp.Header.Get(ProtocolHeader) != v:
				// It speaks another version now: forget it, and call it as any replica.
				_ = c.answerError(v, resp)
				c.Clients.forgetOlder(c.ID, c.URL)
				return c.callNewest(ctx, path, kind, opts)
			}
			if resp.StatusCode == http.StatusOK {
				return resp, nil
			}
			return nil, c.answerError(v, resp) // its own refusal, in its version
		}
	}
	return c.callNewest(ctx, path, kind, opts)
}

// callNewest makes a call in ProtocolVersion. A replica that refuses it with 503 naming an
// older version this release speaks is remembered (noteOlder), and called again in that
// version when the call means the same there, else refused 503 saying why; any other answer
// naming an older version is that replica's own refusal, read as it gave it.
func (c *Client) callNewest(ctx context.Context, path, kind string, opts any) (*http.Response, error) {
	resp, err := c.callIn(ctx, ProtocolVersion, path, kind, opts)
	if err != nil {
		return nil, err
	}
	v := resp.Header.Get(ProtocolHeader)
	switch {
	case resp.StatusCode == http.StatusOK && v == ProtocolVersion:
		return resp, nil
	case resp.StatusCode == http.StatusOK, v == "" || v == ProtocolVersion || !Speaks(v):
		// (A 200 of another version would be misread: it is 503, as refusal says.)
		return nil, c.answerError(ProtocolVersion, resp)
	case resp.StatusCode != http.StatusServiceUnavailable:
		// Not a refusal of the version: the replica's own (its access, its limits), which
		// names its version as every answer of its route does.
		return nil, c.answerError(v, resp)
	}
	_ = c.answerError(ProtocolVersion, resp) // its body read and closed: the call is made again, or refused
	c.Clients.noteOlder(c.ID, c.URL, v)
	older, why := olderCall(v, opts)
	if why != nil {
		return nil, storage.Retry(http.StatusServiceUnavailable, fmt.Sprintf("replica %q speaks peer protocol %q: %v; retry once the rolling update is done", c.ID, v, why))
	}
	if resp, err = c.callIn(ctx, v, path, kind, older); err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusOK && resp.Header.Get(ProtocolHeader) == v {
		return resp, nil
	}
	return nil, c.answerError(v, resp)
}

// callIn posts opts to path in envelope version v and returns the answer, whatever its status
// and version; failing to reach the replica is its error.
func (c *Client) callIn(ctx context.Context, v, path, kind string, opts any) (*http.Response, error) {
	start := time.Now()
	body, err := json.Marshal(opts)
	if err != nil {
		return nil, storage.Errorf(http.StatusInternalServerError, "replica %q: %v", c.ID, err)
	}
	target := strings.TrimSuffix(c.URL, "/") + path
	if c.Clients.Trusted() && !strings.HasPrefix(target, "https://") {
		return nil, storage.Retry(http.StatusServiceUnavailable, fmt.Sprintf("replica %q advertises %s: with peer certificates replicas are called over https only", c.ID, c.URL))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return nil, storage.Errorf(http.StatusServiceUnavailable, "replica %q: %v", c.ID, err)
	}
	req.Header.Set("Content-Type", "application/json")
	// A fan-out's parts are not gzipped at one hop to be gunzipped at the next: the caller's
	// own Accept-Encoding stays with the replica it asked.
	req.Header.Set("Accept-Encoding", "identity")
	req.Header.Set(ProtocolHeader, v)
	if c.Clients.Trusted() {
		// Its certificate proves the peer; ours vouches for the caller.
		if u := auth.UserOf(auth.AccessOf(ctx)); u != nil {
			auth.SetPeerIdentity(req.Header, u)
		}
	}
	resp, err := c.Clients.For(c.ID).Do(req)
	code := "error"
	if err == nil {
		code = strconv.Itoa(resp.StatusCode)
	}
	if c.Latency != nil {
		c.Latency.WithLabelValues(kind, code).Observe(time.Since(start).Seconds())
	}
	if err != nil {
		return nil, storage.Retry(http.StatusServiceUnavailable, fmt.Sprintf("replica %q did not answer: %v", c.ID, err))
	}
	return resp, nil
}

// answerError reads and closes resp, the answer to a call of version v that is not a 200 of
// v, and returns it as an error (refusal).
func (c *Client) answerError(v string, resp *http.Response) error {
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return refusal(c.ID, v, resp, b)
}

// refusal is a replica's refusal: its Status as it gave it (the caller's own answer), but for
// a refusal of this replica itself (401), an answer without the envelope's header or of
// another version than the call's, v (a replica of another release, during a rolling update),
// and a failure of the replica (5xx), which are 503: the caller did nothing wrong, and may
// retry. A 429 or 503 always carries a Retry-After.
func refusal(id, v string, resp *http.Response, body []byte) error {
	var st metav1.Status
	if json.Unmarshal(body, &st) != nil || st.Code == 0 {
		st = storage.Error(resp.StatusCode, strings.TrimSpace(string(body))).ErrStatus
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		return storage.Retry(http.StatusServiceUnavailable, fmt.Sprintf("replica %q refused this replica's call (%s): are its peer certificates signed by the same CA?", id, st.Message))
	case resp.Header.Get(ProtocolHeader) == "":
		return storage.Retry(http.StatusServiceUnavailable, fmt.Sprintf("replica %q does not answer this release's peer calls (it answered %d: %s); retry once the rolling update is done", id, resp.StatusCode, st.Message))
	case resp.Header.Get(ProtocolHeader) != v:
		return storage.Retry(http.StatusServiceUnavailable, fmt.Sprintf("replica %q speaks peer protocol %q, this call %q (this release speaks %s; it answered %d: %s); retry once the rolling update is done",
			id, resp.Header.Get(ProtocolHeader), v, strings.Join(spoken, " and "), resp.StatusCode, st.Message))
	case resp.StatusCode >= 500 && resp.StatusCode != http.StatusServiceUnavailable:
		return storage.Retry(http.StatusServiceUnavailable, fmt.Sprintf("replica %q failed: %d %s", id, resp.StatusCode, st.Message))
	}
	if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && ra > 0 && (st.Details == nil || st.Details.RetryAfterSeconds == 0) {
		if st.Details == nil {
			st.Details = &metav1.StatusDetails{}
		}
		st.Details.RetryAfterSeconds = int32(ra)
	}
	if (st.Code == http.StatusTooManyRequests || st.Code == http.StatusServiceUnavailable) && (st.Details == nil || st.Details.RetryAfterSeconds == 0) {
		if st.Details == nil {
			st.Details = &metav1.StatusDetails{}
		}
		st.Details.RetryAfterSeconds = 1
	}
	return &apierrors.StatusError{ErrStatus: st}
}

// List reads the replica's part of a list. Its items stream (List.More) as the replica sends
// them: an unpaged list is never held whole here. Each read of the body is bounded by Timeout.
func (c *Client) List(ctx context.Context, opts storage.ListOptions) (*storage.List, error) {
	return c.listOrGet(ctx, ListPath, "list", opts)
}

// Get reads the replica's objects of a name.
func (c *Client) Get(ctx context.Context, opts storage.GetOptions) (*storage.List, error) {
	l, err := c.listOrGet(ctx, GetPath, "get", opts)
	if err != nil {
		return nil, err
	}
	return l, storage.Drain(l) // a get's few items, held
}

func (c *Client) listOrGet(ctx context.Context, path, kind string, opts any) (*storage.List, error) {
	ctx, cancel := context.WithCancel(ctx)
	resp, err := c.call(ctx, path, kind, opts)
	if err != nil {
		cancel()
		return nil, err
	}
	body := &deadlineReader{r: resp.Body, d: c.Timeout, cancel: cancel}
	st := &itemStream{id: c.ID, rd: newReader(body), body: resp.Body, cancel: cancel}
	f, err := st.rd.next()
	if err != nil || f.kind != "h" {
		st.Close()
		if err == nil {
			err = fmt.Errorf("%w: the answer starts with %q", errMalformed, f.kind)
		}
		return nil, storage.Retry(http.StatusServiceUnavailable, fmt.Sprintf("replica %q: %v", c.ID, err))
	}
	h := f.head
	return &storage.List{More: st, ResourceVersion: h.ResourceVersion, Epoch: h.Epoch, Continue: h.Continue, Count: h.Count,
		Freshness: h.Freshness, Warnings: h.Warnings}, nil
}

// itemStream is the items of a replica's answer, read as they come.
type itemStream struct {
	id     string
	rd     *reader
	body   io.Closer
	cancel context.CancelFunc
	once   sync.Once
	done   bool
}

func (s *itemStream) Next() (storage.Item, bool, error) {
	if s.done {
		return storage.Item{}, false, nil
	}
	f, err := s.rd.next()
	switch {
	case err != nil:
		s.Close()
		return storage.Item{}, false, storage.Retry(http.StatusServiceUnavailable, fmt.Sprintf("replica %q: the answer broke off: %v", s.id, err))
	case f.kind == "i":
		return f.item, true, nil
	case f.kind == "e":
		s.Close()
		return storage.Item{}, false, nil
	case f.kind == "x":
		s.Close()
		return storage.Item{}, false, &apierrors.StatusError{ErrStatus: *f.status}
	}
	s.Close()
	return storage.Item{}, false, storage.Retry(http.StatusServiceUnavailable, fmt.Sprintf("replica %q: %v: %q in a list", s.id, errMalformed, f.kind))
}

func (s *itemStream) Close() {
	s.once.Do(func() {
		s.done = true
		_ = s.body.Close()
		s.cancel()
	})
}

// deadlineReader bounds each Read of r by d: a read that takes longer cancels the request, and
// the read fails. An answer that keeps coming, however long it is, is never cut.
type deadlineReader struct {
	r      io.Reader
	d      time.Duration
	cancel context.CancelFunc
}

func (dr *deadlineReader) Read(p []byte) (int, error) {
	if dr.d <= 0 {
		return dr.r.Read(p)
	}
	t := time.AfterFunc(dr.d, dr.cancel)
	n, err := dr.r.Read(p)
	if !t.Stop() && err != nil {
		err = fmt.Errorf("no data for %s (sharding.peerTimeout): %w", dr.d, err)
	}
	return n, err
}

// Watch opens the replica's part of a watch: the call is bounded until its headers (Clients'
// timeout), and its events stream in Run.
func (c *Client) Watch(ctx context.Context, opts storage.WatchOptions) (storage.Watch, error) {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	resp, err := c.call(wctx, WatchPath, "watch", opts)
	stop()
	if err != nil {
		cancel()
		return nil, err
	}
	if ctx.Err() != nil {
		resp.Body.Close()
		cancel()
		return nil, storage.Error(http.StatusServiceUnavailable, ctx.Err().Error())
	}
	w := &peerWatch{id: c.ID, rd: newReader(resp.Body), body: resp.Body, cancel: cancel}
	f, err := w.rd.next()
	if err != nil || f.kind != "h" {
		w.close()
		return nil, storage.Retry(http.StatusServiceUnavailable, fmt.Sprintf("replica %q: the watch's answer did not start: %v", c.ID, err))
	}
	w.head = f.head
	return w, nil
}

// peerWatch is a replica's watch, read as it comes.
type peerWatch struct {
	id     string
	rd     *reader
	body   io.Closer
	cancel context.CancelFunc
	head   head
	once   sync.Once
}

func (w *peerWatch) Freshness() []api.ClusterFreshness { return w.head.Freshness }
func (w *peerWatch) Warnings() []string                { return w.head.Warnings }

func (w *peerWatch) close() {
	w.once.Do(func() {
		_ = w.body.Close()
		w.cancel()
	})
}

// Run relays the replica's events to sink until the stream ends (its timeout: nil), ctx ends
// (nil), or it fails: the replica's ERROR (its Status), or a broken stream (503).
func (w *peerWatch) Run(ctx context.Context, sink storage.Sink) error {
	defer w.close()
	stop := context.AfterFunc(ctx, w.close)
	defer stop()
	for {
		f, err := w.rd.next()
		switch {
		case errors.Is(err, io.EOF) && ctx.Err() == nil:
			return nil
		case ctx.Err() != nil:
			return nil
		case err != nil:
			return storage.Errorf(http.StatusServiceUnavailable, "the watch of replica %q broke off: %v", w.id, err)
		}
		switch f.kind {
		case "ev":
			err = sink.Event(f.typ, f.item)
		case "b":
			err = sink.Bookmark(f.rv, f.initialEnd)
		case "x":
			return &apierrors.StatusError{ErrStatus: *f.status}
		default:
			return storage.Errorf(http.StatusServiceUnavailable, "the watch of replica %q: %v: %q", w.id, errMalformed, f.kind)
		}
		if err != nil {
			return err
		}
		if w.rd.r.Buffered() == 0 {
			sink.Flush()
		}
	}
}

// Clusters reads the replica's clusters.
func (c *Client) Clusters(ctx context.Context, opts storage.ClusterOptions) ([]api.Cluster, error) {
	var out []api.Cluster
	return out, c.getJSON(ctx, ClustersPath, "clusters", opts, &out)
}

// definition is a Definition on the wire.
type definition struct {
	Def      json.RawMessage `json:"definition"`
	From     string          `json:"from"`
	Clusters []string        `json:"clusters"`
}

// Definitions reads the replica's definitions.
func (c *Client) Definitions(ctx context.Context, opts storage.ClusterOptions) ([]storage.Definition, error) {
	var wire []definition
	if err := c.getJSON(ctx, DefinitionsPath, "definitions", opts, &wire); err != nil {
		return nil, err
	}
	return decodeDefinitions(c.ID, wire)
}

func (c *Client) getJSON(ctx context.Context, path, kind string, opts, out any) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp, err := c.call(ctx, path, kind, opts)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(&deadlineReader{r: resp.Body, d: c.Timeout, cancel: cancel}).Decode(out); err != nil {
		return storage.Retry(http.StatusServiceUnavailable, fmt.Sprintf("replica %q: %s: %v", c.ID, kind, err))
	}
	return nil
}

// Resources reads how the replica's clusters serve the configured resources.
func (c *Client) Resources(ctx context.Context, opts storage.ClusterOptions) ([]clusterset.ClusterStatus, error) {
	var out []clusterset.ClusterStatus
	return out, c.getJSON(ctx, ResourcesPath, "resources", opts, &out)
}

// Summarize reads the replica's summary of its part.
func (c *Client) Summarize(ctx context.Context, opts storage.SummaryOptions) (*storage.Summary, error) {
	var out storage.Summary
	if err := c.getJSON(ctx, SummaryPath, "summary", opts, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
