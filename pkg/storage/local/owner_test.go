package local

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/storage"
	"github.com/multicache/multicache/pkg/watchcache"
)

// ownerFixture is two clusters, c0 and c1, with the same names in each and uids that differ
// per cluster: in namespace shop, Deployment web → ReplicaSet web-1, ReplicaSet old without
// an owner, ReplicaSet loop and Deployment loop that own each other, Node n1, and the Pods of
// podRefs, each with its owner references.
func ownerFixture(t *testing.T) (pods *aggregate.Aggregate, own *owners) {
	uid := func(c int, what string) types.UID { return types.UID(fmt.Sprintf("%s-c%d", what, c)) }
	ref := func(apiVersion, kind, name string, u types.UID, controller bool) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: u, Controller: ptrTo(controller)}
	}
	podRefs := func(c int) map[string][]metav1.OwnerReference {
		return map[string][]metav1.OwnerReference{
			"a":       {ref("apps/v1", "ReplicaSet", "web-1", uid(c, "rs-web-1"), true)},
			"b":       {ref("apps/v1", "ReplicaSet", "web-1", "another-uid", true)},
			"c":       {ref("batch/v1", "Job", "j", "job-j", true)},
			"d":       {ref("apps/v1", "ReplicaSet", "old", uid(c, "rs-old"), false), ref("apps/v1", "ReplicaSet", "web-1", uid(c, "rs-web-1"), true)},
			"e":       {ref("apps/v1", "ReplicaSet", "old", uid(c, "rs-old"), false)},
			"f":       {ref("apps/v1", "ReplicaSet", "loop", uid(c, "rs-loop"), true)},
			"g":       {ref("v1", "Node", "n1", uid(c, "node-n1"), true)},
			"h":       {ref("apps/v1", "ReplicaSet", "gone", "rs-gone", true)},
			"cross":   {ref("apps/v1", "ReplicaSet", "web-1", uid(0, "rs-web-1"), true)},
			"no-uid":  {ref("apps/v1", "ReplicaSet", "web-1", "", true)},
			"orphan":  nil,
			"bad-ref": {ref("a/b/c", "ReplicaSet", "web-1", "", true)},
		}
	}
	pods = fixedAggregate(t, "pods", 2, &corev1.Pod{}, func(c int) runtime.Object {
		l := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
		for _, name := range slices.Sorted(maps.Keys(podRefs(c))) {
			l.Items = append(l.Items, corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, ResourceVersion: "1", OwnerReferences: podRefs(c)[name]}})
		}
		return l
	})
	rs := fixedAggregate(t, "replicasets.apps", 2, &appsv1.ReplicaSet{}, func(c int) runtime.Object {
		return &appsv1.ReplicaSetList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: []appsv1.ReplicaSet{
			{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-1", UID: uid(c, "rs-web-1"), ResourceVersion: "1",
				OwnerReferences: []metav1.OwnerReference{ref("apps/v1", "Deployment", "web", uid(c, "d-web"), true)}}},
			{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "old", UID: uid(c, "rs-old"), ResourceVersion: "1"}},
			{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "loop", UID: uid(c, "rs-loop"), ResourceVersion: "1",
				OwnerReferences: []metav1.OwnerReference{ref("apps/v1", "Deployment", "loop", uid(c, "d-loop"), true)}}},
		}}
	})
	deploys := fixedAggregate(t, "deployments.apps", 2, &appsv1.Deployment{}, func(c int) runtime.Object {
		return &appsv1.DeploymentList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: []appsv1.Deployment{
			{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: uid(c, "d-web"), ResourceVersion: "1"}},
			{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "loop", UID: uid(c, "d-loop"), ResourceVersion: "1",
				OwnerReferences: []metav1.OwnerReference{ref("apps/v1", "ReplicaSet", "loop", uid(c, "rs-loop"), true)}}},
		}}
	})
	nodes := fixedAggregate(t, "nodes", 2, &corev1.Node{}, func(c int) runtime.Object {
		return &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: []corev1.Node{
			{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: uid(c, "node-n1"), ResourceVersion: "1"}},
		}}
	})
	own = &owners{byKind: map[groupKind]map[string]ownerStore{}, self: map[string]map[string]groupKind{"pods": {}}}
	for _, x := range []struct {
		gk         groupKind
		agg        *aggregate.Aggregate
		namespaced bool
	}{{groupKind{"", "Pod"}, pods, true}, {groupKind{"apps", "ReplicaSet"}, rs, true}, {groupKind{"apps", "Deployment"}, deploys, true}, {groupKind{"", "Node"}, nodes, false}} {
		own.byKind[x.gk] = map[string]ownerStore{}
		for _, c := range []string{"c0", "c1"} {
			own.byKind[x.gk][c] = ownerStore{agg: x.agg, namespaced: x.namespaced}
		}
	}
	own.self["pods"] = map[string]groupKind{"c0": {"", "Pod"}, "c1": {"", "Pod"}}
	return pods, own
}

