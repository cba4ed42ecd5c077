package aggregate

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
)

// Item is one object with the cluster it came from.
type Item struct {
	Cluster string
	Object  any
}

// Key returns the item's Key.
func (it Item) Key() Key {
	k, _ := KeyOf(it.Cluster, it.Object)
	return k
}

// Query selects objects. Every set field narrows the answer. Select answers it from the
// members' indexes; Matches judges one object. Both mean the same.
type Query struct {
	// Clusters limits the answer to these members. Empty: every member.
	Clusters []string
	// Namespace limits the answer to one namespace.
	Namespace string
	// Index and Value select through an index (built-in or added): the object's index values
	// contain Value.
	Index, Value string
	// Labels filters on labels.
	Labels labels.Selector
	// Fields are field-selector terms, each checked object by object.
	Fields []FieldTerm
}

// FieldTerm is one term of a field selector: the values Values reads of the object contain
// Value, or, with Not, do not. A nil Values reads the Aggregate's index named Field, which gives
// no values where the index does not apply (IndexSpec.Clusters) or does not exist.
type FieldTerm struct {
	Field, Value string
	Not          bool
	Values       func(obj any) []string
	// ClusterValues, when set, reads the values instead of Values, for a field that needs the
	// object's cluster too (its owners, which live in the same cluster).
	ClusterValues func(cluster string, obj any) []string
	// Where, when set, is the CEL expression (index.CompileFilter) whose Values the term reads,
	// with Value "true": a summary by cluster filtered by it alone may then learn a count
	// index of it (learned.go). Leave it empty when Values reads anything but the object.
	Where string
}

// Attributes is what Matches reads of an object, kept apart from the object: namespace,
// labels, its values for every index that applies in its cluster, and for every field a
// FieldTerm may read through its own Values. A relay of changes (the server's watch) keeps a
// replaced state's Attributes, to tell whether it matched, instead of the object. Matches
// accepts *Attributes wherever it accepts an object.
type Attributes struct {
	Namespace string
	Labels    map[string]string
	Indexes   map[string][]string // by index name
	Fields    map[string][]string // by FieldTerm.Field, for terms with their own Values
}

// Result is an answer with its freshness: Unsynced lists the clusters it spans whose member was
// not fresh (see Unsynced), so the answer may be partial or stale for them.
type Result struct {
	Items    []Item
	Unsynced []string
}

// Select answers q from the members' indexes. Items come in cluster order, then in store order.
func (a *Aggregate) Select(q Query) (Result, error) {
	var res Result
	p, err := a.planSelect(q)
	if err != nil {
		return res, err
	}
	for _, m := range p.members {
		if !m.fresh() {
			res.Unsynced = append(res.Unsynced, m.cluster)
		}
		objs, err := a.selectMember(m, p.q, p.spec)
		if err != nil {
			return res, fmt.Errorf("cluster %q: %w", m.cluster, err)
		}
		if res.Items == nil {
			res.Items = make([]Item, 0, len(objs))
		}
		for _, o := range objs {
			if !p.check || a.matchObject(p.rest, m.cluster, o) {
				res.Items = append(res.Items, Item{Cluster: m.cluster, Object: o})
			}
		}
	}
	return res, nil
}

// selectPlan is a Query made ready to answer member by member.
type selectPlan struct {
	members []*member // those q spans, in cluster order
	q       Query
	spec    IndexSpec
	// rest is what the index lookup does not already guarantee, checked object by object
	// when check is set.
	rest  Query
	check bool
}

// plain reports whether the plan reads every object of its members: no index, namespace,
// label or field narrows it.
func (p selectPlan) plain() bool {
	return p.q.Index == "" && p.q.Namespace == "" && !p.check
}

