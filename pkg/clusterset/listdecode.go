package clusterset

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// A typed LIST through rest.Request.Do reads the whole response with io.ReadAll (which
// allocates about twice the body while it grows), copies the body again into the protobuf
// envelope (runtime.Unknown), and grows the list's items by append, doubling from nothing: on a
// list of 20,000 Pods that is about four times the body in memory the process never touched
// before, on top of the objects themselves. sizedLists reads the same response, from the same
// request, into one buffer of the size the last list of the resource had, takes the envelope
// apart without copying it, and gives the items room for as many as there were. What comes
// out is what Do().Get() returns (the objects, their list's metadata, no kind), or Do's error.

// protobufPrefix starts every protobuf body kube-apiserver sends (k8s.io/apimachinery's
// protobuf serializer).
var protobufPrefix = []byte{0x6b, 0x38, 0x73, 0x00}

// Bounds of what sizedLists sets aside before a body arrives: the Go heap counts the room of
// a buffer as in use whether or not it is written, so a guess must not be allowed to push the
// collector on. A body larger than the room grows it, as io.ReadAll would.
const (
	maxExpectedListBytes = 256 << 20
	maxExpectedListItems = 1 << 20
)

// sizedLists decodes the typed lists of one cluster × resource, sized by the one before.
// Safe for concurrent use.
type sizedLists struct {
	gvk     schema.GroupVersionKind // of the list
	decoder runtime.Decoder         // for bodies that are not protobuf

	mu      sync.Mutex
	perItem int // bytes of body per item the next list is expected to have, with room to spare
	total   int // items the whole collection is expected to have
}

func newSizedLists(listGVK schema.GroupVersionKind) *sizedLists {
	return &sizedLists{gvk: listGVK, decoder: scheme.Codecs.UniversalDeserializer()}
}

// expect is the room to set aside for the answer to a list with opts: the whole collection,
// or a page of opts.Limit items when the server honours the limit (a list at resourceVersion
// "0" is answered from the watch cache whole, whatever its limit).
func (s *sizedLists) expect(opts metav1.ListOptions) (bodyBytes, items int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	items = s.total
	if opts.Limit > 0 && opts.ResourceVersion != "0" && int64(items) > opts.Limit {
		items = int(opts.Limit)
	}
	items = min(items, maxExpectedListItems)
	return min(items*s.perItem, maxExpectedListBytes), items
}

// list sends req, a list with opts, and decodes its body.
func (s *sizedLists) list(ctx context.Context, req *rest.Request, opts metav1.ListOptions) (runtime.Object, error) {
	body, err := req.Stream(ctx) // a status other than 2xx comes back as Do's error would
	if err != nil {
		return nil, err
	}
	defer body.Close()
	expectBytes, expectItems := s.expect(opts)
	// Room the body does not fill costs address space only: the pages of a new allocation
	// are not touched until written.
	buf := bytes.NewBuffer(make([]byte, 0, expectBytes+bytes.MinRead))
	if _, err := buf.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("read %s: %w", s.gvk.Kind, err)
	}
	data := buf.Bytes()
	obj, err := s.decode(data, expectItems)
	if err != nil {
		return nil, err
	}
	s.learn(len(data), obj)
	return obj, nil
}

// decode decodes a list body: protobuf straight into a list with room for items; anything
// else (JSON, an envelope it does not know) with the scheme's decoder.
func (s *sizedLists) decode(data []byte, items int) (runtime.Object, error) {
	raw, ok := protobufRaw(data, s.gvk.Kind)
	if !ok {
		obj, _, err := s.decoder.Decode(data, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("decode %s: %w", s.gvk.Kind, err)
		}
		obj.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{}) // as the REST client's decoder leaves it
		return obj, nil
	}
	obj, err := scheme.Scheme.New(s.gvk)
	if err != nil {
		return nil, fmt.Errorf("decode %s: %w", s.gvk.Kind, err)
	}
	u, ok := obj.(interface{ Unmarshal([]byte) error })
	if !ok {
		return nil, fmt.Errorf("decode %s: %T has no protobuf form", s.gvk.Kind, obj)
	}
	if items > 0 {
		if f := reflect.ValueOf(obj).Elem().FieldByName("Items"); f.IsValid() && f.Kind() == reflect.Slice {
			f.Set(reflect.MakeSlice(f.Type(), 0, items+items/16))
		}
	}
	if err := u.Unmarshal(raw); err != nil {
		return nil, fmt.Errorf("decode %s: %w", s.gvk.Kind, err)
	}
	return obj, nil
}

// learn records what lists are expected to be after one of size bytes: this one's bytes per
// item and a sixteenth, or a quarter when it was a page (a page of one item says little of the
// others' size); and as many items as it had, or, when it was a page, as it and those remaining
// have. A list with no items teaches nothing of their size.
func (s *sizedLists) learn(size int, obj runtime.Object) {
	n := meta.LenList(obj)
	lm, err := meta.ListAccessor(obj)
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	page := lm.GetContinue() != ""
	switch r := lm.GetRemainingItemCount(); {
	case !page:
		s.total = n
	case r != nil:
		s.total = n + int(*r)
	default:
		s.total = max(s.total, n)
	}
	if n > 0 {
		per := size / n
		if page {
			s.perItem = per + per/4
		} else {
			s.perItem = per + per/16
		}
	}
}

// protobufRaw returns the object bytes of a protobuf body of kind (the raw field of its
// runtime.Unknown envelope), without copying them; false when data is not protobuf, is of
// another kind, or its envelope carries a content encoding.
func protobufRaw(data []byte, kind string) ([]byte, bool) {
	if !bytes.HasPrefix(data, protobufPrefix) {
		return nil, false
	}
	b := data[len(protobufPrefix):]
	var raw []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, false
		}
		b = b[n:]
		if typ != protowire.BytesType { // every field of runtime.Unknown is length-delimited
			return nil, false
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, false
		}
		b = b[n:]
		switch num {
		case 1: // typeMeta
			if typeMetaKind(v) != kind {
				return nil, false
			}
		case 2: // raw
			raw = v
		case 3: // contentEncoding
			if len(v) > 0 {
				return nil, false
			}
		}
	}
	return raw, raw != nil
}

// typeMetaKind is the kind field of an encoded runtime.TypeMeta, or "" when there is none.
func typeMetaKind(b []byte) string {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType {
			return ""
		}
		b = b[n:]
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		if num == 2 {
			return string(v)
		}
	}
	return ""
}
