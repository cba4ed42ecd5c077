package e2e

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/test/harness"
)

// sortRow is one ConfigMap as a sorted list orders it: its key, and the value of the path.
type sortRow struct {
	key   string // cluster|namespace/name
	value *string
}

// compareSortValues orders two values as the daemon documents it, written here again from the
// documentation: none first, then numbers and resource quantities by value, then text
// bytewise.
func compareSortValues(a, b *string) int {
	rank := func(v *string) (int, float64) {
		if v == nil {
			return 0, 0
		}
		if f, err := strconv.ParseFloat(*v, 64); err == nil {
			return 1, f
		}
		if q, err := resource.ParseQuantity(*v); err == nil && strings.ContainsAny(*v, "0123456789") {
			return 1, q.AsApproximateFloat64()
		}
		return 2, 0
	}
	ra, fa := rank(a)
	rb, fb := rank(b)
	switch {
	case ra != rb:
		return ra - rb
	case ra == 1 && fa < fb:
		return -1
	case ra == 1 && fa > fb:
		return 1
	case ra == 2:
		return strings.Compare(*a, *b)
	}
	return 0
}

// keyParts splits cluster|namespace/name for key order.
func keyOrder(a, b string) int {
	ca, ra, _ := strings.Cut(a, "|")
	cb, rb, _ := strings.Cut(b, "|")
	if c := strings.Compare(ca, cb); c != 0 {
		return c
	}
	na, ma, _ := strings.Cut(ra, "/")
	nb, mb, _ := strings.Cut(rb, "/")
	if c := strings.Compare(na, nb); c != 0 {
		return c
	}
	return strings.Compare(ma, mb)
}

// numberSome gives the scale ConfigMaps numbers with repeats and with one and two digits (so
// that a text order would put 10 before 9), and takes the number away from some.
func (e *scaleEnv) numberSome() {
	e.t.Helper()
	for mi, c := range e.members {
		cs, err := e.f.Clientset(c)
		if err != nil {
			e.t.Fatal(err)
		}
		for i := 0; i < 12; i++ {
			patch := fmt.Sprintf(`{"data":{"n":"%d"}}`, (i*7+mi*3)%23)
			if i%5 == 4 {
				patch = `{"data":{"n":null}}`
			}
			if _, err := cs.CoreV1().ConfigMaps(scaleNS).Patch(e.ctx, fmt.Sprintf("cm-%d", i), types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				e.t.Fatalf("%s: number cm-%d: %v", c, i, err)
			}
		}
	}
}

// sortTruth is every ConfigMap the members' API servers list, sorted by hand by read, in the
// order desc says, then by key.
func (e *scaleEnv) sortTruth(read func(*corev1.ConfigMap) *string, desc bool) []string {
	e.t.Helper()
	var rows []sortRow
	for _, c := range e.members {
		cs, err := e.f.Clientset(c)
		if err != nil {
			e.t.Fatal(err)
		}
		l, err := cs.CoreV1().ConfigMaps("").List(e.ctx, metav1.ListOptions{})
		if err != nil {
			e.t.Fatalf("ground truth: %s: %v", c, err)
		}
		for i := range l.Items {
			cm := &l.Items[i]
			rows = append(rows, sortRow{key: c + "|" + cm.Namespace + "/" + cm.Name, value: read(cm)})
		}
	}
	slices.SortFunc(rows, func(a, b sortRow) int {
		c := compareSortValues(a.value, b.value)
		if desc {
			c = -c
		}
		if c != 0 {
			return c
		}
		return keyOrder(a.key, b.key)
	})
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.key
	}
	return out
}

// sortedPages reads a native list sorted by sortBy, limit items a page, through r: the keys in
// the order given, and a problem when a page's total is not want.
func (e *scaleEnv) sortedPages(r replica, sortBy, order string, limit, want int) ([]string, error) {
	var keys []string
	cont := ""
	for {
		q := url.Values{"sortBy": {sortBy}, "limit": {fmt.Sprint(limit)}}
		if order != "" {
			q.Set("order", order)
		}
		if cont != "" {
			q.Set("continue", cont)
		}
		var l api.List
		if err := e.get(r, api.ResourcesPath+"/"+scaleResource+"?"+q.Encode(), &l); err != nil {
			return nil, err
		}
		if l.Total != int64(want) {
			return nil, fmt.Errorf("sortBy %s %s from %s: a page's total is %d, want %d", sortBy, order, r.id, l.Total, want)
		}
		for _, it := range l.Items {
			var om api.ObjectMeta
			_ = json.Unmarshal(it.Object, &om)
			keys = append(keys, it.Cluster+"|"+om.Metadata.Namespace+"/"+om.Metadata.Name)
		}
		if cont = l.Continue; cont == "" {
			return keys, nil
		}
	}
}

