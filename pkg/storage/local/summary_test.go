package local

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/multicache/multicache/internal/fakeapi"
	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/auth"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/storage"
)

// onlyClusters is an Access that may read the clusters it holds and no other.
type onlyClusters map[string]bool

func (onlyClusters) All(context.Context) (bool, error) { return false, nil }
func (o onlyClusters) Cluster(_ context.Context, c string, _ bool) (bool, error) {
	return o[c], nil
}

// summaryPods are the Pods each fake API server lists: in c1, Pod child is controlled by Pod
// parent (its uid), and Pod stray names parent with another uid.
func summaryPods(cluster string) []corev1.Pod {
	pod := func(ns, name, tier string, owners ...metav1.OwnerReference) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(cluster + "-" + name), ResourceVersion: "1", OwnerReferences: owners}}
		if tier != "" {
			p.Labels = map[string]string{"tier": tier}
		}
		return p
	}
	controller := true
	byParent := func(uid types.UID) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "parent", UID: uid, Controller: &controller}
	}
	switch cluster {
	case "c0":
		return []corev1.Pod{pod("a", "web-1", "web"), pod("a", "db-1", "db"), pod("b", "web-1", "web"), pod("b", "plain", "")}
	case "c1":
		return []corev1.Pod{pod("a", "web-1", "web"), pod("a", "parent", ""), pod("a", "child", "web", byParent("c1-parent")),
			pod("a", "stray", "db", byParent("another-uid"))}
	}
	return []corev1.Pod{pod("a", "web-1", "web")} // c2's: never listed, its lists hang
}

