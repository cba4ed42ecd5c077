package server

import (
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/multicache/multicache/internal/fakeapi"
	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/shard"
)

// twoReplicas is a fleet of clusters a, b and c over fake API servers, answered two ways: by
// one replica that runs them all (single), and by a replica that runs a and b and asks a peer
// for c (fanned). Both read the same Registry.
func twoReplicas(t *testing.T) (single, fanned *httptest.Server) {
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
	one, err := New(Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	single = httptest.NewServer(one.Handler())
	t.Cleanup(single.Close)
	fl := &staticFleet{owners: []shard.Owner{self("a"), self("b"), {Cluster: "c", Holder: "p2", URL: single.URL, Live: true}}}
	two, err := New(Options{Registry: reg, Fleet: fl})
	if err != nil {
		t.Fatal(err)
	}
	fanned = httptest.NewServer(two.Handler())
	t.Cleanup(fanned.Close)
	runRegistry(t, reg.Start)
	waitUntil(t, "synced", 10*time.Second, func() bool {
		return len(one.unready("pods", nil)) == 0 && len(two.unready("pods", nil)) == 0 && len(reg.Clusters()) == 3
	})
	return single, fanned
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
	single, fanned := twoReplicas(t)
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
