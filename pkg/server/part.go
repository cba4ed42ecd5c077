package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/filters"
	"github.com/multicache/multicache/pkg/watchcache"
)

// A fan-out reads each part of its plan (the clusters one replica owns) through a partReader,
// and cannot tell which one it holds:
//   - localPart reads this replica's own stores in process, through the same code that answers
//     a request here: the caller's Access travels in the context (authenticated once), each
//     object is encoded once, and nothing is decoded;
//   - peerPart asks the owner over HTTP (peers.call), and decodes its answer once.
//
// Both answer in the same types: a partList, a get's body, a partStream of partEvents. The
// fronts (the Kubernetes API's and the native one's fan-out) merge those and write them.
type partReader interface {
	// list reads the part's page of a list (the whole list without a limit).
	list(ctx context.Context, q partQuery) (partList, error)
	// get reads one answer that is not a list: an object (or its Table), or api.Clusters.
	get(ctx context.Context, q partQuery) (partGot, error)
	// watch opens the part's watch. It fails before any event when the part refuses (403,
	// 429, a bad option; in the native API, 410 for a position gone): the fan-in answers that
	// before its stream starts. A Kubernetes watch from a position gone opens, then ends with
	// an ERROR 410 event, as kube-apiserver's does.
	watch(ctx context.Context, q partQuery) (*partStream, error)
}

// partQuery is what a fan-out asks of one part: the request's path and its query narrowed to
// the part's clusters (restrictTo), in the API of the path.
type partQuery struct {
	kube  bool // the Kubernetes API; else the native one
	path  string
	query url.Values
	kind  string // for the peer-latency metric: list, get, watch, clusters
}

// partList is one part's answer to a list, its elements as their owner encoded them.
type partList struct {
	// head is a Kubernetes list's fields but its elements and metadata (kind, apiVersion, a
	// Table's columnDefinitions); nil in the native API.
	head     map[string]json.RawMessage
	table    bool // elements are a Table's rows
	elements []element
	rv, cont string
	warnings []string               // the answer's Warning headers
	fresh    []api.ClusterFreshness // the native API's clusters[]
}

// element is an item of a list (in the native API, the item's object), or a Table's row.
type element struct {
	key aggregate.Key
	raw json.RawMessage
}

// partGot is an answer to a get: its body, and its Warning headers.
type partGot struct {
	body     json.RawMessage
	warnings []string
}

// partStream is one part's watch, or the fleet's.
type partStream struct {
	part     part
	events   chan partEvent // closed when the watch ends
	err      error          // why it ended, set before events closes
	warnings []string       // Warning headers for its answer
}

// partEvent is one event of a part's watch.
type partEvent struct {
	typ        string
	rv         string // the part's position after it; "" when it does not say
	initialEnd bool   // a BOOKMARK that ends the initial events
	// render appends the event's line with resourceVersion rv (a fan-in's position after it;
	// the Kubernetes API only) to buf, without a Table's columns when columnsSent. A local
	// part's events are encoded here, once, by render.
	render func(buf *bytes.Buffer, rv string, columnsSent bool) error
	// line is a peer's event as it sent it. In the Kubernetes API, object is its object and
	// sent the resourceVersion the peer gave it (its own position), which the fan-in replaces
	// with the fleet's; table says it is a Table that carries columns.
	line   []byte
	object json.RawMessage
	sent   string
	table  bool
	// gone says why a local part's watch ended with 410.
	gone string
}

// reader is the partReader of p for the request r.
func (s *Server) reader(r *http.Request, p part) partReader {
	if p.self {
		return localPart{s: s, r: r, p: p}
	}
	return peerPart{s: s, r: r, p: p}
}

// localPart reads this replica's own part in process.
type localPart struct {
	s *Server
	r *http.Request // the caller's: its context carries the caller's Access
	p part
}

// request is the caller's request re-aimed at q, answered in process: authentication passes
// its Access on as it is.
func (l localPart) request(ctx context.Context, q partQuery) *http.Request {
	req := l.r.Clone(filters.InProcess(ctx))
	req.URL.Path, req.URL.RawPath, req.URL.RawQuery = q.path, "", q.query.Encode()
	req.Header.Set(peerHeader, "1")
	if !q.kube {
		req.SetPathValue("resource", strings.TrimPrefix(q.path, api.ResourcesPath+"/"))
	}
	return req
}

