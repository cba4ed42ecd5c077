package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/multicache/multicache/pkg/auth"
	"github.com/multicache/multicache/pkg/filters"
)

// Self reviews: the questions clients ask the API server about their own caller before they
// show a view (kubectl auth can-i and auth whoami, k9s, Headlamp, Lens), answered by this
// daemon's own authorizer for what the caller may read through multicache. They are creates
// that store nothing, so the API stays read-only:
//   - SelfSubjectAccessReview: allowed for get, list and watch of a resource the daemon
//     caches, when the caller may read a cluster that serves it (in the fleet view, at least
//     one; under /clusters/{name}, that one), as its lists and gets decide (scope); every
//     other verb, and subresources, are denied with the reason;
//   - SelfSubjectRulesReview: those read rules, one per API group, and the non-resource paths
//     the daemon serves;
//   - SelfSubjectReview: who the caller is, as the authorizer said.

// selfReviewPaths are the self reviews' paths, under the fleet view and one cluster's.
var selfReviewPaths = map[string]func(*Server) http.HandlerFunc{
	"/apis/authorization.k8s.io/v1/selfsubjectaccessreviews": func(s *Server) http.HandlerFunc { return s.handleSelfAccessReview },
	"/apis/authorization.k8s.io/v1/selfsubjectrulesreviews":  func(s *Server) http.HandlerFunc { return s.handleSelfRulesReview },
	"/apis/authentication.k8s.io/v1/selfsubjectreviews":      func(s *Server) http.HandlerFunc { return s.handleSelfReview },
}

// readReview reads a review from the request body, JSON or protobuf as client-go sends it, and
// the view it is asked in (reviewCluster); ok is false when it answered an error.
func (s *Server) readReview(w http.ResponseWriter, r *http.Request, into runtime.Object) (*catalog, string, bool) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		filters.WriteError(w, http.StatusBadRequest, "read the request body: "+err.Error())
		return nil, "", false
	}
	if _, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, into); err != nil {
		filters.WriteError(w, http.StatusBadRequest, fmt.Sprintf("decode %T: %v", into, err))
		return nil, "", false
	}
	return s.reviewCluster(w, r)
}

// reviewCluster is the cluster a self review is asked in ("" for the fleet view), and the
// catalog of the resources to decide over: the cluster's, or, for a cluster another replica
// runs, the fleet's as this replica knows it. ok is false when the cluster is not in the
// fleet (answered 404).
func (s *Server) reviewCluster(w http.ResponseWriter, r *http.Request) (*catalog, string, bool) {
	cluster := r.PathValue("cluster")
	cat, ok := s.catalog(cluster)
	if !ok && slices.Contains(s.elsewhere(), cluster) {
		cat, ok = s.catalog("")
	}
	if !ok {
		filters.WriteError(w, http.StatusNotFound, fmt.Sprintf("cluster %q is not in the fleet", cluster))
		return nil, "", false
	}
	return cat, cluster, true
}

// elsewhere are the fleet's clusters that this replica does not run (another replica owns
// them, or none yet): none without a Fleet.
func (s *Server) elsewhere() []string {
	if s.opts.Fleet == nil {
		return nil
	}
	here := s.reg.Clusters()
	var out []string
	for _, o := range s.opts.Fleet.Owners() {
		if !slices.Contains(here, o.Cluster) {
			out = append(out, o.Cluster)
		}
	}
	return out
}

func (s *Server) handleSelfAccessReview(w http.ResponseWriter, r *http.Request) {
	var rev authorizationv1.SelfSubjectAccessReview
	cat, cluster, ok := s.readReview(w, r, &rev)
	if !ok {
		return
	}
	var err error
	switch ra, nra := rev.Spec.ResourceAttributes, rev.Spec.NonResourceAttributes; {
	case ra != nil:
		rev.Status.Allowed, rev.Status.Reason, err = s.mayRead(r.Context(), cat, cluster, *ra)
	case nra != nil:
		rev.Status.Allowed, rev.Status.Reason = mayGetPath(nra.Verb, nra.Path)
	default:
		filters.WriteError(w, http.StatusBadRequest, "spec: one of resourceAttributes or nonResourceAttributes is required")
		return
	}
	if err != nil {
		writeScopeError(w, err)
		return
	}
	rev.Status.Denied = !rev.Status.Allowed
	rev.TypeMeta.Kind, rev.TypeMeta.APIVersion = "SelfSubjectAccessReview", authorizationv1.SchemeGroupVersion.String()
	writeCreated(w, &rev)
}

// mayRead decides a resource access review for the caller of ctx, in cluster ("" for the
// fleet view): what a request of that verb would read.
func (s *Server) mayRead(ctx context.Context, cat *catalog, cluster string, ra authorizationv1.ResourceAttributes) (bool, string, error) {
	gr := schema.GroupResource{Group: ra.Group, Resource: ra.Resource}
	switch {
	case !slices.Contains(readVerbs, ra.Verb):
		return false, fmt.Sprintf("multicache serves reads only (get, list, watch), not %s", ra.Verb), nil
	case ra.Subresource != "":
		return false, fmt.Sprintf("multicache serves objects, not their %s subresource", ra.Subresource), nil
	}
	kr := cat.findResource(gr)
	if kr == nil {
		return false, fmt.Sprintf("%s is not cached by multicache", gr), nil
	}
	if !slices.Contains(kr.api.Verbs, ra.Verb) {
		return false, fmt.Sprintf("%s cannot be %s", gr, ra.Verb), nil
	}
	clusters, why, err := s.readable(ctx, kr, cluster)
	if err != nil || len(clusters) == 0 {
		return false, why, err
	}
	return true, why, nil
}

