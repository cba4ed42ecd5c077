package storage

import (
	"net/http"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/multicache/multicache/pkg/api"
)

// ClusterSelector is a label selector's requirements on the key multicache.io/cluster: they
// select clusters, as if each cluster were an object labelled with its name. Empty selects
// every cluster.
type ClusterSelector []labels.Requirement

// SplitSelector parses a label selector into its requirements on the cluster key, which select
// clusters, and the others, which select objects. A malformed one is 400, naming it.
func SplitSelector(selector string) (ClusterSelector, labels.Selector, error) {
	sel, err := labels.Parse(selector)
	if err != nil {
		return nil, nil, Errorf(http.StatusBadRequest, "labelSelector %q: %v", selector, err)
	}
	reqs, _ := sel.Requirements()
	var clusters ClusterSelector
	objects := labels.NewSelector()
	for _, req := range reqs {
		if req.Key() == api.ClusterAnnotation {
			clusters = append(clusters, req)
			continue
		}
		objects = objects.Add(req)
	}
	return clusters, objects, nil
}

// Matches reports whether every requirement accepts cluster.
func (s ClusterSelector) Matches(cluster string) bool {
	if len(s) == 0 {
		return true // (asked for every event of a watch: no map for nothing)
	}
	set := labels.Set{api.ClusterAnnotation: cluster}
	for _, r := range s {
		if !r.Matches(set) {
			return false
		}
	}
	return true
}

// Select keeps the candidates s matches, in their order; never nil.
func (s ClusterSelector) Select(candidates []string) []string {
	out := []string{}
	for _, c := range candidates {
		if s.Matches(c) {
			out = append(out, c)
		}
	}
	return out
}

// ClusterFilter judges cluster names against a list that may be absent, as a selection's
// clusters and, in process, ClusterOptions' Clusters and Part mean it: no list (nil) accepts
// every cluster, an empty one none. (Between replicas an empty ClusterOptions list is not sent
// at all: a part sent to a peer is never empty.) Built once per request, it judges each
// cluster in constant time: a replica's part names up to a thousand clusters, and a request
// judges each of them.
type ClusterFilter struct {
	named sets.Set[string] // nil: every cluster
}

// FilterOf is the filter of names: every cluster when names is nil.
func FilterOf(names []string) ClusterFilter {
	if names == nil {
		return ClusterFilter{}
	}
	return ClusterFilter{named: sets.New(names...)}
}

// Has reports whether the filter accepts cluster.
func (f ClusterFilter) Has(cluster string) bool {
	return f.named == nil || f.named.Has(cluster)
}
