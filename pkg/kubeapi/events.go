package kubeapi

import (
	"bytes"
	"reflect"

	lru "github.com/hashicorp/golang-lru/v2"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/multicache/multicache/pkg/storage"
)

// Watch events' objects are encoded once for every watch that writes them, as kube-apiserver's
// cachingObject does: one write in a cluster is an event in every watch that selects it, and a
// fleet with many callers' watches (each limited to the clusters its caller may read) writes
// the same object, in the same form, once per watch. Encoding it per watch cost about 6 µs a
// copy at 1,000 clusters and 1,000 watches (docs/SCALING.md, S2.8).
//
// Invariant: an entry's bytes are what encoder.Append wrote for its key's object, cluster,
// kind and encoding at the resourceVersion stored with them. The object is the cache's, which
// is never modified, and the key holds it, so no other object can take its address while the
// entry lives. Another resourceVersion is spliced in (splice), as for a peer's bytes.

// sharedEvents bounds the entries: the events of the last writes, which every watch writes
// within moments of each other.
const sharedEvents = 4096

type eventKey struct {
	obj     any // a pointer: the cache's object
	cluster string
	gvk     schema.GroupVersionKind
	enc     storage.Encoding
}

type eventBytes struct {
	raw []byte
	rv  string
}

func newEventCache() *lru.Cache[eventKey, eventBytes] {
	c, err := lru.New[eventKey, eventBytes](sharedEvents)
	if err != nil {
		panic(err) // only for a size below 1
	}
	return c
}

// appendEvent is Append for a watch event's object: encoded once for every watch that writes
// it in the same encoding. Tables (whose rows a request's convertor makes), a peer's bytes and
// an event without a resourceVersion are encoded as Append does.
func (en *encoder) appendEvent(buf *bytes.Buffer, it storage.Item, rv string) error {
	if en.shared == nil || it.Raw != nil || rv == "" || en.e.As == "Table" || it.Object == nil ||
		reflect.ValueOf(it.Object).Kind() != reflect.Pointer {
		return en.Append(buf, it, rv)
	}
	k := eventKey{obj: it.Object, cluster: it.Key.Cluster, gvk: en.kr.GVK, enc: en.e}
	if b, ok := en.shared.Get(k); ok {
		return splice(buf, b.raw, b.rv, rv, false)
	}
	start := buf.Len()
	if err := en.Append(buf, it, rv); err != nil {
		return err
	}
	en.shared.Add(k, eventBytes{raw: bytes.Clone(buf.Bytes()[start:]), rv: rv})
	return nil
}
