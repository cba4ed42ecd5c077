package table

import (
	"context"
	"fmt"
	"sync"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/registry/customresource/tableconvertor"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ClusterColumn is the first column of every table.
var ClusterColumn = metav1.TableColumnDefinition{Name: "Cluster", Type: "string", Description: "The member cluster the object lives in."}

// TableConvertor is what Kubernetes API servers convert objects with (k8s.io/apiserver's
// rest.TableConvertor): Kubernetes' printers and apiextensions-apiserver's convertor are both
// one.
type TableConvertor interface {
	ConvertToTable(ctx context.Context, obj runtime.Object, tableOptions runtime.Object) (*metav1.Table, error)
}

// Convertor makes the columns and cells of one kind.
type Convertor interface {
	// Columns are the kind's columns, without CLUSTER.
	Columns() []metav1.TableColumnDefinition
	// Cells are obj's cells, one per column.
	Cells(ctx context.Context, obj runtime.Object) ([]any, error)
}

// Provider supplies the Convertors of the kinds it knows (built-in kinds).
type Provider interface {
	// Convertor returns the Convertor of gvk's objects, or nil.
	Convertor(gvk schema.GroupVersionKind) Convertor
}

// Set finds and keeps the Convertor of each kind. Safe for concurrent use.
type Set struct {
	provider Provider
	mu       sync.Mutex
	byKind   map[string]Convertor
}

// NewSet returns a Set that asks p first (p may be nil).
func NewSet(p Provider) *Set {
	return &Set{provider: p, byKind: map[string]Convertor{}}
}

// defaultColumns are those of a custom resource without additionalPrinterColumns.
var defaultColumns = []apiextensionsv1.CustomResourceColumnDefinition{{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"}}

// For returns the Convertor of gvk's objects: the Provider's; else one for columns, a custom
// resource's additionalPrinterColumns; else NAME and AGE. metadataOnly objects (stored as
// PartialObjectMetadata) carry no fields but metadata, so only NAME and AGE describe them.
func (s *Set) For(gvk schema.GroupVersionKind, columns []apiextensionsv1.CustomResourceColumnDefinition, metadataOnly bool) (Convertor, error) {
	key := fmt.Sprintf("%s|%t|%v", gvk, metadataOnly, columns)
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.byKind[key]; ok {
		return c, nil
	}
	var c Convertor
	if s.provider != nil && !metadataOnly {
		c = s.provider.Convertor(gvk)
	}
	if c == nil {
		if metadataOnly || len(columns) == 0 {
			columns = defaultColumns
		}
		tc, err := tableconvertor.New(columns)
		if err != nil {
			return nil, fmt.Errorf("%s: printer columns: %w", gvk.Kind, err)
		}
		c, err = FromTableConvertor(tc, &unstructured.UnstructuredList{})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", gvk.Kind, err)
		}
	}
	s.byKind[key] = c
	return c, nil
}

// FromTableConvertor adapts an API server's TableConvertor; empty is an empty list of the kind,
// whose table gives the columns.
func FromTableConvertor(tc TableConvertor, empty runtime.Object) (Convertor, error) {
	t, err := tc.ConvertToTable(context.Background(), empty, &metav1.TableOptions{})
	if err != nil {
		return nil, fmt.Errorf("columns: %w", err)
	}
	return &adapted{tc: tc, columns: t.ColumnDefinitions}, nil
}

type adapted struct {
	tc      TableConvertor
	columns []metav1.TableColumnDefinition
}

func (a *adapted) Columns() []metav1.TableColumnDefinition { return a.columns }

func (a *adapted) Cells(ctx context.Context, obj runtime.Object) ([]any, error) {
	t, err := a.tc.ConvertToTable(ctx, obj, &metav1.TableOptions{NoHeaders: true})
	if err != nil {
		return nil, err
	}
	if len(t.Rows) != 1 {
		return nil, fmt.Errorf("%d rows for one object", len(t.Rows))
	}
	return t.Rows[0].Cells, nil
}

// Row is one object of a table and the cluster it lives in.
type Row struct {
	Cluster string
	Object  runtime.Object
}

// Build makes the table of rows: CLUSTER, then c's columns (none when noHeaders, as for a
// watch's events after the first). Each row's object is its PartialObjectMetadata.
func Build(ctx context.Context, c Convertor, rows []Row, noHeaders bool) (*metav1.Table, error) {
	t := &metav1.Table{Rows: make([]metav1.TableRow, 0, len(rows))}
	t.Kind, t.APIVersion = "Table", metav1.SchemeGroupVersion.String()
	if !noHeaders {
		t.ColumnDefinitions = append([]metav1.TableColumnDefinition{ClusterColumn}, c.Columns()...)
	}
	for _, r := range rows {
		cells, err := c.Cells(ctx, r.Object)
		if err != nil {
			return nil, fmt.Errorf("cluster %q: %w", r.Cluster, err)
		}
		m, err := meta.Accessor(r.Object)
		if err != nil {
			return nil, fmt.Errorf("cluster %q: %w", r.Cluster, err)
		}
		partial := meta.AsPartialObjectMetadata(m)
		partial.Kind, partial.APIVersion = "PartialObjectMetadata", metav1.SchemeGroupVersion.String()
		t.Rows = append(t.Rows, metav1.TableRow{
			Cells:  append([]any{r.Cluster}, cells...),
			Object: runtime.RawExtension{Object: partial},
		})
	}
	return t, nil
}
