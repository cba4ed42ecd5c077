package aggregate

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"

	"github.com/multicache/multicache/pkg/index"
)

// GroupKey is one key a summary groups objects by, parsed from its text (ParseGroupKey):
//
//	cluster          the object's cluster
//	namespace        its namespace (null for a cluster-scoped object)
//	label:<key>      the value of one label (null without it)
//	field:<path>     the values a JSONPath gives, such as spec.nodeName or
//	                 spec.containers[*].image (null for none)
//	index:<name>     the object's values for an index of the Aggregate (null for none)
//
// A key with several values for one object counts the object once in each distinct value's
// group.
type GroupKey struct {
	text string
	kind groupKind
	arg  string
	// field reads a field: key's values of an object (compiled once).
	field cache.IndexFunc
	// view, when set, is what the key reads of an object instead of the object.
	view func(any) any
	// values reads a FuncKey's values.
	values func(cluster string, obj any) []string
}

// FuncKey is a key named text whose values values gives for an object of a cluster: a
// grouping the caller defines, such as the object's top-level owner, which another resource's
// objects decide.
func FuncKey(text string, values func(cluster string, obj any) []string) GroupKey {
	return GroupKey{text: text, kind: byFunc, values: values}
}

// WithView returns k reading view(obj) of each object instead of obj: what a caller may read of
// it (a Secret without its data). Cluster, namespace and label keys read what every view
// keeps.
func (k GroupKey) WithView(view func(any) any) GroupKey {
	k.view = view
	return k
}

type groupKind int

const (
	byCluster groupKind = iota
	byNamespace
	byLabel
	byField
	byIndex
	byFunc
)

// String is the key as written.
func (k GroupKey) String() string { return k.text }

// SplitGroupKeys splits keys written one after another with commas ("cluster,field:a.b") at the
// commas that separate keys: not those inside brackets, braces or parentheses, or quotes, which
// belong to a key's path (field:{.spec.containers[0,1].image}). Empty keys are dropped.
func SplitGroupKeys(s string) []string {
	var out []string
	depth, start := 0, 0
	var quote byte
	add := func(k string) {
		if k = strings.TrimSpace(k); k != "" {
			out = append(out, k)
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0 && c == '\\':
			i++ // an escaped character, the quote included
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '[' || c == '{' || c == '(':
			depth++
		case (c == ']' || c == '}' || c == ')') && depth > 0:
			depth--
		case c == ',' && depth == 0:
			add(s[start:i])
			start = i + 1
		}
	}
	add(s[start:])
	return out
}

// ParseGroupKey reads one key; its error names the key and what is wrong with it.
func ParseGroupKey(text string) (GroupKey, error) {
	k := GroupKey{text: text}
	kind, arg, hasArg := strings.Cut(text, ":")
	switch {
	case text == "cluster":
		k.kind = byCluster
	case text == "namespace":
		k.kind = byNamespace
	case kind == "label" && hasArg:
		if arg == "" {
			return k, fmt.Errorf("key %q: want label:<key>, with a key", text)
		}
		k.kind, k.arg = byLabel, arg
	case kind == "field" && hasArg:
		path := strings.TrimSpace(arg)
		if path == "" {
			return k, fmt.Errorf("key %q: want field:<path>, with a path", text)
		}
		if !strings.HasPrefix(path, "{") && !strings.HasPrefix(path, ".") && !strings.HasPrefix(path, "$") {
			path = "." + path // spec.nodeName, as kubectl's custom columns take it
		}
		f, err := index.Compile(index.Spec{Name: "summary-field", JSONPath: path})
		if err != nil {
			return k, fmt.Errorf("key %q: %w", text, err)
		}
		k.kind, k.arg, k.field = byField, arg, f
	case kind == "index" && hasArg:
		switch arg {
		case "":
			return k, fmt.Errorf("key %q: want index:<name>, with a name", text)
		case IndexCluster:
			k.kind = byCluster
		case IndexNamespace:
			k.kind = byNamespace
		case IndexClusterNamespace:
			return k, fmt.Errorf("key %q: use the keys cluster,namespace", text)
		default:
			k.kind, k.arg = byIndex, arg
		}
	default:
		return k, fmt.Errorf("key %q: want cluster, namespace, label:<key>, field:<path> or index:<name>", text)
	}
	return k, nil
}

