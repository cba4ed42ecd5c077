package clusterset

import (
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"

	"github.com/multicache/multicache/pkg/intern"
)

// LastAppliedAnnotation is the annotation kubectl apply writes.
const LastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// NewTransform returns the transform a stack installs on its informer for opts, for code that
// builds its own informers and wants the same objects (benchmarks, tests).
//
// Under client-go's watch-list it must be wrapped so that it runs once per object (see
// progress.once): client-go calls it twice on each object of a streamed initial list.
func NewTransform(opts TransformOptions) cache.TransformFunc { return newTransform(opts) }

// newTransform returns the informer transform for opts. It must run once per object (see
// progress.once), before the object is stored, on an object no one else holds yet.
//
// The user's Func runs first, while the object is still entirely its own, so it may mutate in
// place. Sharing (package intern) runs last: after it, the object's label maps, resource lists,
// tolerations and empty security contexts may be shared with other cached objects, and nothing
// may change them.
func newTransform(opts TransformOptions) cache.TransformFunc {
	return func(obj any) (any, error) {
		if _, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			return obj, nil
		}
		if opts.Func != nil {
			out, err := opts.Func(obj)
			if err != nil {
				return nil, err
			}
			obj = out
		}
		if m, err := meta.Accessor(obj); err == nil {
			if !opts.KeepManagedFields && m.GetManagedFields() != nil {
				m.SetManagedFields(nil)
			}
			if !opts.KeepLastApplied {
				if a := m.GetAnnotations(); a != nil {
					if _, ok := a[LastAppliedAnnotation]; ok {
						delete(a, LastAppliedAnnotation)
						if len(a) == 0 {
							m.SetAnnotations(nil)
						}
					}
				}
			}
		}
		if !opts.KeepDuplicates {
			intern.Shared().Object(obj)
		}
		return obj, nil
	}
}
