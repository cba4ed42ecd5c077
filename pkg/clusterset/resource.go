package clusterset

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/multicache/multicache/pkg/aggregate"
)

// Mode is how a resource's objects are decoded and stored.
type Mode string

const (
	// ModeAuto decodes built-in kinds as typed objects (protobuf on the wire) and everything else
	// (CRDs) as unstructured. The default.
	ModeAuto Mode = ""
	// ModeTyped requires a kind client-go's scheme knows; others fail with a clear status.
	ModeTyped Mode = "typed"
	// ModeUnstructured decodes into unstructured maps through the dynamic client.
	ModeUnstructured Mode = "unstructured"
	// ModeMetadata stores only metadata (metav1.PartialObjectMetadata): names, labels,
	// annotations, owners. By far the lightest.
	ModeMetadata Mode = "metadata"
)

// ResourceSpec is one resource to cache in every cluster.
type ResourceSpec struct {
	// Name is what the user typed: plural ("pods"), singular, kind ("Pod"), short name ("po"),
	// "resource.group" ("deployments.apps"), or "group/version/resource" ("apps/v1/deployments",
	// "v1/pods" for the core group). Each cluster resolves it through its own discovery.
	Name string
	// Namespace limits the watch to one namespace (ignored for cluster-scoped resources).
	Namespace string
	// LabelSelector and FieldSelector are passed to LIST and WATCH, as tweakListOptions would.
	LabelSelector string
	FieldSelector string
	// Mode chooses the decoding. Default ModeAuto.
	Mode Mode
	// Transform adjusts objects before they are stored. The zero value drops managedFields and
	// the last-applied annotation, and shares equal parts between objects (see NewTransform).
	Transform TransformOptions
	// Indexes are added to this resource's aggregate, in every cluster they apply to.
	Indexes []aggregate.IndexSpec
	// Counts are summary keys whose counts per cluster and value the aggregate keeps from
	// the start (aggregate.KeepCounts), beyond aggregate.DefaultCountedKeys: label:K,
	// field:PATH, or index:NAME of one of Indexes.
	Counts []string
}

// Validate reports the first bad field, named as in the config file after
// "resources[i].": "name: required", "mode: …", "indexes[j]: …", "counts[j]: …".
func (r ResourceSpec) Validate() error {
	if strings.TrimSpace(r.Name) == "" {
		return fmt.Errorf("name: required")
	}
	if _, err := parseResourceName(r.Name); err != nil {
		return fmt.Errorf("name: %w", err)
	}
	if _, err := labels.Parse(r.LabelSelector); err != nil {
		return fmt.Errorf("labelSelector: %w", err)
	}
	if _, err := fields.ParseSelector(r.FieldSelector); err != nil {
		return fmt.Errorf("fieldSelector: %w", err)
	}
	switch r.Mode {
	case ModeAuto, ModeTyped, ModeUnstructured, ModeMetadata:
	default:
		return fmt.Errorf("mode: %q is not one of typed, unstructured, metadata", r.Mode)
	}
	seen := map[string]bool{}
	for j, ix := range r.Indexes {
		if err := ix.Validate(); err != nil {
			return fmt.Errorf("indexes[%d]: %w", j, err)
		}
		if seen[ix.Name] {
			return fmt.Errorf("indexes[%d]: duplicate index %q", j, ix.Name)
		}
		seen[ix.Name] = true
	}
	for j, by := range r.Counts {
		k, err := aggregate.ParseCountedKey(by)
		if err != nil {
			return fmt.Errorf("counts[%d]: %w", j, err)
		}
		if name, ok := k.IndexName(); ok && !seen[name] {
			return fmt.Errorf("counts[%d]: key %q: index %q is not among this resource's indexes", j, by, name)
		}
	}
	return nil
}

func (r ResourceSpec) tweak(o *metav1.ListOptions) {
	if r.LabelSelector != "" {
		o.LabelSelector = r.LabelSelector
	}
	if r.FieldSelector != "" {
		o.FieldSelector = r.FieldSelector
	}
}

// parseResourceName turns the user's name into what discovery resolves: a GroupVersionResource
// whose empty fields are to be filled in.
func parseResourceName(name string) (schema.GroupVersionResource, error) {
	n := strings.TrimSpace(name)
	if strings.ContainsAny(n, " \t") {
		return schema.GroupVersionResource{}, fmt.Errorf("%q: spaces are not allowed", name)
	}
	parts := strings.Split(n, "/")
	for _, p := range parts {
		if p == "" {
			return schema.GroupVersionResource{}, fmt.Errorf("%q: empty segment", name)
		}
	}
	switch len(parts) {
	case 1:
		gr := schema.ParseGroupResource(n)
		return schema.GroupVersionResource{Group: gr.Group, Resource: strings.ToLower(gr.Resource)}, nil
	case 2: // version/resource in the core group
		return schema.GroupVersionResource{Version: parts[0], Resource: strings.ToLower(parts[1])}, nil
	case 3:
		return schema.GroupVersionResource{Group: parts[0], Version: parts[1], Resource: strings.ToLower(parts[2])}, nil
	}
	return schema.GroupVersionResource{}, fmt.Errorf("%q: want name, resource.group or group/version/resource", name)
}

// TransformOptions configures the transform applied before objects are stored. The zero value
// is the default: drop managedFields and the last-applied-configuration annotation.
type TransformOptions struct {
	// KeepManagedFields keeps metadata.managedFields (often 25–30% of an object).
	KeepManagedFields bool
	// KeepLastApplied keeps the kubectl.kubernetes.io/last-applied-configuration annotation,
	// a full copy of the object as last applied.
	KeepLastApplied bool
	// KeepDuplicates keeps every object's own copy of its repeated parts. By default, label
	// and annotation maps, container resource lists, toleration lists, empty security
	// contexts and low-cardinality strings are shared across cached objects (see package
	// intern); cached objects are read-only either way.
	KeepDuplicates bool
	// Func, if set, runs first, on a freshly decoded object that nothing else holds: it may
	// mutate it in place, and must be idempotent. The built-in steps run on what it returns;
	// sharing runs last, so Func never sees, and cannot change, parts shared with other objects.
	Func cache.TransformFunc
}
