package clusterset

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"reflect"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// A typed LIST through rest.Request.Do reads the whole response with io.ReadAll (which
// allocates about twice the body while it grows), copies the body again into the protobuf
// envelope (runtime.Unknown), and grows the list's items by append, doubling from nothing: on a
// list of 20,000 Pods that is about four times the body in memory the process never touched
// before, on top of the objects themselves. sizedLists sends the same request, reads its
// response into one buffer of the size the last list of the resource had, takes the envelope
// apart without copying it, and gives the items room for as many as there were. What comes
// out is what Do().Get() returns: the objects, their list's metadata and no kind; a failure
// Status as its error, as Do's; GETs retried on the connection errors Do retries. (Read and
// decode errors are worded differently.)

// protobufPrefix starts every protobuf body kube-apiserver sends (k8s.io/apimachinery's
// protobuf serializer).
var protobufPrefix = []byte{0x6b, 0x38, 0x73, 0x00}

// Bounds of what sizedLists sets aside for a list: the Go heap counts the room of a buffer as
// in use whether or not it is written, so a guess must not be allowed to push the collector
// on. A body larger than its room grows it (bytes.Buffer doubles it).
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
// "0" is answered from the watch cache whole, whatever its limit, where the resource has one).
func (s *sizedLists) expect(opts metav1.ListOptions) (bodyBytes, items int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	items = s.total
	if opts.Limit > 0 && opts.ResourceVersion != "0" && int64(items) > opts.Limit {
		items = int(opts.Limit)
	}
	items = min(items, maxExpectedListItems)
	return int(min(int64(items)*int64(s.perItem), maxExpectedListBytes)), items
}

// listRetries and listRetryWait are how often, and after how long, a GET that failed on its
// connection is sent again: as rest.Request.Do does (Request.Stream does not).
const (
	listRetries   = 10
	listRetryWait = time.Second
)

// stream sends req, again after a connection reset, an EOF or a lost HTTP/2 connection.
func stream(ctx context.Context, req *rest.Request) (io.ReadCloser, error) {
	for attempt := 0; ; attempt++ {
		body, err := req.Stream(ctx) // a status other than 2xx comes back as Do's error would
		if err == nil || attempt == listRetries || !(utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err) || utilnet.IsHTTP2ConnectionLost(err)) {
			return body, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(listRetryWait):
		}
	}
}

// list sends req, a list with opts, and decodes its body.
func (s *sizedLists) list(ctx context.Context, req *rest.Request, opts metav1.ListOptions) (runtime.Object, error) {
	body, err := stream(ctx, req)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	expectBytes, expectItems := s.expect(opts)
	// Room the body does not fill is not resident: the pages of a new allocation are not
	// touched until written (it is counted in the heap all the same: see the bounds above).
	buf := bytes.NewBuffer(make([]byte, 0, expectBytes+bytes.MinRead))
	if _, err := buf.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("read %s: %w", s.gvk.Kind, err)
	}
	data := buf.Bytes()
	if expectBytes > 0 {
		// The body says how far the guess was off: no more room for items than twice what
		// it holds at the guess's size per item (a guess from a page of one may be off by a
		// third either way).
		expectItems = min(expectItems, int(int64(expectItems)*int64(len(data))/int64(expectBytes)*2)+1)
	}
	obj, err := s.decode(data, expectItems)
	if err != nil {
		return nil, err
	}
	if st, ok := obj.(*metav1.Status); ok && st.Status != metav1.StatusSuccess {
		return nil, apierrors.FromObject(st) // as Result.Get does
	}
	s.learn(len(data), obj, opts)
	return obj, nil
}

// decode decodes a list body: protobuf straight into a list with room for items; anything
// else (JSON, an envelope it does not know, another kind) with the scheme's decoder.
func (s *sizedLists) decode(data []byte, items int) (runtime.Object, error) {
	raw, ok := protobufRaw(data, s.gvk)
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
	f := reflect.ValueOf(obj).Elem().FieldByName("Items")
	if !f.IsValid() || f.Kind() != reflect.Slice {
		f = reflect.Value{}
	}
	if items > 0 && f.IsValid() {
		items = min(items+items/16, maxExpectedListBytes/max(1, int(f.Type().Elem().Size())))
		f.Set(reflect.MakeSlice(f.Type(), 0, items))
	}
	if err := u.Unmarshal(raw); err != nil {
		return nil, fmt.Errorf("decode %s: %w", s.gvk.Kind, err)
	}
	if f.IsValid() && f.Len() == 0 {
		f.Set(reflect.Zero(f.Type())) // no items decode to nil, as they do from nothing
	}
	return obj, nil
}

// learn records what lists are expected to be after one of size bytes, sent with opts: this
// one's bytes per item and a sixteenth, or a quarter when it was a page (a page of one item
// says little of the others' size); and as many items as it had, or, when it was the first
// page, as it and those remaining have. A later page (opts.Continue) tells nothing of the
// whole, and a list with no items nothing of their size.
func (s *sizedLists) learn(size int, obj runtime.Object, opts metav1.ListOptions) {
	n := meta.LenList(obj)
	lm, err := meta.ListAccessor(obj)
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	page := lm.GetContinue() != "" || opts.Continue != ""
	switch r := lm.GetRemainingItemCount(); {
	case !page:
		s.total = n
	case opts.Continue != "":
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

// protobufRaw returns the object bytes of a protobuf body of gvk (the raw field of its
// runtime.Unknown envelope), without copying them; false when data is not protobuf, its
// envelope names no kind or another, or carries a content encoding.
func protobufRaw(data []byte, gvk schema.GroupVersionKind) ([]byte, bool) {
	if !bytes.HasPrefix(data, protobufPrefix) {
		return nil, false
	}
	b := data[len(protobufPrefix):]
	var raw []byte
	typed := false
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
			apiVersion, kind := typeMeta(v)
			if apiVersion != gvk.GroupVersion().String() || kind != gvk.Kind {
				return nil, false
			}
			typed = true
		case 2: // raw
			raw = v
		case 3: // contentEncoding
			if len(v) > 0 {
				return nil, false
			}
		}
	}
	return raw, typed && raw != nil
}

// typeMeta is the apiVersion and kind of an encoded runtime.TypeMeta.
func typeMeta(b []byte) (apiVersion, kind string) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType {
			return "", ""
		}
		b = b[n:]
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return "", ""
		}
		b = b[n:]
		switch num {
		case 1:
			apiVersion = string(v)
		case 2:
			kind = string(v)
		}
	}
	return apiVersion, kind
}
