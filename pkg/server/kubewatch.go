package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/multicache/multicache/pkg/api"
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
func (s *Server) kubeWatch(w http.ResponseWriter, r *http.Request, p kubePath, kr *kubeResource, f form, vals url.Values, opts metav1.ListOptions) {
	if kr == clustersResource {
		writeError(w, http.StatusMethodNotAllowed, "watch is not supported on clusters.multicache.io: list it again, or run `multicache clusters --watch`")
		return
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, "streaming unsupported")
		return
	}
	agg, _ := s.reg.Aggregate(kr.name)
	h := s.hubs[kr.name]
	sel, err := s.kubeSelect(r.Context(), p, kr, agg, vals)
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
			writeError(w, http.StatusBadRequest, fmt.Sprintf("timeoutSeconds %q: want a non-negative integer", vals.Get("timeoutSeconds")))
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
		writeError(w, http.StatusBadRequest, "sendInitialEvents requires resourceVersionMatch=NotOlderThan")
		return
	case !sieSet && rvm != "":
		writeError(w, http.StatusBadRequest, "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided")
		return
	case sie && !bookmarks:
		writeError(w, http.StatusBadRequest, "sendInitialEvents requires allowWatchBookmarks=true")
		return
	}
	var pos token
	initial, endBookmark := false, sie
	var expired error
	switch {
	case sie:
		if rv != "" && rv != "0" {
			if _, err := parseToken(rv); err != nil {
				writeError(w, http.StatusBadRequest, err.Error())
				return
			}
		}
		pos, initial = h.position(), true // not older than any position given
	case rv == "" || rv == "0":
		pos, initial = h.position(), !sieSet || sie
	default:
		t, err := parseToken(rv)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		pos = t
		if _, _, err := h.next(pos, q.Clusters, make([]event, 0, 1)); err != nil {
			expired = err
		}
	}
	if initial && !sel.none && retryUnready(w, kr.groupResource().String(), s.unready(kr.name, q.Clusters)) {
		return // an initial list without a cluster's objects would read as their deletes
	}
	var items []item
	if initial && !sel.none {
		all, err := h.snapshot(pos, q.Clusters)
		if err != nil {
			expired = err
		}
		for _, it := range all {
			if agg.Matches(q, it.cluster, it.obj) {
				items = append(items, it)
			}
		}
		sort.Slice(items, func(i, j int) bool { return less(items[i].key, items[j].key) })
	}
	if !sel.none {
		s.warnUnfresh(w, request{resource: kr.name, agg: agg, query: q}, nil)
	}
	s.metrics.watches.Inc()
	defer s.metrics.watches.Dec()
	w.Header().Set("Content-Type", "application/json;stream=watch")
	w.WriteHeader(http.StatusOK)

	line := getBuffer()
	defer putBuffer(line)
	headers := true // a Table watch's first object event carries the columns
	emit := func(typ string, it item) error {
		line.Reset()
		line.WriteString(`{"type":`)
		writeName(line, typ)
		line.WriteString(`,"object":`)
		if f.as == "Table" {
			t, err := s.kubeTable(r.Context(), kr, []item{it}, pos.Epoch, !headers, vals.Get("includeObject"), f.tableVersion)
			if err != nil {
				return err
			}
			headers = false
			b, err := json.Marshal(t)
			if err != nil {
				return err
			}
			line.Write(b)
		} else if err := s.appendKubeObject(line, f, kr, it, pos.Epoch, true); err != nil {
			return err
		}
		line.WriteString("}\n")
		_, err := w.Write(line.Bytes())
		return err
	}
	control := func(typ string, obj any) error {
		b, _ := json.Marshal(obj)
		_, err := fmt.Fprintf(w, `{"type":%q,"object":%s}`+"\n", typ, b)
		return err
	}
	fail := func(err error) {
		_ = control(api.ErrorEvent, statusOf(http.StatusGone, "resourceVersion expired: "+err.Error()))
		fl.Flush()
	}
	bookmark := func(end bool) error {
		md := metav1.ObjectMeta{ResourceVersion: pos.encode()}
		if end {
			md.Annotations = map[string]string{initialEventsEnd: "true"}
		}
		kind, apiVersion := kr.gvk.Kind, kr.gvk.GroupVersion().String()
		switch f.as {
		case "Table":
			kind, apiVersion = "Table", "meta.k8s.io/"+f.tableVersion
		case "PartialObjectMetadata":
			kind, apiVersion = "PartialObjectMetadata", metav1.SchemeGroupVersion.String()
		}
		return control(api.Bookmark, map[string]any{"kind": kind, "apiVersion": apiVersion, "metadata": md})
	}
	if expired != nil {
		fail(expired)
		return
	}
	for i, it := range items {
		if emit(api.Added, it) != nil {
			return
		}
		if i%watchBatch == 0 {
			fl.Flush()
		}
	}
	items = nil
	if endBookmark && bookmark(true) != nil {
		return
	}
	fl.Flush()
	if sel.none {
		// No cluster selected: nothing will ever match; wait for the end.
		select {
		case <-r.Context().Done():
		case <-deadline:
		}
		return
	}
	// send relays one hub event through the query: an object that starts matching is ADDED,
	// one that stops is DELETED.
	send := func(ev event) error {
		if ev.typ == handedOff {
			return nil // of a cluster this watch does not span: next ends the others with 410
		}
		now := agg.Matches(q, ev.cluster, ev.obj)
		it := item{key: ev.key, cluster: ev.cluster, obj: ev.obj, seq: ev.seq}
		if ev.typ == api.Modified {
			was := ev.prev != nil && agg.Matches(q, ev.cluster, ev.prev)
			switch {
			case now && !was:
				return emit(api.Added, it)
			case !now && was:
				return emit(api.Deleted, it)
			case !now:
				return nil
			}
		} else if !now {
			return nil
		}
		return emit(ev.typ, it)
	}
	tick := time.NewTicker(s.opts.BookmarkInterval)
	defer tick.Stop()
	// In a sharded fleet the watch ends with 410 once its plan changes (planguard.go).
	replanned := guardOf(r.Context()).track()
	moved := func() bool {
		why := replanned.check()
		if why != "" {
			_ = control(api.ErrorEvent, statusOf(http.StatusGone, "the fleet changed since this watch started: "+why+"; list again"))
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
		evs, wake, err := h.next(pos, q.Clusters, buf[:0])
		if err != nil {
			fail(err)
			return
		}
		for _, ev := range evs {
			pos.Seq = ev.seq
			if send(ev) != nil {
				return
			}
		}
		clear(evs)
		if wake == nil {
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
		case <-deadline:
			return
		case <-wake:
		case <-replanned.C:
			if moved() {
				return
			}
		case <-tick.C:
			if bookmarks {
				if bookmark(false) != nil {
					return
				}
				fl.Flush()
			}
		}
	}
}