// fakeFleetStorage is a Storage over a Registry caching the Pods of one fake API server per
// cluster of pods. The lists of the clusters named in hanging never complete; New waits for
// the others to be synced.
func fakeFleetStorage(t *testing.T, pods map[string][]corev1.Pod, hanging ...string) *Storage {
	t.Helper()
	var static clusterset.Static
	for _, c := range slices.Sorted(maps.Keys(pods)) {
		f := fakeapi.New(t)
		f.SetPods(pods[c])
		if slices.Contains(hanging, c) {
			f.SetSlow(true)
			t.Cleanup(func() { f.SetSlow(false) })
		}
		static = append(static, clusterset.ClusterConfig{Name: c, Config: f.Config(), Fingerprint: c})
	}
	reg, err := clusterset.New(clusterset.Options{Source: static, Resources: []clusterset.ResourceSpec{{Name: "pods"}}, ProbeInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = reg.Start(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(30 * time.Second)
	for synced := 0; synced < len(pods)-len(hanging); {
		if time.Now().After(deadline) {
			t.Fatalf("not every cluster synced in 30 s: %+v", reg.Status())
		}
		time.Sleep(20 * time.Millisecond)
		synced = 0
		for _, cs := range reg.Status() {
			for _, rs := range cs.Resources {
				if rs.State == clusterset.Synced && !slices.Contains(hanging, cs.Name) {
					synced++
				}
			}
		}
	}
	return s
}

// counts is a summary's groups as "value,value" → count, a missing value as "<none>".
func counts(t *testing.T, s *storage.Summary) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, g := range s.Groups {
		var parts []string
		for _, v := range g.Key {
			if v == nil {
				parts = append(parts, "<none>")
			} else {
				parts = append(parts, *v)
			}
		}
		out[strings.Join(parts, ",")] += g.Count
	}
	return out
}

// TestSummarizeOverTheRegistry: Storage.Summarize over a Registry of three fake API servers,
// one of whose lists never complete. Every answer is compared with counts made here from the
// Pods each server lists: by cluster and label, with a where, within one owner, and by owner
// (the resolver the view builds from the Registry). A caller who may read one cluster counts
// only that one and is told which were left out; one that names a cluster it may not read is
// refused; bad keys and expressions are 400s that name their parameter.
func TestSummarizeOverTheRegistry(t *testing.T) {
	s := fakeFleetStorage(t, map[string][]corev1.Pod{"c0": summaryPods("c0"), "c1": summaryPods("c1"), "c2": summaryPods("c2")}, "c2")

	// want counts the Pods of clusters that keep passes, by what key says of each.
	want := func(clusters []string, keep func(c string, p corev1.Pod) bool, key func(c string, p corev1.Pod) string) (map[string]int, int) {
		out, total := map[string]int{}, 0
		for _, c := range clusters {
			for _, p := range summaryPods(c) {
				if keep == nil || keep(c, p) {
					out[key(c, p)]++
					total++
				}
			}
		}
		return out, total
	}
	tierOf := func(p corev1.Pod) string {
		if v, ok := p.Labels["tier"]; ok {
			return v
		}
		return "<none>"
	}
	byClusterTier := func(c string, p corev1.Pod) string { return c + "," + tierOf(p) }
	freshness := func(s *storage.Summary) map[string]api.ClusterFreshness {
		out := map[string]api.ClusterFreshness{}
		for _, f := range s.Freshness {
			out[f.Name] = f
		}
		return out
	}
	check := func(name string, ctx context.Context, opts storage.SummaryOptions, wantGroups map[string]int, wantTotal int) *storage.Summary {
		t.Helper()
		got, err := s.Summarize(ctx, opts)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if g := counts(t, got); !maps.Equal(g, wantGroups) || got.Total != wantTotal {
			t.Errorf("%s: groups %v total %d, want %v total %d", name, g, got.Total, wantGroups, wantTotal)
		}
		return got
	}
	everyone := auth.WithAccess(context.Background(), auth.Everything{})

	// The fleet, by cluster and label: c2 counts nothing and is named unsynced.
	groups, total := want([]string{"c0", "c1"}, nil, byClusterTier)
	sum := check("by cluster,label:tier", everyone, storage.SummaryOptions{Selection: storage.Selection{Resource: "pods"}, By: []string{"cluster", "label:tier"}}, groups, total)
	if !slices.Equal(sum.By, []string{"cluster", "label:tier"}) {
		t.Errorf("by %q", sum.By)
	}
	fresh := freshness(sum)
	if !fresh["c0"].Synced || !fresh["c1"].Synced {
		t.Errorf("c0 and c1 should be fresh: %+v", sum.Freshness)
	}
	if f, ok := fresh["c2"]; !ok || f.Synced {
		t.Errorf("c2, whose list never completes, should be named unsynced: %+v", sum.Freshness)
	}

	// A where, by cluster.
	groups, total = want([]string{"c0", "c1"}, func(_ string, p corev1.Pod) bool { return p.Namespace == "a" && p.Name != "parent" },
		func(c string, _ corev1.Pod) string { return c })
	check("where", everyone, storage.SummaryOptions{Selection: storage.Selection{Resource: "pods",
		Where: "object.metadata.namespace == 'a' && object.metadata.name != 'parent'"}, By: []string{"cluster"}}, groups, total)

	// A where whose value is not a bool for an object (its type is known only per object)
	// passes no object, as documented for index.Bound.Matches; one typed otherwise is a 400 (below).
	check("where of a string", everyone, storage.SummaryOptions{Selection: storage.Selection{Resource: "pods", Where: "object.metadata.name"},
		By: []string{"cluster"}}, map[string]int{}, 0)

	// Owners, resolved through the Pods the Registry caches: child is under parent; stray names
	// parent with another uid, so it is its own top, as every other Pod is.
	groups, total = want([]string{"c1"}, nil, func(c string, p corev1.Pod) string {
		if c == "c1" && p.Name == "child" {
			return "core/Pod/a/parent"
		}
		return "core/Pod/" + p.Namespace + "/" + p.Name
	})
	check("by owner in c1", everyone, storage.SummaryOptions{Selection: storage.Selection{Resource: "pods", Clusters: []string{"c1"}}, By: []string{OwnerKey}}, groups, total)
	check("owner=core/Pod/a/parent", everyone, storage.SummaryOptions{Selection: storage.Selection{Resource: "pods", Owner: "core/Pod/a/parent"},
		By: []string{"cluster", "namespace"}}, map[string]int{"c1,a": 1}, 1)

	// A caller who may read c1 alone: c1's counts, the others named as left out.
	onlyC1 := auth.WithAccess(context.Background(), onlyClusters{"c1": true})
	groups, total = want([]string{"c1"}, nil, byClusterTier)
	sum = check("c1's reader", onlyC1, storage.SummaryOptions{Selection: storage.Selection{Resource: "pods"}, By: []string{"cluster", "label:tier"}}, groups, total)
	fresh = freshness(sum)
	if !fresh["c1"].Synced || !fresh["c0"].Forbidden || !fresh["c2"].Forbidden {
		t.Errorf("c1's reader: c1 fresh, c0 and c2 left out as forbidden: %+v", sum.Freshness)
	}
	if _, err := s.Summarize(onlyC1, storage.SummaryOptions{Selection: storage.Selection{Resource: "pods", Clusters: []string{"c0"}}, By: []string{"cluster"}}); !apierrors.IsForbidden(err) {
		t.Errorf("c1's reader naming c0: %v, want 403", err)
	}

	// Bad input: a 400 that names its parameter.
	for _, bad := range []struct {
		opts storage.SummaryOptions
		name string
	}{
		{storage.SummaryOptions{Selection: storage.Selection{Resource: "pods"}}, "by"},
		{storage.SummaryOptions{Selection: storage.Selection{Resource: "pods"}, By: []string{"colour"}}, "by"},
		{storage.SummaryOptions{Selection: storage.Selection{Resource: "pods"}, By: []string{"field:{.spec"}}, "by"},
		{storage.SummaryOptions{Selection: storage.Selection{Resource: "pods", Where: "object.metadata.name =="}, By: []string{"cluster"}}, "where"},
		{storage.SummaryOptions{Selection: storage.Selection{Resource: "pods", Where: "1 + 1"}, By: []string{"cluster"}}, "where"},
		{storage.SummaryOptions{Selection: storage.Selection{Resource: "pods", Owner: "Pod/parent"}, By: []string{"cluster"}}, "owner"},
	} {
		_, err := s.Summarize(everyone, bad.opts)
		if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), bad.name) {
			t.Errorf("%+v: %v, want a 400 naming %s", bad.opts, err, bad.name)
		}
	}
	if _, err := s.Summarize(everyone, storage.SummaryOptions{Selection: storage.Selection{Resource: "secrets"}, By: []string{"cluster"}}); !apierrors.IsNotFound(err) {
		t.Errorf("an uncached resource: %v, want 404", err)
	}
}
