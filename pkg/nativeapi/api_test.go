package nativeapi

import (
	"bytes"
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/storage"
)

// TestEncodeAddsTheType: an object is written with the kind and apiVersion its cluster serves
// it as, in its group, and never modified; a peer's object is written as it came.
func TestEncodeAddsTheType(t *testing.T) {
	info := map[string]map[string]clusterset.ResourceStatus{
		"configmaps":  {"c1": {Version: "v1", Kind: "ConfigMap"}},
		"deployments": {"c1": {Group: "apps", Version: "v1", Kind: "Deployment"}},
	}
	a := New(Options{Info: func(_ context.Context, res string) map[string]clusterset.ResourceStatus { return info[res] }})
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "d"}, Data: map[string]string{"k": "v"}}
	for res, want := range map[string]string{"configmaps": `{"kind":"ConfigMap","apiVersion":"v1",`, "deployments": `{"kind":"Deployment","apiVersion":"apps/v1",`} {
		var buf bytes.Buffer
		if err := a.encoder(context.Background(), res).object(&buf, storage.Item{Key: aggregate.Key{Cluster: "c1", Name: "d"}, Object: cm}); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(buf.String(), want) || !strings.Contains(buf.String(), `"data":{"k":"v"}`) {
			t.Errorf("%s: %s", res, buf.String())
		}
	}
	if cm.Kind != "" {
		t.Error("encoding modified the cached object")
	}
	var buf bytes.Buffer
	raw := []byte(`{"kind":"Pod","metadata":{"name":"p"}}`)
	if err := a.encoder(context.Background(), "configmaps").object(&buf, storage.Item{Key: aggregate.Key{Cluster: "c2", Name: "p"}, Raw: raw}); err != nil || buf.String() != string(raw) {
		t.Errorf("a peer's object: %s, %v", buf.String(), err)
	}
}
