package local

import (
	"context"
	"net/http"

	"github.com/multicache/multicache/pkg/auth"
	"github.com/multicache/multicache/pkg/storage"
)

// noCluster is a cluster name no cluster has (names start with a letter or digit): a query
// limited to it selects nothing, in stores, snapshots and watches alike.
const noCluster = "-"

// Scope limits a read of resource to what the caller of ctx (auth.AccessOf) may read. named
// are the clusters the request names, or nil for the fleet: a named cluster the caller may not
// read is 403. For the fleet it returns the clusters to read among candidates, and those left
// out. resource "" is the clusters' status, whose Secrets rule does not apply.
//
// nil means every cluster, present and future, and is returned only to a caller who may read
// them all (All), and never for Secrets: anyone else gets the explicit list (empty when none),
// so that a cluster that joins later is not read on the strength of an earlier answer.
func Scope(ctx context.Context, a auth.Access, secrets bool, named, candidates []string) (clusters, leftOut []string, err error) {
	failed := func(err error) error {
		return storage.Errorf(http.StatusServiceUnavailable, "authorization check failed: %v", err)
	}
	if len(named) > 0 {
		ok, err := auth.Clusters(ctx, a, named, secrets)
		if err != nil {
			return nil, nil, failed(err)
		}
		for i, c := range named {
			if !ok[i] {
				what := "cluster"
				if secrets {
					what = "the Secrets of cluster"
				}
				return nil, nil, storage.Errorf(http.StatusForbidden, "forbidden: you may not read %s %q", what, c)
			}
		}
		return named, nil, nil
	}
	if !secrets {
		all, err := a.All(ctx)
		if err != nil {
			return nil, nil, failed(err)
		}
		if all {
			return nil, nil, nil
		}
	}
	ok, err := auth.Clusters(ctx, a, candidates, secrets)
	if err != nil {
		return nil, nil, failed(err)
	}
	clusters = []string{}
	for i, c := range candidates {
		if ok[i] {
			clusters = append(clusters, c)
		} else {
			leftOut = append(leftOut, c)
		}
	}
	return clusters, leftOut, nil
}

// Readable filters names to those the caller may read (not their Secrets).
func Readable(ctx context.Context, a auth.Access, names []string) ([]string, error) {
	c, _, err := Scope(ctx, a, false, nil, names)
	if err != nil {
		return nil, err
	}
	if c == nil {
		return names, nil
	}
	return c, nil
}
