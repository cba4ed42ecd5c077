package fanout

import (
	"context"
	"net/http"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/storage"
)

var _ storage.Summarizer = (*Reader)(nil)

// Summarize asks every owner for its part's summary at once and adds them up: the parts span
// disjoint clusters, so each object is counted by one of them. Any part's refusal is the whole
// answer's, as for lists: a summary without a part's clusters would undercount silently.
func (r *Reader) Summarize(ctx context.Context, opts storage.SummaryOptions) (*storage.Summary, error) {
	pl, err := r.planOf(opts.Selection)
	if err != nil {
		return nil, err
	}
	if rd, sel := r.direct(pl, opts.Selection); rd != nil {
		o := opts
		o.Selection = sel
		return summarize(ctx, rd, o)
	}
	if len(pl.down) > 0 {
		return nil, refuseDown(pl)
	}
	pl = pl.withSelf(r.opts.Fleet.Identity())
	answers := gather(ctx, r, pl, func(ctx context.Context, rd ReadStatus, p part) (*storage.Summary, error) {
		o := opts
		o.Selection = partSelection(opts.Selection, p)
		return summarize(ctx, rd, o)
	})
	if err := refusal(answers); err != nil {
		return nil, err
	}
	out := &storage.Summary{}
	fresh := make([][]api.ClusterFreshness, 0, len(answers))
	for i, a := range answers {
		if i == 0 {
			out.Summary = aggregate.Summary{By: a.val.By, Groups: []aggregate.Group{}}
		}
		out.Merge(a.val.Summary)
		fresh = append(fresh, a.val.Freshness)
		out.Warnings = storage.AppendWarnings(out.Warnings, a.val.Warnings...)
	}
	out.Freshness = mergeFreshness(fresh...)
	return out, nil
}

// summarize asks rd, which must be a Summarizer.
func summarize(ctx context.Context, rd storage.Reader, opts storage.SummaryOptions) (*storage.Summary, error) {
	sm, ok := rd.(storage.Summarizer)
	if !ok {
		return nil, storage.Error(http.StatusNotImplemented, "summaries are not answered here")
	}
	return sm.Summarize(ctx, opts)
}
