package server

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/shard"
)

// crdPeer is a replica's answer for the definitions of its part, as a peer sends it.
type crdPeer struct {
	mu      sync.Mutex
	items   []apiextensionsv1.CustomResourceDefinition
	queries []string
}

func (p *crdPeer) set(items ...apiextensionsv1.CustomResourceDefinition) {
	p.mu.Lock()
	p.items = items
	p.mu.Unlock()
}

func (p *crdPeer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r.URL.Path != "/apis/apiextensions.k8s.io/v1/customresourcedefinitions" || r.Header.Get(peerHeader) == "" {
		http.Error(w, "unexpected "+r.URL.String(), http.StatusBadRequest)
		return
	}
	p.queries = append(p.queries, r.URL.RawQuery)
	writeJSON(w, apiextensionsv1.CustomResourceDefinitionList{Items: p.items})
}

// peerCRD is a definition as a peer serves it: shown from from, served by clusters, its
// cluster's resourceVersion 5 in the annotation and the peer's own (777) in metadata.
func peerCRD(name, from, uid string, clusters ...string) apiextensionsv1.CustomResourceDefinition {
	return apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid), ResourceVersion: "777",
		Annotations: map[string]string{api.ClusterAnnotation: from, ClustersAnnotation: strings.Join(clusters, ","), api.ResourceVersionAnnotation: "5"}}}
}

