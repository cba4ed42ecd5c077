package server

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/multicache/multicache/internal/fakeapi"
	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/clusterset"
)

// TestListBytesMatchAPI: the hand-written fast path of list pages (pooled, parallel encoding)
// produces exactly the bytes encoding/json gives for the api types, as do the other answers.
func TestListBytesMatchAPI(t *testing.T) {
	f := fakeapi.New(t)
	f.SetPods(benchPods("c1", 40))
	reg, err := clusterset.New(clusterset.Options{Source: clusterset.Static{{Name: "c1", Config: f.Config(), Fingerprint: "1"}},
		Resources: []clusterset.ResourceSpec{{Name: "pods"}}, ProbeInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	runRegistry(t, reg.Start)
	if missing := reg.WaitForSync(context.Background(), 30*time.Second); missing != nil {
		t.Fatal(missing)
	}
	h := s.Handler()
	roundTrip := func(path string, v any) {
		t.Helper()
		code, body := get(t, h, path, "")
		if code != 200 {
			t.Fatalf("%s: %d %s", path, code, body)
		}
		if err := json.Unmarshal([]byte(body), v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		want, _ := json.Marshal(v)
		if string(want)+"\n" != body {
			t.Errorf("%s: answer differs from encoding/json of the api type:\n got  %s\n want %s", path, body, want)
		}
	}
	var page api.List
	roundTrip("/multicache/v1/resources/pods?limit=30", &page) // 30 items: the parallel encoder
	if len(page.Items) != 30 || page.Continue == "" {
		t.Fatalf("first page: %d items, continue %q", len(page.Items), page.Continue)
	}
	roundTrip("/multicache/v1/resources/pods?limit=30&continue="+page.Continue, &api.List{})
	roundTrip("/multicache/v1/resources/pods/c1/ns-1/pod-1", &api.Item{})
	roundTrip("/multicache/v1/clusters", &api.Clusters{})
}
