package local

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/storage"
)

// TestWhereReadsSecretsAsServed: a where filter judges a Secret as the caller reads it. Without
// the daemon serving Secrets' data, a filter on the data (or on the last-applied annotation,
// which copies it) passes no Secret, so it cannot tell a caller what the data holds; with it,
// the filter reads the data.
func TestWhereReadsSecretsAsServed(t *testing.T) {
	agg, _, err := aggregate.New(aggregate.Options{Resource: "secrets"})
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns",
		Annotations: map[string]string{clusterset.LastAppliedAnnotation: `{"data":{"password":"aHVudGVyMg=="}}`}},
		Data: map[string][]byte{"password": []byte("hunter2")}}
	for _, where := range []string{
		"has(object.data) && object.data.password == 'aHVudGVyMg=='",
		"has(object.metadata.annotations) && object.metadata.annotations.exists(k, k.startsWith('kubectl'))",
		"object.metadata.name == 's' && has(object.data)",
	} {
		for _, served := range []bool{false, true} {
			f, err := compileWhere(where, false)
			if err != nil {
				t.Fatal(err)
			}
			q, err := query(agg, storage.Selection{Resource: "secrets", Where: where}, f, readView(true, served))
			if err != nil {
				t.Fatal(err)
			}
			if got := agg.Matches(q, "c", secret); got != served {
				t.Errorf("%s, data served %v: passes %v, want %v", where, served, got, served)
			}
		}
	}
	// Not a Secret: read as it is.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Data: map[string]string{"k": "v"}}
	f, _ := compileWhere("object.data.k == 'v'", true)
	q, _ := query(agg, storage.Selection{Resource: "configmaps"}, f, readView(false, false))
	if !agg.Matches(q, "c", cm) {
		t.Error("a ConfigMap's data is hidden from a where filter")
	}
}