// TestCRDsFleetMerge: in a sharded fleet's view, the definitions of every replica's part merge
// into one entry per name, shown from the first cluster by name with the union of the clusters;
// a peer's entry naming clusters outside its part is narrowed to its part; the cluster selector
// travels to the peers; a watch sends what changed at the new resourceVersion, and a watch from
// a resourceVersion that is not the current one ends with 410.
func TestCRDsFleetMerge(t *testing.T) {
	defer func(d time.Duration) { crdPollInterval = d }(crdPollInterval)
	crdPollInterval = 20 * time.Millisecond
	p1, p2 := &crdPeer{}, &crdPeer{}
	p1.set(peerCRD("widgets.example.io", "b", "uid-b", "b"), peerCRD("gadgets.example.io", "b", "uid-gb", "b", "zz"))
	p2.set(peerCRD("widgets.example.io", "a", "uid-a", "a"), peerCRD("things.example.io", "c", "uid-c", "c"))
	h1, h2 := httptest.NewServer(p1), httptest.NewServer(p2)
	defer h1.Close()
	defer h2.Close()
	reg, err := clusterset.New(clusterset.Options{Source: clusterset.Static{}, Resources: []clusterset.ResourceSpec{{Name: "pods"}}})
	if err != nil {
		t.Fatal(err)
	}
	fl := &staticFleet{owners: []shard.Owner{{Cluster: "a", Holder: "p2", URL: h2.URL, Live: true}, {Cluster: "b", Holder: "p1", URL: h1.URL, Live: true},
		{Cluster: "c", Holder: "p2", URL: h2.URL, Live: true}}}
	s, err := New(Options{Registry: reg, Fleet: fl})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	const path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"

	code, _, body := do(t, hs, "GET", path, "")
	var list apiextensionsv1.CustomResourceDefinitionList
	if err := json.Unmarshal(body, &list); code != 200 || err != nil {
		t.Fatalf("list: %d %v %s", code, err, body)
	}
	var got []string
	for _, it := range list.Items {
		got = append(got, it.Name+"="+it.Annotations[api.ClusterAnnotation]+":"+it.Annotations[ClustersAnnotation]+":"+string(it.UID))
		if it.ResourceVersion != list.ResourceVersion || it.Annotations[api.ResourceVersionAnnotation] != "5" {
			t.Errorf("%s: resourceVersion %s (the list's %s), its cluster's %q (want 5, not the peer's)", it.Name, it.ResourceVersion, list.ResourceVersion, it.Annotations[api.ResourceVersionAnnotation])
		}
	}
	want := []string{"gadgets.example.io=b:b:uid-gb", "things.example.io=c:c:uid-c", "widgets.example.io=a:a,b:uid-a"}
	if !slices.Equal(got, want) || list.Kind != "CustomResourceDefinitionList" {
		t.Errorf("fleet list: %s %v, want %v", list.Kind, got, want)
	}
	if !slices.ContainsFunc(p1.queries, func(q string) bool { return strings.Contains(q, partParam+"=b") }) {
		t.Errorf("p1 was asked %v: want its part, b", p1.queries)
	}

	// The cluster selector selects clusters, at the peers too: widgets shown from b.
	code, _, body = do(t, hs, "GET", path+"?labelSelector="+api.ClusterAnnotation+"%3Db", tableAccept)
	var tb metav1.Table
	if err := json.Unmarshal(body, &tb); code != 200 || err != nil {
		t.Fatalf("table: %d %v %s", code, err, body)
	}
	if len(tb.ColumnDefinitions) != 3 || tb.ColumnDefinitions[1].Name != "Name" {
		t.Errorf("table columns %v", tb.ColumnDefinitions)
	}
	if p1.mu.Lock(); !strings.Contains(p1.queries[len(p1.queries)-1], "labelSelector=") {
		t.Errorf("p1 was not passed the cluster selector: %q", p1.queries[len(p1.queries)-1])
	}
	p1.mu.Unlock()
	code, _, body = do(t, hs, "GET", path+"/widgets.example.io", "")
	var one apiextensionsv1.CustomResourceDefinition
	if err := json.Unmarshal(body, &one); code != 200 || err != nil || one.Annotations[ClustersAnnotation] != "a,b" || one.Kind != "CustomResourceDefinition" {
		t.Errorf("get widgets: %d %v %s", code, err, body)
	}
	if code, _, _ = do(t, hs, "GET", path+"/nothing.example.io", ""); code != http.StatusNotFound {
		t.Errorf("get nothing: %d, want 404", code)
	}
	if code, _, body = do(t, hs, "GET", path+"?fieldSelector=spec.group%3Dx", ""); code != http.StatusBadRequest || !strings.Contains(string(body), "spec.group") {
		t.Errorf("an unsupported field selector: %d %s, want 400 naming the field", code, body)
	}

	// A watch from the list's resourceVersion: gadgets goes, things changes.
	resp, err := http.Get(hs.URL + path + "?watch=1&resourceVersion=" + list.ResourceVersion)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p1.set(peerCRD("widgets.example.io", "b", "uid-b", "b"))
	p2.set(peerCRD("widgets.example.io", "a", "uid-a", "a"), peerCRD("things.example.io", "c", "uid-c2", "c"))
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	var events []string
	for len(events) < 2 && sc.Scan() {
		var ev struct {
			Type   string
			Object apiextensionsv1.CustomResourceDefinition
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatal(err)
		}
		events = append(events, ev.Type+" "+ev.Object.Name+" "+string(ev.Object.UID))
		if ev.Object.ResourceVersion == list.ResourceVersion {
			t.Errorf("%s %s at the old resourceVersion", ev.Type, ev.Object.Name)
		}
	}
	if want := []string{"MODIFIED things.example.io uid-c2", "DELETED gadgets.example.io uid-gb"}; !slices.Equal(events, want) {
		t.Errorf("watch events %v, want %v", events, want)
	}
	lines := watchLines(t, hs, path+"?watch=1&resourceVersion="+list.ResourceVersion, "", 1)
	if len(lines) != 1 || lines[0].Type != "ERROR" || !strings.Contains(string(lines[0].Object), "410") {
		t.Errorf("a watch from the old resourceVersion: %+v, want one 410 ERROR", lines)
	}
}

