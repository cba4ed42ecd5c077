package e2e

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/multicache/multicache/pkg/api"
)

// ownerObj is one object of an owner chain as the API servers list it.
type ownerObj struct {
	id   string // group/Kind/namespace/name
	uid  types.UID
	refs []metav1.OwnerReference
}

// ownerTruth is, per member, the Pods, ReplicaSets and Deployments its API server lists, by
// kind/namespace/name.
type ownerTruth map[string]map[string]ownerObj

// ownerTruthNow lists them.
func (e *scaleEnv) ownerTruthNow() ownerTruth {
	e.t.Helper()
	out := ownerTruth{}
	for _, c := range e.members {
		cs, err := e.f.Clientset(c)
		if err != nil {
			e.t.Fatal(err)
		}
		objs := map[string]ownerObj{}
		pods, err := cs.CoreV1().Pods(scaleNS).List(e.ctx, metav1.ListOptions{})
		if err != nil {
			e.t.Fatal(err)
		}
		for _, p := range pods.Items {
			objs["Pod/"+p.Namespace+"/"+p.Name] = ownerObj{"core/Pod/" + p.Namespace + "/" + p.Name, p.UID, p.OwnerReferences}
		}
		rss, err := cs.AppsV1().ReplicaSets(scaleNS).List(e.ctx, metav1.ListOptions{})
		if err != nil {
			e.t.Fatal(err)
		}
		for _, r := range rss.Items {
			objs["ReplicaSet/"+r.Namespace+"/"+r.Name] = ownerObj{"apps/ReplicaSet/" + r.Namespace + "/" + r.Name, r.UID, r.OwnerReferences}
		}
		ds, err := cs.AppsV1().Deployments(scaleNS).List(e.ctx, metav1.ListOptions{})
		if err != nil {
			e.t.Fatal(err)
		}
		for _, d := range ds.Items {
			objs["Deployment/"+d.Namespace+"/"+d.Name] = ownerObj{"apps/Deployment/" + d.Namespace + "/" + d.Name, d.UID, d.OwnerReferences}
		}
		out[c] = objs
	}
	return out
}

// chain follows o's owners by hand: the controller reference (else the first), to the object
// of that kind and name in the namespace, while its uid is the reference's.
func (t ownerTruth) chain(cluster string, o ownerObj) []string {
	var out []string
	for range 8 {
		var ref *metav1.OwnerReference
		for i := range o.refs {
			if o.refs[i].Controller != nil && *o.refs[i].Controller {
				ref = &o.refs[i]
			}
		}
		if ref == nil && len(o.refs) > 0 {
			ref = &o.refs[0]
		}
		if ref == nil {
			return out
		}
		ns := strings.Split(o.id, "/")[2]
		next, ok := t[cluster][ref.Kind+"/"+ns+"/"+ref.Name]
		if !ok || next.uid != ref.UID {
			return out
		}
		out = append(out, next.id)
		o = next
	}
	return out
}

// podsUnder is every Pod, as cluster|namespace/name, with owner in its chain; tops counts the
// Pods by cluster and top-level owner (the Pod itself without one).
func (t ownerTruth) podsUnder(owner string) (under []string, tops map[string]int) {
	tops = map[string]int{}
	for c, objs := range t {
		for k, o := range objs {
			if !strings.HasPrefix(k, "Pod/") {
				continue
			}
			ch := t.chain(c, o)
			top := o.id
			if len(ch) > 0 {
				top = ch[len(ch)-1]
			}
			tops[c+" "+top]++
			if slices.Contains(ch, owner) {
				parts := strings.Split(o.id, "/")
				under = append(under, c+"|"+parts[2]+"/"+parts[3])
			}
		}
	}
	sort.Strings(under)
	return under, tops
}