// wantChains is every fixture Pod's owner chain, nearest first, in cluster c.
func wantChains(c string) map[string][]string {
	const (
		web1   = "apps/ReplicaSet/shop/web-1"
		web    = "apps/Deployment/shop/web"
		rsLoop = "apps/ReplicaSet/shop/loop"
		dLoop  = "apps/Deployment/shop/loop"
	)
	loop := []string{rsLoop}
	for len(loop) < maxOwnerDepth {
		loop = append(loop, map[string]string{rsLoop: dLoop, dLoop: rsLoop}[loop[len(loop)-1]])
	}
	chains := map[string][]string{
		"a":       {web1, web},                  // the controller, then its controller
		"b":       nil,                          // a namesake: another uid
		"c":       nil,                          // Jobs are not cached
		"d":       {web1, web},                  // the controller reference, not the first
		"e":       {"apps/ReplicaSet/shop/old"}, // no controller: the first reference
		"f":       loop,                         // a cycle ends at the depth bound
		"g":       {"core/Node//n1"},            // a cluster-scoped owner
		"h":       nil,                          // not in the cache
		"cross":   nil,                          // names c0's uid: c0's only
		"no-uid":  {web1, web},                  // a reference without a uid trusts the name
		"orphan":  nil,
		"bad-ref": nil, // an apiVersion that does not parse
	}
	if c == "c0" {
		chains["cross"] = []string{web1, web}
	}
	return chains
}

// TestOwnerChains: an object's owners are read from the caches of its own cluster, following
// the controller reference (else the first), checking uids, stopping at what is not cached and
// at maxOwnerDepth; top is the last of the chain, or the object itself. owner= (ownerTerm)
// selects exactly the objects with that owner in their chain, and a summary by owner counts
// each object under its top-level owner.
func TestOwnerChains(t *testing.T) {
	pods, own := ownerFixture(t)
	tops := map[string]int{}
	under := map[string][]aggregate.Key{}
	for _, c := range []string{"c0", "c1"} {
		for name, want := range wantChains(c) {
			key := aggregate.Key{Cluster: c, Namespace: "shop", Name: name}
			obj, ok, err := pods.Get(key)
			if err != nil || !ok {
				t.Fatalf("%v: %v %v", key, ok, err)
			}
			if got := own.chain(c, obj); !slices.Equal(got, want) {
				t.Errorf("%s/%s: chain %q, want %q", c, name, got, want)
			}
			top := OwnerID("", "Pod", "shop", name)
			if len(want) > 0 {
				top = want[len(want)-1]
			}
			if got := own.top("pods", c, obj); !slices.Equal(got, []string{top}) {
				t.Errorf("%s/%s: top %q, want %q", c, name, got, top)
			}
			tops[top]++
			for _, o := range slices.Compact(slices.Sorted(slices.Values(want))) {
				under[o] = append(under[o], key)
			}
		}
	}
	for id, want := range under {
		r, err := pods.Select(aggregate.Query{Fields: []aggregate.FieldTerm{ownerTerm(own, id)}})
		if err != nil {
			t.Fatal(err)
		}
		var got []aggregate.Key
		for _, it := range r.Items {
			got = append(got, it.Key())
		}
		slices.SortFunc(got, watchcache.CompareKeys)
		slices.SortFunc(want, watchcache.CompareKeys)
		if !slices.Equal(got, want) {
			t.Errorf("owner=%s: %v, want %v", id, got, want)
		}
	}
	sum, err := pods.SummarizeKeys(aggregate.Query{}, []aggregate.GroupKey{aggregate.FuncKey(OwnerKey, func(cluster string, obj any) []string { return own.top("pods", cluster, obj) })})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, g := range sum.Groups {
		if len(g.Key) != 1 || g.Key[0] == nil {
			t.Fatalf("group without an owner: %+v", g)
		}
		got[*g.Key[0]] += g.Count
	}
	if !maps.Equal(got, tops) {
		t.Errorf("summary by owner: %v, want %v", got, tops)
	}
}

// TestValidOwner: owner= takes group/Kind/namespace/name; anything else is a 400 that names
// owner and the form.
func TestValidOwner(t *testing.T) {
	for _, ok := range []string{"apps/Deployment/shop/web", "core/Node//n1", OwnerID("", "Pod", "a", "b")} {
		if err := validOwner(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "web", "apps/Deployment/web", "/Deployment/shop/web", "apps//shop/web", "apps/Deployment/shop/", "apps/Deployment/shop/web/x"} {
		err := validOwner(bad)
		if err == nil || storage.Code(err) != http.StatusBadRequest || !strings.Contains(err.Error(), "owner") || !strings.Contains(err.Error(), "group/Kind/namespace/name") {
			t.Errorf("%q: %v; want a 400 naming owner and its form", bad, err)
		}
	}
}
