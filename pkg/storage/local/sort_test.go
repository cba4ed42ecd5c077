package local

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/storage"
)

// sortFixture is 3 clusters of 41 Pods whose sort values repeat across clusters and are
// missing from some Pods: a node name (none on every fifth Pod), a restart count (a number,
// 0–10, so that 10 sorts after 9; none on every fourth Pod) and a creation time (none on every
// sixth Pod).
func sortFixture(t *testing.T) (*selected, map[aggregate.Key]*corev1.Pod) {
	const clusters, pods = 3, 41
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	all := map[aggregate.Key]*corev1.Pod{}
	agg := fixedAggregate(t, "pods", clusters, &corev1.Pod{}, func(c int) runtime.Object {
		l := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: make([]corev1.Pod, 0, pods)}
		for i := range pods {
			p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprint("ns-", i%3), Name: fmt.Sprintf("p%02d", i), ResourceVersion: "1"}}
			if i%5 != 0 {
				p.Spec.NodeName = fmt.Sprint("node-", (i*7+c)%6)
			}
			if i%4 != 0 {
				p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "a", RestartCount: int32((i*13 + c) % 11)}}
			}
			if i%6 != 0 {
				p.CreationTimestamp = metav1.NewTime(t0.Add(time.Duration((i*7919+c)%pods) * time.Second))
			}
			l.Items = append(l.Items, p)
			all[aggregate.Key{Cluster: fmt.Sprint("c", c), Namespace: p.Namespace, Name: p.Name}] = &l.Items[len(l.Items)-1]
		}
		return l
	})
	return &selected{resource: "pods", agg: agg}, all
}

// wantOrder is the order a list sorted by one of sortFixture's paths must have, computed
// here without the package's encoding: Pods without a value first (last when descending),
// restart counts as numbers, creation times in time, names as text, then cluster, namespace and name ascending.
func wantOrder(all map[aggregate.Key]*corev1.Pod, by string, desc bool) []aggregate.Key {
	type row struct {
		key  aggregate.Key
		has  bool
		num  int64
		text string
	}
	var rows []row
	for k, p := range all {
		r := row{key: k}
		switch by {
		case "metadata.name":
			r.has, r.text = true, p.Name
		case "spec.nodeName":
			r.has, r.text = p.Spec.NodeName != "", p.Spec.NodeName
		case "{.status.containerStatuses[0].restartCount}":
			if len(p.Status.ContainerStatuses) > 0 {
				r.has, r.num = true, int64(p.Status.ContainerStatuses[0].RestartCount)
			}
		case "metadata.creationTimestamp":
			r.has, r.num = !p.CreationTimestamp.IsZero(), p.CreationTimestamp.Unix()
		default:
			panic(by)
		}
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, b row) int {
		c := cmp.Compare(strconv.FormatBool(a.has), strconv.FormatBool(b.has)) // "false" < "true"
		if c == 0 {
			c = cmp.Or(cmp.Compare(a.num, b.num), strings.Compare(a.text, b.text))
		}
		if desc {
			c = -c
		}
		return cmp.Or(c, strings.Compare(a.key.Cluster, b.key.Cluster), strings.Compare(a.key.Namespace, b.key.Namespace), strings.Compare(a.key.Name, b.key.Name))
	})
	out := make([]aggregate.Key, len(rows))
	for i, r := range rows {
		out[i] = r.key
	}
	return out
}

// walk reads every page of a sorted list, each after the last item of the one before, checking
// each page's counts: total is the whole list, before the items already read.
func walk(t *testing.T, name string, total int, limit int, next func(cur *sortedItem) (page, error)) []aggregate.Key {
	t.Helper()
	var keys []aggregate.Key
	var cur *sortedItem
	for range total + 2 {
		pg, err := next(cur)
		if err != nil {
			t.Fatalf("%s: page after %d items: %v", name, len(keys), err)
		}
		if pg.total != int64(total) || pg.before != int64(len(keys)) {
			t.Errorf("%s: page after %d items counts total %d, before %d; want %d, %d", name, len(keys), pg.total, pg.before, total, len(keys))
		}
		if len(pg.items) > limit || len(pg.items) != len(pg.sorts) {
			t.Fatalf("%s: page of %d items (%d sort values), limit %d", name, len(pg.items), len(pg.sorts), limit)
		}
		for _, it := range pg.items {
			keys = append(keys, it.Key)
		}
		if !pg.more {
			return keys
		}
		if len(pg.items) == 0 {
			t.Fatalf("%s: an empty page says more items follow", name)
		}
		last := len(pg.items) - 1
		cur = &sortedItem{Item: pg.items[last], sort: pg.sorts[last]}
	}
	t.Fatalf("%s: more than %d pages", name, total+2)
	return nil
}

