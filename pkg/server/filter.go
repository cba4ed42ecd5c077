package server

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/index"
)

// pathFields are the field paths a field selector may name besides the resource's index names,
// with how each is read.
var pathFields = map[string]func(obj any) []string{
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

// parseQuery turns a request's parameters into the aggregate's query: cluster (repeatable),
// namespace, labelSelector, index+value, and fieldSelector (a path of pathFields or an index
// name of agg). Equality on an indexed field narrows through the index when nothing else does.
func parseQuery(agg *aggregate.Aggregate, q url.Values) (aggregate.Query, error) {
	var out aggregate.Query
	for _, c := range q["cluster"] {
		if err := aggregate.ValidateClusterName(c); err != nil {
			return out, fmt.Errorf("cluster: %w", err)
		}
	}
	out.Clusters = q["cluster"]
	out.Namespace = q.Get("namespace")
	if ls := q.Get("labelSelector"); ls != "" {
		sel, err := labels.Parse(ls)
		if err != nil {
			return out, fmt.Errorf("labelSelector %q: %v", ls, err)
		}
		out.Labels = sel
	}
	if ix := q.Get("index"); ix != "" {
		if !q.Has("value") {
			return out, fmt.Errorf("index %q: value is required", ix)
		}
		out.Index, out.Value = ix, q.Get("value")
		if ix == aggregate.IndexClusterNamespace && !strings.Contains(out.Value, "/") {
			return out, fmt.Errorf("index %q: value %q is not cluster/namespace", ix, out.Value)
		}
	} else if q.Has("value") {
		return out, errors.New("value: given without index")
	}
	fs := q.Get("fieldSelector")
	if fs == "" {
		return out, nil
	}
	sel, err := fields.ParseSelector(fs)
	if err != nil {
		return out, fmt.Errorf("fieldSelector %q: %v", fs, err)
	}
	indexes := agg.GetIndexers()
	for _, r := range sel.Requirements() {
		read, isPath := pathFields[r.Field]
		_, isIndex := indexes[r.Field]
		if !isPath && !isIndex {
			return out, fmt.Errorf("fieldSelector: field %q is not supported (use metadata.name, metadata.namespace, spec.nodeName, status.phase or an index name)", r.Field)
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

// cachedItems lists every object agg holds.
func cachedItems(agg *aggregate.Aggregate) []item {
	result, err := agg.Select(aggregate.Query{})
	if err != nil {
		return nil
	}
	var out []item
	for it := range keyed(result) {
		out = append(out, it)
	}
	return out
}
