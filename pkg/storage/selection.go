package storage

import (
	"net/http"

	"k8s.io/apimachinery/pkg/labels"

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
