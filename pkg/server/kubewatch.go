package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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
// allowWatchBookmarks adds BOOKMARKs now and then; timeoutSeconds ends the watch cleanly. opts
// are vals decoded (listOptions).
func (s *Server) kubeWatch(w http.ResponseWriter, r *http.Request, kq kubeRequest) {
	kr, f, vals, opts := kq.kr, kq.f, kq.vals, kq.opts
	if kr == clustersResource {
		filters.WriteError(w, http.StatusMethodNotAllowed, "watch is not supported on clusters.multicache.io: list it again, or run `multicache clusters --watch`")
		return
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		filters.WriteError(w, http.StatusInternalServerError, "streaming unsupported")
		return
	}
	agg, _ := s.reg.Aggregate(kr.name)
	h := s.caches[kr.name]
	sel, err := s.kubeSelect(r.Context(), kq, agg)
	if err != nil {
		writeSelectError(w, err)
		return
	}
	warnLeftOut(w, sel.leftOut)
	q := sel.query
	// Booleans as kube-apiserver decodes them: any value but "false" or "0" is true (the
	// official Python client sends True).
	bookmarks := opts.AllowWatchBookmarks
	rv, rvm := opts.ResourceVersion, string(opts.ResourceVersionMatch)
	sieSet := opts.SendInitialEvents != nil
	sie := sieSet && *opts.SendInitialEvents
	var deadline <-chan time.Time
	if opts.TimeoutSeconds != nil {
		n := *opts.TimeoutSeconds
		if n < 0 {
			filters.WriteError(w, http.StatusBadRequest, fmt.Sprintf("timeoutSeconds %q: want a non-negative integer", vals.Get("timeoutSeconds")))
			return
		}
		if n > 0 {
			timer := time.NewTimer(time.Duration(n) * time.Second)
			defer timer.Stop()
			deadline = timer.C
		}
	}
	// As kube-apiserver validates them.
	switch {
	case sieSet && rvm != string(metav1.ResourceVersionMatchNotOlderThan):
		filters.WriteError(w, http.StatusBadRequest, "sendInitialEvents requires resourceVersionMatch=NotOlderThan")
		return
	case !sieSet && rvm != "":
		filters.WriteError(w, http.StatusBadRequest, "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided")
		return
	case sie && !bookmarks:
		filters.WriteError(w, http.StatusBadRequest, "sendInitialEvents requires allowWatchBookmarks=true")
		return
	}
	wo := watchcache.WatchOptions{Clusters: q.Clusters, Matches: func(c string, obj any) bool { return agg.Matches(q, c, obj) }}
	switch {
	case sie:
		if rv != "" && rv != "0" {
			if _, err := watchcache.ParsePosition(rv); err != nil {
				filters.WriteError(w, http.StatusBadRequest, err.Error())
				return
			}
		}
		wo.From, wo.Initial = h.Position(), true // not older than any position given
	case rv == "" || rv == "0":
		wo.From, wo.Initial = h.Position(), !sieSet || sie
	default:
		t, err := watchcache.ParsePosition(rv)
		if err != nil {
			filters.WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		wo.From = t // one of another replica's, or merged: Watch says it is gone, in the stream
	}
	if wo.Initial && !sel.none && retryUnready(w, kr.groupResource().String(), s.unready(kr.name, q.Clusters)) {
		return // an initial list without a cluster's objects would read as their deletes
	}
	var wch *watchcache.Watcher
	var expired error
	if !sel.none {
		wch, expired = h.Watch(wo)
		s.warnUnfresh(w, request{resource: kr.name, agg: agg, query: q}, nil)
	} else if !wo.Initial {
		expired = h.Check(wo.From, q.Clusters)
	}
	s.metrics.watches.Inc()
	defer s.metrics.watches.Dec()
	w.Header().Set("Content-Type", "application/json;stream=watch")
	w.WriteHeader(http.StatusOK)
	sink := &kubeSink{s: s, r: r, w: w, fl: fl, kr: kr, f: f, epoch: wo.From.Epoch, includeObject: string(kq.table.IncludeObject), line: getBuffer()}
	defer putBuffer(sink.line)
	if expired != nil {
		sink.gone(expired)
		return
	}
	ctx := r.Context()
	if deadline != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-deadline:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	if sel.none {
		// No cluster selected: nothing will ever match. The end bookmark when asked, then an
		// open stream until the client leaves or its timeout: a watch that ended at once would
		// make client-go back off and relist, and a fan-in end the whole watch.
		if sie && sink.Bookmark(wo.From, true) != nil {
			return
		}
		sink.Flush()
		<-ctx.Done()
		return
	}
	ro := watchcache.RunOptions{FirstBookmark: sie, Guard: guardOf(r.Context()).orNil()}
	if bookmarks {
		tick := time.NewTicker(s.opts.BookmarkInterval)
		defer tick.Stop()
		ro.Bookmarks = tick.C
	}
	if err := wch.Run(ctx, sink, ro); watchcache.IsGone(err) {
		sink.gone(err)
	}
}

// kubeSink writes a Kubernetes watch: {"type":…,"object":…} events, objects in the form asked
// for (a Table watch's first object event carries the columns).
type kubeSink struct {
	s             *Server
	r             *http.Request
	w             http.ResponseWriter
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
	line.WriteString(`{"type":`)
	writeName(line, typ)
	line.WriteString(`,"object":`)
	if k.f.as == "Table" {
		t, err := k.s.kubeTable(k.r.Context(), k.kr, []item{it}, k.epoch, k.columnsSent, k.includeObject, k.f.tableVersion)
		if err != nil {
			return err
		}
		k.columnsSent = true
		b, err := json.Marshal(t)
		if err != nil {
			return err
		}
		line.Write(b)
	} else if err := k.s.appendKubeObject(line, k.f, k.kr, it, k.epoch, true); err != nil {
		return err
	}
	line.WriteString("}\n")
	_, err := k.w.Write(line.Bytes())
	return err
}

func (k *kubeSink) Bookmark(pos watchcache.Position, initialEnd bool) error {
	md := metav1.ObjectMeta{ResourceVersion: pos.String()}
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
	msg := err.Error()
	if !strings.HasPrefix(msg, "the fleet changed") {
		msg = "resourceVersion expired: " + msg
	}
	_ = k.control(api.ErrorEvent, filters.StatusOf(http.StatusGone, msg))
	k.fl.Flush()
}
