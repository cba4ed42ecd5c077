package fanout

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/shard"
	"github.com/multicache/multicache/pkg/storage"
	"github.com/multicache/multicache/pkg/watchcache"
)

// fakePart is one replica's part as the fan-out reads it: sorted items of the clusters it owns,
// paged after a continue token's key, narrowed to the clusters it is asked for, counted on
// request. err, when set, is every answer; extra is a cluster it answers for unasked.
type fakePart struct {
	id    string
	items []storage.Item
	err   error
	extra string
	lists atomic.Int32
	// statusReads counts the reads of its status a storage/local part would make: one per
	// read scope.
	statusReads atomic.Int32
}

type statusKey struct{ part string }

func (f *fakePart) position() watchcache.Position { return watchcache.Position{Epoch: f.id, Seq: 9} }

func (f *fakePart) List(ctx context.Context, o storage.ListOptions) (*storage.List, error) {
	f.lists.Add(1)
	storage.Scoped(ctx, statusKey{f.id}, func() bool { f.statusReads.Add(1); return true })
	if f.err != nil {
		return nil, f.err
	}
	var after *aggregate.Key
	if o.Continue != "" {
		c, err := watchcache.ParseContinue(o.Continue)
		if err != nil {
			return nil, storage.Error(http.StatusBadRequest, err.Error())
		}
		k := c.After()
		after = &k
	}
	asked := slices.Clone(o.Selection.Part)
	if f.extra != "" {
		asked = append(asked, f.extra)
	}
	var page []storage.Item
	before := int64(0)
	for _, it := range f.items {
		switch {
		case !slices.Contains(asked, it.Key.Cluster):
		case after != nil && watchcache.CompareKeys(it.Key, *after) <= 0:
			before++
		default:
			page = append(page, it)
		}
	}
	l := &storage.List{ResourceVersion: f.position().String()}
	if o.Count || o.CountOnly {
		l.Count = &storage.Count{Total: before + int64(len(page)), Before: before}
	}
	if o.CountOnly {
		return l, nil
	}
	if o.Limit > 0 && int64(len(page)) > o.Limit {
		page = page[:o.Limit]
		l.Continue = watchcache.Continue{Last: page[len(page)-1].Key.String(), Position: f.position()}.String()
	}
	if o.Limit == 0 && len(page) > 1 {
		// Unpaged: the first item held, the rest streamed, as a peer's answer comes.
		l.Items, l.More = page[:1], &sliceStream{items: page[1:]}
		return l, nil
	}
	l.Items = page
	return l, nil
}

func (f *fakePart) Get(_ context.Context, o storage.GetOptions) (*storage.List, error) {
	if f.err != nil {
		return nil, f.err
	}
	l := &storage.List{ResourceVersion: f.position().String()}
	for _, it := range f.items {
		if it.Key.Name == o.Name && slices.Contains(o.Selection.Part, it.Key.Cluster) {
			l.Items = append(l.Items, it)
		}
	}
	return l, nil
}

func (f *fakePart) Watch(context.Context, storage.WatchOptions) (storage.Watch, error) {
	return nil, errors.New("not in this test")
}

// reported are the clusters the part reports on in a status read: those it is asked for, and
// extra, unasked.
func (f *fakePart) reported(o storage.ClusterOptions) []string {
	out := slices.Clone(o.Part)
	if f.extra != "" {
		out = append(out, f.extra)
	}
	slices.Sort(out)
	return out
}

func (f *fakePart) Clusters(_ context.Context, o storage.ClusterOptions) ([]api.Cluster, error) {
	var out []api.Cluster
	for _, c := range f.reported(o) {
		out = append(out, api.Cluster{Name: c, State: "Synced", Resources: []api.Resource{}})
	}
	return out, f.err
}

// Definitions answers one definition, served by every cluster the part reports on.
func (f *fakePart) Definitions(_ context.Context, o storage.ClusterOptions) ([]storage.Definition, error) {
	cs := f.reported(o)
	if f.err != nil || len(cs) == 0 {
		return nil, f.err
	}
	def := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com"}}
	return []storage.Definition{{Def: def, From: cs[0], Clusters: cs}}, nil
}

