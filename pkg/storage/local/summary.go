package local

import (
	"context"
	"net/http"

	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/storage"
)

// Summarize counts the objects of the selection in groups of opts.By, over the clusters the
// caller may read, as List selects them. Keys read Secrets as the caller reads them: without
// their data unless the daemon serves it.
func (s *Storage) Summarize(ctx context.Context, opts storage.SummaryOptions) (*storage.Summary, error) {
	v := s.view(ctx)
	sel, err := s.selectFor(ctx, v, opts.Selection)
	if err != nil {
		return nil, err
	}
	keys := make([]aggregate.GroupKey, 0, len(opts.By))
	for _, text := range opts.By {
		if text == OwnerKey {
			own, res := v.owners(s.reg), sel.resource
			keys = append(keys, aggregate.FuncKey(OwnerKey, func(cluster string, obj any) []string { return own.top(res, cluster, obj) }))
			continue
		}
		k, err := aggregate.ParseGroupKey(text)
		if err != nil {
			return nil, storage.Errorf(http.StatusBadRequest, "by: %v", err)
		}
		if view := readView(sel.secrets, sel.allowSecretData); view != nil {
			k = k.WithView(view) // a key counts what the caller may read of a Secret, no more
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, storage.Error(http.StatusBadRequest, "by: at least one key is required (cluster, namespace, label:<key>, field:<path>, index:<name> or owner)")
	}
	if err := s.awaitPlanned(ctx, sel); err != nil {
		return nil, err
	}
	by := make([]string, len(keys))
	for i, k := range keys {
		by[i] = k.String()
	}
	out := &storage.Summary{Summary: aggregate.Summary{By: by, Groups: []aggregate.Group{}}}
	fresh := map[string]bool{}
	if clusters := sel.clusters(); !sel.none && len(clusters) > 0 {
		q := sel.query
		q.Clusters = clusters
		sum, err := sel.agg.SummarizeKeysContext(ctx, q, keys)
		if ctx.Err() != nil {
			return nil, storage.Error(http.StatusGatewayTimeout, "request timed out")
		}
		if err != nil {
			return nil, storage.Errorf(http.StatusBadRequest, "%v", err)
		}
		out.Summary = sum
		unsynced := sets.New(sum.Unsynced...)
		for _, c := range clusters {
			if sel.agg.HasList(c) {
				fresh[c] = !unsynced.Has(c)
			}
		}
		out.Unsynced = nil // told per cluster in Freshness
	}
	if ctx.Err() != nil {
		return nil, storage.Error(http.StatusGatewayTimeout, "request timed out")
	}
	if err := whereFailed(sel.where); err != nil {
		return nil, err
	}
	if err := s.recheckPlanned(sel); err != nil {
		return nil, err
	}
	out.Freshness = sel.freshness(fresh)
	return out, nil
}
