package local

import (
	"fmt"
	"net/http"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/index"
	"github.com/multicache/multicache/pkg/storage"
)

// PathFields are the field paths a field selector may name besides the resource's index
// names, with how each is read.
var PathFields = map[string]func(obj any) []string{
	"metadata.name":      func(obj any) []string { return metaValue(obj, metav1.Object.GetName) },
	"metadata.namespace": func(obj any) []string { return metaValue(obj, metav1.Object.GetNamespace) },
	"spec.nodeName":      func(obj any) []string { return podField(obj, "spec.nodeName") },
	"status.phase":       func(obj any) []string { return podField(obj, "status.phase") },
}

func metaValue(obj any, get func(metav1.Object) string) []string {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil
	}
	return []string{get(m)}
}

// podField reads spec.nodeName or status.phase of a Pod, typed or unstructured ("" elsewhere).
func podField(obj any, field string) []string {
	switch o := obj.(type) {
	case *corev1.Pod:
		if field == "spec.nodeName" {
			return []string{o.Spec.NodeName}
		}
		return []string{string(o.Status.Phase)}
	case *unstructured.Unstructured:
		v, _, _ := unstructured.NestedString(o.Object, strings.Split(field, ".")...)
		return []string{v}
	}
	return []string{""}
}

// Query turns a selection's object filters into the aggregate's query: namespace, index and
// value, the field selector (a path of PathFields or an index name of agg) and the where
// filter. Equality on an indexed field narrows through the index when nothing else does. Its
// errors are 400s that name the parameter. Clusters and labels are the caller's to set.
func Query(agg *aggregate.Aggregate, sel storage.Selection) (aggregate.Query, error) {
	where, err := compileWhere(sel.Where, false)
	if err != nil {
		return aggregate.Query{}, err
	}
	return query(agg, sel, where, nil)
}

// compileWhere is the request's filter of a where expression, nil without one: a watch's
// (index.Filter.BindWatch), or an answer's (Bind).
func compileWhere(expr string, watch bool) (*index.Bound, error) {
	if expr == "" {
		return nil, nil
	}
	f, err := index.CompileFilter(expr)
	if err != nil {
		return nil, storage.Errorf(http.StatusBadRequest, "where: %v", err)
	}
	if watch {
		return f.BindWatch(), nil
	}
	return f.Bind(), nil
}

// whereFailed is the 400 of a filter that failed for good on some object (its cost), nil
// otherwise.
func whereFailed(where *index.Bound) error {
	if where == nil || where.Err() == nil {
		return nil
	}
	return storage.Errorf(http.StatusBadRequest, "where: %v", where.Err())
}

// query is Query with a compiled filter, which reads view(obj) of each object (obj itself
// when view is nil).
func query(agg *aggregate.Aggregate, sel storage.Selection, where *index.Bound, view func(any) any) (aggregate.Query, error) {
	bad := func(format string, args ...any) (aggregate.Query, error) {
		return aggregate.Query{}, storage.Errorf(http.StatusBadRequest, format, args...)
	}
	out := aggregate.Query{Namespace: sel.Namespace}
	if ix := sel.Index; ix != "" {
		out.Index, out.Value = ix, sel.Value
		if ix == aggregate.IndexClusterNamespace && !strings.Contains(out.Value, "/") {
			return bad("index %q: value %q is not cluster/namespace", ix, out.Value)
		}
	}
	if where != nil {
		// A field term that reads the filter: Select, Matches and a watch's kept
		// Attributes judge it as they judge a field selector.
		values := where.Values
		if view != nil {
			values = func(obj any) []string { return where.Values(view(obj)) }
		}
		term := aggregate.FieldTerm{Field: "where", Value: "true", Values: values}
		if view == nil {
			term.Where = where.Expr() // what the object itself makes true: learnable
		}
		out.Fields = append(out.Fields, term)
	}
	fs := sel.FieldSelector
	if fs == "" {
		return out, nil
	}
	parsed, err := fields.ParseSelector(fs)
	if err != nil {
		return bad("fieldSelector %q: %v", fs, err)
	}
	indexes := agg.GetIndexers()
	for _, r := range parsed.Requirements() {
		read, isPath := PathFields[r.Field]
		_, isIndex := indexes[r.Field]
		if !isPath && !isIndex {
			return bad("fieldSelector: field %q is not supported (use metadata.name, metadata.namespace, spec.nodeName, status.phase or an index name)", r.Field)
		}
		not := r.Operator == selection.NotEquals
		// An empty value selects objects without the field (cluster-scoped ones, unscheduled
		// Pods), which neither the namespace filter nor the node index can express.
		_, hasNodeIndex := indexes[index.NodeName]
		switch {
		case !not && r.Value != "" && r.Field == "metadata.namespace" && out.Namespace == "":
			out.Namespace = r.Value
			continue
		case !not && r.Value != "" && out.Index == "" && r.Field == "spec.nodeName" && hasNodeIndex:
			out.Index, out.Value = index.NodeName, r.Value
			continue
		case !not && out.Index == "" && isIndex && !isPath:
			// (A path field keeps its meaning even if an index has its name.)
			out.Index, out.Value = r.Field, r.Value
			continue
		}
		out.Fields = append(out.Fields, aggregate.FieldTerm{Field: r.Field, Value: r.Value, Not: not, Values: read})
	}
	return out, nil
}

// validNames fails with a 400 naming the first cluster name that no cluster can have.
func validNames(names []string) error {
	for _, c := range names {
		if err := aggregate.ValidateClusterName(c); err != nil {
			return storage.Error(http.StatusBadRequest, fmt.Sprintf("cluster: %v", err))
		}
	}
	return nil
}