func (f *fakePart) Resources(_ context.Context, o storage.ClusterOptions) ([]clusterset.ClusterStatus, error) {
	var out []clusterset.ClusterStatus
	for _, c := range f.reported(o) {
		out = append(out, clusterset.ClusterStatus{Name: c})
	}
	return out, f.err
}

type sliceStream struct {
	items  []storage.Item
	closed bool
}

func (s *sliceStream) Next() (storage.Item, bool, error) {
	if s.closed || len(s.items) == 0 {
		return storage.Item{}, false, nil
	}
	it := s.items[0]
	s.items = s.items[1:]
	return it, true, nil
}

func (s *sliceStream) Close() { s.closed = true }

type fakeFleet struct{ owners []shard.Owner }

func (f *fakeFleet) Identity() string            { return "me" }
func (f *fakeFleet) Owners() []shard.Owner       { return f.owners }
func (f *fakeFleet) WaitChange() <-chan struct{} { return nil }

// testFleet is ten clusters over three replicas, owned out of key order so that a page spans
// several owners, each cluster holding i%4*2 objects (c2 and c6 none), and the Reader over it.
func testFleet(t *testing.T) (*Reader, map[string]*fakePart, *fakeFleet, []string) {
	t.Helper()
	ownerOf := map[string]string{"c0": "me", "c1": "p2", "c2": "p2", "c3": "me", "c4": "me", "c5": "p3", "c6": "p3", "c7": "p3", "c8": "me", "c9": "p2"}
	parts := map[string]*fakePart{"me": {id: "me"}, "p2": {id: "p2"}, "p3": {id: "p3"}}
	fl := &fakeFleet{}
	var want []string
	for i := range 10 {
		c := fmt.Sprintf("c%d", i)
		o := ownerOf[c]
		fl.owners = append(fl.owners, shard.Owner{Cluster: c, Holder: o, URL: "http://" + o, Live: true, Self: o == "me"})
		for j := range i % 4 * 2 {
			k := aggregate.Key{Cluster: c, Namespace: "ns", Name: fmt.Sprintf("o-%02d", j)}
			parts[o].items = append(parts[o].items, storage.Item{Key: k, Raw: []byte(k.String())})
			want = append(want, k.String())
		}
	}
	r, err := New(Options{Fleet: fl, Local: parts["me"], Peer: func(id, url string) ReadStatus {
		if url != "http://"+id {
			t.Errorf("replica %q asked at %q", id, url)
		}
		return parts[id]
	}})
	if err != nil {
		t.Fatal(err)
	}
	return r, parts, fl, want
}

// walk lists every page of opts through r, checking each page's invariants (its count, when
// it counts, or may and does), and returns the keys in the order listed.
func walk(t *testing.T, r *Reader, opts storage.ListOptions, total int) []string {
	t.Helper()
	var got []string
	for page := 0; ; page++ {
		l, err := r.List(context.Background(), opts)
		if err != nil {
			t.Fatalf("limit %d, page %d: %v", opts.Limit, page, err)
		}
		if err := storage.Drain(l); err != nil {
			t.Fatalf("limit %d, page %d: drain: %v", opts.Limit, page, err)
		}
		if opts.Limit > 0 && int64(len(l.Items)) > opts.Limit {
			t.Fatalf("limit %d, page %d: %d items", opts.Limit, page, len(l.Items))
		}
		if _, ok := parseMerged(l.ResourceVersion); !ok {
			t.Fatalf("limit %d, page %d: resourceVersion %q is not the fleet's position", opts.Limit, page, l.ResourceVersion)
		}
		for _, it := range l.Items {
			if it.RV != l.ResourceVersion {
				t.Fatalf("limit %d, page %d: %s shows %q, not the list's position", opts.Limit, page, it.Key, it.RV)
			}
			got = append(got, it.Key.String())
		}
		if opts.Count && (l.Count != nil || !opts.CountOptional) {
			if l.Count == nil || l.Count.Total != int64(total) || l.Count.Before != int64(len(got)-len(l.Items)) {
				t.Fatalf("limit %d, page %d: count %+v, want total %d, before %d", opts.Limit, page, l.Count, total, len(got)-len(l.Items))
			}
		}
		if l.Continue == "" {
			return got
		}
		if page > total {
			t.Fatalf("limit %d: more pages than objects", opts.Limit)
		}
		opts.Continue = l.Continue
	}
}

