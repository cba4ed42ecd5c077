package index

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
)

// Names of the built-in indexes. (The cluster, cluster-namespace and namespace indexes are the
// aggregate's: aggregate.IndexCluster and the like.)
const (
	// Label values are "key=value" for every label, and "key" alone for its presence.
	Label = "label"
	// OwnerUID values are the UIDs of the owner references.
	OwnerUID = "owner-uid"
	// Owner values are "Kind/name" of the owner references.
	Owner = "owner"
	// NodeName values are a Pod's spec.nodeName (unscheduled Pods have none).
	NodeName = "pod-node"
	// Image values are every container image of a Pod: init, regular and ephemeral containers.
	Image = "image"
)

// Builtins returns the built-in index functions by name.
func Builtins() cache.Indexers {
	return cache.Indexers{
		Label:    ByLabel,
		OwnerUID: ByOwnerUID,
		Owner:    ByOwner,
		NodeName: ByNodeName,
		Image:    ByImage,
	}
}

// LabelValue is the index value ByLabel gives a key=value pair.
func LabelValue(key, value string) string { return key + "=" + value }

// ByLabel indexes every label as "key=value" and as "key".
func ByLabel(obj any) ([]string, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, fmt.Errorf("index %s: %w", Label, err)
	}
	lbl := m.GetLabels()
	out := make([]string, 0, 2*len(lbl))
	for k, v := range lbl {
		out = append(out, k, LabelValue(k, v))
	}
	return out, nil
}

// ByOwnerUID indexes the UIDs of the owner references.
func ByOwnerUID(obj any) ([]string, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, fmt.Errorf("index %s: %w", OwnerUID, err)
	}
	refs := m.GetOwnerReferences()
	out := make([]string, 0, len(refs))
	for _, r := range refs {
		out = append(out, string(r.UID))
	}
	return out, nil
}

// ByOwner indexes the owner references as "Kind/name".
func ByOwner(obj any) ([]string, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, fmt.Errorf("index %s: %w", Owner, err)
	}
	refs := m.GetOwnerReferences()
	out := make([]string, 0, len(refs))
	for _, r := range refs {
		out = append(out, r.Kind+"/"+r.Name)
	}
	return out, nil
}

// ByNodeName indexes a Pod's spec.nodeName. Other objects, and metadata-only Pods, yield nothing.
func ByNodeName(obj any) ([]string, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		if o.Spec.NodeName != "" {
			return []string{o.Spec.NodeName}, nil
		}
	case *unstructured.Unstructured:
		if n, _, _ := unstructured.NestedString(o.Object, "spec", "nodeName"); n != "" && o.GetKind() == "Pod" {
			return []string{n}, nil
		}
	}
	return nil, nil
}

// ByImage indexes the images of a Pod's init, regular and ephemeral containers, each once.
func ByImage(obj any) ([]string, error) {
	var out []string
	add := func(img string) {
		if img == "" {
			return
		}
		for _, x := range out {
			if x == img {
				return
			}
		}
		out = append(out, img)
	}
	switch o := obj.(type) {
	case *corev1.Pod:
		for i := range o.Spec.InitContainers {
			add(o.Spec.InitContainers[i].Image)
		}
		for i := range o.Spec.Containers {
			add(o.Spec.Containers[i].Image)
		}
		for i := range o.Spec.EphemeralContainers {
			add(o.Spec.EphemeralContainers[i].Image)
		}
	case *unstructured.Unstructured:
		if o.GetKind() != "Pod" {
			return nil, nil
		}
		for _, field := range []string{"initContainers", "containers", "ephemeralContainers"} {
			cs, _, _ := unstructured.NestedSlice(o.Object, "spec", field)
			for _, c := range cs {
				if m, ok := c.(map[string]any); ok {
					img, _ := m["image"].(string)
					add(img)
				}
			}
		}
	}
	return out, nil
}