// ownersAgree compares, through each replica, the Pods under each owner (lists with owner=) and
// the Pods by cluster and top-level owner (a summary by cluster,owner) with what the API
// servers list, followed by hand.
func (e *scaleEnv) ownersAgree(what string, rs []replica, owners []string, within time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for {
		truth := e.ownerTruthNow()
		var problems []string
		for _, r := range rs {
			for _, owner := range owners {
				want, _ := truth.podsUnder(owner)
				var l api.List
				if err := e.get(r, api.ResourcesPath+"/pods?"+url.Values{"owner": {owner}}.Encode(), &l); err != nil {
					problems = append(problems, err.Error())
					continue
				}
				var got []string
				for _, it := range l.Items {
					var om api.ObjectMeta
					_ = json.Unmarshal(it.Object, &om)
					got = append(got, it.Cluster+"|"+om.Metadata.Namespace+"/"+om.Metadata.Name)
				}
				sort.Strings(got)
				if !slices.Equal(got, want) || l.Total != int64(len(want)) {
					problems = append(problems, fmt.Sprintf("%s: pods under %s: %v (total %d), want %v", r.id, owner, got, l.Total, want))
				}
			}
			_, wantTops := truth.podsUnder("")
			var s api.Summary
			if err := e.get(r, api.ResourcesPath+"/pods/summary?by=cluster,owner&namespace="+scaleNS, &s); err != nil {
				problems = append(problems, err.Error())
				continue
			}
			got := map[string]int{}
			for _, g := range s.Groups {
				got[show(g.Key["cluster"])+" "+show(g.Key["owner"])] = g.Count
			}
			if d := diffCounts(wantTops, got); len(d) > 0 {
				problems = append(problems, fmt.Sprintf("%s: pods by cluster,owner: %s", r.id, strings.Join(d, "; ")))
			}
		}
		if len(problems) == 0 {
			e.t.Logf("%s: owners through %d replicas agree with the API servers (%d owners asked)", what, len(rs), len(owners))
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s:\n%s", what, strings.Join(problems, "\n"))
		}
		time.Sleep(time.Second)
	}
}

