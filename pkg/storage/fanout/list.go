package fanout

import (
	"container/heap"
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/multicache/multicache/pkg/storage"
	"github.com/multicache/multicache/pkg/watchcache"
)

// less orders keys as every answer does: cluster, namespace, name.
func less(a, b storage.Item) bool { return watchcache.CompareKeys(a.Key, b.Key) < 0 }

// List merges the owners' pages in key order, a page at a time: the continue token carries
// the last key and every owner's position. A list without a limit streams a merge of the
// owners' answers as they come (List.More), never holding them whole. Every item shows the
// list's position as its resourceVersion, a position of the fleet that a watch resumes from.
func (r *Reader) List(ctx context.Context, opts storage.ListOptions) (*storage.List, error) {
	pl, err := r.planOf(opts.Selection)
	if err != nil {
		return nil, err
	}
	if rd, sel := r.direct(pl, opts.Selection); rd != nil {
		o := opts
		o.Selection = sel
		return rd.List(ctx, o)
	}
	if len(pl.down) > 0 {
		return nil, refuseDown(pl)
	}
	pl = pl.withSelf(r.opts.Fleet.Identity())
	if opts.Limit < 0 {
		return nil, storage.Errorf(http.StatusBadRequest, "limit %d: want a non-negative integer", opts.Limit)
	}
	limit := opts.Limit
	exact := opts.ResourceVersionMatch == metav1.ResourceVersionMatchExact
	var from watchcache.Position
	var cont *watchcache.Continue
	if opts.Continue != "" {
		fc, err := watchcache.ParseContinue(opts.Continue)
		if err != nil {
			return nil, storage.Error(http.StatusBadRequest, err.Error())
		}
		cont, from, exact = &fc, fc.Position, fc.Exact
		// A page of an exact list reads every part at its position; any other page of any
		// list continues after its key, each part at its position or from now (partContinue).
		if err := resumable(from, pl); exact && err != nil {
			return nil, storage.Error(http.StatusGone, "continue expired: "+err.Error()+"; list again")
		}
	} else if rv := opts.ResourceVersion; rv != "" && rv != "0" {
		t, ok := parseMerged(rv)
		if exact && (!ok || resumable(t, pl) != nil) {
			return nil, storage.Error(http.StatusGone, "resourceVersion expired: the clusters moved between replicas since; list again")
		}
		from = t
	}
	if cont != nil && (cont.SortBy != opts.SortBy || cont.Desc != opts.Desc) {
		return nil, storage.Error(http.StatusBadRequest, "continue: the token continues a list of another order; ask with the same sortBy and order")
	}
	// read reads part p's page: the selection narrowed to the clusters ask(p) gives, at most n
	// items (n 0: the request's own limit), after c's key at p's position in c, or, without c,
	// from the request's resourceVersion; or, when ask says countOnly, its count alone.
	read := func(c *watchcache.Continue, n int64, ask func(part) (clusters []string, countOnly bool)) func(context.Context, ReadStatus, part) (*storage.List, error) {
		return func(ctx context.Context, rd ReadStatus, p part) (*storage.List, error) {
			o := opts
			clusters, countOnly := ask(p)
			o.Selection = partSelection(opts.Selection, part{clusters: clusters})
			o.CountOnly = countOnly
			o.Continue, o.ResourceVersion, o.ResourceVersionMatch = "", "", ""
			if n > 0 {
				o.Limit = n
			}
			rv, ok := partPosition(from, p)
			switch {
			case c != nil:
				o.Continue = partContinue(*c, p)
			case ok && rv != "":
				o.ResourceVersion, o.ResourceVersionMatch = rv, opts.ResourceVersionMatch
			}
			l, err := rd.List(ctx, o)
			if err != nil {
				return nil, err
			}
			if limit > 0 {
				if err := storage.Drain(l); err != nil { // a page: at most limit items
					return nil, err
				}
				// A page continues after the last key merged: an item of a cluster the part
				// was not asked for would move it past clusters not read yet.
				asked := sets.New(clusters...)
				for _, it := range l.Items {
					if !asked.Has(it.Key.Cluster) {
						return nil, storage.Retry(http.StatusServiceUnavailable, fmt.Sprintf("replica %q answered for cluster %q, which it was not asked for", p.peer, it.Key.Cluster))
					}
				}
			}
			return l, nil
		}
	}
	var answers []answer[*storage.List]
	var mp mergedPage
	keyOrdered := false
	if limit > 0 && !exact && opts.LabelSelector == "" && opts.FieldSelector == "" && opts.Where == "" && opts.SortBy == "" && len(pl.parts) > 1 {
		if answers, mp, keyOrdered, err = r.pageInKeyOrder(ctx, pl, cont, limit, opts.Count, read); err != nil {
			return nil, err
		}
		if !keyOrdered {
			// Its first round failed: every part is asked again, at positions read now, under
			// a read scope of their own (what the first round's shares is older than them).
			ctx = storage.NewReadScope(ctx)
		}
	}
	if !keyOrdered {
		answers = gather(ctx, r, pl, read(cont, 0, func(p part) ([]string, bool) { return p.clusters, false }))
		if err := refusal(answers); err != nil {
			closeAll(answers)
			return nil, err
		}
		if limit == 0 && opts.SortBy == "" {
			return merged(answers), nil
		}
		if limit == 0 {
			// A sorted list without a limit: every part's items, merged in the list's
			// order (the stream merges in key order).
			for _, a := range answers {
				if err := storage.Drain(a.val); err != nil {
					closeAll(answers)
					return nil, err
				}
			}
		}
		mp = mergePages(answers, int(limit), opts.Desc)
	}
	out := &storage.List{Items: mp.items, ResourceVersion: watchcache.Position{Parts: mp.rvs}.String(), Count: mp.count}
	if mp.more && len(mp.items) > 0 {
		last := mp.items[len(mp.items)-1]
		c := watchcache.Continue{Last: last.Key.String(), Position: watchcache.Position{Parts: mp.rvs}, Exact: exact}
		if opts.SortBy != "" {
			c.SortBy, c.Desc, c.Sort = opts.SortBy, opts.Desc, last.Sort
		}
		out.Continue = c.String()
	}
	for i := range out.Items {
		out.Items[i].RV = out.ResourceVersion
	}
	for _, a := range answers {
		out.Freshness = mergeFreshness(out.Freshness, a.val.Freshness)
		out.AddWarning(a.val.Warnings...)
	}
	return out, nil
}

