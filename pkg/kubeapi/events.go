package kubeapi

import (
	"bytes"
	"reflect"
	"sync/atomic"

	lru "github.com/hashicorp/golang-lru/v2"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/multicache/multicache/pkg/storage"
)

// Watch events' objects are encoded once for the watches that write them, as kube-apiserver's
// cachingObject does: one write in a cluster is an event in every watch that selects it, and a
// fleet with many callers' watches (each limited to the clusters its caller may read) writes
// the same object, in the same form, once per watch. At 1,000 clusters and 1,000 such watches,
// sharing took the daemon's CPU a delivered copy from 10.74 to 8.86 µs (two runs, not side by
// side; docs/SCALING.md, S2.8).
//
// What is not shared: Tables (a request's convertor makes their rows), a peer's bytes, an
// event without a resourceVersion, an object that is not a pointer, an encoding larger than
// sharedEventMax, and a watch-list's initial events until its first bookmark
// (watchSink.initial; through the fan-in a part's bookmark may come first). A redacted Secret is a copy made for its watch, so its key is its own.
//
// Invariant: an entry's bytes are what encoder.Append wrote for its key's object, cluster,
// kind and encoding at the resourceVersion stored with them. The cache's objects are never
// modified, and the key holds its object, so no other object can take its address while the
// entry lives. Another resourceVersion is spliced in (splice), as for a peer's bytes.

// The shared encodings are the last writes' events, which every watch writes within moments
// of each other: at most sharedEvents entries and sharedEventBytes of encodings, none larger
// than sharedEventMax.
const (
	sharedEvents     = 4096
	sharedEventBytes = 32 << 20
	sharedEventMax   = 64 << 10
)

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

// eventCache is the shared encodings, bounded in entries and in bytes.
type eventCache struct {
	lru   *lru.Cache[eventKey, eventBytes]
	bytes atomic.Int64
}

func newEventCache() *eventCache {
	c := &eventCache{}
	l, err := lru.NewWithEvict(sharedEvents, func(_ eventKey, v eventBytes) { c.bytes.Add(-int64(len(v.raw))) })
	if err != nil {
		panic(err) // only for a size below 1
	}
	c.lru = l
	return c
}

func (c *eventCache) add(k eventKey, v eventBytes) {
	c.bytes.Add(int64(len(v.raw)))
	c.lru.Add(k, v)
	for c.bytes.Load() > sharedEventBytes {
		if _, _, ok := c.lru.RemoveOldest(); !ok {
			return
		}
	}
}

// appendEvent is Append for a watch event's object, sharing its encoding with the other
// watches that write it in the same encoding.
func (en *encoder) appendEvent(buf *bytes.Buffer, it storage.Item, rv string) error {
	if en.shared == nil || it.Raw != nil || rv == "" || en.e.As == "Table" || it.Object == nil ||
		reflect.ValueOf(it.Object).Kind() != reflect.Pointer {
		return en.Append(buf, it, rv)
	}
	k := eventKey{obj: it.Object, cluster: it.Key.Cluster, gvk: en.kr.GVK, enc: en.e}
	if b, ok := en.shared.lru.Get(k); ok {
		return splice(buf, b.raw, b.rv, rv, false)
	}
	start := buf.Len()
	if err := en.Append(buf, it, rv); err != nil {
		return err
	}
	if n := buf.Len() - start; n <= sharedEventMax {
		en.shared.add(k, eventBytes{raw: bytes.Clone(buf.Bytes()[start:]), rv: rv})
	}
	return nil
}