// readable are the clusters serving kr that the caller may read (in cluster alone when set),
// and why in words. An error is one the access check could not decide.
func (s *Server) readable(ctx context.Context, kr *kubeResource, cluster string) ([]string, string, error) {
	resource := kr.name
	if !kr.cached() {
		resource = "" // the clusters themselves, or their definitions: no Secrets
	}
	// The clusters that serve it here, and those other replicas run, whose resources this
	// replica does not know: as a list or get through the fan-out would ask them.
	candidates := kr.clusters
	if !kr.cached() {
		candidates = s.reg.Clusters()
	}
	candidates = append(slices.Clone(candidates), s.elsewhere()...)
	if cluster != "" {
		if !slices.Contains(candidates, cluster) {
			return nil, fmt.Sprintf("cluster %q does not serve %s", cluster, kr.groupResource()), nil
		}
		candidates = []string{cluster}
	}
	allowed, _, err := s.scope(ctx, resource, nil, candidates)
	if err != nil {
		return nil, "", err
	}
	if allowed == nil {
		return candidates, "you may read every cluster", nil
	}
	allowed = slices.DeleteFunc(allowed, func(c string) bool { return c == noCluster })
	if len(allowed) == 0 {
		what := "any cluster that serves " + kr.groupResource().String()
		if cluster != "" {
			what = fmt.Sprintf("cluster %q", cluster)
		}
		if s.isSecrets(resource) {
			what = "the Secrets of " + what
		}
		return nil, "you may not read " + what, nil
	}
	return allowed, fmt.Sprintf("you may read %s in %d of the %d clusters that serve it", kr.groupResource(), len(allowed), len(candidates)), nil
}

// findResource is the resource of gr, at any version; clusters.multicache.io included.
func (c *catalog) findResource(gr schema.GroupResource) *kubeResource {
	for _, kr := range []*kubeResource{clustersResource, crdsResource} {
		if gr == kr.groupResource() {
			return kr
		}
	}
	for _, kr := range c.resources {
		if kr.groupResource() == gr {
			return kr
		}
	}
	return nil
}

// readablePaths are the non-resource paths the daemon serves to any authenticated caller.
var readablePaths = []string{"/api", "/api/*", "/apis", "/apis/*", "/version", "/healthz", "/readyz", "/metrics"}

// mayGetPath decides a non-resource access review.
func mayGetPath(verb, path string) (bool, string) {
	if verb != "get" {
		return false, fmt.Sprintf("multicache serves reads only (get), not %s", verb)
	}
	for _, p := range readablePaths {
		if p == path || (strings.HasSuffix(p, "/*") && strings.HasPrefix(path, strings.TrimSuffix(p, "*"))) {
			return true, "multicache serves " + p
		}
	}
	return false, fmt.Sprintf("multicache does not serve %s", path)
}

func (s *Server) handleSelfRulesReview(w http.ResponseWriter, r *http.Request) {
	var rev authorizationv1.SelfSubjectRulesReview
	cat, cluster, ok := s.readReview(w, r, &rev)
	if !ok {
		return
	}
	byGroup := map[string][]string{}
	for _, kr := range cat.resources { // clusters.multicache.io among them
		clusters, _, err := s.readable(r.Context(), kr, cluster)
		if err != nil {
			writeScopeError(w, err)
			return
		}
		if len(clusters) > 0 {
			byGroup[kr.gvk.Group] = append(byGroup[kr.gvk.Group], kr.api.Name)
		}
	}
	groups := make([]string, 0, len(byGroup))
	for g := range byGroup {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	rev.Status = authorizationv1.SubjectRulesReviewStatus{ResourceRules: []authorizationv1.ResourceRule{}}
	for _, g := range groups {
		res := byGroup[g]
		sort.Strings(res)
		verbs := readVerbs
		if g == clustersResource.gvk.Group {
			verbs = clustersResource.api.Verbs
		}
		rev.Status.ResourceRules = append(rev.Status.ResourceRules, authorizationv1.ResourceRule{Verbs: verbs, APIGroups: []string{g}, Resources: res})
	}
	rev.Status.NonResourceRules = []authorizationv1.NonResourceRule{{Verbs: []string{"get"}, NonResourceURLs: readablePaths}}
	rev.TypeMeta.Kind, rev.TypeMeta.APIVersion = "SelfSubjectRulesReview", authorizationv1.SchemeGroupVersion.String()
	writeCreated(w, &rev)
}

// anonymous is who a caller is when auth is off, as kube-apiserver names an anonymous caller.
var anonymous = &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}

func (s *Server) handleSelfReview(w http.ResponseWriter, r *http.Request) {
	var rev authenticationv1.SelfSubjectReview
	if _, _, ok := s.readReview(w, r, &rev); !ok {
		return
	}
	u := auth.UserOf(filters.AccessOf(r.Context()))
	if u == nil {
		u = anonymous
	}
	info := authenticationv1.UserInfo{Username: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups()}
	if extra := u.GetExtra(); len(extra) > 0 {
		info.Extra = map[string]authenticationv1.ExtraValue{}
		for k, v := range extra {
			info.Extra[k] = v
		}
	}
	rev.Status.UserInfo = info
	rev.TypeMeta.Kind, rev.TypeMeta.APIVersion = "SelfSubjectReview", authenticationv1.SchemeGroupVersion.String()
	writeCreated(w, &rev)
}

// writeCreated answers a review as kube-apiserver answers a create: 201, the object as JSON.
func writeCreated(w http.ResponseWriter, obj runtime.Object) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(obj)
}