// mergedPage is the fleet's page of a list: its parts' items merged in the list's order, cut at
// the limit.
type mergedPage struct {
	items []storage.Item
	more  bool
	rvs   map[string]watchcache.PartPosition // each part's position
	// count sums the parts' counts, when every part counted: they count the same list from
	// the same cursor, each its own clusters.
	count *storage.Count
}

// mergePages merges the parts' pages: each holds up to limit items after the same cursor, so
// the first limit of their merge, in the list's order (by key, or sorted with desc), are the
// fleet's next page.
func mergePages(answers []answer[*storage.List], limit int, desc bool) mergedPage {
	mp := mergedPage{rvs: map[string]watchcache.PartPosition{}, count: &storage.Count{}}
	for _, a := range answers {
		mp.rvs[a.part.peer] = watchcache.PartPosition{RV: a.val.ResourceVersion, Set: a.part.set()}
		mp.more = mp.more || a.val.Continue != ""
		mp.items = append(mp.items, a.val.Items...)
		if c := a.val.Count; c != nil && mp.count != nil {
			mp.count.Total += c.Total
			mp.count.Before += c.Before
		} else {
			mp.count = nil
		}
	}
	sort.SliceStable(mp.items, func(i, j int) bool { return storage.CompareSorted(mp.items[i], mp.items[j], desc) < 0 })
	if limit > 0 && len(mp.items) > limit {
		mp.more, mp.items = true, mp.items[:limit]
	}
	return mp
}

