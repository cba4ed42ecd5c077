package storage

import (
	"context"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/api"
)

// Summarizer counts the objects a selection spans in groups, without answering them: the
// inventory answers (how many Pods per cluster and phase, which images run where). Every error
// is an *apierrors.StatusError.
type Summarizer interface {
	Summarize(ctx context.Context, opts SummaryOptions) (*Summary, error)
}

// SummaryOptions is a summary: the selection, and the keys to group by
// (aggregate.ParseGroupKey's texts).
type SummaryOptions struct {
	Selection
	By []string `json:"by"`
}

// Summary is a summary's answer: the groups in no order (the front sorts and limits them once
// the parts are merged), the total of objects, and how fresh each cluster it spans is.
type Summary struct {
	aggregate.Summary
	Freshness []api.ClusterFreshness `json:"clusters"`
	Warnings  []string               `json:"warnings,omitempty"`
}