// MaxGroupKeys is how many keys a summary may group by: each object counts once per
// combination of its keys' values.
const MaxGroupKeys = 8

// MaxCombinations bounds the groups one object counts in: the product of its keys' numbers of
// distinct values (images × ports, say). A summary in which an object has more is refused,
// naming the object, rather than spending memory and time per object without bound.
const MaxCombinations = 1024

// Group is one group of a Summary: the values of its keys, in the order of Summary.By (nil
// where the objects have none), and how many objects it holds.
type Group struct {
	Key   []*string `json:"key"`
	Count int       `json:"count"`
}

// Summary counts the objects a Query selects, grouped by the values of its keys.
type Summary struct {
	By     []string `json:"by"`
	Groups []Group  `json:"groups"`
	// Total counts each object once, whatever its groups.
	Total int `json:"total"`
	// Unsynced are the clusters it spans whose member was not fresh (as Result.Unsynced).
	Unsynced []string `json:"unsynced,omitempty"`
}

// Summarize counts the objects q selects (what Select would answer) by the values of by
// (ParseGroupKey's texts), in groups sorted by count, most first, then by key. Members are
// counted in parallel. With no filter but q.Clusters and keys among cluster and namespace, the
// counts come from the members' namespace index without a look at any object.
func (a *Aggregate) Summarize(q Query, by ...string) (Summary, error) {
	keys := make([]GroupKey, 0, len(by))
	for _, text := range by {
		k, err := ParseGroupKey(text)
		if err != nil {
			return Summary{}, err
		}
		keys = append(keys, k)
	}
	s, err := a.SummarizeKeys(q, keys)
	if err != nil {
		return s, err
	}
	s.Sort(false)
	return s, nil
}

// SummarizeKeys is Summarize with parsed keys, its groups in no order.
func (a *Aggregate) SummarizeKeys(q Query, keys []GroupKey) (Summary, error) {
	return a.SummarizeKeysContext(context.Background(), q, keys)
}

