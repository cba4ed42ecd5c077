package local

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/multicache/multicache/pkg/clusterset"
)

// Redaction is read policy, applied once, where objects are read: a Secret leaves the
// Storage without its data unless Options.AllowSecretData, whatever API serves it.

// redact is obj as the selection's read serves it.
func (sel *selected) redact(obj any) any {
	if sel.allowSecretData {
		return obj
	}
	return redactSecret(obj, sel.secrets)
}

// readView is what a filter or a summary key of the caller reads of an object: the object as
// the read serves it, so that neither judges, nor counts, what the caller may not read (a
// where over a Secret's data would otherwise answer whether it holds a value). nil: the
// object as it is.
func readView(secrets, allowSecretData bool) func(any) any {
	if allowSecretData || !secrets {
		return nil
	}
	return func(obj any) any { return redactSecret(obj, true) }
}

// redactSecret returns obj without what would reveal a Secret's data: data, stringData and
// kubectl's last-applied annotation, which holds a full copy of the Secret as applied. secret
// says the resource is core Secrets (a metadata-only object does not say its kind). obj is
// never modified; a redacted copy shares what it does not change.
func redactSecret(obj any, secret bool) any {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	switch o := obj.(type) {
	case *corev1.Secret:
		c := *o
		c.Data, c.StringData = nil, nil
		c.Annotations = withoutLastApplied(o.Annotations)
		return &c
	case *metav1.PartialObjectMetadata:
		if !secret {
			return obj
		}
		c := *o
		c.Annotations = withoutLastApplied(o.Annotations)
		return &c
	case *unstructured.Unstructured:
		if !secret && (o.GetKind() != "Secret" || o.GetAPIVersion() != "v1") {
			return obj
		}
		m := make(map[string]any, len(o.Object))
		for k, v := range o.Object {
			if k != "data" && k != "stringData" {
				m[k] = v
			}
		}
		if md, ok := o.Object["metadata"].(map[string]any); ok {
			if ann, ok := md["annotations"].(map[string]any); ok {
				if _, has := ann[clusterset.LastAppliedAnnotation]; has {
					mdc := make(map[string]any, len(md))
					for k, v := range md {
						mdc[k] = v
					}
					annc := make(map[string]any, len(ann))
					for k, v := range ann {
						if k != clusterset.LastAppliedAnnotation {
							annc[k] = v
						}
					}
					mdc["annotations"] = annc
					m["metadata"] = mdc
				}
			}
		}
		return &unstructured.Unstructured{Object: m}
	}
	return obj
}

func withoutLastApplied(a map[string]string) map[string]string {
	if _, ok := a[clusterset.LastAppliedAnnotation]; !ok {
		return a
	}
	out := make(map[string]string, len(a))
	for k, v := range a {
		if k != clusterset.LastAppliedAnnotation {
			out[k] = v
		}
	}
	return out
}