func (l localPart) list(ctx context.Context, q partQuery) (partList, error) {
	if q.kube {
		return l.s.localKubeList(ctx, l.request(ctx, q), l.p)
	}
	return l.s.localNativeList(ctx, l.request(ctx, q), l.p)
}

func (l localPart) get(ctx context.Context, q partQuery) (partGot, error) {
	req := l.request(ctx, q)
	rec, err := l.s.inProcess(ctx, l.p, q.kind, func(ctx context.Context, rec *answerRecorder) bool {
		req := req.WithContext(ctx)
		if q.kube {
			kq, ok := l.s.parseKube(rec, req)
			if !ok {
				return false
			}
			l.s.kubeGet(ctx, rec, kq)
		} else {
			l.s.handleClusters(rec, req)
		}
		return rec.code == 0 || rec.code == http.StatusOK
	})
	if err != nil {
		return partGot{}, err
	}
	return partGot{body: rec.body, warnings: rec.header.Values("Warning")}, nil
}

func (l localPart) watch(ctx context.Context, q partQuery) (*partStream, error) {
	req := l.request(ctx, q)
	rec := newAnswerRecorder()
	var lw *localWatch
	var encode func(buf *bytes.Buffer, typ string, it watchcache.Item, rv string, columnsSent bool) error
	var bookmark func(buf *bytes.Buffer, rv string, initialEnd bool) error
	if q.kube {
		kq, ok := l.s.parseKube(rec, req)
		if ok && !kq.watch {
			filters.WriteError(rec, http.StatusBadRequest, "not a watch")
			ok = false
		}
		if ok {
			lw, ok = l.s.openKubeWatch(ctx, rec, kq)
		}
		if !ok {
			return nil, rec.failure(l.p)
		}
		// One sink encodes every event of this part, from the fan-in's goroutine only.
		ks := l.s.kubeEncoder(ctx, kq, lw.from.Epoch)
		encode = func(buf *bytes.Buffer, typ string, it watchcache.Item, rv string, columnsSent bool) error {
			ks.columnsSent = columnsSent
			return ks.appendEvent(buf, typ, it, rv)
		}
		bookmark = func(buf *bytes.Buffer, rv string, initialEnd bool) error {
			ks.w = buf
			return ks.bookmarkAt(rv, initialEnd)
		}
	} else {
		rq, ok := l.s.parseRequest(rec, req)
		if ok {
			lw, ok = l.s.openNativeWatch(ctx, rec, q.query, rq)
		}
		if !ok {
			return nil, rec.failure(l.p)
		}
		ns := l.s.nativeEncoder(rq.resource)
		encode = func(buf *bytes.Buffer, typ string, it watchcache.Item, _ string, _ bool) error {
			return ns.appendEvent(buf, typ, it)
		}
		bookmark = func(buf *bytes.Buffer, rv string, _ bool) error {
			ns.w = buf
			return ns.bookmarkAt(rv)
		}
	}
	st := &partStream{part: l.p, events: make(chan partEvent, 64)}
	sink := &partSink{ctx: ctx, out: st.events, epoch: lw.from.Epoch, marksEnd: q.kube, encode: encode, bookmark: bookmark}
	go func() {
		defer close(st.events)
		err := lw.run(ctx, sink)
		switch {
		case watchcache.IsGone(err):
			st.err = err
			msg := err.Error()
			if q.kube {
				msg = goneMessage(err)
			}
			_ = sink.send(partEvent{typ: api.ErrorEvent, gone: msg})
		case err != nil:
			st.err = err
		case ctx.Err() != nil:
			st.err = ctx.Err()
		default:
			st.err = io.EOF
		}
	}()
	return st, nil
}

// partSink turns a local part's watch into partEvents, each encoded later, once, by the
// fan-in (render).
type partSink struct {
	ctx   context.Context
	out   chan<- partEvent
	epoch string
	// marksEnd: the Kubernetes API. Its first BOOKMARK ends the initial events, and its
	// objects carry their positions; the native API's BOOKMARK is a plain one.
	marksEnd bool
	encode   func(buf *bytes.Buffer, typ string, it watchcache.Item, rv string, columnsSent bool) error
	bookmark func(buf *bytes.Buffer, rv string, initialEnd bool) error
}

