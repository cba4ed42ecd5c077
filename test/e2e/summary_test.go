package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/test/harness"
)

// labelSome labels every third ConfigMap of the scale namespace tier=web, and every third
// after it tier=db, in each member: the rest have no tier, which groups under null.
func (e *scaleEnv) labelSome() {
	e.t.Helper()
	for _, c := range e.members {
		cs, err := e.f.Clientset(c)
		if err != nil {
			e.t.Fatal(err)
		}
		for i := 0; i < 12; i++ {
			tier := map[int]string{0: "web", 1: "db"}[i%3]
			if tier == "" {
				continue
			}
			patch := fmt.Sprintf(`{"metadata":{"labels":{"tier":%q}}}`, tier)
			if _, err := cs.CoreV1().ConfigMaps(scaleNS).Patch(e.ctx, fmt.Sprintf("cm-%d", i), types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				e.t.Fatalf("%s: label cm-%d: %v", c, i, err)
			}
		}
	}
}

// summaryKey reads one ConfigMap's value for a summary key, as the daemon defines it; nil for
// none.
func summaryKey(cluster string, cm *corev1.ConfigMap, key string) *string {
	var v string
	var ok bool
	switch {
	case key == "cluster":
		v, ok = cluster, true
	case key == "namespace":
		v, ok = cm.Namespace, cm.Namespace != ""
	case strings.HasPrefix(key, "label:"):
		v, ok = cm.Labels[strings.TrimPrefix(key, "label:")]
	case strings.HasPrefix(key, "field:data."):
		v, ok = cm.Data[strings.TrimPrefix(key, "field:data.")]
		ok = ok && v != ""
	}
	if !ok {
		return nil
	}
	return &v
}

// summaryTruth counts, by hand, what each member's API server lists in the groups of by.
func (e *scaleEnv) summaryTruth(by []string, keep func(*corev1.ConfigMap) bool) (map[string]int, int) {
	e.t.Helper()
	groups, total := map[string]int{}, 0
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
			if keep != nil && !keep(&l.Items[i]) {
				continue
			}
			total++
			var parts []string
			for _, k := range by {
				parts = append(parts, show(summaryKey(c, &l.Items[i], k)))
			}
			groups[strings.Join(parts, " ")]++
		}
	}
	return groups, total
}

func show(v *string) string {
	if v == nil {
		return "null"
	}
	return *v
}