// TestOwners runs two sharded replicas caching Pods, ReplicaSets and Deployments, and asks
// each for the Pods under an owner (owner=, through ReplicaSets to Deployments) and for Pods by
// top-level owner (by=owner), compared with chains followed by hand over what each member's API
// server lists: as built; after a Deployment created after its Pods adopts their ReplicaSet
// (the chain changes with no Pod event); after a ReplicaSet is replaced by a namesake (a new
// uid: its Pods' chain stops at them); and after the Pods are pointed at the new one.
func TestOwners(t *testing.T) {
	e, _ := newScaleEnv(t, 3)
	extra := []string{"--resource", "pods", "--resource", "replicasets.apps", "--resource", "deployments.apps"}
	rs := []replica{e.start("r1", extra...), e.start("r2", extra...)}
	deadline := time.Now().Add(6 * shardLease)
	for {
		holders := e.settled("every member owned and synced", rs, nil, 2*time.Minute)
		owners := map[string]bool{}
		for _, h := range holders {
			owners[h] = true
		}
		if len(owners) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("owners %v: one replica owns every member, so nothing would fan out", holders)
		}
		time.Sleep(200 * time.Millisecond)
	}
	rsUIDs := map[string]types.UID{} // member → web-1's uid
	for _, c := range e.members {
		cs, err := e.f.Clientset(c)
		if err != nil {
			t.Fatal(err)
		}
		apps := cs.AppsV1()
		labels := map[string]string{"app": "api"}
		tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx:1"}}}}
		api1, err := apps.Deployments(scaleNS).Create(e.ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "api"},
			Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		mkRS := func(name string, owner *metav1.OwnerReference) *appsv1.ReplicaSet {
			r := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: appsv1.ReplicaSetSpec{Replicas: ptr[int32](0), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl}}
			if owner != nil {
				r.OwnerReferences = []metav1.OwnerReference{*owner}
			}
			out, err := apps.ReplicaSets(scaleNS).Create(e.ctx, r, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		apiRS := mkRS("api-1", &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "api", UID: api1.UID, Controller: ptr(true)})
		webRS := mkRS("web-1", nil)
		rsUIDs[c] = webRS.UID
		pod := func(name string, refs ...metav1.OwnerReference) {
			_, err := cs.CoreV1().Pods(scaleNS).Create(e.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: refs}, Spec: tmpl.Spec}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
		}
		ctrl := func(kind, name string, uid types.UID) metav1.OwnerReference {
			return metav1.OwnerReference{APIVersion: "apps/v1", Kind: kind, Name: name, UID: uid, Controller: ptr(true)}
		}
		for i := range 3 {
			pod(fmt.Sprintf("web-%d", i), ctrl("ReplicaSet", "web-1", webRS.UID))
		}
		for i := range 2 {
			pod(fmt.Sprintf("api-%d", i), ctrl("ReplicaSet", "api-1", apiRS.UID))
		}
		pod("bare")
		pod("orphan", ctrl("ReplicaSet", "ghost", "00000000-0000-0000-0000-000000000001")) // an owner never cached
		// A non-controller reference first, the controller second: the controller is followed.
		pod("both", metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "api", UID: api1.UID}, ctrl("ReplicaSet", "web-1", webRS.UID))
	}
	asked := []string{"apps/ReplicaSet/scale/web-1", "apps/ReplicaSet/scale/api-1", "apps/Deployment/scale/api", "apps/Deployment/scale/web", "apps/ReplicaSet/scale/ghost"}
	e.ownersAgree("as built", rs, asked, time.Minute)

	// A Deployment created after the Pods adopts web-1: the Pods' top owner becomes it, though
	// no Pod changed.
	for _, c := range e.members {
		cs, _ := e.f.Clientset(c)
		d, err := cs.AppsV1().Deployments(scaleNS).Create(e.ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web"},
			Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx:1"}}}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		patch := fmt.Sprintf(`{"metadata":{"ownerReferences":[{"apiVersion":"apps/v1","kind":"Deployment","name":"web","uid":%q,"controller":true}]}}`, d.UID)
		if _, err := cs.AppsV1().ReplicaSets(scaleNS).Patch(e.ctx, "web-1", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.ownersAgree("a Deployment created after its Pods adopted their ReplicaSet", rs, asked, time.Minute)

	// web-1 replaced by a namesake in the first member: its Pods name the old uid, so their
	// chain stops at them there; pointed at the new one, it goes on.
	c := e.members[0]
	cs, _ := e.f.Clientset(c)
	if err := cs.AppsV1().ReplicaSets(scaleNS).Delete(e.ctx, "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	old, _ := cs.AppsV1().ReplicaSets(scaleNS).Get(e.ctx, "api-1", metav1.GetOptions{})
	fresh := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-1"}, Spec: *old.Spec.DeepCopy()}
	created, err := cs.AppsV1().ReplicaSets(scaleNS).Create(e.ctx, fresh, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.ownersAgree("a ReplicaSet replaced by a namesake", rs, asked, time.Minute)
	for i := range 3 {
		patch := fmt.Sprintf(`{"metadata":{"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","uid":%q,"controller":true}]}}`, created.UID)
		if _, err := cs.CoreV1().Pods(scaleNS).Patch(e.ctx, fmt.Sprintf("web-%d", i), types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.ownersAgree("Pods pointed at the new ReplicaSet", rs, asked, time.Minute)

	// A bad owner is a 400 that names it.
	for _, bad := range []string{"Deployment/web", "apps//scale/web", "apps/Deployment/scale/"} {
		err := e.get(rs[0], api.ResourcesPath+"/pods?"+url.Values{"owner": {bad}}.Encode(), &api.List{})
		if err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), "owner") {
			t.Errorf("owner=%s: %v; want a 400 naming owner", bad, err)
		}
	}
}
