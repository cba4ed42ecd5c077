package kubeapi

import (
	"bytes"
	"context"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/kubeapi/discovery"
	"github.com/multicache/multicache/pkg/storage"
)

// TestWatchEventsEncodedOnce: the watches of one API that write the same event's object in
// the same encoding share one encoding of it, and each writes exactly what encoding it alone
// would have: at its own resourceVersion, with its cluster's annotation, in its form.
func TestWatchEventsEncodedOnce(t *testing.T) {
	a := New(Options{})
	ctx := context.Background()
	kr := &discovery.Resource{Name: "configmaps", GVK: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}}
	objects := storage.Encoding{API: storage.KubernetesAPI, TypeMeta: true}
	metadata := storage.Encoding{API: storage.KubernetesAPI, As: "PartialObjectMetadata", TypeMeta: true}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", ResourceVersion: "17"}, Data: map[string]string{"k": "v"}}
	twin := cm.DeepCopy() // the same content, another object
	item := func(cluster string, obj any) storage.Item {
		return storage.Item{Key: aggregate.Key{Cluster: cluster, Namespace: "ns", Name: "a"}, Object: obj}
	}
	newEncoder := func(e storage.Encoding) *encoder {
		en, err := a.encoder(ctx, e, kr)
		if err != nil {
			t.Fatal(err)
		}
		return en
	}
	alone := func(e storage.Encoding, it storage.Item, rv string) string {
		var b bytes.Buffer
		en := newEncoder(e)
		en.shared = nil
		if err := en.Append(&b, it, rv); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	watches := []*encoder{newEncoder(objects), newEncoder(objects), newEncoder(objects)}
	for _, tc := range []struct {
		name    string
		en      *encoder
		e       storage.Encoding
		it      storage.Item
		rv      string
		entries int // in the shared cache after
	}{
		{"first watch", watches[0], objects, item("c1", cm), "p1", 1},
		{"second watch, same event", watches[1], objects, item("c1", cm), "p1", 1},
		{"third watch, another position", watches[2], objects, item("c1", cm), "p2", 1},
		{"another cluster's copy", watches[0], objects, item("c2", cm), "p1", 2},
		{"another object, same content", watches[1], objects, item("c1", twin), "p1", 3},
		{"metadata only", newEncoder(metadata), metadata, item("c1", cm), "p1", 4},
		{"metadata only, another watch and position", newEncoder(metadata), metadata, item("c1", cm), "p3", 4},
	} {
		var b bytes.Buffer
		if err := tc.en.appendEvent(&b, tc.it, tc.rv); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if want := alone(tc.e, tc.it, tc.rv); b.String() != want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, b.String(), want)
		}
		if n := a.events.lru.Len(); n != tc.entries {
			t.Errorf("%s: %d shared encodings, want %d", tc.name, n, tc.entries)
		}
	}
	if cm.ResourceVersion != "17" || len(cm.Annotations) != 0 {
		t.Errorf("the cache's object changed: %+v", cm.ObjectMeta)
	}
	// Not shared: an event without a resourceVersion, an object that is not a pointer, and
	// an encoding larger than sharedEventMax.
	big := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: "ns"}, Data: map[string]string{"k": strings.Repeat("x", sharedEventMax)}}
	for name, it := range map[string]storage.Item{
		"without a resourceVersion": item("c3", cm),
		"not a pointer":             item("c3", cache.DeletedFinalStateUnknown{Key: "ns/a", Obj: cm}),
		"too large":                 item("c3", big),
	} {
		rv := "p1"
		if name == "without a resourceVersion" {
			rv = ""
		}
		var b bytes.Buffer
		if err := watches[0].appendEvent(&b, it, rv); err != nil || b.String() != alone(objects, it, rv) {
			t.Errorf("%s: %v: %.200s", name, err, b.String())
		}
	}
	if n := a.events.lru.Len(); n != 4 {
		t.Errorf("%d shared encodings after events that are not shared, want 4", n)
	}
	if got, want := a.events.bytes.Load(), int64(0); got <= want {
		t.Errorf("the shared encodings count %d bytes, want more than none", got)
	}
}

