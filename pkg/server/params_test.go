package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/filters"
	"github.com/multicache/multicache/pkg/shard"
)

// decodedParams are the query parameters listOptions' callers read, as both decodings give them.
type decodedParams struct {
	Watch, AllowWatchBookmarks bool
	SendInitialEvents          *bool
	Limit                      int64
	TimeoutSeconds             *int64
	ResourceVersion            string
}

// TestListOptionsDecodesAsKubeAPIServer: listOptions reads every query as kube-apiserver's list
// handler does (ParameterCodec.DecodeParameters of metainternalversionscheme, from
// metav1.SchemeGroupVersion, into metainternalversion.ListOptions): the same values, and an
// error exactly when it fails, one that names the malformed parameter. isWatch agrees with it.
func TestListOptionsDecodesAsKubeAPIServer(t *testing.T) {
	for _, tc := range []struct {
		query string
		bad   string // the parameter named by the error; "" when the query decodes
	}{
		{query: ""},
		{query: "watch=true"},
		{query: "watch=True"},
		{query: "watch=TRUE"},
		{query: "watch=1"},
		{query: "watch=yes"},
		{query: "watch=false"},
		{query: "watch=False"},
		{query: "watch=0"},
		{query: "watch="},
		{query: "watch"},
		{query: "watch=false&watch=true"},
		{query: "limit=0"},
		{query: "limit=5"},
		{query: "limit=-1"},
		{query: "limit=%2B7"},
		{query: "limit=abc", bad: "limit"},
		{query: "limit=", bad: "limit"},
		{query: "limit=5abc", bad: "limit"},
		{query: "limit=1.5", bad: "limit"},
		{query: "limit=99999999999999999999", bad: "limit"},
		{query: "limit=5&limit=abc"},
		{query: "timeoutSeconds=30"},
		{query: "timeoutSeconds=0"},
		{query: "timeoutSeconds=-1"},
		{query: "timeoutSeconds=x", bad: "timeoutSeconds"},
		{query: "watch=True&timeoutSeconds=30&allowWatchBookmarks=True&sendInitialEvents=True&resourceVersionMatch=NotOlderThan&resourceVersion=0"},
		{query: "watch=1&sendInitialEvents=0&allowWatchBookmarks=false"},
		{query: "watch=True&limit=abc", bad: "limit"},
		{query: "timeoutSeconds=x&limit=abc", bad: "limit"}, // the first name in order
		{query: "cluster=a&namespace=ns&index=by-node&value=n1&limit=3"},
	} {
		t.Run(tc.query, func(t *testing.T) {
			vals, err := url.ParseQuery(tc.query)
			if err != nil {
				t.Fatal(err)
			}
			var ref metainternalversion.ListOptions
			refErr := metainternalversionscheme.ParameterCodec.DecodeParameters(vals, metav1.SchemeGroupVersion, &ref)
			opts, err := listOptions(vals)
			if (err != nil) != (refErr != nil) {
				t.Fatalf("error %v; kube-apiserver's decoding: %v", err, refErr)
			}
			if got := isWatch(vals); got != isWatchAlone(t, vals) {
				t.Errorf("isWatch %t, kube-apiserver's decoding of watch alone %t", got, !got)
			}
			if refErr != nil {
				var pe *paramError
				if !errors.As(err, &pe) || pe.name != tc.bad || !strings.HasPrefix(err.Error(), tc.bad+" ") {
					t.Errorf("error %q, want one naming %s", err, tc.bad)
				}
				return
			}
			if tc.bad != "" {
				t.Fatalf("kube-apiserver's decoding accepts the query; the test expects %s to fail", tc.bad)
			}
			got := decodedParams{opts.Watch, opts.AllowWatchBookmarks, opts.SendInitialEvents, opts.Limit, opts.TimeoutSeconds, opts.ResourceVersion}
			want := decodedParams{ref.Watch, ref.AllowWatchBookmarks, ref.SendInitialEvents, ref.Limit, ref.TimeoutSeconds, ref.ResourceVersion}
			if g, w := mustJSON(t, got), mustJSON(t, want); g != w {
				t.Errorf("decoded %s, kube-apiserver's decoding %s", g, w)
			}
			if isWatch(vals) != opts.Watch {
				t.Errorf("isWatch %t, listOptions' Watch %t", !opts.Watch, opts.Watch)
			}
		})
	}
}

// isWatchAlone is kube-apiserver's decoding of the watch parameter of vals, alone.
func isWatchAlone(t *testing.T, vals url.Values) bool {
	t.Helper()
	var ref metainternalversion.ListOptions
	if v, ok := vals["watch"]; ok {
		if err := metainternalversionscheme.ParameterCodec.DecodeParameters(url.Values{"watch": v}, metav1.SchemeGroupVersion, &ref); err != nil {
			t.Fatal(err)
		}
	}
	return ref.Watch
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestWatchTimeoutDecoded: a fan-in watch ends at the decoded timeoutSeconds and asks its parts
// for a minute more; without a positive one, it sets none and forwards the query as it is.
func TestWatchTimeoutDecoded(t *testing.T) {
	q := url.Values{"timeoutSeconds": {"30"}, "watch": {"True"}}
	d, out := watchTimeout(q, ptr.To[int64](30))
	if d.Seconds() != 30 || out.Get("timeoutSeconds") != "90" || out.Get("watch") != "True" || q.Get("timeoutSeconds") != "30" {
		t.Errorf("timeoutSeconds=30: %s, parts asked %v (query now %v)", d, out, q)
	}
	for _, n := range []*int64{nil, ptr.To[int64](0), ptr.To[int64](-5)} {
		if d, out := watchTimeout(q, n); d != 0 || out.Get("timeoutSeconds") != "30" {
			t.Errorf("timeoutSeconds %v: %s, parts asked %v", n, d, out)
		}
	}
}

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
