package e2e

import (
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/multicache/multicache/pkg/api"
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
		"by=cluster&watch=true":           "watch",
		"by=cluster&labelSelector=a%20b!": "labelSelector",
	} {
		err := e.get(r, api.ResourcesPath+"/"+scaleResource+"/summary?"+q, &api.Summary{})
		if err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), want) {
			e.t.Errorf("summary?%s: %v; want a 400 naming %s", q, err, want)
		}
	}
	var top api.Summary
	if err := e.get(r, api.ResourcesPath+"/"+scaleResource+"/summary?by=cluster,namespace&sort=key&limit=2", &top); err != nil {
		e.t.Fatal(err)
	}
	if len(top.Groups) != 2 || show(top.Groups[0].Key["cluster"]) > show(top.Groups[1].Key["cluster"]) {
		e.t.Errorf("sort=key&limit=2: groups %+v, want the first 2 by key", top.Groups)
	}
}