// summaryEqualsTruth asks each replica for summaries of the fleet (through fan-outs where it
// owns only some clusters) and compares each with the counts done by hand from what each API
// server lists: every group, every count, the total, and every cluster synced.
func (e *scaleEnv) summaryEqualsTruth(rs []replica, within time.Duration) {
	e.t.Helper()
	cases := []struct {
		by    []string
		query url.Values
		keep  func(*corev1.ConfigMap) bool
	}{
		{by: []string{"cluster"}},
		{by: []string{"namespace"}},            // kept counts (the default), from the first ask
		{by: []string{"cluster", "namespace"}}, // the same
		{by: []string{"cluster", "label:tier"}},
		{by: []string{"namespace", "field:data.n"}},
		{by: []string{"label:tier"}, query: url.Values{"labelSelector": {"tier"}}, keep: func(cm *corev1.ConfigMap) bool { _, ok := cm.Labels["tier"]; return ok }},
		{by: []string{"cluster"}, query: url.Values{"namespace": {scaleNS}}, keep: func(cm *corev1.ConfigMap) bool { return cm.Namespace == scaleNS }},
	}
	deadline := time.Now().Add(within)
	for {
		var problems []string
		for _, tc := range cases {
			want, wantTotal := e.summaryTruth(tc.by, tc.keep)
			for _, r := range rs {
				q := url.Values{"by": {strings.Join(tc.by, ",")}}
				for k, v := range tc.query {
					q[k] = v
				}
				var s api.Summary
				if err := e.get(r, api.ResourcesPath+"/"+scaleResource+"/summary?"+q.Encode(), &s); err != nil {
					problems = append(problems, fmt.Sprintf("%s: summary by %v: %v", r.id, tc.by, err))
					continue
				}
				got := map[string]int{}
				for _, g := range s.Groups {
					var parts []string
					for _, k := range tc.by {
						parts = append(parts, show(g.Key[k]))
					}
					got[strings.Join(parts, " ")] = g.Count
				}
				for _, f := range s.Clusters {
					if !f.Synced {
						problems = append(problems, fmt.Sprintf("%s: summary by %v: cluster %s not synced", r.id, tc.by, f.Name))
					}
				}
				if d := diffCounts(want, got); len(d) > 0 || s.Total != wantTotal || len(s.Clusters) != len(e.members) {
					problems = append(problems, fmt.Sprintf("%s: summary by %v %v: total %d (want %d), %d clusters (want %d), groups differ: %v",
						r.id, tc.by, tc.query, s.Total, wantTotal, len(s.Clusters), len(e.members), d))
				}
			}
		}
		if len(problems) == 0 {
			e.t.Logf("summaries through %d replicas equal the counts of what the API servers list (%d queries)", len(rs), len(cases))
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("summaries differ from the API servers after %s:\n%s", within, strings.Join(problems, "\n"))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func diffCounts(want, got map[string]int) []string {
	var out []string
	for k, n := range want {
		if got[k] != n {
			out = append(out, fmt.Sprintf("%q: %d, want %d", k, got[k], n))
		}
	}
	for k, n := range got {
		if _, ok := want[k]; !ok {
			out = append(out, fmt.Sprintf("%q: %d, want none", k, n))
		}
	}
	sort.Strings(out)
	return out
}

// summaryRefusals: a bad key and a bad sort are 400s that name them.
func (e *scaleEnv) summaryRefusals(r replica) {
	e.t.Helper()
	for q, want := range map[string]string{
		"by=colour":                       `key \"colour\"`,
		"by=cluster&sort=size":            `sort \"size\"`,
		"by=field:spec.containers[":       `field:spec.containers[`,
		"by=index:nope":                   `index \"nope\"`,
		"":                                "by: at least one key",
		"by=cluster&interval=1s":          "interval",
		"by=cluster&watch=1&interval=5ms": "interval",
		"by=cluster&labelSelector=a%20b!": "labelSelector",
	} {
		err := e.get(r, api.ResourcesPath+"/"+scaleResource+"/summary?"+q, &api.Summary{})
		if err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), want) {
			e.t.Errorf("summary?%s: %v; want a 400 naming %s", q, err, want)
		}
	}
	// A comma inside a path's brackets belongs to the path: two keys, not three.
	var union api.Summary
	if err := e.get(r, api.ResourcesPath+"/"+scaleResource+"/summary?"+url.Values{"by": {"field:{.metadata.labels['tier','none']},cluster"}}.Encode(), &union); err != nil {
		e.t.Fatal(err)
	}
	if len(union.By) != 2 || union.By[1] != "cluster" {
		e.t.Errorf("by a union path and cluster: keys %q, want the path and cluster", union.By)
	}
	var top api.Summary
	if err := e.get(r, api.ResourcesPath+"/"+scaleResource+"/summary?by=cluster,namespace&sort=key&limit=2", &top); err != nil {
		e.t.Fatal(err)
	}
	if len(top.Groups) != 2 || show(top.Groups[0].Key["cluster"]) > show(top.Groups[1].Key["cluster"]) {
		e.t.Errorf("sort=key&limit=2: groups %+v, want the first 2 by key", top.Groups)
	}
}

// whereFilters: a where expression filters native lists and summaries as the same expression
// judged by hand over what the API servers list; on a watch, an object that comes to pass
// arrives as ADDED and one that stops passing as DELETED, as with a label selector.
func (e *scaleEnv) whereFilters(rs []replica, holders map[string]string) {
	e.t.Helper()
	const where = "has(object.metadata.labels) && object.metadata.labels.tier == 'web'"
	isWeb := func(cm *corev1.ConfigMap) bool { return cm.Labels["tier"] == "web" }
	want, wantTotal := e.summaryTruth([]string{"cluster"}, isWeb)
	for _, r := range rs {
		var s api.Summary
		q := url.Values{"by": {"cluster"}, "where": {where}}
		if err := e.get(r, api.ResourcesPath+"/"+scaleResource+"/summary?"+q.Encode(), &s); err != nil {
			e.t.Fatalf("%s: summary where: %v", r.id, err)
		}
		got := map[string]int{}
		for _, g := range s.Groups {
			got[show(g.Key["cluster"])] = g.Count
		}
		if d := diffCounts(want, got); len(d) > 0 || s.Total != wantTotal || wantTotal == 0 {
			e.t.Errorf("%s: summary where %s: total %d (want %d): %v", r.id, where, s.Total, wantTotal, d)
		}
		var l api.List
		if err := e.get(r, api.ResourcesPath+"/"+scaleResource+"?"+url.Values{"where": {where}}.Encode(), &l); err != nil {
			e.t.Fatalf("%s: list where: %v", r.id, err)
		}
		if len(l.Items) != wantTotal || l.Total != int64(wantTotal) {
			e.t.Errorf("%s: list where %s: %d items, total %d, want %d", r.id, where, len(l.Items), l.Total, wantTotal)
		}
		// Pages of 2 say the whole list's total, each one, through a fan-out too.
		cont, seen := "", 0
		for {
			q := url.Values{"where": {where}, "limit": {"2"}}
			if cont != "" {
				q.Set("continue", cont)
			}
			var page api.List
			if err := e.get(r, api.ResourcesPath+"/"+scaleResource+"?"+q.Encode(), &page); err != nil {
				e.t.Fatalf("%s: paged list where: %v", r.id, err)
			}
			seen += len(page.Items)
			if page.Total != int64(wantTotal) {
				e.t.Errorf("%s: a page of a list where %s: total %d, want %d", r.id, where, page.Total, wantTotal)
			}
			if cont = page.Continue; cont == "" {
				break
			}
		}
		if seen != wantTotal {
			e.t.Errorf("%s: pages of a list where %s: %d items, want %d", r.id, where, seen, wantTotal)
		}
	}
	for q, want := range map[string]string{
		"where=object.metadata.name%20%3D%3D":    "1:24: Syntax error",
		"where=1%20%2B%201":                      "want bool",
		"where=nosuch%20%3D%3D%201":              "undeclared reference",
		"watch=true&where=object.metadata.name(": "where",
	} {
		err := e.get(rs[0], api.ResourcesPath+"/"+scaleResource+"?"+q, &api.List{})
		if err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), want) {
			e.t.Errorf("?%s: %v; want a 400 with %q", q, err, want)
		}
	}

	// An evaluation past kube-apiserver's per-expression cost limit: the list and the summary
	// are 400s that say so, through either replica.
	var nums []string
	for i := range 1500 {
		nums = append(nums, fmt.Sprint(i))
	}
	l := "[" + strings.Join(nums, ",") + "]"
	costly := url.Values{"where": {l + ".all(a, " + l + ".all(b, a == b || a != b))"}, "by": {"cluster"}}
	for _, r := range rs {
		for _, path := range []string{"", "/summary"} {
			err := e.get(r, api.ResourcesPath+"/"+scaleResource+path+"?"+costly.Encode(), &api.Summary{})
			if err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), "cost exceeds the limit") {
				e.t.Errorf("%s: %s with a where past the cost limit: %v; want a 400 that says so", r.id, path, err)
			}
		}
	}

	// A watch through the replica that does not own the first member: cm-2 (no tier) comes to
	// pass, cm-0 (web) stops passing.
	member := e.members[0]
	via := rs[0]
	if holders[member] == via.id {
		via = rs[1]
	}
	w, err := e.openNativeWatch(via, url.Values{"where": {where}, "cluster": {member}})
	if err != nil {
		e.t.Fatal(err)
	}
	defer w.close()
	initial := w.until(e.t, func(ev api.WatchEvent) bool { return ev.Type == api.Bookmark }, 30*time.Second)
	adds := 0
	for _, ev := range initial {
		if ev.Type == api.Added {
			adds++
		}
	}
	if adds != want[member] {
		e.t.Errorf("watch where: %d initial ADDED in %s, want %d", adds, member, want[member])
	}
	cs, err := e.f.Clientset(member)
	if err != nil {
		e.t.Fatal(err)
	}
	for name, tier := range map[string]string{"cm-2": "web", "cm-0": "db"} {
		patch := fmt.Sprintf(`{"metadata":{"labels":{"tier":%q}}}`, tier)
		if _, err := cs.CoreV1().ConfigMaps(scaleNS).Patch(e.ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			e.t.Fatal(err)
		}
	}
	seen := map[string]string{}
	w.until(e.t, func(ev api.WatchEvent) bool {
		if ev.Type == api.Added || ev.Type == api.Deleted || ev.Type == api.Modified {
			var om api.ObjectMeta
			_ = json.Unmarshal(ev.Object, &om)
			seen[om.Metadata.Name] = ev.Type
		}
		return seen["cm-2"] != "" && seen["cm-0"] != ""
	}, 30*time.Second)
	if seen["cm-2"] != api.Added || seen["cm-0"] != api.Deleted {
		e.t.Errorf("watch where: cm-2 (now web) %s, cm-0 (now db) %s; want ADDED and DELETED", seen["cm-2"], seen["cm-0"])
	}
}

