package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/multicache/multicache/pkg/filters"
)

// noCluster is a cluster name no cluster has (names start with a letter or digit): a query
// limited to it selects nothing, in stores, snapshots and watches alike.
const noCluster = "-"

// scopeError is an answer a cluster scope could not be decided with.
type scopeError struct {
	code int
	msg  string
}

func (e *scopeError) Error() string { return e.msg }

func writeScopeError(w http.ResponseWriter, err error) {
	var se *scopeError
	if errors.As(err, &se) {
		filters.WriteError(w, se.code, se.msg)
		return
	}
	filters.WriteError(w, http.StatusServiceUnavailable, err.Error())
}

// scope limits a request on resource to what the caller may read. named are the clusters the
// request names (by path, cluster= or a cluster selector), or nil for the fleet. A named
// cluster the caller may not read is 403. For the fleet it returns the clusters to read and
// those left out. candidates are the fleet's clusters to decide over.
//
// nil means every cluster, present and future, and is returned only to a caller who may read
// them all (All), and never for Secrets: anyone else gets the explicit list ([noCluster] when
// empty), so that a cluster that joins later is not read on the strength of an earlier answer.
func (s *Server) scope(ctx context.Context, resource string, named, candidates []string) (clusters, leftOut []string, err error) {
	a := filters.AccessOf(ctx)
	secrets := resource != "" && s.isSecrets(resource)
	check := func(c string) (bool, error) {
		ok, err := a.Cluster(ctx, c, secrets)
		if err != nil {
			return false, &scopeError{http.StatusServiceUnavailable, fmt.Sprintf("cluster %q: authorization check failed: %v", c, err)}
		}
		return ok, nil
	}
	if len(named) > 0 {
		for _, c := range named {
			ok, err := check(c)
			if err != nil {
				return nil, nil, err
			}
			if !ok {
				what := "cluster"
				if secrets {
					what = "the Secrets of cluster"
				}
				return nil, nil, &scopeError{http.StatusForbidden, fmt.Sprintf("forbidden: you may not read %s %q", what, c)}
			}
		}
		return named, nil, nil
	}
	if !secrets {
		all, err := a.All(ctx)
		if err != nil {
			return nil, nil, &scopeError{http.StatusServiceUnavailable, fmt.Sprintf("authorization check failed: %v", err)}
		}
		if all {
			return nil, nil, nil
		}
	}
	for _, c := range candidates {
		ok, err := check(c)
		if err != nil {
			return nil, nil, err
		}
		if ok {
			clusters = append(clusters, c)
		} else {
			leftOut = append(leftOut, c)
		}
	}
	if len(clusters) == 0 {
		clusters = []string{noCluster}
	}
	return clusters, leftOut, nil
}

// isSecrets reports whether resource is core Secrets. It fails closed: core Secrets in any
// cluster's discovery, or a configured name that would resolve to them before any has resolved.
func (s *Server) isSecrets(resource string) bool {
	for _, rs := range s.info(resource) {
		if rs.Kind == "Secret" && rs.Group == "" {
			return true
		}
	}
	switch strings.ToLower(resource) {
	case "secrets", "secret", "v1/secrets", "/v1/secrets":
		return true
	}
	return false
}

// allowedClusters filters names (cluster names) to those the caller may read.
func (s *Server) allowedClusters(ctx context.Context, names []string) ([]string, error) {
	c, _, err := s.scope(ctx, "", nil, names)
	if err != nil {
		return nil, err
	}
	if c == nil {
		return names, nil
	}
	return slices.DeleteFunc(c, func(n string) bool { return n == noCluster }), nil
}
