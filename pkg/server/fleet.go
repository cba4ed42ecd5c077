package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/multicache/multicache/pkg/shard"
	"github.com/multicache/multicache/pkg/storage/peer"
	"github.com/multicache/multicache/pkg/watchcache"
)

// Fleet says which replica owns each cluster when replicas share the fleet (a
// shard.Coordinator). With a Fleet, every list, get and watch answers for the whole fleet: the
// clusters this replica runs from memory, the others by asking their owners.
type Fleet interface {
	// Identity is this replica's name among its peers.
	Identity() string
	// Owners lists every cluster of the fleet with its owner, sorted by cluster.
	Owners() []shard.Owner
	// WaitChange is closed when Owners may answer differently.
	WaitChange() <-chan struct{}
}

// peerHeader marks a request one replica sends another: answer from the clusters you run, and
// ask nobody else. Any caller may set it; it only narrows the answer, and auth still applies.
const peerHeader = "X-Multicache-Peer"

// part is the share of a request one replica answers: the clusters it owns.
type part struct {
	peer     string
	url      string
	self     bool
	clusters []string // sorted
}

// set identifies the clusters of a part: a watch position of the peer is valid for the same
// set only.
func (p part) set() string { return watchcache.ClusterSet(p.clusters) }

// plan splits the fleet's clusters that keep accepts among their owners. A cluster whose
// owner is not live (or that no replica holds) is down: the answer reports it unsynced.
type plan struct {
	parts []part
	down  map[string]string // cluster → why no replica answers for it
	// owner of every planned cluster, to tell when one moves.
	owner map[string]string
	// keep is the filter the plan was made with, to make it again and compare (changeFrom).
	keep func(cluster string) bool
}

func (s *Server) plan(keep func(cluster string) bool) plan {
	pl := plan{down: map[string]string{}, owner: map[string]string{}, keep: keep}
	byPeer := map[string]int{}
	for _, o := range s.opts.Fleet.Owners() {
		if keep != nil && !keep(o.Cluster) {
			continue
		}
		pl.owner[o.Cluster] = o.Holder
		switch {
		case o.Holder == "":
			pl.down[o.Cluster] = "no replica owns it yet"
			continue
		case !o.Live && !o.Self:
			pl.down[o.Cluster] = fmt.Sprintf("its owner, replica %q, is down", o.Holder)
			continue
		case !o.Self && o.URL == "":
			pl.down[o.Cluster] = fmt.Sprintf("its owner, replica %q, advertises no URL", o.Holder)
			continue
		}
		i, ok := byPeer[o.Holder]
		if !ok {
			i = len(pl.parts)
			byPeer[o.Holder] = i
			pl.parts = append(pl.parts, part{peer: o.Holder, url: strings.TrimSuffix(o.URL, "/"), self: o.Self})
		}
		pl.parts[i].clusters = append(pl.parts[i].clusters, o.Cluster)
	}
	return pl
}

// withSelf gives a plan no replica could answer a part of this replica's, with no cluster in
// it: the answer then has the resource's own shape (an empty list, a watch of bookmarks).
func (pl plan) withSelf(id string) plan {
	if len(pl.parts) == 0 {
		pl.parts = []part{{peer: id, self: true, clusters: []string{}}}
	}
	return pl
}

// watchTimeout is a watch's timeoutSeconds (seconds, as listOptions decodes it from q): the
// fan-in ends cleanly then, and asks its parts for a minute more so that none ends first. With
// none, or one not positive, it sets no timeout and leaves q as it is.
func watchTimeout(q url.Values, seconds *int64) (time.Duration, url.Values) {
	if seconds == nil || *seconds <= 0 {
		return 0, q
	}
	n := *seconds
	out := url.Values{}
	for k, v := range q {
		out[k] = slices.Clone(v)
	}
	out.Set("timeoutSeconds", strconv.FormatInt(n+60, 10))
	return time.Duration(n) * time.Second, out
}

// local reports whether this replica alone answers the plan: no fan-out needed.
func (pl plan) local() bool {
	return len(pl.down) == 0 && (len(pl.parts) == 0 || (len(pl.parts) == 1 && pl.parts[0].self))
}

// moved says in words how the plan changed since pl was made: a cluster moved, joined, left,
// went down or came back (changeFrom); "" when it did not.
func (s *Server) moved(pl plan) string {
	return changeFrom(pl, s.plan(pl.keep))
}