func (ps *partSink) Event(typ string, it watchcache.Item) error {
	ev := partEvent{typ: typ, render: func(buf *bytes.Buffer, rv string, columnsSent bool) error {
		return ps.encode(buf, typ, it, rv, columnsSent)
	}}
	if ps.marksEnd {
		// A Kubernetes object carries its position, as a peer's does; a native one none: the
		// native fan-in moves a part's position by its BOOKMARKs only, which come after its
		// initial objects (whose own positions are older than the snapshot's).
		ev.rv = watchcache.Position{Epoch: ps.epoch, Seq: it.Seq}.String()
	}
	return ps.send(ev)
}

func (ps *partSink) Bookmark(pos watchcache.Position, initialEnd bool) error {
	initialEnd = initialEnd && ps.marksEnd
	return ps.send(partEvent{typ: api.Bookmark, rv: pos.String(), initialEnd: initialEnd,
		render: func(buf *bytes.Buffer, rv string, _ bool) error {
			return ps.bookmark(buf, rv, initialEnd)
		}})
}

func (ps *partSink) Flush() {}

func (ps *partSink) send(ev partEvent) error {
	select {
	case ps.out <- ev:
		return nil
	case <-ps.ctx.Done():
		return ps.ctx.Err()
	}
}

// peerPart reads another replica's part over HTTP.
type peerPart struct {
	s *Server
	r *http.Request
	p part
}

// call asks the peer q, and turns an answer that is not 200 into a peerError.
func (pp peerPart) call(ctx context.Context, q partQuery) (*http.Response, error) {
	resp, err := pp.s.peers.call(ctx, pp.r, pp.p, q.path, q.query, q.kind)
	if err == nil {
		err = checkAnswer(pp.p, resp)
	}
	return resp, err
}

func (pp peerPart) list(ctx context.Context, q partQuery) (partList, error) {
	resp, err := pp.call(ctx, q)
	if err != nil {
		return partList{}, err
	}
	defer drain(resp.Body)
	var l partList
	if q.kube {
		l, err = decodeKubeList(resp)
	} else {
		l, err = decodeNativeList(resp)
	}
	if err != nil {
		return partList{}, fmt.Errorf("replica %q: %w", pp.p.peer, err)
	}
	return l, nil
}

func (pp peerPart) get(ctx context.Context, q partQuery) (partGot, error) {
	resp, err := pp.call(ctx, q)
	if err != nil {
		return partGot{}, err
	}
	defer drain(resp.Body)
	var b json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&b); err != nil {
		return partGot{}, fmt.Errorf("replica %q: %w", pp.p.peer, err)
	}
	return partGot{body: b, warnings: resp.Header.Values("Warning")}, nil
}

func (pp peerPart) watch(ctx context.Context, q partQuery) (*partStream, error) {
	resp, err := pp.call(ctx, q)
	if err != nil {
		return nil, err
	}
	st := &partStream{part: pp.p, events: make(chan partEvent, 64)}
	go st.read(resp.Body, q.kube)
	return st, nil
}

// read decodes a peer's watch, one event a line, until it ends or sends one it cannot read.
func (st *partStream) read(body io.ReadCloser, kube bool) {
	defer close(st.events)
	defer body.Close()
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 256<<20)
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			continue
		}
		ev, err := decodePeerEvent(slices.Clone(sc.Bytes()), kube)
		if err != nil {
			st.err = fmt.Errorf("replica %q sent a malformed event: %w", st.part.peer, err)
			return
		}
		st.events <- ev
	}
	st.err = sc.Err()
	if st.err == nil {
		st.err = io.EOF
	}
}

// decodePeerEvent reads what a fan-in needs of a peer's event line: its type and position, and
// in the Kubernetes API its object's fields, to rewrite its resourceVersion.
func decodePeerEvent(line []byte, kube bool) (partEvent, error) {
	ev := partEvent{line: line}
	if !kube {
		var we api.WatchEvent
		if err := json.Unmarshal(line, &we); err != nil {
			return ev, err
		}
		ev.typ = we.Type
		if we.Type == api.Bookmark {
			var b api.BookmarkObject
			if err := json.Unmarshal(we.Object, &b); err != nil {
				return ev, err
			}
			ev.rv = b.Metadata.ResourceVersion
		}
		return ev, nil
	}
	var raw rawKubeEvent
	if err := json.Unmarshal(line, &raw); err != nil {
		return ev, err
	}
	// Only what the fan-in needs of the object: its position, the end of the initial events,
	// whether it carries a Table's columns. The object itself stays as the peer wrote it.
	var head struct {
		Metadata struct {
			ResourceVersion string            `json:"resourceVersion"`
			Annotations     map[string]string `json:"annotations"`
		} `json:"metadata"`
		ColumnDefinitions json.RawMessage `json:"columnDefinitions"`
	}
	if err := json.Unmarshal(raw.Object, &head); err != nil {
		return ev, err
	}
	ev.typ, ev.object = raw.Type, raw.Object
	ev.rv, ev.sent = head.Metadata.ResourceVersion, head.Metadata.ResourceVersion
	ev.initialEnd = raw.Type == api.Bookmark && head.Metadata.Annotations[initialEventsEnd] == "true"
	cd := string(head.ColumnDefinitions)
	ev.table = cd != "" && cd != "null" && cd != "[]"
	return ev, nil
}

