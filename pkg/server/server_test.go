package server

import (
	"net/url"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/index"
)

func TestEncodeAddsTypeAndRedactsSecrets(t *testing.T) {
	s := &Server{}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Data: map[string][]byte{"password": []byte("hunter2")}, StringData: map[string]string{"k": "v"}}
	b, err := s.encode(secret, clusterset.ResourceStatus{Version: "v1", Kind: "Secret"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "aHVudGVyMg") || strings.Contains(string(b), `"k":"v"`) || !strings.HasPrefix(string(b), `{"kind":"Secret","apiVersion":"v1",`) {
		t.Errorf("encoded secret: %s", b)
	}
	if secret.Data == nil {
		t.Error("encode modified the cached object")
	}
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "s"}, "data": map[string]any{"p": "aHVudGVyMg=="}}}
	b, _ = s.encode(u, clusterset.ResourceStatus{})
	if strings.Contains(string(b), "aHVudGVyMg") || u.Object["data"] == nil {
		t.Errorf("unstructured secret: %s", b)
	}
	s.opts.AllowSecretData = true
	b, _ = s.encode(secret, clusterset.ResourceStatus{Version: "v1", Kind: "Secret"})
	if !strings.Contains(string(b), "aHVudGVyMg") {
		t.Errorf("allowData: %s", b)
	}
	b, _ = s.encode(&appsDeployment, clusterset.ResourceStatus{Group: "apps", Version: "v1", Kind: "Deployment"})
	if !strings.HasPrefix(string(b), `{"kind":"Deployment","apiVersion":"apps/v1",`) {
		t.Errorf("group apiVersion: %s", b)
	}
}

var appsDeployment = corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "d"}}

func TestTokenRoundTrip(t *testing.T) {
	tok := token{Epoch: "abc", RVs: map[string]uint64{"fleet-1": 10, "fleet-2": 7}}
	got, err := parseToken(tok.encode())
	if err != nil || got.Epoch != "abc" || got.RVs["fleet-2"] != 7 {
		t.Errorf("round trip: %+v %v", got, err)
	}
	for _, bad := range []string{"", "!!", "e30", "eyJlIjoiIn0", "eyJlIjoiYSIsInYiOnsiYSBiIjoxfX0"} {
		if _, err := parseToken(bad); err == nil {
			t.Errorf("parseToken(%q) accepted", bad)
		}
	}
}

func TestHubResumeAndExpiry(t *testing.T) {
	h := newHub("cm", "e", 3)
	for i := 1; i <= 5; i++ {
		h.OnAdd("c1", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", ResourceVersion: string(rune('0' + i))}}, false)
	}
	if _, _, err := h.subscribe(map[string]uint64{"c1": 1}, 10); err == nil {
		t.Error("resume from an evicted rv: no error")
	}
	w, replay, err := h.subscribe(map[string]uint64{"c1": 3}, 10)
	if err != nil || len(replay) != 2 || replay[0].rv != 4 {
		t.Errorf("resume from 3: %v %v", replay, err)
	}
	h.unsubscribe(w)
	// A deleted object seen through a tombstone has no comparable rv: always replayed.
	h.OnDelete("c1", cache.DeletedFinalStateUnknown{Key: "x", Obj: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", ResourceVersion: "5"}}})
	_, replay, _ = h.subscribe(map[string]uint64{"c1": 5}, 10)
	if len(replay) != 1 || replay[0].typ != "DELETED" {
		t.Errorf("tombstone replay: %+v", replay)
	}
}

func FuzzParseToken(f *testing.F) {
	f.Add(token{Epoch: "e", RVs: map[string]uint64{"fleet-1": 1}}.encode())
	f.Add("eyJlIjoib2xkIiwidiI6e319")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := parseToken(s)
		if err != nil {
			return
		}
		again, err := parseToken(tok.encode())
		if err != nil || again.Epoch != tok.Epoch || len(again.RVs) != len(tok.RVs) {
			t.Fatalf("accepted token does not round-trip: %q", s)
		}
	})
}

// FuzzParseFilter: no query string panics the parser, and what it accepts filters without error.
func FuzzParseFilter(f *testing.F) {
	s := &Server{opts: Options{IndexFuncs: map[string]map[string]cache.IndexFunc{"pods": {index.NodeName: index.ByNodeName, index.Image: index.ByImage}}}}
	for _, q := range []string{"labelSelector=app%3Dweb", "fieldSelector=spec.nodeName%3Dn1,metadata.name!%3Dx", "index=image&value=nginx", "cluster=fleet-1&namespace=a", "fieldSelector=image%3Dx", "labelSelector=a+in+(b"} {
		f.Add(q)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "a", Labels: map[string]string{"app": "web"}}}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		flt, err := s.parseFilter("pods", q)
		if err != nil {
			return
		}
		_ = flt.matches(s, "fleet-1", pod)
	})
}