// nativeWatch reads a native watch's NDJSON events.
type nativeWatch struct {
	body io.ReadCloser
	dec  *json.Decoder
}

func (w *nativeWatch) close() { _ = w.body.Close() }

// until reads events until stop says so, and returns them; the test fails after within.
func (w *nativeWatch) until(t *testing.T, stop func(api.WatchEvent) bool, within time.Duration) []api.WatchEvent {
	t.Helper()
	timer := time.AfterFunc(within, w.close)
	defer timer.Stop()
	var out []api.WatchEvent
	for {
		var ev api.WatchEvent
		if err := w.dec.Decode(&ev); err != nil {
			t.Fatalf("watch: after %d events: %v", len(out), err)
		}
		out = append(out, ev)
		if stop(ev) {
			return out
		}
	}
}

func (e *scaleEnv) openNativeWatch(r replica, q url.Values) (*nativeWatch, error) {
	return e.openNativeStream(r, "", q)
}

// openNativeStream opens a watch of the scale resource's path with sub appended (/summary).
func (e *scaleEnv) openNativeStream(r replica, sub string, q url.Values) (*nativeWatch, error) {
	q.Set("watch", "true")
	req, err := http.NewRequestWithContext(e.ctx, http.MethodGet, r.d.URL+api.ResourcesPath+"/"+scaleResource+sub+"?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+scaleToken)
	resp, err := (&http.Client{Transport: e.httpClient().Transport}).Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, fmt.Errorf("watch from %s: %d %s", r.id, resp.StatusCode, b)
	}
	return &nativeWatch{body: resp.Body, dec: json.NewDecoder(resp.Body)}, nil
}