// pageReader reads one part's page: after c's key (from the request's position without c),
// at most n items, narrowed to the clusters ask gives for the part, or its count alone.
type pageReader func(c *watchcache.Continue, n int64, ask func(part) (clusters []string, countOnly bool)) func(context.Context, ReadStatus, part) (*storage.List, error)

// pageInKeyOrder reads a page of limit items of a paged list without selectors the way its
// keys sort: by cluster first. The clusters from the page's start onward that one owner holds in
// a row (the leading run) come first in the fleet's order, so that owner alone is asked for the
// page, narrowed to them; every other part is asked for its position only (narrowed to no
// cluster, an empty page that costs it no read), or, when the list counts (a page's
// remainingItemCount), for its position and its count (CountOnly: without a selector, O(1) per
// cluster). The leader's count of its clusters outside the run, which its paged call does not
// give, is asked beside that first round, at the same cursor. Only when the leading run holds
// fewer than
// limit items are the parts that own later clusters asked for the rest, at once and at the
// positions they answered, as in a plain fan-out. A fleet of large clusters thus answers a
// page from one owner's encoding, not from one per owner.
//
// Invariant: every part answers at least once, so the page's position holds every part's, as
// in a plain fan-out; a part's position is the first it answered, from which the page's items
// were read or after which they were (a list may be ahead of its resourceVersion, never behind
// it). When a part fails in the first round, ok is false and nothing is merged: the caller asks
// every part at once, as a plain fan-out (a part asked for no cluster cannot tell a cluster that
// is still starting).
func (r *Reader) pageInKeyOrder(ctx context.Context, pl plan, cont *watchcache.Continue, limit int64, counted bool, read pageReader) (answers []answer[*storage.List], mp mergedPage, ok bool, err error) {
	type owned struct {
		cluster string
		part    int
	}
	var order []owned
	for i, p := range pl.parts {
		for _, c := range p.clusters {
			order = append(order, owned{c, i})
		}
	}
	slices.SortFunc(order, func(a, b owned) int { return strings.Compare(a.cluster, b.cluster) })
	start := 0 // order[start] is the first cluster the page can hold
	if cont != nil {
		after := cont.After().Cluster
		start = sort.Search(len(order), func(i int) bool { return order[i].cluster >= after })
	}
	leader, run := -1, []string{}
	end := start // order[start:end] is the leading run
	if start < len(order) {
		leader = order[start].part
		for end < len(order) && order[end].part == leader {
			run = append(run, order[end].cluster)
			end++
		}
	}
	var restCount func() (*storage.Count, error)
	if counted {
		// The leader's other clusters are counted beside the first round, not after it: the
		// count does not depend on the page, so a page costs the slower of the two calls, not
		// their sum. Every return waits for it, cancelled unless it was read.
		countCtx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		var extra *storage.Count
		var extraErr error
		go func() {
			defer close(done)
			extra, extraErr = r.countRest(countCtx, pl, leader, run, cont, read)
		}()
		restCount = func() (*storage.Count, error) {
			<-done
			return extra, extraErr
		}
		defer func() {
			cancel()
			<-done
		}()
	}
	first := gather(ctx, r, pl, read(cont, limit, func(p part) ([]string, bool) {
		if leader >= 0 && p.peer == pl.parts[leader].peer {
			return run, false
		}
		if counted {
			// Its count, of all its clusters from the same cursor: the fleet's count is
			// the first round's.
			return p.clusters, true
		}
		return []string{}, false
	}))
	for _, a := range first {
		if a.err != nil {
			return nil, mergedPage{}, false, nil
		}
	}
	mp = mergePages(first, int(limit), false)
	if counted && mp.count != nil {
		// The leader counted only the run: its other clusters' count comes on top.
		extra, err := restCount()
		switch {
		case err != nil:
			return nil, mergedPage{}, false, nil
		case extra == nil:
			mp.count = nil
		default:
			mp.count.Total += extra.Total
			mp.count.Before += extra.Before
		}
	}
	if mp.more || len(mp.items) >= int(limit) || end == len(order) {
		// The leading run completed the page (its owner has more, or gave a whole page), or no
		// cluster follows it: later clusters' items come in the next page, which continues
		// after this one's last key.
		mp.more = mp.more || end < len(order)
		return first, mp, true, nil
	}
	// The rest of the page comes from the clusters after the run, each part at the position it
	// answered: a continue after the last key read (or the request's own).
	var next *watchcache.Continue
	switch {
	case len(mp.items) > 0:
		next = &watchcache.Continue{Last: mp.items[len(mp.items)-1].Key.String(), Position: watchcache.Position{Parts: mp.rvs}}
	case cont != nil:
		next = &watchcache.Continue{Last: cont.Last, Position: watchcache.Position{Parts: mp.rvs}}
	}
	rest := plan{down: pl.down, owner: pl.owner, keep: pl.keep}
	later := map[string][]string{}
	for _, o := range order[end:] {
		p := pl.parts[o.part]
		if _, ok := later[p.peer]; !ok {
			rest.parts = append(rest.parts, p)
		}
		later[p.peer] = append(later[p.peer], o.cluster)
	}
	second := gather(ctx, r, rest, read(next, limit-int64(len(mp.items)), func(p part) ([]string, bool) { return later[p.peer], false }))
	if err := refusal(second); err != nil {
		return nil, mergedPage{}, false, err
	}
	mp2 := mergePages(second, int(limit)-len(mp.items), false)
	mp.items = append(mp.items, mp2.items...)
	mp.more = mp2.more
	return append(first, second...), mp, true, nil
}

