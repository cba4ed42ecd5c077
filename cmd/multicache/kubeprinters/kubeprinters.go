package kubeprinters

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	"k8s.io/kubernetes/pkg/printers"
	printersinternal "k8s.io/kubernetes/pkg/printers/internalversion"
	printerstorage "k8s.io/kubernetes/pkg/printers/storage"

	// The groups whose objects the printers read, in their internal form.
	_ "k8s.io/kubernetes/pkg/apis/admissionregistration/install"
	_ "k8s.io/kubernetes/pkg/apis/apps/install"
	_ "k8s.io/kubernetes/pkg/apis/autoscaling/install"
	_ "k8s.io/kubernetes/pkg/apis/batch/install"
	_ "k8s.io/kubernetes/pkg/apis/certificates/install"
	_ "k8s.io/kubernetes/pkg/apis/coordination/install"
	_ "k8s.io/kubernetes/pkg/apis/core/install"
	_ "k8s.io/kubernetes/pkg/apis/discovery/install"
	_ "k8s.io/kubernetes/pkg/apis/flowcontrol/install"
	_ "k8s.io/kubernetes/pkg/apis/networking/install"
	_ "k8s.io/kubernetes/pkg/apis/node/install"
	_ "k8s.io/kubernetes/pkg/apis/policy/install"
	_ "k8s.io/kubernetes/pkg/apis/rbac/install"
	_ "k8s.io/kubernetes/pkg/apis/resource/install"
	_ "k8s.io/kubernetes/pkg/apis/scheduling/install"
	_ "k8s.io/kubernetes/pkg/apis/storage/install"

	"github.com/multicache/multicache/pkg/table"
)

// Provider is a table.Provider of every kind Kubernetes' printers know.
type Provider struct {
	convertor printerstorage.TableConvertor
}

// New returns the Provider.
func New() *Provider {
	return &Provider{convertor: printerstorage.TableConvertor{TableGenerator: printers.NewTableGenerator().With(printersinternal.AddHandlers)}}
}

// Convertor returns the printers' Convertor for gvk, or nil when they have no columns for it
// (or it is not a built-in kind).
func (p *Provider) Convertor(gvk schema.GroupVersionKind) table.Convertor {
	internal := schema.GroupVersion{Group: gvk.Group, Version: runtime.APIVersionInternal}
	if !legacyscheme.Scheme.Recognizes(gvk) {
		return nil
	}
	list, err := legacyscheme.Scheme.New(internal.WithKind(gvk.Kind + "List"))
	if err != nil {
		return nil
	}
	t, err := p.convertor.ConvertToTable(context.Background(), list, &metav1.TableOptions{})
	if err != nil || len(t.ColumnDefinitions) == 0 || t.ColumnDefinitions[0].Name != "Name" {
		return nil
	}
	if len(t.ColumnDefinitions) == 2 && t.ColumnDefinitions[1].Name == "Created At" {
		return nil // the printers' fallback for kinds they do not know
	}
	return &convertor{p: p, internal: internal, columns: t.ColumnDefinitions}
}

type convertor struct {
	p        *Provider
	internal schema.GroupVersion
	columns  []metav1.TableColumnDefinition
}

func (c *convertor) Columns() []metav1.TableColumnDefinition { return c.columns }

// Cells converts obj to its internal form, which the printers read. The conversion shares
// memory with obj (no deep copy of every object): the printers only read it.
func (c *convertor) Cells(ctx context.Context, obj runtime.Object) ([]any, error) {
	in, err := legacyscheme.Scheme.UnsafeConvertToVersion(obj, c.internal)
	if err != nil {
		return nil, fmt.Errorf("convert %s to its internal form: %w", obj.GetObjectKind().GroupVersionKind().Kind, err)
	}
	t, err := c.p.convertor.ConvertToTable(ctx, in, &metav1.TableOptions{NoHeaders: true})
	if err != nil {
		return nil, err
	}
	if len(t.Rows) != 1 {
		return nil, fmt.Errorf("%d rows for one object", len(t.Rows))
	}
	return t.Rows[0].Cells, nil
}