// TestListMergesOwnersInKeyOrder: whole and by pages of every size, with and without a count,
// and with a selector (every part asked at once), a list through the fan-out has every object
// once, in key order, each page at most its limit with the fleet's position.
func TestListMergesOwnersInKeyOrder(t *testing.T) {
	r, _, _, want := testFleet(t)
	for _, limit := range []int64{0, 1, 2, 3, 5, 7, 100} {
		for _, count := range []bool{false, true} {
			for _, labels := range []string{"", "tier=web"} {
				opts := storage.ListOptions{Selection: storage.Selection{Resource: "pods", LabelSelector: labels}, Limit: limit, Count: count}
				if got := walk(t, r, opts, len(want)); !slices.Equal(got, want) {
					t.Errorf("limit %d, count %v, labels %q:\n got %v\nwant %v", limit, count, labels, got, want)
				}
			}
		}
	}
}

// TestListOfOneOwnerAsksOnlyIt: a list of clusters one replica owns is that replica's answer;
// the others are not asked.
func TestListOfOneOwnerAsksOnlyIt(t *testing.T) {
	r, parts, _, _ := testFleet(t)
	l, err := r.List(context.Background(), storage.ListOptions{Selection: storage.Selection{Resource: "pods", Clusters: []string{"c5", "c7"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := storage.Drain(l); err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 2+6 || parts["me"].lists.Load() != 0 || parts["p2"].lists.Load() != 0 || parts["p3"].lists.Load() != 1 {
		t.Errorf("%d items; lists asked of me %d, p2 %d, p3 %d; want 8 items from p3 alone", len(l.Items), parts["me"].lists.Load(), parts["p2"].lists.Load(), parts["p3"].lists.Load())
	}
}

// TestListRefusesWithoutAPart: a part's refusal is the whole answer's, and a part that cannot
// be reached is 503 to retry, never a 200 without that part's clusters (which a relisting
// client would take for their deletion); so is a cluster with no live owner, and a part that
// answers for a cluster it was not asked for.
func TestListRefusesWithoutAPart(t *testing.T) {
	for _, limit := range []int64{0, 3} {
		for _, c := range []struct {
			name string
			err  error
			want int
		}{
			{"forbidden", storage.Error(http.StatusForbidden, "no"), http.StatusForbidden},
			{"unauthorized", storage.Error(http.StatusUnauthorized, "who"), http.StatusUnauthorized},
			{"not found", storage.Error(http.StatusNotFound, "what"), http.StatusNotFound},
			{"unreachable", errors.New("dial tcp: connection refused"), http.StatusServiceUnavailable},
		} {
			r, parts, _, _ := testFleet(t)
			parts["p3"].err = c.err
			l, err := r.List(context.Background(), storage.ListOptions{Selection: storage.Selection{Resource: "pods"}, Limit: limit})
			if err == nil {
				_ = storage.Drain(l)
				t.Errorf("limit %d, p3 %s: answered %d items, want %d", limit, c.name, len(l.Items), c.want)
				continue
			}
			if got := storage.Code(err); got != c.want {
				t.Errorf("limit %d, p3 %s: %d (%v), want %d", limit, c.name, got, err, c.want)
			}
			if c.want == http.StatusServiceUnavailable && storage.RetryAfter(err) == 0 {
				t.Errorf("limit %d, p3 %s: %v says nothing of retrying", limit, c.name, err)
			}
		}
	}

	r, _, fl, _ := testFleet(t)
	fl.owners[5].Live = false
	_, err := r.List(context.Background(), storage.ListOptions{Selection: storage.Selection{Resource: "pods"}, Limit: 3})
	if storage.Code(err) != http.StatusServiceUnavailable || !strings.Contains(err.Error(), "c5") {
		t.Errorf("c5's owner down: %v, want 503 naming c5", err)
	}

	r, parts, _, _ := testFleet(t)
	// p2 still holds c3, which moved away from it, and answers for it too.
	parts["p2"].extra = "c3"
	parts["p2"].items = append(parts["p2"].items, storage.Item{Key: aggregate.Key{Cluster: "c3", Namespace: "ns", Name: "stale"}})
	slices.SortFunc(parts["p2"].items, func(a, b storage.Item) int { return watchcache.CompareKeys(a.Key, b.Key) })
	for _, labels := range []string{"", "tier=web"} {
		_, err = r.List(context.Background(), storage.ListOptions{Selection: storage.Selection{Resource: "pods", LabelSelector: labels}, Limit: 100})
		if storage.Code(err) != http.StatusServiceUnavailable || !strings.Contains(err.Error(), `"c3"`) {
			t.Errorf("labels %q: p2 answered for c3 unasked: %v, want 503 naming c3", labels, err)
		}
	}

	if _, err := r.List(context.Background(), storage.ListOptions{Selection: storage.Selection{Resource: "pods"}, Limit: -1}); storage.Code(err) != http.StatusBadRequest {
		t.Errorf("limit -1: %v, want 400", err)
	}
	if _, err := r.List(context.Background(), storage.ListOptions{Selection: storage.Selection{Resource: "pods"}, Limit: 3, Continue: "not-a-token"}); storage.Code(err) != http.StatusBadRequest {
		t.Errorf("a bad continue token: %v, want 400", err)
	}
}

// TestListReadScopes: a page's reads of this replica's part share the request's read scope (a
// storage/local part reads its status once), the count and the second round of a key-ordered
// page included; a page that starts over as a plain fan-out once its first round failed asks
// under a new scope, read no earlier than its new positions.
func TestListReadScopes(t *testing.T) {
	r, parts, _, _ := testFleet(t)
	// The first page of 8 ends inside c3 (c1's 2, c2's 4, and 2 of c3's 6). The second, of 5,
	// counted, asks me (c3, c4, c8) for its run (c3 and c4: 4 items), for its count of c8 beside
	// that, and, the run short of 5, for c8 in a second round with p3 and p2.
	first, err := r.List(context.Background(), storage.ListOptions{Selection: storage.Selection{Resource: "pods"}, Limit: 8})
	if err != nil {
		t.Fatal(err)
	}
	before := parts["me"].lists.Load()
	parts["me"].statusReads.Store(0)
	l, err := r.List(storage.WithReadScope(context.Background()), storage.ListOptions{Selection: storage.Selection{Resource: "pods"}, Limit: 5, Count: true, Continue: first.Continue})
	if err != nil {
		t.Fatal(err)
	}
	if asked, reads := parts["me"].lists.Load()-before, parts["me"].statusReads.Load(); asked < 3 || reads != 1 {
		t.Errorf("a counted page over two rounds: me asked %d times, its status read %d times; want at least 3 (the page, the count, the second round: %d items) and 1", asked, reads, len(l.Items))
	}

	parts["p2"].err = errors.New("dial tcp: connection refused")
	parts["me"].statusReads.Store(0)
	before = parts["me"].lists.Load()
	if _, err := r.List(storage.WithReadScope(context.Background()), storage.ListOptions{Selection: storage.Selection{Resource: "pods"}, Limit: 3}); storage.Code(err) != http.StatusServiceUnavailable {
		t.Fatalf("p2 unreachable: %v, want 503", err)
	}
	if asked, reads := parts["me"].lists.Load()-before, parts["me"].statusReads.Load(); asked != 2 || reads != 2 {
		t.Errorf("a page that started over: me asked %d times, its status read %d times; want 2 and 2 (a scope for each round)", asked, reads)
	}
}

// TestGetAcrossOwners: a get asks every owner for the name and merges what they hold in key
// order; with a cluster down, finding nothing is 503, not 404.
func TestGetAcrossOwners(t *testing.T) {
	r, _, fl, _ := testFleet(t)
	l, err := r.Get(context.Background(), storage.GetOptions{Selection: storage.Selection{Resource: "pods"}, Name: "o-05"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, it := range l.Items {
		got = append(got, it.Key.String())
	}
	// o-05 exists where i%4*2 > 5: c3 and c7.
	if want := []string{"c3|ns/o-05", "c7|ns/o-05"}; !slices.Equal(got, want) {
		t.Errorf("get o-05: %v, want %v", got, want)
	}
	fl.owners[1].Live = false
	if _, err := r.Get(context.Background(), storage.GetOptions{Selection: storage.Selection{Resource: "pods"}, Name: "nowhere"}); storage.Code(err) != http.StatusServiceUnavailable {
		t.Errorf("get of a name found nowhere, c1 down: %v, want 503", err)
	}
}
