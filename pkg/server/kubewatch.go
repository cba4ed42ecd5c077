package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/filters"
	"github.com/multicache/multicache/pkg/watchcache"
)

// initialEventsEnd is the annotation of the BOOKMARK that ends a watch's initial events.
const initialEventsEnd = metav1.InitialEventsAnnotationKey

// kubeWatch streams a Kubernetes watch: {"type":…,"object":…} events, objects in the form
// asked for (a Table watch's first event carries the columns). Where it starts:
//   - sendInitialEvents=true: ADDED for every object at the hub's position now (its snapshot,
//     so exactly the state the events after it continue), then a BOOKMARK carrying that
//     position and the k8s.io/initial-events-end annotation (the watch-list of client-go);
//   - no resourceVersion, or "0": the same ADDED events, without that BOOKMARK;
//   - a resourceVersion token: the events after it, or an ERROR 410 once they are gone;
//   - sendInitialEvents=false without a resourceVersion: the events from now.
//
// A watch that starts with the current objects gets 429 (client-go retries) while a cluster
// has not synced the resource since the daemon started (initializing).
//
// allowWatchBookmarks adds BOOKMARKs now and then; timeoutSeconds ends the watch cleanly.
func (s *Server) kubeWatch(w http.ResponseWriter, r *http.Request, kq kubeRequest) {
	fl, ok := w.(http.Flusher)
	if !ok {
		filters.WriteError(w, http.StatusInternalServerError, "streaming unsupported")
		return
	}
	lw, ok := s.openKubeWatch(r.Context(), w, kq)
	if !ok {
		return
	}
	s.metrics.watches.Inc()
	defer s.metrics.watches.Dec()
	w.Header().Set("Content-Type", "application/json;stream=watch")
	w.WriteHeader(http.StatusOK)
	sink := s.newKubeSink(r.Context(), w, fl, kq, lw.from.Epoch)
	defer putBuffer(sink.line)
	if err := lw.run(r.Context(), sink); watchcache.IsGone(err) {
		sink.gone(err)
	}
}

