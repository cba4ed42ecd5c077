package fanout

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/auth"
	"github.com/multicache/multicache/pkg/storage"
	"github.com/multicache/multicache/pkg/storage/local"
)

// ReadStatus is a Reader that is also a Status: what each part of a plan is read through.
type ReadStatus interface {
	storage.Reader
	storage.Status
}

// Options configures a Reader.
type Options struct {
	// Fleet says who owns each cluster. Required.
	Fleet Fleet
	// Local reads this replica's own part. Required.
	Local ReadStatus
	// Peer is the reader of replica id, at its advertised URL. Required.
	Peer func(id, url string) ReadStatus
}

// Reader reads the fleet from the owners of its clusters: this replica's own part from Local,
// each other replica's from Peer, all at once, and merges their answers into the one a replica
// that ran every cluster would give, with the fleet's positions (watchcache.Position with
// Parts). Any part's refusal is the whole answer's, never an answer without that part's
// clusters (a relisting client would take their absence for deletes).
type Reader struct {
	opts Options
}

var (
	_ storage.Reader = (*Reader)(nil)
	_ storage.Status = (*Reader)(nil)
)

// New makes the Reader.
func New(opts Options) (*Reader, error) {
	if opts.Fleet == nil || opts.Local == nil || opts.Peer == nil {
		return nil, errors.New("storage/fanout: Options.Fleet, Local and Peer are required")
	}
	return &Reader{opts: opts}, nil
}

// Ready says why this replica cannot answer for the fleet yet: until it knows the fleet's
// owners (coordinated, not self-fenced), it cannot tell which clusters an answer spans, and an
// empty answer would read as deletes to every client. 429, as kube-apiserver answers while
// its watch cache initializes; clients retry. Nil once it can.
func (r *Reader) Ready() error {
	f, ok := r.opts.Fleet.(interface{ Ready() error })
	if !ok {
		return nil
	}
	if err := f.Ready(); err != nil {
		return storage.Retry(http.StatusTooManyRequests, "this replica cannot answer yet: "+err.Error()+"; retry")
	}
	return nil
}

// planFor is the plan of a selection: its named clusters, those its cluster selector accepts.
func (r *Reader) planFor(named []string, labelSelector string) (plan, error) {
	clusterSel, _, err := storage.SplitSelector(labelSelector)
	if err != nil {
		return plan{}, err
	}
	wanted := storage.FilterOf(named)
	keep := func(c string) bool {
		return wanted.Has(c) && clusterSel.Matches(c)
	}
	return planOf(r.opts.Fleet.Owners(), keep), nil
}

// reader is the reader of part p.
func (r *Reader) reader(p part) ReadStatus {
	if p.self {
		return r.opts.Local
	}
	return r.opts.Peer(p.peer, p.url)
}

// answer is one part's answer.
type answer[T any] struct {
	part part
	val  T
	err  error
}

// gather asks every part of pl at once and waits for all the answers.
func gather[T any](ctx context.Context, r *Reader, pl plan, read func(context.Context, ReadStatus, part) (T, error)) []answer[T] {
	out := make([]answer[T], len(pl.parts))
	var wg sync.WaitGroup
	for i, p := range pl.parts {
		out[i].part = p
		wg.Go(func() {
			out[i].val, out[i].err = read(ctx, r.reader(p), p)
		})
	}
	wg.Wait()
	return out
}

// refusal is the whole answer's error when a part failed, nil when none did: the first refusal
// of a part that refused the read (400, 403, 410, 429, …), else the first failure to reach a
// part, as 503 to retry.
func refusal[T any](answers []answer[T]) error {
	var unreachable error
	for _, a := range answers {
		if a.err == nil {
			continue
		}
		if c := storage.Code(a.err); c < 500 {
			return a.err
		}
		if unreachable == nil {
			unreachable = a.err
		}
	}
	if unreachable != nil {
		if storage.RetryAfter(unreachable) > 0 {
			return unreachable
		}
		return storage.Retry(http.StatusServiceUnavailable, "a replica that owns clusters of this answer did not answer: "+unreachable.Error()+"; retry")
	}
	return nil
}

// refuseDown is the 503 of a read whose plan has clusters without a live owner: a cluster moving
// to another replica (its owner died, and the others take its clusters within a lease
// duration), whose absence would read as deletes to every client that relists now.
func refuseDown(pl plan) error {
	return storage.Retry(http.StatusServiceUnavailable, "no live replica answers for "+strings.Join(pl.downNames(), ", ")+" yet; retry")
}

// downFreshness reports the down clusters the caller may read, as unavailable.
func downFreshness(ctx context.Context, down map[string]string) []api.ClusterFreshness {
	names := make([]string, 0, len(down))
	for c := range down {
		names = append(names, c)
	}
	sort.Strings(names)
	readable, err := local.Readable(ctx, auth.AccessOf(ctx), names)
	if err != nil {
		return nil
	}
	out := make([]api.ClusterFreshness, 0, len(readable))
	for _, c := range readable {
		out = append(out, api.ClusterFreshness{Name: c, Error: "unavailable: " + down[c]})
	}
	return out
}

// mergeFreshness joins the parts' freshness: one entry per cluster, sorted.
func mergeFreshness(lists ...[]api.ClusterFreshness) []api.ClusterFreshness {
	var out []api.ClusterFreshness
	for _, l := range lists {
		out = mergeSortedFreshness(out, l)
	}
	return out
}

// mergeSortedFreshness merges b into a, which is sorted by name with each name once: the
// result is too, a's entry kept where both name a cluster, and b's first where it names one
// twice. Parts answer their freshness sorted, so a merge walks the two lists once, with no set
// and no sort; b is sorted (a copy) when it is not.
func mergeSortedFreshness(a, b []api.ClusterFreshness) []api.ClusterFreshness {
	byName := func(x, y api.ClusterFreshness) int { return strings.Compare(x.Name, y.Name) }
	if len(b) == 0 {
		return a
	}
	if !slices.IsSortedFunc(b, byName) {
		b = slices.Clone(b)
		slices.SortStableFunc(b, byName)
	}
	out := make([]api.ClusterFreshness, 0, len(a)+len(b))
	add := func(f api.ClusterFreshness) {
		if n := len(out); n == 0 || out[n-1].Name != f.Name {
			out = append(out, f)
		}
	}
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		if j == len(b) || i < len(a) && a[i].Name <= b[j].Name {
			add(a[i])
			i++
		} else {
			add(b[j])
			j++
		}
	}
	return out
}

// planOf is the plan of a read of sel, once this replica is coordinated with the others.
func (r *Reader) planOf(sel storage.Selection) (plan, error) {
	if err := r.Ready(); err != nil {
		return plan{}, err
	}
	return r.planFor(sel.Clusters, sel.LabelSelector)
}

// direct is the Reader that answers a list or get of plan pl alone, and sel narrowed to its
// part: this replica's own when it owns every cluster of pl (and none is down), another
// replica's when that one does (plan.single); nil when the read fans out.
func (r *Reader) direct(pl plan, sel storage.Selection) (storage.Reader, storage.Selection) {
	if pl.local() {
		return r.opts.Local, partSelection(sel, part{clusters: pl.selfClusters()})
	}
	if p, ok := pl.single(); ok {
		return r.reader(p), partSelection(sel, p)
	}
	return nil, sel
}

// partSelection narrows a selection to part p.
func partSelection(sel storage.Selection, p part) storage.Selection {
	sel.Part = slices.Clone(p.clusters)
	if sel.Part == nil {
		sel.Part = []string{}
	}
	return sel
}
