package storage

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestAppendJSON: AppendJSON appends what json.Marshal gives, byte for byte (HTML escaped,
// no newline), and leaves the buffer as it was when the value does not encode.
func TestAppendJSON(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a<b>&c", Namespace: "ns", Annotations: map[string]string{"x": "\u2028"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry/img:1"}}}}
	for _, v := range []any{pod, map[string]any{"k": []any{1, "two", nil}}, "plain", 3.5, nil} {
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		buf := bytes.NewBufferString("before,")
		if err := AppendJSON(buf, v); err != nil {
			t.Fatalf("%T: %v", v, err)
		}
		if got := buf.String(); got != "before,"+string(want) {
			t.Errorf("%T: appended %q, want %q", v, got, "before,"+string(want))
		}
	}
	buf := bytes.NewBufferString("before")
	if err := AppendJSON(buf, map[string]any{"ok": 1, "bad": math.Inf(1)}); err == nil {
		t.Error("+Inf encoded")
	}
	if buf.String() != "before" {
		t.Errorf("a failed encoding left %q, want %q", buf.String(), "before")
	}
}