// TestCRDDiff: what a watch sends between two sets.
func TestCRDDiff(t *testing.T) {
	def := func(name, rv string) *apiextensionsv1.CustomResourceDefinition {
		return &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv}}
	}
	before := []crdEntry{{def: def("a", "1"), from: "x", clusters: []string{"x"}}, {def: def("b", "1"), from: "x", clusters: []string{"x"}},
		{def: def("c", "1"), from: "x", clusters: []string{"x"}}}
	after := []crdEntry{{def: def("a", "1"), from: "x", clusters: []string{"x", "y"}}, {def: def("c", "1"), from: "x", clusters: []string{"x"}},
		{def: def("d", "1"), from: "y", clusters: []string{"y"}}}
	var got []string
	for _, ev := range crdDiff(before, after) {
		got = append(got, ev.typ+" "+ev.entry.def.Name)
	}
	if want := []string{"MODIFIED a", "ADDED d", "DELETED b"}; !slices.Equal(got, want) {
		t.Errorf("diff %v, want %v", got, want)
	}
	if crdVersion(before) == crdVersion(after) || crdVersion(before) != crdVersion(slices.Clone(before)) {
		t.Error("crdVersion: equal sets must hash equal, and different ones differ")
	}
}

// TestOpenAPIV2Merge: the v2 document takes each group-version's paths, and the definitions
// they use, from the member chosen for it; a member that cannot be read is left out.
func TestOpenAPIV2Merge(t *testing.T) {
	src, a, b := fakeClustersAB(t)
	_, s := kubeFixtureOf(t, src, Options{})
	doc, failed, err := s.buildOpenAPIV2(context.Background(), map[string]string{"api/v1": "a", "apis/x.io/v1": "b", "apis/y.io/v1": "nowhere"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(failed, []string{"nowhere"}) {
		t.Errorf("failed %v, want [nowhere]", failed)
	}
	pods, things := doc.Paths.Paths["/api/v1/pods"], doc.Paths.Paths["/apis/x.io/v1/things"]
	if pods.Get == nil || pods.Get.Description != "pods of "+a.Config().Host || things.Get == nil || things.Get.Description != "things of "+b.Config().Host {
		t.Errorf("paths: pods %+v, things %+v: want pods from a, things from b", pods.Get, things.Get)
	}
	pod, thing := doc.Definitions["io.k8s.api.core.v1.Pod"], doc.Definitions["io.x.v1.Thing"]
	if pod.Description != "Pod of "+a.Config().Host || thing.Description != "Thing of "+b.Config().Host {
		t.Errorf("definitions: Pod %q, Thing %q: want each from the member its paths came from", pod.Description, thing.Description)
	}
	if len(doc.Paths.Paths) != 2 || !strings.Contains(doc.Info.Description, "a, b") || !strings.Contains(doc.Info.Description, api.ClusterAnnotation) {
		t.Errorf("%d paths, description %q", len(doc.Paths.Paths), doc.Info.Description)
	}
	if _, _, err := s.buildOpenAPIV2(context.Background(), map[string]string{"api/v1": "nowhere"}); err == nil {
		t.Error("no member readable: want an error")
	}
}

// TestCRDsMovingClusterAnswersRetry: a fleet part whose cluster has not started here yet (it
// is moving here) answers 503 with Retry-After, never a list without the cluster's
// definitions, which a client would take for their deletion.
func TestCRDsMovingClusterAnswersRetry(t *testing.T) {
	src, _, _ := fakeClustersAB(t)
	fl := &staticFleet{owners: []shard.Owner{self("a"), self("b"), self("c")}}
	hs, _ := kubeFixtureOf(t, src, Options{Fleet: fl})
	req, _ := http.NewRequest("GET", hs.URL+"/apis/apiextensions.k8s.io/v1/customresourcedefinitions?"+partParam+"=a,c", nil)
	req.Header.Set(peerHeader, "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a part with a cluster not started here: %d (Retry-After %q), want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	req, _ = http.NewRequest("GET", hs.URL+"/apis/apiextensions.k8s.io/v1/customresourcedefinitions?"+partParam+"=a,b", nil)
	req.Header.Set(peerHeader, "1")
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a part of running clusters: %d, want 200", resp.StatusCode)
	}
}