// parseMerged returns a merged answer's position (watchcache.Position with Parts); ok is false
// for anything else (one replica's position, "0", "").
func parseMerged(s string) (watchcache.Position, bool) {
	if s == "" || s == "0" {
		return watchcache.Position{}, false
	}
	t, err := watchcache.ParsePosition(s)
	return t, err == nil && t.Merged()
}

// partPosition is p's own position in the merged position t: "" when t holds none for it, or
// one for another set of clusters (the part then answers from now).
func partPosition(t watchcache.Position, p part) (string, bool) {
	return t.Part(p.peer, p.set())
}

// partContinue is the continue token of part p's own page of the merged list c continues:
// after the same key, at p's position in c when c holds one for p's clusters, and from now
// otherwise (the order of keys is the fleet's, so the walk stays whole when clusters move).
func partContinue(c watchcache.Continue, p part) string {
	pc := watchcache.Continue{Last: c.Last, Exact: c.Exact}
	if rv, ok := partPosition(c.Position, p); ok && rv != "" {
		if pos, err := watchcache.ParsePosition(rv); err == nil {
			pc.Position = pos
		}
	}
	return pc.String()
}

// resumable reports why t cannot resume a watch of plan pl: every part must have its position,
// for the same clusters.
func resumable(t watchcache.Position, pl plan) error {
	for _, p := range pl.parts {
		if _, ok := partPosition(t, p); !ok {
			return fmt.Errorf("the clusters of replica %q changed since this resourceVersion", p.peer)
		}
	}
	if len(t.Parts) != len(pl.parts) {
		return errors.New("the fleet's owners changed since this resourceVersion")
	}
	return nil
}

// peers sends requests to other replicas.
type peers struct {
	// clients call each peer: with a peer.Trust, over TLS to the identity the fence names,
	// presenting this replica's peer certificate, and the calls name the caller
	// (peertrust.go); without one (auth off) plainly, naming nobody.
	clients *peer.Clients
	timeout time.Duration
	latency *prometheus.HistogramVec
}

// call sends the caller's request, re-aimed at path with query q, to the replica of p. The
// caller's credentials never go with it: with peer certificates its identity does, which the
// peer believes from them only. The response's body must be closed.
func (pc *peers) call(ctx context.Context, r *http.Request, p part, path string, q url.Values, kind string) (*http.Response, error) {
	start := time.Now()
	target := p.url + path
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, fmt.Errorf("replica %q: %w", p.peer, err)
	}
	for _, h := range []string{"Accept", "User-Agent"} {
		if v := r.Header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	req.Header.Set(peerHeader, "1")
	// Replicas answer each other uncompressed: a page of a fleet list is gzipped and gunzipped
	// at every hop otherwise (Go's transport asks for gzip by default), CPU that the replicas,
	// which run side by side, are shorter of than bandwidth. A merged answer is compressed,
	// or not, at the replica the client asked.
	req.Header.Set("Accept-Encoding", "identity")
	if pc.clients.Trusted() {
		if !strings.HasPrefix(target, "https://") {
			return nil, fmt.Errorf("replica %q advertises %s: with peer certificates replicas are called over https only", p.peer, p.url)
		}
		setIdentity(req.Header, r.Context()) // its peer certificate proves the peer; ours vouches for the caller
	}
	resp, err := pc.clients.For(p.peer).Do(req)
	code := "error"
	if err == nil {
		code = strconv.Itoa(resp.StatusCode)
	}
	pc.latency.WithLabelValues(kind, code).Observe(time.Since(start).Seconds())
	if err != nil {
		return nil, fmt.Errorf("replica %q: %w", p.peer, err)
	}
	return resp, nil
}

// peerError is a replica's non-200 answer, or the fan-out's own (refusal, no peer).
type peerError struct {
	peer     string
	code     int
	status   []byte // the answer's body: a Status
	msg      string
	retry    bool     // answer with Retry-After
	warnings []string // Warning headers to answer with
}

func (e *peerError) Error() string {
	if e.peer == "" {
		return e.msg
	}
	return fmt.Sprintf("replica %q answered %d: %s", e.peer, e.code, e.msg)
}

// checkAnswer turns a non-200 answer into a peerError, reading (and closing) its body.
func checkAnswer(p part, resp *http.Response) error {
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return peerErrorOf(p, resp.StatusCode, b)
}