// TestSortedPagesWalkTheOrder: a list sorted by a path, read a page at a time after each page's
// last item, visits every object once in the order wantOrder computes (ascending and
// descending, by text, by number, by timestamp, with objects that have no value), with its
// counts right on every page; once the order has been asked often enough to be learned, the
// sort index answers every page, and the same ones.
func TestSortedPagesWalkTheOrder(t *testing.T) {
	sel, all := sortFixture(t)
	ctx := context.Background()
	for _, by := range []string{"metadata.name", "spec.nodeName", "{.status.containerStatuses[0].restartCount}", "metadata.creationTimestamp"} {
		for _, desc := range []bool{false, true} {
			want := wantOrder(all, by, desc)
			srt, err := sortingOf(storage.ListOptions{SortBy: by, Desc: desc}, sel)
			if err != nil {
				t.Fatalf("sortBy %s: %v", by, err)
			}
			for _, limit := range []int{1, 7, 500} {
				name := fmt.Sprintf("sortBy %s desc=%t limit %d, scanned", by, desc, limit)
				got := walk(t, name, len(all), limit, func(cur *sortedItem) (page, error) { return scanSortedPage(ctx, sel, srt, cur, limit) })
				if !slices.Equal(got, want) {
					t.Errorf("%s: order\n%v\nwant\n%v", name, got, want)
				}
			}
			// Asked again, the order is learned as a sort index (aggregate.SortedAfter).
			order := map[bool]string{false: "asc ", true: "desc "}[desc] + srt.path
			deadline := time.Now().Add(30 * time.Second)
			for !slices.ContainsFunc(sel.agg.SortIndexes(), func(si aggregate.SortIndex) bool { return si.Name == order && si.Clusters == 3 }) {
				if time.Now().After(deadline) {
					t.Fatalf("sortBy %s desc=%t: no sort index %q learned after 30s: %+v", by, desc, order, sel.agg.SortIndexes())
				}
				if _, err := sortedPage(ctx, sel, srt, nil, 7); err != nil {
					t.Fatal(err)
				}
				time.Sleep(5 * time.Millisecond)
			}
			for _, limit := range []int{1, 7, 500} {
				name := fmt.Sprintf("sortBy %s desc=%t limit %d, indexed", by, desc, limit)
				got := walk(t, name, len(all), limit, func(cur *sortedItem) (page, error) {
					pg, ok := indexedPage(sel, srt, cur, limit)
					if !ok {
						return page{}, fmt.Errorf("the sort index did not answer")
					}
					return pg, nil
				})
				if !slices.Equal(got, want) {
					t.Errorf("%s: order\n%v\nwant\n%v", name, got, want)
				}
			}
		}
	}
}

// TestSortingOfRefusesBadOrders: an order that cannot be read is a 400 that names sortBy or
// order.
func TestSortingOfRefusesBadOrders(t *testing.T) {
	sel := &selected{resource: "pods"}
	for _, tc := range []struct {
		opts storage.ListOptions
		want string
	}{
		{storage.ListOptions{SortBy: "  "}, "sortBy"},
		{storage.ListOptions{Desc: true}, "order"},
		{storage.ListOptions{SortBy: "{.metadata.name"}, "sortBy"},
		{storage.ListOptions{SortBy: "spec.containers[?(@.name=="}, "sortBy"},
	} {
		srt, err := sortingOf(tc.opts, sel)
		if err == nil {
			t.Errorf("%+v: accepted (%+v)", tc.opts, srt)
			continue
		}
		if code := storage.Code(err); code != http.StatusBadRequest || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %d %v; want a 400 that names %s", tc.opts, code, err, tc.want)
		}
	}
	if srt, err := sortingOf(storage.ListOptions{}, sel); srt != nil || err != nil {
		t.Errorf("no sortBy: %+v, %v; want no order", srt, err)
	}
}
