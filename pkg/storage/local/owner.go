package local

import (
	"net/http"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/storage"
)

// OwnerKey is the summary key that groups objects by their top-level owner, and the selection
// field (Selection.Owner) that keeps what is under one owner.
const OwnerKey = "owner"

// maxOwnerDepth bounds a walk up an owner chain: real chains are two or three long (Pod,
// ReplicaSet, Deployment); a cycle of references ends there.
const maxOwnerDepth = 8

// groupKind names a kind.
type groupKind struct{ group, kind string }

// ownerStore is where the objects of one kind live in one cluster.
type ownerStore struct {
	agg        *aggregate.Aggregate
	namespaced bool
}

// owners resolves owner chains from the caches themselves, as the status of one request saw
// the fleet: an object's owner is the object its controller reference names (or, without a
// controller, its first reference), looked up by name in the aggregate of the resource that
// serves that group and kind in the object's cluster, and kept only when its uid is the one
// the reference names. Nothing is stored per object: a chain is read when asked, so it is
// always that of the objects cached now, whichever came first and however a chain changed.
type owners struct {
	byKind map[groupKind]map[string]ownerStore // cluster → store
	self   map[string]map[string]groupKind     // resource → cluster → its group and kind
}

// owners is the resolver of the view's fleet, built once per request.
func (v *view) owners(reg *clusterset.Registry) *owners {
	if v.own != nil {
		return v.own
	}
	o := &owners{byKind: map[groupKind]map[string]ownerStore{}, self: map[string]map[string]groupKind{}}
	for _, cs := range v.statuses {
		for _, rs := range cs.Resources {
			if rs.Kind == "" {
				continue // not resolved in this cluster
			}
			agg, ok := reg.Aggregate(rs.Resource)
			if !ok {
				continue
			}
			gk := groupKind{rs.Group, rs.Kind}
			if o.byKind[gk] == nil {
				o.byKind[gk] = map[string]ownerStore{}
			}
			o.byKind[gk][cs.Name] = ownerStore{agg: agg, namespaced: rs.Namespaced}
			if o.self[rs.Resource] == nil {
				o.self[rs.Resource] = map[string]groupKind{}
			}
			o.self[rs.Resource][cs.Name] = gk
		}
	}
	v.own = o
	return o
}

// OwnerID names an object as owner= and by=owner do: group/Kind/namespace/name, with "core" for
// the core group and an empty namespace for a cluster-scoped object (core/Node//node-1).
func OwnerID(group, kind, namespace, name string) string {
	if group == "" {
		group = "core"
	}
	return group + "/" + kind + "/" + namespace + "/" + name
}

// validOwner checks an owner= value: group/Kind/namespace/name, with a kind and a name.
func validOwner(id string) error {
	parts := strings.Split(id, "/")
	if len(parts) != 4 || parts[0] == "" || parts[1] == "" || parts[3] == "" {
		return storage.Errorf(http.StatusBadRequest, "owner %q: want group/Kind/namespace/name (core for the core group, an empty namespace for a cluster-scoped owner), such as apps/Deployment/shop/web", id)
	}
	return nil
}

// chain is obj's cached owners in cluster, nearest first.
func (o *owners) chain(cluster string, obj any) []string {
	var out []string
	for range maxOwnerDepth {
		m, err := meta.Accessor(obj)
		if err != nil {
			return out
		}
		ref := ownerRef(m.GetOwnerReferences())
		if ref == nil {
			return out
		}
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil {
			return out
		}
		st, ok := o.byKind[groupKind{gv.Group, ref.Kind}][cluster]
		if !ok {
			return out // a kind not cached here: the chain stops at the highest cached
		}
		ns := ""
		if st.namespaced {
			ns = m.GetNamespace()
		}
		owner, exists, err := st.agg.Get(aggregate.Key{Cluster: cluster, Namespace: ns, Name: ref.Name})
		if err != nil || !exists {
			return out
		}
		if om, err := meta.Accessor(owner); err != nil || (ref.UID != "" && om.GetUID() != ref.UID) {
			return out // a namesake, not the owner
		}
		out = append(out, OwnerID(gv.Group, ref.Kind, ns, ref.Name))
		obj = owner
	}
	return out
}

// top is obj's top-level owner in cluster: the highest cached owner of its chain, or obj
// itself (an object of resource) when it has none.
func (o *owners) top(resource, cluster string, obj any) []string {
	if c := o.chain(cluster, obj); len(c) > 0 {
		return c[len(c)-1:]
	}
	gk, ok := o.self[resource][cluster]
	m, err := meta.Accessor(obj)
	if !ok || err != nil {
		return nil
	}
	return []string{OwnerID(gk.group, gk.kind, m.GetNamespace(), m.GetName())}
}

// ownerRef is the reference a chain follows: the controller's, else the first.
func ownerRef(refs []metav1.OwnerReference) *metav1.OwnerReference {
	for i := range refs {
		if refs[i].Controller != nil && *refs[i].Controller {
			return &refs[i]
		}
	}
	if len(refs) > 0 {
		return &refs[0]
	}
	return nil
}

// ownerTerm is the field term of owner=id: objects with id among their owners.
func ownerTerm(o *owners, id string) aggregate.FieldTerm {
	return aggregate.FieldTerm{Field: OwnerKey, Value: id, ClusterValues: o.chain}
}