// countRest counts the clusters of the leader's part outside the run it paged, from the same
// cursor: with the other parts' counts, the fleet's. It is nil when the part answered no count
// (a replica of the previous envelope, asked by a list whose count is optional).
func (r *Reader) countRest(ctx context.Context, pl plan, leader int, run []string, cont *watchcache.Continue, read pageReader) (*storage.Count, error) {
	if leader < 0 {
		return &storage.Count{}, nil
	}
	p := pl.parts[leader]
	var others []string
	paged := sets.New(run...)
	for _, c := range p.clusters {
		if !paged.Has(c) {
			others = append(others, c)
		}
	}
	if len(others) == 0 {
		return &storage.Count{}, nil
	}
	one := plan{parts: []part{p}, down: pl.down, owner: pl.owner, keep: pl.keep}
	answers := gather(ctx, r, one, read(cont, 0, func(part) ([]string, bool) { return others, true }))
	if err := refusal(answers); err != nil {
		return nil, err
	}
	return answers[0].val.Count, nil
}

// closeAll closes the item streams of the answers.
func closeAll(answers []answer[*storage.List]) {
	for _, a := range answers {
		if a.val != nil && a.val.More != nil {
			a.val.More.Close()
		}
	}
}

// merged is an unpaged list of the parts' answers: their items merged in key order as they
// come (each part's come in key order), held one per part at most.
func merged(answers []answer[*storage.List]) *storage.List {
	rvs := map[string]watchcache.PartPosition{}
	out := &storage.List{Count: &storage.Count{}}
	m := &mergeStream{}
	for _, a := range answers {
		if c := a.val.Count; c != nil && out.Count != nil {
			out.Count.Total += c.Total
			out.Count.Before += c.Before
		} else {
			out.Count = nil
		}
		rvs[a.part.peer] = watchcache.PartPosition{RV: a.val.ResourceVersion, Set: a.part.set()}
		out.Freshness = mergeFreshness(out.Freshness, a.val.Freshness)
		out.AddWarning(a.val.Warnings...)
		m.sources = append(m.sources, &source{items: a.val.Items, more: a.val.More})
	}
	out.ResourceVersion = watchcache.Position{Parts: rvs}.String()
	m.rv = out.ResourceVersion
	out.More = m
	return out
}