// kubeRemaining pages through r's Kubernetes API list of ConfigMaps, limit a page, with the
// query q, and checks every page's remainingItemCount against the items the later pages hold
// (none with a label selector, as kube-apiserver).
func (e *scaleEnv) kubeRemaining(r replica, q url.Values, limit int, counted bool) error {
	var sizes []int
	var said []*int64
	cont := ""
	for {
		qq := url.Values{"limit": {fmt.Sprint(limit)}}
		for k, v := range q {
			qq[k] = v
		}
		if cont != "" {
			qq.Set("continue", cont)
		}
		var l scaleList
		if err := e.get(r, "/api/v1/configmaps?"+qq.Encode(), &l); err != nil {
			return err
		}
		sizes = append(sizes, len(l.Items))
		said = append(said, l.Metadata.RemainingItemCount)
		if cont = l.Metadata.Continue; cont == "" {
			break
		}
	}
	for i := range sizes {
		after := 0
		for _, n := range sizes[i+1:] {
			after += n
		}
		switch got := said[i]; {
		case i == len(sizes)-1 && got != nil:
			return fmt.Errorf("kube list %v from %s: the last page says %d remain, want none said", q, r.id, *got)
		case i == len(sizes)-1:
		case !counted && got != nil:
			return fmt.Errorf("kube list %v from %s: page %d says %d remain; with a selector kube-apiserver says nothing", q, r.id, i, *got)
		case counted && (got == nil || *got != int64(after)):
			return fmt.Errorf("kube list %v from %s: page %d of %v says %v remain, want %d", q, r.id, i, sizes, show64(got), after)
		}
	}
	if len(sizes) < 3 {
		return fmt.Errorf("kube list %v from %s: %d pages, too few to test", q, r.id, len(sizes))
	}
	return nil
}

func show64(v *int64) string {
	if v == nil {
		return "none"
	}
	return fmt.Sprint(*v)
}

// sortedLists: native lists sorted by a path (a name, a number written as text, a timestamp),
// in both orders, read a few items a page through continue through each replica (a fan-out
// where it owns only some clusters), give every ConfigMap once, in the order a sort by hand of
// what the API servers list gives, and every page's total is their count. The Kubernetes API's
// pages say how many items follow each (remainingItemCount), and say nothing with a label
// selector, as kube-apiserver's. Every order asked again becomes a sort index on each replica:
// once one answers (its /metrics say so), every comparison runs again, from the indexes.
func (e *scaleEnv) sortedLists(rs []replica, within time.Duration) {
	e.t.Helper()
	e.numberSome()
	cases := []struct {
		sortBy, order string
		read          func(*corev1.ConfigMap) *string
	}{
		{"metadata.name", "", func(cm *corev1.ConfigMap) *string { return &cm.Name }},
		{"data.n", "desc", func(cm *corev1.ConfigMap) *string {
			if v, ok := cm.Data["n"]; ok && v != "" {
				return &v
			}
			return nil
		}},
		{"data.n", "asc", func(cm *corev1.ConfigMap) *string {
			if v, ok := cm.Data["n"]; ok && v != "" {
				return &v
			}
			return nil
		}},
		{"{.metadata.creationTimestamp}", "desc", func(cm *corev1.ConfigMap) *string {
			v := cm.CreationTimestamp.UTC().Format(time.RFC3339)
			return &v
		}},
	}
	deadline := time.Now().Add(within)
	indexed := false
	for {
		var problems []string
		for _, tc := range cases {
			want := e.sortTruth(tc.read, tc.order == "desc")
			for _, r := range rs {
				got, err := e.sortedPages(r, tc.sortBy, tc.order, 7, len(want))
				if err != nil {
					problems = append(problems, err.Error())
					continue
				}
				if !slices.Equal(got, want) {
					problems = append(problems, fmt.Sprintf("sortBy %s %s from %s:\n got %v\nwant %v", tc.sortBy, tc.order, r.id, got, want))
				}
			}
		}
		for _, r := range rs {
			if err := e.kubeRemaining(r, url.Values{}, 7, true); err != nil {
				problems = append(problems, err.Error())
			}
			if err := e.kubeRemaining(r, url.Values{"labelSelector": {"tier"}}, 3, false); err != nil {
				problems = append(problems, err.Error())
			}
		}
		if len(problems) == 0 && !indexed {
			// Each order was asked again: each replica learns a sort index of it. Once one
			// answers, every comparison runs again, its pages read from the indexes.
			for _, r := range rs {
				harness.WaitFor(e.t, r.id+" answers sorted pages from a sort index", 30*time.Second, func() bool {
					if _, err := e.sortedPages(r, "metadata.name", "", 7, len(e.sortTruth(cases[0].read, false))); err != nil {
						return false
					}
					body, err := e.raw(r, "/metrics")
					return err == nil && strings.Contains(body, `multicache_sort_index_answers_total{order="asc metadata.name",resource="`+scaleResource+`"}`) &&
						!strings.Contains(body, `multicache_sort_index_answers_total{order="asc metadata.name",resource="`+scaleResource+`"} 0`)
				})
			}
			indexed = true
			continue
		}
		if len(problems) == 0 {
			e.sortRefusals(rs[0])
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("sorted lists (sort indexes answering: %v):\n%s", indexed, strings.Join(problems, "\n"))
		}
		time.Sleep(time.Second)
	}
}

// sortRefusals: a bad order, a path that does not parse, order without sortBy, and a continue
// token of another order are 400s that name them.
func (e *scaleEnv) sortRefusals(r replica) {
	e.t.Helper()
	var first api.List
	if err := e.get(r, api.ResourcesPath+"/"+scaleResource+"?sortBy=metadata.name&limit=2", &first); err != nil || first.Continue == "" {
		e.t.Fatalf("a first sorted page: %v, continue %q", err, first.Continue)
	}
	for q, want := range map[string]string{
		"sortBy=metadata.name&order=up": `order \"up\"`,
		"sortBy=spec.containers[":       `sortBy \"spec.containers[\"`,
		"order=desc":                    "order",
		"sortBy=data.n&continue=" + url.QueryEscape(first.Continue): "continue",
		"continue=" + url.QueryEscape(first.Continue):               "continue",
	} {
		err := e.get(r, api.ResourcesPath+"/"+scaleResource+"?limit=2&"+q, &api.List{})
		if err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), want) {
			e.t.Errorf("list?%s: %v; want a 400 naming %s", q, err, want)
		}
	}
}