// openKubeWatch checks a Kubernetes watch of this replica's stores and opens it, or answers
// why not to w (ok false): a bad option, 403, or 429 while a cluster it starts with is not
// synced. Its warnings go to w's header. A position already gone opens a watch that ends at
// once with 410, as kube-apiserver's do.
func (s *Server) openKubeWatch(ctx context.Context, w http.ResponseWriter, kq kubeRequest) (*localWatch, bool) {
	kr, vals, opts := kq.kr, kq.vals, kq.opts
	if kr == clustersResource {
		filters.WriteError(w, http.StatusMethodNotAllowed, "watch is not supported on clusters.multicache.io: list it again, or run `multicache clusters --watch`")
		return nil, false
	}
	agg, _ := s.reg.Aggregate(kr.name)
	h := s.caches[kr.name]
	sel, err := s.kubeSelect(ctx, kq, agg)
	if err != nil {
		writeSelectError(w, err)
		return nil, false
	}
	warnLeftOut(w, sel.leftOut)
	q := sel.query
	// Booleans as kube-apiserver decodes them: any value but "false" or "0" is true (the
	// official Python client sends True).
	rv, rvm := opts.ResourceVersion, string(opts.ResourceVersionMatch)
	sieSet := opts.SendInitialEvents != nil
	sie := sieSet && *opts.SendInitialEvents
	lw := &localWatch{bookmarks: opts.AllowWatchBookmarks, initialEnd: sie, guard: guardOf(ctx).orNil(), interval: s.opts.BookmarkInterval}
	if opts.TimeoutSeconds != nil {
		n := *opts.TimeoutSeconds
		if n < 0 {
			filters.WriteError(w, http.StatusBadRequest, fmt.Sprintf("timeoutSeconds %q: want a non-negative integer", vals.Get("timeoutSeconds")))
			return nil, false
		}
		lw.timeout = time.Duration(n) * time.Second
	}
	// As kube-apiserver validates them.
	switch {
	case sieSet && rvm != string(metav1.ResourceVersionMatchNotOlderThan):
		filters.WriteError(w, http.StatusBadRequest, "sendInitialEvents requires resourceVersionMatch=NotOlderThan")
		return nil, false
	case !sieSet && rvm != "":
		filters.WriteError(w, http.StatusBadRequest, "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided")
		return nil, false
	case sie && !lw.bookmarks:
		filters.WriteError(w, http.StatusBadRequest, "sendInitialEvents requires allowWatchBookmarks=true")
		return nil, false
	}
	wo := watchcache.WatchOptions{Clusters: q.Clusters, Matches: func(c string, obj any) bool { return agg.Matches(q, c, obj) }}
	switch {
	case sie:
		if rv != "" && rv != "0" {
			if _, err := watchcache.ParsePosition(rv); err != nil {
				filters.WriteError(w, http.StatusBadRequest, err.Error())
				return nil, false
			}
		}
		wo.From, wo.Initial = h.Position(), true // not older than any position given
	case rv == "" || rv == "0":
		wo.From, wo.Initial = h.Position(), !sieSet || sie
	default:
		t, err := watchcache.ParsePosition(rv)
		if err != nil {
			filters.WriteError(w, http.StatusBadRequest, err.Error())
			return nil, false
		}
		wo.From = t // one of another replica's, or merged: Watch says it is gone, in the stream
	}
	if wo.Initial && !sel.none {
		if retryUnready(w, kr.groupResource().String(), s.unreadyAwait(ctx, kr.name, q.Clusters)) {
			return nil, false // an initial list without a cluster's objects would read as their deletes
		}
		// An initial list starts from the position after any wait, which holds the lists
		// waited for.
		wo.From = h.Position()
	}
	lw.from = wo.From
	if !sel.none {
		lw.wch, lw.expired = h.Watch(wo)
		s.warnUnfresh(w, request{resource: kr.name, agg: agg, query: q}, nil)
	} else if !wo.Initial {
		lw.expired = h.Check(wo.From, q.Clusters)
	}
	return lw, true
}

// localWatch is a watch of this replica's stores, checked and opened: it runs into any Sink,
// an HTTP stream's or a fan-in's part.
type localWatch struct {
	wch        *watchcache.Watcher // nil: it selects no cluster
	from       watchcache.Position
	expired    error         // its position is gone: it ends at once
	bookmarks  bool          // a BOOKMARK every interval
	initialEnd bool          // the BOOKMARK that ends the initial events
	timeout    time.Duration // 0: none
	interval   time.Duration
	guard      watchcache.Guard
}

// run streams the watch into sink until ctx ends, its timeout passes, or it is gone; the
// error is then the watchcache.GoneError to answer with 410, or nil.
func (lw *localWatch) run(ctx context.Context, sink watchcache.Sink) error {
	if lw.expired != nil {
		return lw.expired
	}
	if lw.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, lw.timeout)
		defer cancel()
	}
	if lw.wch == nil {
		// No cluster selected: nothing will ever match. The end bookmark when asked, then an
		// open stream until the client leaves or its timeout: a watch that ended at once would
		// make client-go back off and relist, and a fan-in end the whole watch.
		if lw.initialEnd && sink.Bookmark(lw.from, true) != nil {
			return nil
		}
		sink.Flush()
		<-ctx.Done()
		return nil
	}
	ro := watchcache.RunOptions{FirstBookmark: lw.initialEnd, Guard: lw.guard}
	if lw.bookmarks {
		tick := time.NewTicker(lw.interval)
		defer tick.Stop()
		ro.Bookmarks = tick.C
	}
	return lw.wch.Run(ctx, sink, ro)
}

// kubeSink writes a Kubernetes watch: {"type":…,"object":…} events, objects in the form asked
// for (a Table watch's first object event carries the columns).
type kubeSink struct {
	s             *Server
	ctx           context.Context
	w             io.Writer
	fl            http.Flusher
	kr            *kubeResource
	f             form
	epoch         string
	includeObject string
	columnsSent   bool
	line          *bytes.Buffer
}

