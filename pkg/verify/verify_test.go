package verify

import (
	"strings"
	"testing"

	"github.com/multicache/multicache/pkg/aggregate"
)

func key(cluster, ns, name string) aggregate.Key {
	return aggregate.Key{Cluster: cluster, Namespace: ns, Name: name}
}

func TestDiffClassifiesAndSorts(t *testing.T) {
	truth := map[aggregate.Key]string{
		key("c1", "a", "same"):    State("u1", "5"),
		key("c1", "a", "stale"):   State("u2", "9"),
		key("c2", "", "missing"):  State("u3", "1"),
		key("c1", "a", "replace"): State("u5", "2"),
	}
	cached := map[aggregate.Key]string{
		key("c1", "a", "same"):    State("u1", "5"),
		key("c1", "a", "stale"):   State("u2", "8"),
		key("c1", "b", "extra"):   State("u4", "3"),
		key("c1", "a", "replace"): State("u4", "2"), // another object under the same name
	}
	rep := Diff("widgets", cached, truth)
	if rep.Objects != 4 {
		t.Errorf("Objects = %d, want what the servers list (4)", rep.Objects)
	}
	var got []string
	for _, d := range rep.Diverged {
		got = append(got, d.String())
	}
	want := []string{
		"stale c1|a/replace: cache u4/2, server u5/2",
		"stale c1|a/stale: cache u2/8, server u2/9",
		"extra c1|b/extra",
		"missing c2|missing",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("diverged:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if s := rep.Summary(); !strings.HasPrefix(s, "widgets: 4 objects, 4 diverged: stale c1|a/replace") {
		t.Errorf("summary %q", s)
	}
	if s := Diff("pods", truth, truth).Summary(); s != "pods: 4 objects, converged" {
		t.Errorf("summary of equal sides %q", s)
	}
}
