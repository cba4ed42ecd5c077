package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/multicache/multicache/internal/fakeapi"
	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/filters"
	"github.com/multicache/multicache/pkg/shard"
	"github.com/multicache/multicache/pkg/storage"
	"github.com/multicache/multicache/pkg/storage/peer"
	"github.com/multicache/multicache/pkg/watchcache"
)

// twoReplicas is a fleet of clusters a, b and c over fake API servers, answered two ways: by
// one replica that runs them all (single), and by a replica that runs a and b and asks a peer
// for c (fanned). Both read the same Registry.
func twoReplicas(t *testing.T) (single, fanned *httptest.Server) {
	return twoReplicasVia(t, nil)
}

// twoReplicasVia is twoReplicas with the fanned replica's requests to its peer passing through
// via (nil: straight to single).
func twoReplicasVia(t *testing.T, via func(http.Handler) http.Handler) (single, fanned *httptest.Server) {
	return twoReplicasOwning(t, via, "c")
}

// twoReplicasOwning is twoReplicasVia with the clusters atPeer at the peer, the others here.
func twoReplicasOwning(t *testing.T, via func(http.Handler) http.Handler, atPeer ...string) (single, fanned *httptest.Server) {
	var src clusterset.Static
	for i, name := range []string{"a", "b", "c"} {
		f := fakeapi.New(t)
		var pods []corev1.Pod
		for j := range 3 + i {
			p := pod("p" + strconv.Itoa(j))
			p.Namespace = "ns" + strconv.Itoa(j%2)
			pods = append(pods, p)
		}
		f.SetPods(pods)
		src = append(src, clusterset.ClusterConfig{Name: name, Config: f.Config(), Fingerprint: "1"})
	}
	reg, err := clusterset.New(clusterset.Options{Source: src, Resources: []clusterset.ResourceSpec{{Name: "pods"}}})
	if err != nil {
		t.Fatal(err)
	}
	one, err := New(Options{Registry: reg, BookmarkInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	single = httptest.NewServer(one.Handler())
	t.Cleanup(single.Close)
	peerURL := single.URL
	if via != nil {
		peer := httptest.NewServer(via(one.Handler()))
		t.Cleanup(peer.Close)
		peerURL = peer.URL
	}
	fl := &staticFleet{}
	for _, c := range []string{"a", "b", "c"} {
		if slices.Contains(atPeer, c) {
			fl.owners = append(fl.owners, shard.Owner{Cluster: c, Holder: "p2", URL: peerURL, Live: true})
		} else {
			fl.owners = append(fl.owners, self(c))
		}
	}
	two, err := New(Options{Registry: reg, Fleet: fl, BookmarkInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	fanned = httptest.NewServer(two.Handler())
	t.Cleanup(fanned.Close)
	runRegistry(t, reg.Start)
	waitUntil(t, "synced", 10*time.Second, func() bool {
		// Every cluster resolved pods (the catalog serves them) and the hubs hold their lists.
		for _, c := range []string{"a", "b", "c"} {
			cs, ok := reg.ClusterStatus(c)
			if !ok || cs.State != clusterset.Synced {
				return false
			}
		}
		return len(one.local.Unready("pods", nil)) == 0 && len(two.local.Unready("pods", nil)) == 0
	})
	return single, fanned
}

// rawKubeEvent is one event of a Kubernetes watch, its object kept raw.
type rawKubeEvent struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

// parseMerged returns a merged answer's position; ok is false for anything else.
func parseMerged(s string) (watchcache.Position, bool) {
	t, err := watchcache.ParsePosition(s)
	return t, err == nil && t.Merged()
}

// keyOfElement is the fleet key of an item or a Table row: cluster, namespace, name.
func keyOfElement(raw json.RawMessage) aggregate.Key {
	var m struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
		Object   *struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		} `json:"object"`
		Cells []any `json:"cells"`
	}
	_ = json.Unmarshal(raw, &m)
	md := m.Metadata
	if m.Object != nil {
		md = m.Object.Metadata
	}
	k := aggregate.Key{Cluster: md.Annotations[api.ClusterAnnotation], Namespace: md.Namespace, Name: md.Name}
	if k.Cluster == "" && len(m.Cells) > 0 {
		k.Cluster, _ = m.Cells[0].(string)
	}
	return k
}

// listed is what a list answer says of each element: key, and the object without its
// resourceVersion (a position of the replica that served it).
func listed(t *testing.T, body []byte, table bool) (keys []string, objects []string, md map[string]any) {
	t.Helper()
	var doc struct {
		Metadata map[string]any    `json:"metadata"`
		Items    []json.RawMessage `json:"items"`
		Rows     []json.RawMessage `json:"rows"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	// The list's own fields but metadata and its elements: kind, apiVersion, a Table's
	// columns, as the first of objects.
	var head map[string]json.RawMessage
	_ = json.Unmarshal(body, &head)
	delete(head, "metadata")
	delete(head, "items")
	delete(head, "rows")
	hb, _ := json.Marshal(head)
	objects = append(objects, string(hb))
	els := doc.Items
	if table {
		els = doc.Rows
	}
	for _, el := range els {
		keys = append(keys, keyOfElement(el).String())
		var m map[string]any
		_ = json.Unmarshal(el, &m)
		strip := m
		if table {
			strip, _ = m["object"].(map[string]any)
		}
		if md, ok := strip["metadata"].(map[string]any); ok {
			delete(md, "resourceVersion")
		}
		b, _ := json.Marshal(m)
		objects = append(objects, string(b))
	}
	return keys, objects, doc.Metadata
}

// TestFanoutListMatchesOneReplica: a fleet list merged from this replica's part (answered in
// process) and a peer's is the list one replica that runs every cluster answers: the same
// elements in the same order, for objects, Tables and metadata, whole or paged.
func TestFanoutListMatchesOneReplica(t *testing.T) {
	for _, atPeer := range [][]string{{"c"}, {"a", "c"}, {"a"}} {
		t.Run("peer owns "+strings.Join(atPeer, ","), func(t *testing.T) { fanoutListMatchesOneReplica(t, atPeer) })
	}
}

func fanoutListMatchesOneReplica(t *testing.T, atPeer []string) {
	single, fanned := twoReplicasOwning(t, nil, atPeer...)
	for _, accept := range []string{"", "application/json;as=Table;v=v1;g=meta.k8s.io", "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"} {
		table := strings.Contains(accept, "as=Table")
		code, _, want := do(t, single, "GET", "/api/v1/pods", accept)
		if code != 200 {
			t.Fatalf("single %q: %d %s", accept, code, want)
		}
		wantKeys, wantObjs, _ := listed(t, want, table)
		if len(wantKeys) != 12 {
			t.Fatalf("single %q: %d elements, want 12", accept, len(wantKeys))
		}
		code, _, got := do(t, fanned, "GET", "/api/v1/pods", accept)
		if code != 200 {
			t.Fatalf("fanned %q: %d %s", accept, code, got)
		}
		keys, objs, md := listed(t, got, table)
		if !slices.Equal(keys, wantKeys) || !slices.Equal(objs, wantObjs) {
			t.Errorf("fanned %q:\n%v\nwant\n%v\n(objects equal: %v)", accept, keys, wantKeys, slices.Equal(objs, wantObjs))
		}
		if rv, _ := md["resourceVersion"].(string); rv == "" {
			t.Errorf("fanned %q: no resourceVersion in %v", accept, md)
		}
		// Paged by 5: the same walk.
		var walked []string
		cont := ""
		for range 10 {
			q := url.Values{"limit": {"5"}}
			if cont != "" {
				q.Set("continue", cont)
			}
			code, _, page := do(t, fanned, "GET", "/api/v1/pods?"+q.Encode(), accept)
			if code != 200 {
				t.Fatalf("page: %d %s", code, page)
			}
			keys, _, md := listed(t, page, table)
			walked = append(walked, keys...)
			if cont, _ = md["continue"].(string); cont == "" {
				break
			}
		}
		if !slices.Equal(walked, wantKeys) {
			t.Errorf("paged %q: %v, want %v", accept, walked, wantKeys)
		}
	}
	// The native API's fleet list agrees too, freshness included.
	var one, two api.List
	for srv, l := range map[*httptest.Server]*api.List{single: &one, fanned: &two} {
		code, _, body := do(t, srv, "GET", "/multicache/v1/resources/pods?limit=100", "")
		if code != 200 || json.Unmarshal(body, l) != nil {
			t.Fatalf("native list: %d %s", code, body)
		}
	}
	a, _ := json.Marshal(one.Items)
	b, _ := json.Marshal(two.Items)
	if len(one.Items) != 12 || string(a) != string(b) {
		t.Errorf("native lists differ: %d and %d items\n%s\n%s", len(one.Items), len(two.Items), a, b)
	}
	fresh := func(l api.List) (out []string) {
		for _, c := range l.Clusters {
			out = append(out, c.Name+":"+strconv.FormatBool(c.Synced))
		}
		return out
	}
	if f1, f2 := fresh(one), fresh(two); !slices.Equal(f1, f2) || len(f1) != 3 {
		t.Errorf("native clusters[]: one replica %v, merged %v", f1, f2)
	}
	// Paged by 5 through the fan-out: the same items.
	var walked []api.Item
	cont := ""
	for range 10 {
		q := url.Values{"limit": {"5"}}
		if cont != "" {
			q.Set("continue", cont)
		}
		var l api.List
		code, _, body := do(t, fanned, "GET", "/multicache/v1/resources/pods?"+q.Encode(), "")
		if code != 200 || json.Unmarshal(body, &l) != nil {
			t.Fatalf("native page: %d %s", code, body)
		}
		walked = append(walked, l.Items...)
		if cont = l.Continue; cont == "" {
			break
		}
	}
	if c, _ := json.Marshal(walked); string(c) != string(a) {
		t.Errorf("native pages differ from the whole list:\n%s\n%s", c, a)
	}
}

// TestFanoutPageAsksTheLeadingOwner: a paged list without selectors asks, for each page, the
// owner of the clusters the page starts with for the elements, and every other owner only for
// its position and count (CountOnly: the page's remainingItemCount), until that owner's
// clusters run out; the pages walk the one replica's list, each says how many items follow it,
// and each page's position resumes a watch.
func TestFanoutPageAsksTheLeadingOwner(t *testing.T) {
	var mu sync.Mutex
	var asked []string // the peer's lists: the clusters each was narrowed to
	failWith := 0      // the peer's lists fail with this code, when not 0
	single, fanned := twoReplicasVia(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var call string
			switch r.URL.Path {
			case peer.ListPath:
				var o storage.ListOptions
				body, _ := io.ReadAll(r.Body)
				_ = json.Unmarshal(body, &o)
				r.Body = io.NopCloser(bytes.NewReader(body))
				call = "[" + strings.Join(o.Part, ",") + "] limit " + strconv.FormatInt(o.Limit, 10)
				if o.CountOnly {
					call += " count only"
				}
			case peer.ClustersPath:
				var o storage.ClusterOptions
				body, _ := io.ReadAll(r.Body)
				_ = json.Unmarshal(body, &o)
				r.Body = io.NopCloser(bytes.NewReader(body))
				call = "[" + strings.Join(o.Part, ",") + "] clusters"
			}
			if call != "" {
				mu.Lock()
				asked = append(asked, call)
				code := failWith
				mu.Unlock()
				if code != 0 {
					w.Header().Set(peer.ProtocolHeader, peer.ProtocolVersion)
					filters.WriteError(w, code, "injected")
					return
				}
			}
			h.ServeHTTP(w, r)
		})
	})
	_, _, whole := do(t, single, "GET", "/api/v1/pods", "")
	wantKeys, _, _ := listed(t, whole, false)
	// a has 3 Pods, b 4 (this replica's), c 5 (the peer's). Pages of 5: a's 3 and b's first 2;
	// b's last 2 and then c's first 3 (b's run falls short); c's last 2. While this replica
	// answers a page from its own clusters, the peer is asked for its count only (the page's
	// remainingItemCount).
	wantAsked := [][]string{{"[c] limit 5 count only"}, {"[c] limit 5 count only", "[c] limit 3"}, {"[c] limit 5"}}
	var walked []string
	cont := ""
	for i := 0; ; i++ {
		q := url.Values{"limit": {"5"}}
		if cont != "" {
			q.Set("continue", cont)
		}
		mu.Lock()
		asked = nil
		mu.Unlock()
		code, _, page := do(t, fanned, "GET", "/api/v1/pods?"+q.Encode(), "")
		if code != 200 {
			t.Fatalf("page %d: %d %s", i, code, page)
		}
		keys, _, md := listed(t, page, false)
		walked = append(walked, keys...)
		if _, more := md["continue"]; more {
			if rem, _ := md["remainingItemCount"].(float64); int(rem) != 12-len(walked) {
				t.Errorf("page %d: remainingItemCount %v, want %d", i, md["remainingItemCount"], 12-len(walked))
			}
		} else if _, said := md["remainingItemCount"]; said {
			t.Errorf("the last page says remainingItemCount %v", md["remainingItemCount"])
		}
		mu.Lock()
		got := slices.Clone(asked)
		mu.Unlock()
		if i >= len(wantAsked) || !slices.Equal(got, wantAsked[i]) {
			t.Errorf("page %d (%v): the peer was asked %q, want %q", i, keys, got, wantAsked[min(i, len(wantAsked)-1)])
		}
		rv, _ := md["resourceVersion"].(string)
		pos, ok := parseMerged(rv)
		if !ok || len(pos.Parts) != 2 {
			t.Fatalf("page %d: resourceVersion %q holds %d parts' positions, want both", i, rv, len(pos.Parts))
		}
		// The page's position resumes a watch of the fleet: it opens without 410.
		events := watchUntil(t, fanned, "/api/v1/pods?watch=1&allowWatchBookmarks=true&resourceVersion="+url.QueryEscape(rv), "", func(typ string, _ map[string]json.RawMessage) bool {
			return typ == "BOOKMARK" || typ == "ERROR"
		})
		if n := len(events); n == 0 || events[n-1].Type != "BOOKMARK" {
			t.Errorf("page %d: a watch from its resourceVersion: %v, want a BOOKMARK", i, events)
		}
		if cont, _ = md["continue"].(string); cont == "" {
			break
		}
		if i > 5 {
			t.Fatal("more pages than elements")
		}
	}
	if !slices.Equal(walked, wantKeys) || len(wantKeys) != 12 {
		t.Errorf("pages walked %v, want %v", walked, wantKeys)
	}
	// A part that fails is asked again as in a plain fan-out, whose refusal is the page's: an
	// answer without the part's clusters would read as their deletes to a client that relists
	// (D3).
	for _, c := range []struct {
		code, want int
		asked      []string
	}{{404, 404, []string{"[c] limit 5 count only", "[c] limit 5"}}, {401, 503, []string{"[c] limit 5 count only", "[c] limit 5"}}, {503, 503, []string{"[c] limit 5 count only", "[c] limit 5"}}} {
		mu.Lock()
		asked, failWith = nil, c.code
		mu.Unlock()
		code, _, page := do(t, fanned, "GET", "/api/v1/pods?limit=5", "")
		mu.Lock()
		got := slices.Clone(asked)
		failWith = 0
		mu.Unlock()
		if code != c.want || !slices.Equal(got, c.asked) {
			t.Errorf("the peer failing with %d: %d %s, asked %q; want %d, asked %q", c.code, code, page, got, c.want, c.asked)
		}
	}
	// Every owner is asked at once, for its own clusters, by a page of clusters.multicache.io
	// (answered from status, not narrowed to a part's clusters) and by a page with a selector
	// (whose matches may lie in any cluster).
	for path, want := range map[string]string{
		"/apis/multicache.io/v1/clusters?limit=500":                   "[c] clusters",
		"/api/v1/pods?limit=5&fieldSelector=metadata.namespace%3Dns0": "[c] limit 5",
	} {
		mu.Lock()
		asked = nil
		mu.Unlock()
		if code, _, body := do(t, fanned, "GET", path, ""); code != 200 {
			t.Fatalf("%s: %d %s", path, code, body)
		}
		if mu.Lock(); !slices.Equal(asked, []string{want}) {
			t.Errorf("%s asked the peer %q, want %q", path, asked, want)
		}
		mu.Unlock()
	}
}

// watchUntil opens a watch at path and reads its events until stop says so, for at most 10 s.
func watchUntil(t *testing.T, hs *httptest.Server, path, accept string, stop func(typ string, obj map[string]json.RawMessage) bool) (events []rawKubeEvent) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL+path, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("watch %s: %d %s", path, resp.StatusCode, b)
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var ev rawKubeEvent
		if err := dec.Decode(&ev); err != nil {
			t.Fatalf("watch %s: after %d events: %v", path, len(events), err)
		}
		events = append(events, ev)
		var obj map[string]json.RawMessage
		_ = json.Unmarshal(ev.Object, &obj)
		if stop(ev.Type, obj) {
			return events
		}
	}
}

// TestFanInWatchMatchesOneReplica: a fleet watch merged from this replica's part (encoded
// here, once) and a peer's starts with the objects one replica's watch starts with, in every
// form: each carries the fleet's position, a Table's columns come once, and the end BOOKMARK
// is a position the fan-in resumes from.
func TestFanInWatchMatchesOneReplica(t *testing.T) {
	single, fanned := twoReplicas(t)
	const watchList = "/api/v1/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
	initialEnd := func(typ string, obj map[string]json.RawMessage) bool {
		return typ == "BOOKMARK" && strings.Contains(string(obj["metadata"]), metav1.InitialEventsAnnotationKey)
	}
	for _, accept := range []string{"", tableAccept, "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io"} {
		table := accept == tableAccept
		// What an event says of its object, its position left out; a Table's rows one by one.
		seen := func(events []rawKubeEvent, merged bool) (objs []string, columns int, end string) {
			for _, ev := range events {
				var obj map[string]json.RawMessage
				_ = json.Unmarshal(ev.Object, &obj)
				var md map[string]any
				_ = json.Unmarshal(obj["metadata"], &md)
				rv, _ := md["resourceVersion"].(string)
				if _, ok := parseMerged(rv); ok != merged {
					t.Errorf("%q: %s at %q: a fleet position: %v, want %v", accept, ev.Type, rv, ok, merged)
				}
				if ev.Type == "BOOKMARK" {
					end = rv
					continue
				}
				if cd := obj["columnDefinitions"]; len(cd) > 2 && string(cd) != "null" {
					columns++
				}
				els := []json.RawMessage{ev.Object}
				if table {
					_ = json.Unmarshal(obj["rows"], &els)
				}
				for _, el := range els {
					doc := `{"items":[` + string(el) + `]}`
					if table {
						doc = `{"rows":[` + string(el) + `]}`
					}
					_, o, _ := listed(t, []byte(doc), table)
					objs = append(objs, ev.Type+" "+keyOfElement(el).String()+" "+o[1])
				}
			}
			slices.Sort(objs)
			return objs, columns, end
		}
		want, wantColumns, _ := seen(watchUntil(t, single, watchList, accept, initialEnd), false)
		got, columns, end := seen(watchUntil(t, fanned, watchList, accept, initialEnd), true)
		if len(want) != 12 || !slices.Equal(got, want) {
			t.Errorf("%q: the fan-in's initial events:\n%v\nwant\n%v", accept, got, want)
		}
		if columns != wantColumns || (table && columns != 1) {
			t.Errorf("%q: columns sent %d times, one replica %d", accept, columns, wantColumns)
		}
		// Its end BOOKMARK resumes the fan-in: a watch from it opens (no 410), with no events
		// to repeat.
		resumed := watchUntil(t, fanned, "/api/v1/pods?watch=1&allowWatchBookmarks=true&resourceVersion="+url.QueryEscape(end), accept, func(typ string, _ map[string]json.RawMessage) bool {
			return typ == "BOOKMARK"
		})
		for _, ev := range resumed {
			if ev.Type != "BOOKMARK" {
				t.Errorf("%q: resumed at the end BOOKMARK, got a %s", accept, ev.Type)
			}
		}
	}
	// The native API: the same objects, then a BOOKMARK of the fleet's position.
	native := func(hs *httptest.Server) (objs []string, bookmark string) {
		for _, ev := range watchUntil(t, hs, "/multicache/v1/resources/pods?watch=true", "", func(typ string, _ map[string]json.RawMessage) bool { return typ == "BOOKMARK" }) {
			var obj map[string]json.RawMessage
			_ = json.Unmarshal(ev.Object, &obj)
			if ev.Type == "BOOKMARK" {
				var md struct {
					ResourceVersion string `json:"resourceVersion"`
				}
				_ = json.Unmarshal(obj["metadata"], &md)
				bookmark = md.ResourceVersion
				continue
			}
			objs = append(objs, ev.Type+" "+string(ev.Object))
		}
		slices.Sort(objs)
		return objs, bookmark
	}
	want, _ := native(single)
	got, bookmark := native(fanned)
	if len(want) != 12 || !slices.Equal(got, want) {
		t.Errorf("native fan-in's first events:\n%v\nwant\n%v", got, want)
	}
	if _, ok := parseMerged(bookmark); !ok {
		t.Errorf("native fan-in's BOOKMARK %q is not a fleet position", bookmark)
	}
	watchUntil(t, fanned, "/multicache/v1/resources/pods?watch=true&resourceVersion="+url.QueryEscape(bookmark), "", func(typ string, _ map[string]json.RawMessage) bool {
		if typ != "BOOKMARK" {
			t.Errorf("native: resumed at its BOOKMARK, got a %s", typ)
		}
		return true
	})
}