// TestSharedEventsBoundedInBytes: the shared encodings never hold more than sharedEventBytes,
// and count exactly the bytes of the entries they hold.
func TestSharedEventsBoundedInBytes(t *testing.T) {
	c := newEventCache()
	raw := bytes.Repeat([]byte("x"), sharedEventMax)
	for i := range 2 * sharedEventBytes / sharedEventMax {
		c.add(eventKey{obj: &corev1.ConfigMap{}, cluster: strconv.Itoa(i)}, eventBytes{raw: raw, rv: "p"})
		if n := c.bytes.Load(); n > sharedEventBytes {
			t.Fatalf("after %d entries: %d bytes held, more than %d", i+1, n, sharedEventBytes)
		}
	}
	var sum int64
	for _, k := range c.lru.Keys() {
		v, _ := c.lru.Peek(k)
		sum += int64(len(v.raw))
	}
	if sum != c.bytes.Load() || sum != sharedEventBytes {
		t.Errorf("held %d bytes, counted %d; want both %d", sum, c.bytes.Load(), sharedEventBytes)
	}
}

// TestWatchListInitialEventsNotShared: a watch-list's initial events are written as an
// unshared watch writes them and leave the shared encodings alone; once its first bookmark
// has ended them, its events are shared as every watch's are.
func TestWatchListInitialEventsNotShared(t *testing.T) {
	a := New(Options{})
	kr := &discovery.Resource{Name: "configmaps", GVK: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}}
	e := storage.Encoding{API: storage.KubernetesAPI, TypeMeta: true}
	en, err := a.encoder(context.Background(), e, kr)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	for _, tc := range []struct {
		wo      storage.WatchOptions
		initial bool
	}{
		{storage.WatchOptions{Initial: true, StartBookmark: true}, true},           // a watch-list
		{storage.WatchOptions{Initial: true}, false},                               // resourceVersion 0: no bookmark ends its initial events
		{storage.WatchOptions{ResourceVersion: "p1", StartBookmark: false}, false}, // from a position
	} {
		if k := newWatchSink(rec, rec, en, tc.wo); k.initial != tc.initial {
			t.Errorf("a sink for %+v: initial %v, want %v", tc.wo, k.initial, tc.initial)
		}
	}
	sink := newWatchSink(rec, rec, en, storage.WatchOptions{Initial: true, StartBookmark: true})
	defer storage.PutBuffer(sink.line)
	for i := range 3 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a" + strconv.Itoa(i), Namespace: "ns"}}
		it := storage.Item{Key: aggregate.Key{Cluster: "c1", Namespace: "ns", Name: cm.Name}, Object: cm, RV: "p" + strconv.Itoa(i)}
		if err := sink.Event("ADDED", it); err != nil {
			t.Fatal(err)
		}
	}
	if n := a.events.lru.Len(); n != 0 {
		t.Errorf("after 3 initial events: %d shared encodings, want none", n)
	}
	if err := sink.Bookmark("p3", true); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns"}}
	if err := sink.Event("ADDED", storage.Item{Key: aggregate.Key{Cluster: "c1", Namespace: "ns", Name: "b"}, Object: cm, RV: "p4"}); err != nil {
		t.Fatal(err)
	}
	if n := a.events.lru.Len(); n != 1 {
		t.Errorf("a live event after the initial ones: %d shared encodings, want 1", n)
	}
	lines := strings.Split(strings.TrimSpace(rec.Body.String()), "\n")
	if len(lines) != 5 || !strings.Contains(lines[0], `"name":"a0"`) || !strings.Contains(lines[0], `"resourceVersion":"p0"`) ||
		!strings.Contains(lines[3], `"BOOKMARK"`) || !strings.Contains(lines[4], `"resourceVersion":"p4"`) {
		t.Errorf("the stream:\n%s", rec.Body.String())
	}
}