// source is one part's items: those held, then those streaming.
type source struct {
	items []storage.Item
	more  storage.ItemStream
	head  storage.Item
}

// next advances the source to its next item; false at its end.
func (s *source) next() (bool, error) {
	if len(s.items) > 0 {
		s.head, s.items = s.items[0], s.items[1:]
		return true, nil
	}
	if s.more == nil {
		return false, nil
	}
	it, ok, err := s.more.Next()
	if !ok || err != nil {
		return false, err
	}
	s.head = it
	return true, nil
}

// mergeStream is a k-way merge of sources in key order.
type mergeStream struct {
	sources []*source
	h       sourceHeap
	started bool
	rv      string
}

func (m *mergeStream) Next() (storage.Item, bool, error) {
	if !m.started {
		m.started = true
		for _, s := range m.sources {
			ok, err := s.next()
			if err != nil {
				m.Close()
				return storage.Item{}, false, err
			}
			if ok {
				m.h = append(m.h, s)
			}
		}
		heap.Init(&m.h)
	}
	if len(m.h) == 0 {
		return storage.Item{}, false, nil
	}
	s := m.h[0]
	it := s.head
	it.RV = m.rv
	ok, err := s.next()
	switch {
	case err != nil:
		m.Close()
		return storage.Item{}, false, fmt.Errorf("an owner's answer broke off: %w", err)
	case ok:
		heap.Fix(&m.h, 0)
	default:
		heap.Pop(&m.h)
	}
	return it, true, nil
}

func (m *mergeStream) Close() {
	for _, s := range m.sources {
		if s.more != nil {
			s.more.Close()
		}
	}
}

// sourceHeap is a min-heap of sources by their next item's key.
type sourceHeap []*source

func (h sourceHeap) Len() int           { return len(h) }
func (h sourceHeap) Less(i, j int) bool { return less(h[i].head, h[j].head) }
func (h sourceHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *sourceHeap) Push(x any)        { *h = append(*h, x.(*source)) }
func (h *sourceHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Get asks every owner for the objects of a name, each for its part's clusters (a cluster two
// replicas hold for a moment answers once), and merges them in key order. With clusters down,
// finding nothing is 503 (the others may hold it), never 404.
func (r *Reader) Get(ctx context.Context, opts storage.GetOptions) (*storage.List, error) {
	pl, err := r.planOf(opts.Selection)
	if err != nil {
		return nil, err
	}
	if rd, sel := r.direct(pl, opts.Selection); rd != nil {
		o := opts
		o.Selection = sel
		return rd.Get(ctx, o)
	}
	pl = pl.withSelf(r.opts.Fleet.Identity())
	answers := gather(ctx, r, pl, func(ctx context.Context, rd ReadStatus, p part) (*storage.List, error) {
		o := opts
		o.Selection = partSelection(opts.Selection, p)
		return rd.Get(ctx, o)
	})
	if err := refusal(answers); err != nil {
		return nil, err
	}
	mp := mergePages(answers, 0, false)
	out := &storage.List{Items: mp.items, ResourceVersion: watchcache.Position{Parts: mp.rvs}.String()}
	for i := range out.Items {
		out.Items[i].RV = out.ResourceVersion
	}
	for _, a := range answers {
		out.Freshness = mergeFreshness(out.Freshness, a.val.Freshness)
		out.AddWarning(a.val.Warnings...)
	}
	if len(pl.down) > 0 {
		if len(out.Items) == 0 {
			return nil, storage.Retry(http.StatusServiceUnavailable, fmt.Sprintf("not found in the clusters that answered; %d clusters could not be read now: %s", len(pl.down), strings.Join(pl.downNames(), ", ")))
		}
		out.Freshness = mergeFreshness(out.Freshness, downFreshness(ctx, pl.down))
	}
	return out, nil
}
