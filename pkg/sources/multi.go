package sources

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/multicache/multicache/pkg/clusterset"
)

// Multi is a Source over several sources, such as kubeconfig contexts and cluster Secrets. A
// cluster name yielded by two sources goes to the first; the other entry is reported as bad.
// Create with NewMulti.
type Multi struct {
	sources []clusterset.Source
	mu      sync.Mutex
	last    [][]clusterset.ClusterConfig // per source, what it yielded at the last load (partial ones completed)
}

// NewMulti merges sources, in order of precedence.
func NewMulti(sources ...clusterset.Source) *Multi {
	return &Multi{sources: sources, last: make([][]clusterset.ClusterConfig, len(sources))}
}

// Load merges every source's clusters, sorted by name. A source's partial load does not make
// the whole partial: for that source, the clusters it yielded before and misses now are kept
// as they were, so that a removal from another source still takes effect. Its errors, and name
// clashes, are returned as a CompleteError.
func (m *Multi) Load() ([]clusterset.ClusterConfig, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []clusterset.ClusterConfig
	var errs []error
	from := map[string]string{}
	for i, src := range m.sources {
		cfgs, err := src.Load()
		var complete *clusterset.CompleteError
		if err != nil {
			errs = append(errs, err)
			if !errors.As(err, &complete) {
				got := map[string]bool{}
				for _, c := range cfgs {
					got[c.Name] = true
				}
				for _, c := range m.last[i] {
					if !got[c.Name] {
						cfgs = append(cfgs, c)
					}
				}
			}
		}
		m.last[i] = cfgs
		for _, c := range cfgs {
			if other, dup := from[c.Name]; dup {
				errs = append(errs, fmt.Errorf("%s: cluster name %q already used by %s", c.Origin, c.Name, other))
				continue
			}
			from[c.Name] = c.Origin
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	if len(errs) > 0 {
		return out, &clusterset.CompleteError{Err: errors.Join(errs...)}
	}
	return out, nil
}

// Changes fires when any source's does.
func (m *Multi) Changes(ctx context.Context) <-chan struct{} {
	out := make(chan struct{}, 1)
	for _, src := range m.sources {
		ch := src.Changes(ctx)
		if ch == nil {
			continue
		}
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-ch:
					select {
					case out <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
	return out
}