// SummarizeKeysContext is SummarizeKeys that stops once ctx ends (a request's timeout), with
// ctx's error: a scan of millions of objects does not outlive its request.
func (a *Aggregate) SummarizeKeysContext(ctx context.Context, q Query, keys []GroupKey) (Summary, error) {
	if len(keys) == 0 {
		return Summary{}, fmt.Errorf("by: at least one key is required")
	}
	if len(keys) > MaxGroupKeys {
		return Summary{}, fmt.Errorf("by: %d keys, at most %d", len(keys), MaxGroupKeys)
	}
	sum := Summary{By: make([]string, len(keys)), Groups: []Group{}}
	for i, k := range keys {
		sum.By[i] = k.text
		if k.kind == byIndex {
			if _, err := a.indexSpec(k.arg); err != nil {
				return sum, fmt.Errorf("key %q: %w", k.text, err)
			}
		}
	}
	p, err := a.planSelect(q)
	if err != nil {
		return sum, err
	}
	for _, m := range p.members {
		if !m.fresh() {
			sum.Unsynced = append(sum.Unsynced, m.cluster)
		}
	}
	if k, ok := learnable(keys); ok && p.plain() {
		if idx := a.askLearned(k, p.members); idx != nil {
			idx.summary(keys, p.members, &sum)
			return sum, nil
		}
	} else if k, ok := learnableWhere(p, keys); ok {
		if idx := a.askLearned(k, p.members); idx != nil {
			idx.passing(p.members, &sum)
			return sum, nil
		}
	}
	fromIndex, onlyCluster := p.plain(), p.plain()
	for _, k := range keys {
		fromIndex = fromIndex && (k.kind == byCluster || k.kind == byNamespace)
		onlyCluster = onlyCluster && k.kind == byCluster
	}
	// Each worker counts whole members into its own counter; the counters are merged after.
	workers := min(len(p.members), runtime.GOMAXPROCS(0))
	counters := make([]*counter, workers)
	errs := make([]error, workers)
	var next sync.Mutex
	i := 0
	var wg sync.WaitGroup
	for w := range workers {
		counters[w] = newCounter(keys)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				next.Lock()
				if i == len(p.members) || ctx.Err() != nil {
					next.Unlock()
					return
				}
				m := p.members[i]
				i++
				next.Unlock()
				var err error
				switch {
				case onlyCluster:
					counters[w].fromLen(a, m)
				case fromIndex:
					if err = counters[w].fromIndex(m); err != nil {
						err = fmt.Errorf("cluster %q: %w", m.cluster, err)
					}
				default:
					n := 0
					err = a.selectIn(p, m, func(obj any) bool {
						counters[w].add(a, m.cluster, obj)
						n++
						return n%4096 != 0 || ctx.Err() == nil
					})
				}
				if err != nil {
					errs[w] = err // (selectIn's errors name the cluster)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return sum, err
	}
	for _, err := range errs {
		if err != nil {
			return sum, err
		}
	}
	total := newCounter(keys)
	for _, c := range counters {
		if c.err != nil {
			return sum, c.err
		}
		total.merge(c)
	}
	sum.Total = total.objects
	for _, g := range total.groups {
		sum.Groups = append(sum.Groups, Group{Key: g.key, Count: g.n})
	}
	return sum, nil
}

// Merge adds o's counts to s: summaries of disjoint sets of clusters (a fleet's parts) with
// the same keys.
func (s *Summary) Merge(o Summary) {
	at := make(map[string]int, len(s.Groups))
	var buf []byte
	for i, g := range s.Groups {
		buf = encodeKey(buf[:0], g.Key)
		at[string(buf)] = i
	}
	for _, g := range o.Groups {
		buf = encodeKey(buf[:0], g.Key)
		if i, ok := at[string(buf)]; ok {
			s.Groups[i].Count += g.Count
			continue
		}
		at[string(buf)] = len(s.Groups)
		s.Groups = append(s.Groups, g)
	}
	s.Total += o.Total
	s.Unsynced = append(s.Unsynced, o.Unsynced...)
	sort.Strings(s.Unsynced)
}

// Sort orders the groups: by count, most first, then by key; or, byKey, by key alone. Keys
// compare value by value, a null after every value.
func (s *Summary) Sort(byKey bool) {
	sort.SliceStable(s.Groups, func(i, j int) bool {
		gi, gj := s.Groups[i], s.Groups[j]
		if !byKey && gi.Count != gj.Count {
			return gi.Count > gj.Count
		}
		return compareKeys(gi.Key, gj.Key) < 0
	})
}

// Limit keeps the first n groups (n > 0).
func (s *Summary) Limit(n int) {
	if n > 0 && len(s.Groups) > n {
		s.Groups = s.Groups[:n]
	}
}

func compareKeys(a, b []*string) int {
	for i := range min(len(a), len(b)) {
		switch {
		case a[i] == nil && b[i] == nil:
		case a[i] == nil:
			return 1
		case b[i] == nil:
			return -1
		default:
			if c := strings.Compare(*a[i], *b[i]); c != 0 {
				return c
			}
		}
	}
	return len(a) - len(b)
}

// encodeKey appends a map key for values: each value marked as null or not, separated by a
// byte no label value or JSON text holds.
func encodeKey(buf []byte, values []*string) []byte {
	for i, v := range values {
		if i > 0 {
			buf = append(buf, 0)
		}
		if v == nil {
			buf = append(buf, 1)
			continue
		}
		buf = append(buf, 2)
		buf = append(buf, *v...)
	}
	return buf
}

// counter counts objects into groups. Its map is looked up with a reused buffer, so an object
// whose groups exist allocates nothing for the lookup.
type counter struct {
	err     error // the first object refused (MaxCombinations)
	keys    []GroupKey
	groups  map[string]*groupCount
	objects int
	buf     []byte
	values  [][]*string // per key, the object's distinct values (reused)
	combo   []*string
}

type groupCount struct {
	key []*string
	n   int
}

func newCounter(keys []GroupKey) *counter {
	return &counter{keys: keys, groups: map[string]*groupCount{}, values: make([][]*string, len(keys)), combo: make([]*string, len(keys))}
}

// add counts obj of cluster once in each combination of its keys' distinct values; an object
// with more than MaxCombinations of them is not counted, and makes err the summary's refusal.
func (c *counter) add(a *Aggregate, cluster string, obj any) {
	c.objects++
	combos := 1
	for i, k := range c.keys {
		vs := k.appendValues(a, cluster, obj, c.values[i][:0])
		if len(vs) == 0 {
			vs = append(vs, nil)
		}
		c.values[i] = vs
		combos *= len(vs)
		if combos > MaxCombinations {
			if c.err == nil {
				key, _ := KeyOf(cluster, obj)
				c.err = fmt.Errorf("by: %s has more than %d combinations of values of the keys %s; group by fewer keys, or by keys with fewer values", key, MaxCombinations, keyTexts(c.keys))
			}
			return
		}
	}
	c.count(0, 1)
}

func keyTexts(keys []GroupKey) string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.text
	}
	return strings.Join(out, ",")
}

