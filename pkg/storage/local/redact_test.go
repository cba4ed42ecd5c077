package local

import (
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/client-go/tools/cache"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/multicache/multicache/pkg/clusterset"
)

// TestRedactionLeavesTheCacheAlone: a Secret is read without its data, stringData and
// kubectl's last-applied annotation, typed, unstructured or metadata-only; the cached object is
// never modified; with AllowSecretData it is read whole.
func TestRedactionLeavesTheCacheAlone(t *testing.T) {
	sel := &selected{secrets: true}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Annotations: map[string]string{clusterset.LastAppliedAnnotation: `{"data":{"password":"aHVudGVyMg=="}}`}},
		Data: map[string][]byte{"password": []byte("hunter2")}, StringData: map[string]string{"k": "v"}}
	for _, obj := range []any{secret,
		&unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "s"}, "data": map[string]any{"p": "aHVudGVyMg=="}}},
		&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "s", Annotations: map[string]string{clusterset.LastAppliedAnnotation: "aHVudGVyMg=="}}},
	} {
		b, _ := json.Marshal(sel.redact(obj))
		if strings.Contains(string(b), "aHVudGVyMg") || strings.Contains(string(b), `"k":"v"`) {
			t.Errorf("%T read with its data: %s", obj, b)
		}
	}
	if secret.Data == nil || secret.Annotations[clusterset.LastAppliedAnnotation] == "" {
		t.Error("redaction modified the cached object")
	}
	sel.allowSecretData = true
	if b, _ := json.Marshal(sel.redact(secret)); !strings.Contains(string(b), "aGVudGVyMg") && !strings.Contains(string(b), "aHVudGVyMg") {
		t.Errorf("allowSecretData: %s", b)
	}
}

// TestSecretRedactionEveryShape: no shape a Secret can be cached in (typed, unstructured,
// metadata-only, a tombstone of any of them) lets its data out, through data, stringData or
// kubectl's last-applied annotation, which holds a full copy of the applied Secret.
func TestSecretRedactionEveryShape(t *testing.T) {
	const secret = "aHVudGVyMg" // base64 of the password, as last-applied holds it
	applied := `{"apiVersion":"v1","kind":"Secret","data":{"password":"aHVudGVyMg=="},"metadata":{"name":"s"}}`
	meta := func() metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: "s", Namespace: "ns", Annotations: map[string]string{clusterset.LastAppliedAnnotation: applied, "keep": "me"}}
	}
	typed := &corev1.Secret{ObjectMeta: meta(), Data: map[string][]byte{"password": []byte("hunter2")}, StringData: map[string]string{"k": "hunter2"}}
	unstr := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"name": "s", "namespace": "ns", "annotations": map[string]any{clusterset.LastAppliedAnnotation: applied, "keep": "me"}},
		"data":     map[string]any{"password": "aHVudGVyMg=="}}}
	partial := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"}, ObjectMeta: meta()}
	for name, obj := range map[string]any{
		"typed": typed, "unstructured": unstr, "metadata": partial,
		"typed tombstone":    cache.DeletedFinalStateUnknown{Key: "ns/s", Obj: typed},
		"metadata tombstone": cache.DeletedFinalStateUnknown{Key: "ns/s", Obj: partial},
	} {
		b, err := json.Marshal((&selected{secrets: true}).redact(obj))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if strings.Contains(string(b), secret) || strings.Contains(string(b), "hunter2") || strings.Contains(string(b), "aHVudGVyMg==") {
			t.Errorf("%s: Secret data served: %s", name, b)
		}
		if !strings.Contains(string(b), `"keep":"me"`) {
			t.Errorf("%s: other annotations lost: %s", name, b)
		}
	}
	if typed.Annotations[clusterset.LastAppliedAnnotation] == "" || partial.Annotations[clusterset.LastAppliedAnnotation] == "" || typed.Data == nil {
		t.Error("redaction modified the cached objects")
	}
}