func (a *Aggregate) planSelect(q Query) (selectPlan, error) {
	ms := a.snapshot()
	if len(q.Clusters) > 0 {
		// Each named cluster is found in the sorted members: a query may name one of a
		// thousand members, or all of them, and neither reads every member per name.
		keep := make([]*member, 0, min(len(q.Clusters), len(ms)))
		for _, c := range q.Clusters {
			if i, ok := slices.BinarySearchFunc(ms, c, func(m *member, c string) int { return strings.Compare(m.cluster, c) }); ok {
				keep = append(keep, ms[i])
			}
		}
		if !slices.IsSortedFunc(keep, memberOrder) {
			slices.SortFunc(keep, memberOrder)
		}
		ms = slices.Compact(keep) // a cluster named twice is read once
	}
	spec, err := a.indexSpec(q.Index)
	if err == nil {
		err = checkIndexValue(q.Index, q.Value)
	}
	if err != nil {
		return selectPlan{}, err
	}
	rest := q
	rest.Clusters = nil
	switch q.Index {
	case "":
		rest.Namespace = "" // the namespace index answered it
	case IndexCluster, IndexClusterNamespace, IndexNamespace:
		rest.Index, rest.Value, rest.Namespace = "", "", "" // the lookup answered them
	default:
		rest.Index, rest.Value = "", ""
	}
	check := rest.Namespace != "" || (rest.Labels != nil && !rest.Labels.Empty()) || len(rest.Fields) > 0
	return selectPlan{members: ms, q: q, spec: spec, rest: rest, check: check}, nil
}

// memberOrder orders members by cluster name, as snapshot does.
func memberOrder(a, b *member) int { return strings.Compare(a.cluster, b.cluster) }

// selectIn calls f with each object of member m that the plan selects, in store order, until
// f returns false.
func (a *Aggregate) selectIn(p selectPlan, m *member, f func(obj any) bool) error {
	objs, err := a.selectMember(m, p.q, p.spec)
	if err != nil {
		return fmt.Errorf("cluster %q: %w", m.cluster, err)
	}
	for _, o := range objs {
		if (!p.check || a.matchObject(p.rest, m.cluster, o)) && !f(o) {
			return nil
		}
	}
	return nil
}

// checkIndexValue rejects a value the built-in cluster-namespace index can never hold.
func checkIndexValue(index, value string) error {
	if index == IndexClusterNamespace && !strings.Contains(value, "/") {
		return fmt.Errorf("index %q: value %q is not cluster/namespace", index, value)
	}
	return nil
}

// indexSpec returns the spec of a custom index, and an error if name is neither built in nor
// added.
func (a *Aggregate) indexSpec(name string) (IndexSpec, error) {
	switch name {
	case "", IndexCluster, IndexClusterNamespace, IndexNamespace:
		return IndexSpec{}, nil
	}
	a.mu.RLock()
	spec, ok := a.indexes[name]
	a.mu.RUnlock()
	if !ok {
		return spec, fmt.Errorf("index %q does not exist", name)
	}
	return spec, nil
}

func (a *Aggregate) selectMember(m *member, q Query, spec IndexSpec) ([]any, error) {
	store := m.current()
	switch q.Index {
	case "":
		if q.Namespace != "" {
			return store.ByIndex(IndexNamespace, q.Namespace)
		}
		return store.List(), nil
	case IndexCluster:
		if q.Value != m.cluster {
			return nil, nil
		}
		if q.Namespace != "" {
			return store.ByIndex(IndexNamespace, q.Namespace)
		}
		return store.List(), nil
	case IndexClusterNamespace:
		cluster, ns, _ := strings.Cut(q.Value, "/")
		if cluster != m.cluster || (q.Namespace != "" && q.Namespace != ns) {
			return nil, nil
		}
		return store.ByIndex(IndexNamespace, ns)
	case IndexNamespace:
		if q.Namespace != "" && q.Namespace != q.Value {
			return nil, nil
		}
		return store.ByIndex(IndexNamespace, q.Value)
	}
	if !spec.appliesTo(m.cluster) {
		return nil, nil
	}
	return store.ByIndex(q.Index, q.Value)
}

