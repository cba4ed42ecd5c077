package watchcache

import "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

// sizer is implemented by typed API objects (their protobuf size).
type sizer interface{ Size() int }

// heapPerWireByte is how much heap a decoded typed object takes per byte of its protobuf
// encoding, as measured on cached ConfigMaps under the soak load (a 100,000-event ring of
// about 32 MiB of protobuf held about 95 MiB of heap): an estimate, not an accounting.
const heapPerWireByte = 3

// ApproxSize estimates the memory an object keeps alive, for the ring's bound: from its
// protobuf size for typed objects, its content for unstructured ones.
func ApproxSize(obj any) int {
	switch o := obj.(type) {
	case sizer:
		return heapPerWireByte*o.Size() + 128
	case *unstructured.Unstructured:
		return sizeOfValue(o.Object) + 128
	}
	return 4096
}

// sizeOfValue estimates the heap of an unstructured value.
func sizeOfValue(v any) int {
	switch x := v.(type) {
	case map[string]any:
		n := 48
		for k, e := range x {
			n += len(k) + 48 + sizeOfValue(e)
		}
		return n
	case []any:
		n := 24
		for _, e := range x {
			n += 16 + sizeOfValue(e)
		}
		return n
	case string:
		return len(x) + 16
	}
	return 16
}

// initialSampleEvery is how often an initial list's object is sized: ApproxSize walks the
// whole object, which was 6% of the daemon's CPU in a sync of 3 clusters × 50k Pods.
const initialSampleEvery = 16

// sizeSampler sizes the objects of initial lists: one in initialSampleEvery with ApproxSize,
// and the others at a moving average of those measured (each new measure weighs 1/8). The ring's bound is an estimate either
// way; objects of one resource are alike, and a cluster's initial list is a burst of them. Not
// safe for concurrent use.
type sizeSampler struct {
	n    uint64
	mean int
}

func (s *sizeSampler) size(obj any) int {
	s.n++
	if s.mean == 0 || s.n%initialSampleEvery == 0 {
		x := ApproxSize(obj)
		if s.mean == 0 {
			s.mean = x
		} else {
			s.mean += (x - s.mean) / 8
		}
		return x
	}
	return s.mean
}