func (k *kubeSink) Event(typ string, it watchcache.Item) error {
	line := k.line
	line.Reset()
	if err := k.appendEvent(line, typ, it, ""); err != nil {
		return err
	}
	_, err := k.w.Write(line.Bytes())
	return err
}

// appendEvent appends the line of an object's event to buf. rv, when set, is the object's
// resourceVersion (a fan-in's position after it); otherwise its own position here.
func (k *kubeSink) appendEvent(buf *bytes.Buffer, typ string, it watchcache.Item, rv string) error {
	buf.WriteString(`{"type":`)
	writeName(buf, typ)
	buf.WriteString(`,"object":`)
	if k.f.as == "Table" {
		t, err := k.s.kubeTable(k.ctx, k.kr, []item{it}, k.epoch, k.columnsSent, k.includeObject, k.f.tableVersion)
		if err != nil {
			return err
		}
		k.columnsSent = true
		if rv != "" {
			t.ResourceVersion = rv
		}
		b, err := json.Marshal(t)
		if err != nil {
			return err
		}
		buf.Write(b)
	} else if err := k.s.appendKubeObjectAt(buf, k.f, k.kr, it, k.epoch, rv, true); err != nil {
		return err
	}
	buf.WriteString("}\n")
	return nil
}

// newKubeSink is the sink of a watch of kq, whose objects' positions are of epoch. Its line
// buffer is the pool's.
func (s *Server) newKubeSink(ctx context.Context, w io.Writer, fl http.Flusher, kq kubeRequest, epoch string) *kubeSink {
	k := s.kubeEncoder(ctx, kq, epoch)
	k.w, k.fl, k.line = w, fl, getBuffer()
	return k
}

// kubeEncoder is a kubeSink that only encodes (appendEvent, bookmarkAt into a buffer given as
// its writer): a fan-in's local part.
func (s *Server) kubeEncoder(ctx context.Context, kq kubeRequest, epoch string) *kubeSink {
	return &kubeSink{s: s, ctx: ctx, kr: kq.kr, f: kq.f, epoch: epoch, includeObject: string(kq.table.IncludeObject)}
}

func (k *kubeSink) Bookmark(pos watchcache.Position, initialEnd bool) error {
	return k.bookmarkAt(pos.String(), initialEnd)
}

// bookmarkAt writes a BOOKMARK at the position rv.
func (k *kubeSink) bookmarkAt(rv string, initialEnd bool) error {
	md := metav1.ObjectMeta{ResourceVersion: rv}
	if initialEnd {
		md.Annotations = map[string]string{initialEventsEnd: "true"}
	}
	kind, apiVersion := k.kr.gvk.Kind, k.kr.gvk.GroupVersion().String()
	switch k.f.as {
	case "Table":
		kind, apiVersion = "Table", "meta.k8s.io/"+k.f.tableVersion
	case "PartialObjectMetadata":
		kind, apiVersion = "PartialObjectMetadata", metav1.SchemeGroupVersion.String()
	}
	return k.control(api.Bookmark, map[string]any{"kind": kind, "apiVersion": apiVersion, "metadata": md})
}

func (k *kubeSink) Flush() { k.fl.Flush() }

func (k *kubeSink) control(typ string, obj any) error {
	b, _ := json.Marshal(obj)
	_, err := fmt.Fprintf(k.w, `{"type":%q,"object":%s}`+"\n", typ, b)
	return err
}

// gone ends the stream with an ERROR event: 410, list again.
func (k *kubeSink) gone(err error) {
	_ = k.control(api.ErrorEvent, filters.StatusOf(http.StatusGone, goneMessage(err)))
	k.fl.Flush()
}

// goneMessage is what a Kubernetes watch's 410 says of err, a watchcache.GoneError.
func goneMessage(err error) string {
	msg := err.Error()
	if !strings.HasPrefix(msg, "the fleet changed") {
		msg = "resourceVersion expired: " + msg
	}
	return msg
}