// Matches reports whether obj (or an *Attributes), in cluster, passes q: the same judgement
// Select makes, for one object.
func (a *Aggregate) Matches(q Query, cluster string, obj any) bool {
	if len(q.Clusters) > 0 && !slices.Contains(q.Clusters, cluster) {
		return false
	}
	if q.Index != "" {
		if spec, err := a.indexSpec(q.Index); err != nil || checkIndexValue(q.Index, q.Value) != nil || (spec.Func != nil && !spec.appliesTo(cluster)) {
			return false
		}
	}
	return a.matchObject(q, cluster, obj)
}

// matchObject is Matches without the clusters and the index's cluster scope.
func (a *Aggregate) matchObject(q Query, cluster string, obj any) bool {
	at, isAttrs := obj.(*Attributes)
	var namespace string
	var lbls map[string]string
	if isAttrs {
		namespace, lbls = at.Namespace, at.Labels
	} else {
		m, err := meta.Accessor(obj)
		if err != nil {
			return false
		}
		// Read only when judged: in a scan of millions of objects, reading a field is the
		// first touch of the object's memory, which a where over spec alone need not pay.
		if q.Namespace != "" || q.Index == IndexClusterNamespace || q.Index == IndexNamespace {
			namespace = m.GetNamespace()
		}
		if q.Labels != nil && !q.Labels.Empty() {
			lbls = m.GetLabels()
		}
	}
	if q.Namespace != "" && namespace != q.Namespace {
		return false
	}
	if q.Labels != nil && !q.Labels.Empty() && !q.Labels.Matches(labels.Set(lbls)) {
		return false
	}
	switch q.Index {
	case "":
	case IndexCluster:
		if cluster != q.Value {
			return false
		}
	case IndexClusterNamespace:
		if cluster+"/"+namespace != q.Value {
			return false
		}
	case IndexNamespace:
		if namespace != q.Value {
			return false
		}
	default:
		var vals []string
		if isAttrs {
			vals = at.Indexes[q.Index]
		} else {
			vals = a.indexValues(q.Index, cluster, obj)
		}
		if !slices.Contains(vals, q.Value) {
			return false
		}
	}
	for _, ft := range q.Fields {
		var vals []string
		switch {
		case isAttrs && (ft.Values != nil || ft.ClusterValues != nil):
			vals = at.Fields[ft.Field]
		case isAttrs:
			vals = at.Indexes[ft.Field]
		case ft.ClusterValues != nil:
			vals = ft.ClusterValues(cluster, obj)
		case ft.Values != nil:
			vals = ft.Values(obj)
		default:
			vals = a.indexValues(ft.Field, cluster, obj)
		}
		if slices.Contains(vals, ft.Value) == ft.Not {
			return false
		}
	}
	return true
}

// indexValues is obj's values for the custom index name in cluster: none when the index does
// not exist or does not apply there.
func (a *Aggregate) indexValues(name, cluster string, obj any) []string {
	spec, err := a.indexSpec(name)
	if err != nil || spec.Func == nil || !spec.appliesTo(cluster) {
		return nil
	}
	vals, _ := spec.Func(obj)
	return vals
}

// AttributesOf returns what Matches reads of obj in cluster: its namespace, labels, its values
// for every index that applies in cluster, and for each field of fields (FieldTerm readers, by
// name) what the reader gives.
func (a *Aggregate) AttributesOf(cluster string, obj any, fields map[string]func(any) []string) *Attributes {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	at := &Attributes{Indexes: map[string][]string{}, Fields: make(map[string][]string, len(fields))}
	if m, err := meta.Accessor(obj); err == nil {
		at.Namespace, at.Labels = m.GetNamespace(), m.GetLabels()
	}
	for name, read := range fields {
		at.Fields[name] = read(obj)
	}
	a.mu.RLock()
	specs := make([]IndexSpec, 0, len(a.indexes))
	for _, spec := range a.indexes {
		if spec.appliesTo(cluster) {
			specs = append(specs, spec)
		}
	}
	a.mu.RUnlock()
	for _, spec := range specs {
		at.Indexes[spec.Name], _ = spec.Func(obj)
	}
	return at
}