// appendValues appends obj's distinct values for k in cluster to vs (none: the object groups
// under null).
func (k GroupKey) appendValues(a *Aggregate, cluster string, obj any, vs []*string) []*string {
	switch k.kind {
	case byCluster:
		return append(vs, &cluster)
	case byNamespace, byLabel:
		m, err := meta.Accessor(obj)
		if err != nil {
			return vs
		}
		if k.kind == byNamespace {
			if ns := m.GetNamespace(); ns != "" {
				vs = append(vs, &ns)
			}
		} else if v, ok := m.GetLabels()[k.arg]; ok {
			vs = append(vs, &v)
		}
		return vs
	case byField:
		o := obj
		if k.view != nil {
			o = k.view(obj)
		}
		fv, _ := k.field(o)
		return appendDistinct(vs, fv)
	case byIndex:
		return appendDistinct(vs, a.indexValues(k.arg, cluster, obj))
	case byFunc:
		return appendDistinct(vs, k.values(cluster, obj))
	}
	return vs
}

// count adds n to every combination of c.values from key i on.
func (c *counter) count(i, n int) {
	if i == len(c.keys) {
		c.bump(c.combo, n)
		return
	}
	for _, v := range c.values[i] {
		c.combo[i] = v
		c.count(i+1, n)
	}
}

func (c *counter) bump(key []*string, n int) {
	c.buf = encodeKey(c.buf[:0], key)
	if g := c.groups[string(c.buf)]; g != nil {
		g.n += n
		return
	}
	own := make([]*string, len(key))
	for i, v := range key {
		if v != nil {
			s := strings.Clone(*v)
			own[i] = &s
		}
	}
	c.groups[string(c.buf)] = &groupCount{key: own, n: n}
}

// fromLen counts member m's objects as one group per cluster key: Len, in O(1) once the
// member's handlers have had its initial list.
func (c *counter) fromLen(a *Aggregate, m *member) {
	n, ok := a.Len(m.cluster)
	if !ok || n == 0 {
		return
	}
	c.objects += n
	for i := range c.keys {
		c.combo[i] = &m.cluster
	}
	c.bump(c.combo, n)
}

// fromIndex counts member m's objects from its namespace index: keys among cluster and
// namespace only, and no filter.
func (c *counter) fromIndex(m *member) error {
	store := m.current()
	for _, ns := range store.ListIndexFuncValues(IndexNamespace) {
		keys, err := store.IndexKeys(IndexNamespace, ns)
		if err != nil {
			return err
		}
		if len(keys) == 0 {
			continue
		}
		c.objects += len(keys)
		var nsv *string
		if ns != "" {
			nsv = &ns
		}
		for i, k := range c.keys {
			if k.kind == byCluster {
				c.combo[i] = &m.cluster
			} else {
				c.combo[i] = nsv
			}
		}
		c.bump(c.combo, len(keys))
	}
	return nil
}

func (c *counter) merge(o *counter) {
	c.objects += o.objects
	for k, g := range o.groups {
		if mine := c.groups[k]; mine != nil {
			mine.n += g.n
			continue
		}
		c.groups[k] = g
	}
}

func appendDistinct(dst []*string, vals []string) []*string {
	for i := range vals {
		if !slices.ContainsFunc(dst, func(v *string) bool { return v != nil && *v == vals[i] }) {
			dst = append(dst, &vals[i])
		}
	}
	return dst
}