// decodeKubeList reads a peer's list or Table in one pass, keeping its elements as the peer
// wrote them: each element is scanned for its end, then for its key.
func decodeKubeList(resp *http.Response) (partList, error) {
	l := partList{warnings: resp.Header.Values("Warning"), head: map[string]json.RawMessage{}}
	dec := json.NewDecoder(resp.Body)
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return l, fmt.Errorf("not a list: %v %v", t, err)
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return l, err
		}
		name, _ := t.(string)
		switch name {
		case "items", "rows":
			l.table = name == "rows"
			if t, err = dec.Token(); err != nil {
				return l, fmt.Errorf("%s: %w", name, err)
			}
			if t == nil { // null
				continue
			}
			if t != json.Delim('[') {
				return l, fmt.Errorf("%s: not an array", name)
			}
			for dec.More() {
				var raw json.RawMessage
				if err := dec.Decode(&raw); err != nil {
					return l, fmt.Errorf("%s: %w", name, err)
				}
				l.elements = append(l.elements, element{key: keyOfElement(raw), raw: raw})
			}
			if _, err := dec.Token(); err != nil {
				return l, fmt.Errorf("%s: %w", name, err)
			}
		case "metadata":
			var md metav1.ListMeta
			if err := dec.Decode(&md); err != nil {
				return l, fmt.Errorf("metadata: %w", err)
			}
			l.rv, l.cont = md.ResourceVersion, md.Continue
		default:
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return l, fmt.Errorf("%s: %w", name, err)
			}
			l.head[name] = raw
		}
	}
	return l, nil
}

// decodeNativeList reads a peer's native list, keeping its objects as the peer wrote them.
func decodeNativeList(resp *http.Response) (partList, error) {
	var list api.List
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return partList{}, err
	}
	l := partList{rv: list.ResourceVersion, cont: list.Continue, fresh: list.Clusters, elements: make([]element, len(list.Items))}
	for i, it := range list.Items {
		var m api.ObjectMeta
		_ = json.Unmarshal(it.Object, &m)
		l.elements[i] = element{key: aggregate.Key{Cluster: it.Cluster, Namespace: m.Metadata.Namespace, Name: m.Metadata.Name}, raw: it.Object}
	}
	return l, nil
}

// answer is one part's reply to a fan-out.
type answer[T any] struct {
	part part
	val  T
	err  error
}

// gather asks every part of pl at once, within the peer timeout: read reads one part through
// its partReader.
func gather[T any](ctx context.Context, s *Server, r *http.Request, pl plan, read func(ctx context.Context, rd partReader, p part) (T, error)) []answer[T] {
	ctx, cancel := context.WithTimeout(ctx, s.peers.timeout)
	defer cancel()
	out := make([]answer[T], len(pl.parts))
	var wg sync.WaitGroup
	for i, p := range pl.parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i].part = p
			out[i].val, out[i].err = read(ctx, s.reader(r, p), p)
		}()
	}
	wg.Wait()
	return out
}

// openStreams opens every part's watch, through its partReader; they end with ctx. It fails
// when any part refuses: the caller answers that before its stream starts.
func (s *Server) openStreams(ctx context.Context, r *http.Request, pl plan, query func(part) partQuery) ([]*partStream, error) {
	answers := gather(ctx, s, r, pl, func(_ context.Context, rd partReader, p part) (*partStream, error) {
		return rd.watch(ctx, query(p)) // not gather's context: the watch outlives its timeout
	})
	out := make([]*partStream, 0, len(answers))
	for _, a := range answers {
		if a.err != nil {
			for _, a := range answers {
				if a.val != nil { // ends with ctx: read it to its end
					go func() {
						for range a.val.events {
						}
					}()
				}
			}
			return nil, a.err
		}
		out = append(out, a.val)
	}
	return out, nil
}