// peerErrorOf is a part's answer code with its body (a Status).
func peerErrorOf(p part, code int, body []byte) *peerError {
	msg := strings.TrimSpace(string(body))
	var st struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &st) == nil && st.Message != "" {
		msg = st.Message
	}
	return &peerError{peer: p.peer, code: code, status: body, msg: msg}
}

// answerRecorder is the http.ResponseWriter of a part answered in process: it keeps the
// header (its Warnings), and the code and body of an error answer.
type answerRecorder struct {
	header http.Header
	code   int
	body   []byte
}

func newAnswerRecorder() *answerRecorder { return &answerRecorder{header: http.Header{}} }

func (a *answerRecorder) Header() http.Header { return a.header }

func (a *answerRecorder) WriteHeader(code int) {
	if a.code == 0 {
		a.code = code
	}
}

func (a *answerRecorder) Write(b []byte) (int, error) {
	a.WriteHeader(http.StatusOK)
	a.body = append(a.body, b...)
	return len(b), nil
}

// inProcess runs read, this replica's own part p of a fan-out, as a request to it would run:
// in a request slot (server.maxRequestsInFlight: past it, 429), within the request timeout,
// its time observed as a peer call's (kind). read writes any error answer to rec and reports
// whether it read; the error returned is then that answer's.
func (s *Server) inProcess(ctx context.Context, p part, kind string, read func(ctx context.Context, rec *answerRecorder) bool) (*answerRecorder, error) {
	start := time.Now()
	rec := newAnswerRecorder()
	ok := false
	s.limits.Request(rec, func() {
		ctx, cancel := context.WithTimeout(ctx, s.opts.RequestTimeout)
		defer cancel()
		ok = read(ctx, rec)
	})
	code := http.StatusOK
	if !ok {
		code = rec.code
	}
	s.metrics.peerLatency.WithLabelValues(kind, strconv.Itoa(code)).Observe(time.Since(start).Seconds())
	if !ok {
		return rec, rec.failure(p)
	}
	return rec, nil
}

// failure is what the recorded answer says went wrong, for part p.
func (a *answerRecorder) failure(p part) error {
	code := a.code
	if code == 0 || code == http.StatusOK {
		code = http.StatusInternalServerError
	}
	return peerErrorOf(p, code, a.body)
}

// partParam narrows a request a replica sends another to the clusters of its part (a comma
// list). Unlike cluster= it names no cluster to the access check: a caller who may not read
// some of them gets them left out, as in a fleet-wide answer, not a 403. Any caller may set
// it; it only narrows.
const partParam = "x-multicache-part"

// partOf is the part a request is narrowed to, nil when it is not: the clusters it names that
// the fleet has (the Fleet's owners, or without one the Registry's clusters). Any caller may
// set the parameter, so names the fleet does not know never reach the access check.
func (s *Server) partOf(q url.Values) []string {
	if !q.Has(partParam) {
		return nil
	}
	var known []string
	if s.opts.Fleet != nil {
		for _, o := range s.opts.Fleet.Owners() {
			known = append(known, o.Cluster)
		}
	} else {
		known = s.reg.Clusters()
	}
	out := []string{}
	for _, c := range strings.Split(q.Get(partParam), ",") {
		if c != "" && slices.Contains(known, c) && !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// narrow keeps the clusters of list that are in only; nil only keeps list as it is. A nil list
// (every cluster) narrows to only.
func narrow(list, only []string) []string {
	if only == nil {
		return list
	}
	if list == nil {
		return slices.Clone(only)
	}
	out := []string{}
	for _, c := range list {
		if slices.Contains(only, c) {
			out = append(out, c)
		}
	}
	return out
}

// restrictTo narrows query q to the clusters of a part.
func restrictTo(q url.Values, clusters []string) url.Values {
	out := url.Values{}
	for k, v := range q {
		out[k] = slices.Clone(v)
	}
	out.Set(partParam, strings.Join(clusters, ","))
	return out
}

// joinPeerErrors lists the parts that failed, for a Warning or an error event.
func joinPeerErrors(errs map[string]error) string {
	var out []string
	for _, e := range errs {
		out = append(out, e.Error())
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

// drain reads and closes a body so that its connection is reused.
func drain(rc io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(rc, 1<<20))
	_ = rc.Close()
}
