package server

import (
	"bufio"
	"bytes"
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
	"github.com/multicache/multicache/pkg/kubeapi"
	"github.com/multicache/multicache/pkg/shard"
	"github.com/multicache/multicache/pkg/storage"
	"github.com/multicache/multicache/pkg/storage/peer"
)

// crdPeer is a replica's part of the definitions (storage.Status), as the envelope serves it.
type crdPeer struct {
	mu      sync.Mutex
	items   []storage.Definition
	queries []storage.ClusterOptions
}

func (p *crdPeer) set(items ...storage.Definition) {
	p.mu.Lock()
	p.items = items
	p.mu.Unlock()
}

func (p *crdPeer) Definitions(_ context.Context, opts storage.ClusterOptions) ([]storage.Definition, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.queries = append(p.queries, opts)
	return p.items, nil
}

func (p *crdPeer) Clusters(context.Context, storage.ClusterOptions) ([]api.Cluster, error) {
	return nil, nil
}
func (p *crdPeer) Resources(context.Context, storage.ClusterOptions) ([]clusterset.ClusterStatus, error) {
	return nil, nil
}

// serve is the envelope of p.
func (p *crdPeer) serve() *httptest.Server {
	return httptest.NewServer(&peer.Handler{Status: p})
}

// peerCRD is a definition as a peer's part holds it: shown from from, served by clusters, its
// cluster's resourceVersion 5.
func peerCRD(name, from, uid string, clusters ...string) storage.Definition {
	return storage.Definition{Def: &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid), ResourceVersion: "5"}},
		From: from, Clusters: clusters}
}

// TestCRDsFleetMerge: in a sharded fleet's view, the definitions of every replica's part merge
// into one entry per name, shown from the first cluster by name with the union of the clusters;
// a peer's entry naming clusters outside its part is narrowed to its part; the cluster selector
// travels to the peers; a watch sends what changed at the new resourceVersion, and a watch from
// a resourceVersion that is not the current one ends with 410.
func TestCRDsFleetMerge(t *testing.T) {
	defer kubeapi.SetDefinitionsPollInterval(20 * time.Millisecond)()
	p1, p2 := &crdPeer{}, &crdPeer{}
	p1.set(peerCRD("widgets.example.io", "b", "uid-b", "b"), peerCRD("gadgets.example.io", "b", "uid-gb", "b", "zz"))
	p2.set(peerCRD("widgets.example.io", "a", "uid-a", "a"), peerCRD("things.example.io", "c", "uid-c", "c"))
	h1, h2 := p1.serve(), p2.serve()
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
		got = append(got, it.Name+"="+it.Annotations[api.ClusterAnnotation]+":"+it.Annotations[kubeapi.ClustersAnnotation]+":"+string(it.UID))
		if it.ResourceVersion != list.ResourceVersion || it.Annotations[api.ResourceVersionAnnotation] != "5" {
			t.Errorf("%s: resourceVersion %s (the list's %s), its cluster's %q (want 5, not the peer's)", it.Name, it.ResourceVersion, list.ResourceVersion, it.Annotations[api.ResourceVersionAnnotation])
		}
	}
	want := []string{"gadgets.example.io=b:b:uid-gb", "things.example.io=c:c:uid-c", "widgets.example.io=a:a,b:uid-a"}
	if !slices.Equal(got, want) || list.Kind != "CustomResourceDefinitionList" {
		t.Errorf("fleet list: %s %v, want %v", list.Kind, got, want)
	}
	if !slices.ContainsFunc(p1.queries, func(q storage.ClusterOptions) bool { return slices.Equal(q.Part, []string{"b"}) }) {
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
	if p1.mu.Lock(); p1.queries[len(p1.queries)-1].LabelSelector == "" {
		t.Errorf("p1 was not passed the cluster selector: %q", p1.queries[len(p1.queries)-1])
	}
	p1.mu.Unlock()
	code, _, body = do(t, hs, "GET", path+"/widgets.example.io", "")
	var one apiextensionsv1.CustomResourceDefinition
	if err := json.Unmarshal(body, &one); code != 200 || err != nil || one.Annotations[kubeapi.ClustersAnnotation] != "a,b" || one.Kind != "CustomResourceDefinition" {
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
	// The two peers change apart: a poll may see one change and the next poll the other, in
	// either order.
	slices.Sort(events)
	if want := []string{"DELETED gadgets.example.io uid-gb", "MODIFIED things.example.io uid-c2"}; !slices.Equal(events, want) {
		t.Errorf("watch events %v, want %v", events, want)
	}
	lines := watchLines(t, hs, path+"?watch=1&resourceVersion="+list.ResourceVersion, "", 1)
	if len(lines) != 1 || lines[0].Type != "ERROR" || !strings.Contains(string(lines[0].Object), "410") {
		t.Errorf("a watch from the old resourceVersion: %+v, want one 410 ERROR", lines)
	}
}

// TestCRDsMovingClusterAnswersRetry: a fleet part whose cluster has not started here yet (it
// is moving here) answers 503 with Retry-After, never a list without the cluster's
// definitions, which a client would take for their deletion.
func TestCRDsMovingClusterAnswersRetry(t *testing.T) {
	src, _, _ := fakeClustersAB(t)
	fl := &staticFleet{owners: []shard.Owner{self("a"), self("b"), self("c")}}
	hs, _ := kubeFixtureOf(t, src, Options{Fleet: fl})
	ask := func(part ...string) *http.Response {
		body, _ := json.Marshal(storage.ClusterOptions{Part: part})
		req, _ := http.NewRequest(http.MethodPost, hs.URL+peer.DefinitionsPath, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(peer.ProtocolHeader, peer.ProtocolVersion)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := ask("a", "c"); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a part with a cluster not started here: %d (Retry-After %q), want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if resp := ask("a", "b"); resp.StatusCode != http.StatusOK {
		t.Errorf("a part of running clusters: %d, want 200", resp.StatusCode)
	}
}

// The envelope's header, for fakes whose name for a peer shadows the package's.
const (
	envelopeHeader  = peer.ProtocolHeader
	envelopeVersion = peer.ProtocolVersion
)