// summaryStreams: a summary with watch=true, through each replica (a fan-out where it owns only
// some clusters), sends the counts at once, then new counts once a ConfigMap is created in each
// member, and again once they are deleted: each time what the API servers list, counted by
// hand.
func (e *scaleEnv) summaryStreams(rs []replica) {
	e.t.Helper()
	counts := func(ev api.WatchEvent) (map[string]int, bool) {
		if ev.Type != api.SummaryEvent {
			e.t.Fatalf("summary stream: a %s event: %s", ev.Type, ev.Object)
		}
		var s api.Summary
		if err := json.Unmarshal(ev.Object, &s); err != nil {
			e.t.Fatalf("summary stream: %v", err)
		}
		got := map[string]int{}
		for _, g := range s.Groups {
			got[show(g.Key["cluster"])] = g.Count
		}
		return got, true
	}
	for _, r := range rs {
		w, err := e.openNativeStream(r, "/summary", url.Values{"by": {"cluster"}, "interval": {"200ms"}})
		if err != nil {
			e.t.Fatal(err)
		}
		want, _ := e.summaryTruth([]string{"cluster"}, nil)
		first, _ := counts(w.until(e.t, func(api.WatchEvent) bool { return true }, 30*time.Second)[0])
		if d := diffCounts(want, first); len(d) > 0 {
			e.t.Errorf("%s: the stream's first summary: %v", r.id, d)
		}
		name := "stream-" + r.id
		for _, c := range e.members {
			cs, _ := e.f.Clientset(c)
			if _, err := cs.CoreV1().ConfigMaps(scaleNS).Create(e.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
				e.t.Fatal(err)
			}
		}
		for _, phase := range []string{"created", "deleted"} {
			want, _ = e.summaryTruth([]string{"cluster"}, nil)
			w.until(e.t, func(ev api.WatchEvent) bool {
				got, _ := counts(ev)
				return len(diffCounts(want, got)) == 0
			}, 30*time.Second)
			if phase == "created" {
				for _, c := range e.members {
					cs, _ := e.f.Clientset(c)
					if err := cs.CoreV1().ConfigMaps(scaleNS).Delete(e.ctx, name, metav1.DeleteOptions{}); err != nil {
						e.t.Fatal(err)
					}
				}
			}
		}
		w.close()
	}
}

// learnedIndexes: a summary key asked again becomes a learned index on every replica that owns
// clusters (each part is summarized where it lives); /metrics shows its memory and the summaries
// it answered, and the summaries it answers still equal the counts by hand.
func (e *scaleEnv) learnedIndexes(rs []replica) {
	e.t.Helper()
	for range 3 {
		for _, r := range rs {
			if err := e.get(r, api.ResourcesPath+"/"+scaleResource+"/summary?by=cluster,label:tier", &api.Summary{}); err != nil {
				e.t.Fatal(err)
			}
		}
	}
	for _, r := range rs {
		harness.WaitFor(e.t, r.id+" shows a learned index that answered", 30*time.Second, func() bool {
			if err := e.get(r, api.ResourcesPath+"/"+scaleResource+"/summary?by=label:tier", &api.Summary{}); err != nil {
				return false
			}
			body, err := e.raw(r, "/metrics")
			if err != nil {
				return false
			}
			return strings.Contains(body, `multicache_learned_index_bytes{key="label:tier",resource="`+scaleResource+`"}`) &&
				strings.Contains(body, `multicache_learned_index_answers_total{key="label:tier",resource="`+scaleResource+`"}`) &&
				!strings.Contains(body, `multicache_learned_index_answers_total{key="label:tier",resource="`+scaleResource+`"} 0`)
		})
	}
	e.summaryEqualsTruth(rs, time.Minute)
}

// raw is the body of a GET of path from r.
func (e *scaleEnv) raw(r replica, path string) (string, error) {
	req, _ := http.NewRequestWithContext(e.ctx, http.MethodGet, r.d.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+scaleToken)
	resp, err := e.httpClient().Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %d", path, resp.StatusCode)
	}
	return string(b), err
}
