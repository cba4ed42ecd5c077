package table

import (
	"context"
	"reflect"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func widget(name string, size int64) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.io/v1", "kind": "Widget",
		"metadata": map[string]any{"name": name, "namespace": "ns", "creationTimestamp": time.Now().Add(-2 * time.Hour).UTC().Format(time.RFC3339)},
		"spec":     map[string]any{"size": size, "color": "blue"},
	}}
	return u
}

// TestCustomColumns: a custom resource's additionalPrinterColumns, after CLUSTER and NAME, with
// priority kept for -o wide, and rows whose objects are PartialObjectMetadata.
func TestCustomColumns(t *testing.T) {
	cols := []apiextensionsv1.CustomResourceColumnDefinition{
		{Name: "Size", Type: "integer", JSONPath: ".spec.size"},
		{Name: "Color", Type: "string", JSONPath: ".spec.color", Priority: 1},
	}
	c, err := NewSet(nil).For(schema.GroupVersionKind{Group: "example.io", Version: "v1", Kind: "Widget"}, cols, false)
	if err != nil {
		t.Fatal(err)
	}
	w := widget("w1", 3)
	before := w.DeepCopy()
	tab, err := Build(context.Background(), c, []Row{{Cluster: "east", Object: w}}, false)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, col := range tab.ColumnDefinitions {
		names = append(names, col.Name)
	}
	if want := []string{"Cluster", "Name", "Size", "Color"}; !reflect.DeepEqual(names, want) {
		t.Errorf("columns %v, want %v", names, want)
	}
	if tab.ColumnDefinitions[3].Priority != 1 {
		t.Error("the wide column lost its priority")
	}
	if want := []any{"east", "w1", int64(3), "blue"}; !reflect.DeepEqual(tab.Rows[0].Cells, want) {
		t.Errorf("cells %#v, want %#v", tab.Rows[0].Cells, want)
	}
	p, ok := tab.Rows[0].Object.Object.(*metav1.PartialObjectMetadata)
	if !ok || p.Namespace != "ns" || p.Kind != "PartialObjectMetadata" {
		t.Errorf("row object %#v", tab.Rows[0].Object.Object)
	}
	if !reflect.DeepEqual(w, before) {
		t.Error("Build modified the object")
	}
	none, err := Build(context.Background(), c, []Row{{Cluster: "east", Object: w}}, true)
	if err != nil || none.ColumnDefinitions != nil || len(none.Rows[0].Cells) != 4 {
		t.Errorf("noHeaders: %+v %v", none, err)
	}
}

// TestDefaultColumns: without columns, and for metadata-only objects, NAME and AGE.
func TestDefaultColumns(t *testing.T) {
	s := NewSet(nil)
	gvk := schema.GroupVersionKind{Group: "example.io", Version: "v1", Kind: "Widget"}
	size := []apiextensionsv1.CustomResourceColumnDefinition{{Name: "Size", Type: "integer", JSONPath: ".spec.size"}}
	for _, tc := range []struct {
		obj          runtime.Object
		columns      []apiextensionsv1.CustomResourceColumnDefinition
		metadataOnly bool
	}{
		{widget("w1", 1), nil, false},
		// Metadata only: the columns would read fields the object does not have.
		{&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "w1", CreationTimestamp: metav1.NewTime(time.Now().Add(-3 * time.Minute))}}, size, true},
	} {
		c, err := s.For(gvk, tc.columns, tc.metadataOnly)
		if err != nil {
			t.Fatal(err)
		}
		tab, err := Build(context.Background(), c, []Row{{Cluster: "c1", Object: tc.obj}}, false)
		if err != nil {
			t.Fatal(err)
		}
		if len(tab.ColumnDefinitions) != 3 || tab.ColumnDefinitions[1].Name != "Name" || tab.ColumnDefinitions[2].Name != "Age" {
			t.Errorf("columns %+v", tab.ColumnDefinitions)
		}
		if cells := tab.Rows[0].Cells; cells[0] != "c1" || cells[1] != "w1" || cells[2] == "" {
			t.Errorf("cells %v", cells)
		}
	}
}

// TestBadColumn: a column whose JSONPath does not parse is an error naming the kind.
func TestBadColumn(t *testing.T) {
	_, err := NewSet(nil).For(schema.GroupVersionKind{Kind: "Widget"}, []apiextensionsv1.CustomResourceColumnDefinition{{Name: "X", Type: "string", JSONPath: ".spec[("}}, false)
	if err == nil {
		t.Fatal("no error")
	}
}
