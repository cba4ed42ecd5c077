package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/filters"
	"github.com/multicache/multicache/pkg/shard"
)

// TestCompressLargeSkipsEveryWatch: a watch is never gzipped, whichever true value asks for it.
func TestCompressLargeSkipsEveryWatch(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 128<<10) // kube-apiserver's threshold
	for query, watch := range map[string]bool{"watch=True": true, "watch=yes": true, "watch": true, "watch=false": false, "watch=0": false} {
		for _, path := range []string{"/api/v1/pods", "/multicache/v1/resources/pods"} {
			h := filters.CompressLarge(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(big) }), streams)
			req := httptest.NewRequest("GET", path+"?"+query, nil)
			req.Header.Set("Accept-Encoding", "gzip")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if gz := rec.Header().Get("Content-Encoding") == "gzip"; gz == watch {
				t.Errorf("%s?%s: gzipped %t", path, query, gz)
			}
		}
	}
}

// TestWatchParamOverHTTP: watch=True (as the Python client sends it) and the other true values
// of kube-apiserver start a watch, on both APIs, served by this replica or fanned out over the
// fleet: the answer streams events, not a list. watch=False lists. A malformed limit or
// timeoutSeconds of a list or a watch is 400 BadRequest naming it; a get does not read them.
func TestWatchParamOverHTTP(t *testing.T) {
	single, _ := kubeFixture(t)
	// A fleet whose cluster b another replica owns: every list and watch fans out, a in
	// process, b to that replica.
	owner, _ := kubeFixture(t)
	fleet, _ := kubeFixtureWith(t, Options{Fleet: &staticFleet{owners: []shard.Owner{
		{Cluster: "a", Holder: "me", Self: true, Live: true},
		{Cluster: "b", Holder: "p2", URL: owner.URL, Live: true},
	}}})
	for name, hs := range map[string]*httptest.Server{"single": single, "fleet": fleet} {
		t.Run(name, func(t *testing.T) {
			for _, path := range []string{
				"/api/v1/pods?watch=True",
				"/api/v1/pods?watch=yes",
				"/api/v1/pods?watch",
				"/api/v1/namespaces/ns/pods?watch=True&timeoutSeconds=30",
				"/multicache/v1/resources/pods?watch=True",
				"/multicache/v1/resources/pods?watch=True&cluster=a",
			} {
				evs := watchLines(t, hs, path, "", 1)
				if len(evs) != 1 || evs[0].Type != string(api.Added) {
					t.Errorf("%s: first line %+v, want an ADDED event", path, evs)
					continue
				}
				var p corev1.Pod
				if err := json.Unmarshal(evs[0].Object, &p); err != nil || p.Name == "" {
					t.Errorf("%s: the event's object %s", path, evs[0].Object)
				}
			}
			var podList corev1.PodList
			code, _, body := do(t, hs, "GET", "/api/v1/pods?watch=False", "")
			if err := json.Unmarshal(body, &podList); code != 200 || err != nil || podList.Kind != "PodList" || len(podList.Items) == 0 {
				t.Errorf("watch=False: %d %.200s, want a PodList", code, body)
			}
			var list api.List
			code, _, body = do(t, hs, "GET", "/multicache/v1/resources/pods?watch=0&limit=1", "")
			if err := json.Unmarshal(body, &list); code != 200 || err != nil || len(list.Items) != 1 {
				t.Errorf("native watch=0: %d %.200s, want a list of one", code, body)
			}
			for _, path := range []string{
				"/api/v1/pods?limit=abc",
				"/api/v1/pods?limit=-1",
				"/api/v1/pods?watch=True&timeoutSeconds=x",
				"/api/v1/pods?watch=True&timeoutSeconds=-1",
				"/multicache/v1/resources/pods?limit=abc",
				"/multicache/v1/resources/pods?limit=-1",
				"/multicache/v1/resources/pods?watch=True&timeoutSeconds=x",
			} {
				code, _, body := do(t, hs, "GET", path, "")
				var st metav1.Status
				param := "limit"
				for _, p := range []string{"timeoutSeconds"} {
					if strings.Contains(path, p) {
						param = p
					}
				}
				if err := json.Unmarshal(body, &st); err != nil || code != 400 || st.Reason != metav1.StatusReasonBadRequest || !strings.HasPrefix(st.Message, param+" ") {
					t.Errorf("%s: %d %s, want 400 BadRequest naming %s", path, code, body, param)
				}
			}
			if code, _, body := do(t, hs, "GET", "/api/v1/namespaces/ns/pods/only-a?limit=abc", ""); code != 200 {
				t.Errorf("get with limit=abc: %d %s", code, body)
			}
			for _, rv := range []string{"0", "42"} {
				if code, _, body := do(t, hs, "GET", "/api/v1/namespaces/ns/pods/only-a?resourceVersion="+rv, ""); code != 200 {
					t.Errorf("get with resourceVersion=%s: %d %s", rv, code, body)
				}
			}
			// includeObject is read for Tables only, as kube-apiserver reads it.
			tableAccept := "application/json;as=Table;v=v1;g=meta.k8s.io"
			if code, _, body := do(t, hs, "GET", "/api/v1/pods?includeObject=Everything", ""); code != 200 {
				t.Errorf("a list (not a Table) with includeObject=Everything: %d %s", code, body)
			}
			for _, path := range []string{"/api/v1/pods?includeObject=Everything", "/api/v1/namespaces/ns/pods/only-a?includeObject=Everything"} {
				var st metav1.Status
				code, _, body := do(t, hs, "GET", path, tableAccept)
				if err := json.Unmarshal(body, &st); err != nil || code != 400 || !strings.HasPrefix(st.Message, "includeObject ") {
					t.Errorf("Table %s: %d %s, want 400 naming includeObject", path, code, body)
				}
			}
			// includeObject, decoded as kube-apiserver decodes it: None leaves the rows' objects out.
			var tbl metav1.Table
			code, _, body = do(t, hs, "GET", "/api/v1/pods?includeObject=None", tableAccept)
			if err := json.Unmarshal(body, &tbl); code != 200 || err != nil || len(tbl.Rows) == 0 || tbl.Rows[0].Object.Raw != nil {
				t.Errorf("Table with includeObject=None: %d %.300s", code, body)
			}
		})
	}
}

// TestWatchListWithPythonBooleans: a watch-list whose booleans are spelt as the official
// Python client spells them (True) streams the objects, then the bookmark that ends them.
func TestWatchListWithPythonBooleans(t *testing.T) {
	hs, _ := kubeFixture(t)
	evs := watchLines(t, hs, "/api/v1/pods?watch=True&sendInitialEvents=True&allowWatchBookmarks=True&resourceVersionMatch=NotOlderThan", "", 4)
	var added int
	for _, ev := range evs {
		switch ev.Type {
		case string(api.Added):
			added++
		case string(api.Bookmark):
			if !strings.Contains(string(ev.Object), "initial-events-end") {
				t.Errorf("bookmark without the initial-events-end annotation: %s", ev.Object)
			}
			if added != 3 {
				t.Errorf("the end bookmark came after %d ADDED events, want 3", added)
			}
			return
		}
	}
	t.Errorf("no end bookmark in %d events", len(evs))
}
