package discovery

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
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/multicache/multicache/pkg/auth"
	"github.com/multicache/multicache/pkg/storage"
	"github.com/multicache/multicache/pkg/storage/local"
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

// Reviews answers the self reviews, for the caller of each request (auth.AccessOf).
type Reviews struct {
	// Catalog is the fleet's: the resources to decide over.
	Catalog *Catalog
	// Fleet lists every cluster of the fleet, those no replica has reported on included;
	// nil: the catalog's.
	Fleet func() []string
}

// ReviewPaths are the self reviews' paths, each with its handler, under the fleet view and one
// cluster's (/clusters/{cluster}).
func (rv *Reviews) ReviewPaths() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		"/apis/authorization.k8s.io/v1/selfsubjectaccessreviews": rv.selfAccessReview,
		"/apis/authorization.k8s.io/v1/selfsubjectrulesreviews":  rv.selfRulesReview,
		"/apis/authentication.k8s.io/v1/selfsubjectreviews":      rv.selfReview,
	}
}

// read reads a review from the request body, JSON or protobuf as client-go sends it, and the
// view it is asked in; ok is false when it answered an error.
func (rv *Reviews) read(w http.ResponseWriter, r *http.Request, into runtime.Object) (*View, string, bool) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		writeError(w, storage.Error(http.StatusBadRequest, "read the request body: "+err.Error()))
		return nil, "", false
	}
	if _, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, into); err != nil {
		writeError(w, storage.Errorf(http.StatusBadRequest, "decode %T: %v", into, err))
		return nil, "", false
	}
	cluster := r.PathValue("cluster")
	v, ok := rv.Catalog.View(r.Context(), cluster, false)
	if !ok && slices.Contains(rv.fleet(r.Context()), cluster) {
		v, ok = rv.Catalog.View(r.Context(), "", false) // a cluster no replica has reported on yet
	}
	if !ok {
		writeError(w, storage.Errorf(http.StatusNotFound, "cluster %q is not in the fleet", cluster))
		return nil, "", false
	}
	return v, cluster, true
}

// fleet is every cluster of the fleet.
func (rv *Reviews) fleet(ctx context.Context) []string {
	if rv.Fleet != nil {
		return rv.Fleet()
	}
	v, _ := rv.Catalog.View(ctx, "", false)
	return v.Clusters
}

func (rv *Reviews) selfAccessReview(w http.ResponseWriter, r *http.Request) {
	var rev authorizationv1.SelfSubjectAccessReview
	cat, cluster, ok := rv.read(w, r, &rev)
	if !ok {
		return
	}
	var err error
	switch ra, nra := rev.Spec.ResourceAttributes, rev.Spec.NonResourceAttributes; {
	case ra != nil:
		rev.Status.Allowed, rev.Status.Reason, err = rv.mayRead(r.Context(), cat, cluster, *ra)
	case nra != nil:
		rev.Status.Allowed, rev.Status.Reason = mayGetPath(nra.Verb, nra.Path)
	default:
		writeError(w, storage.Error(http.StatusBadRequest, "spec: one of resourceAttributes or nonResourceAttributes is required"))
		return
	}
	if err != nil {
		writeError(w, err)
		return
	}
	rev.Status.Denied = !rev.Status.Allowed
	rev.TypeMeta.Kind, rev.TypeMeta.APIVersion = "SelfSubjectAccessReview", authorizationv1.SchemeGroupVersion.String()
	writeCreated(w, &rev)
}

// mayRead decides a resource access review for the caller of ctx, in cluster ("" for the
// fleet view): what a request of that verb would read.
func (rv *Reviews) mayRead(ctx context.Context, cat *View, cluster string, ra authorizationv1.ResourceAttributes) (bool, string, error) {
	gr := schema.GroupResource{Group: ra.Group, Resource: ra.Resource}
	switch {
	case !slices.Contains(ReadVerbs, ra.Verb):
		return false, fmt.Sprintf("multicache serves reads only (get, list, watch), not %s", ra.Verb), nil
	case ra.Subresource != "":
		return false, fmt.Sprintf("multicache serves objects, not their %s subresource", ra.Subresource), nil
	}
	kr := cat.FindResource(gr)
	if kr == nil {
		return false, fmt.Sprintf("%s is not cached by multicache", gr), nil
	}
	if !slices.Contains(kr.API.Verbs, ra.Verb) {
		return false, fmt.Sprintf("%s cannot be %s", gr, ra.Verb), nil
	}
	clusters, why, err := rv.readable(ctx, kr, cluster)
	if err != nil || len(clusters) == 0 {
		return false, why, err
	}
	return true, why, nil
}

// readable are the clusters serving kr that the caller may read (in cluster alone when set),
// and why in words. An error is one the access check could not decide.
func (rv *Reviews) readable(ctx context.Context, kr *Resource, cluster string) ([]string, string, error) {
	secrets := kr.GVK.Group == "" && kr.GVK.Kind == "Secret"
	// The clusters that serve it, and those no replica has reported on, whose resources are not
	// known: as a list or get through the fan-out would ask them.
	fleet := rv.fleet(ctx)
	candidates := kr.Clusters
	if !kr.Cached() {
		candidates = fleet
	}
	v, _ := rv.Catalog.View(ctx, "", false)
	reported, serving := sets.New(v.Clusters...), sets.New(candidates...)
	candidates = slices.Clone(candidates) // kr.Clusters and fleet are not ours to append to
	for _, c := range fleet {
		if !reported.Has(c) && !serving.Has(c) {
			candidates = append(candidates, c)
			serving.Insert(c)
		}
	}
	if cluster != "" {
		if !serving.Has(cluster) {
			return nil, fmt.Sprintf("cluster %q does not serve %s", cluster, kr.GroupResource()), nil
		}
		candidates = []string{cluster}
	}
	allowed, _, err := local.Scope(ctx, auth.AccessOf(ctx), secrets, nil, candidates)
	if err != nil {
		return nil, "", err
	}
	if allowed == nil {
		return candidates, "you may read every cluster", nil
	}
	if len(allowed) == 0 {
		what := "any cluster that serves " + kr.GroupResource().String()
		if cluster != "" {
			what = fmt.Sprintf("cluster %q", cluster)
		}
		if secrets {
			what = "the Secrets of " + what
		}
		return nil, "you may not read " + what, nil
	}
	return allowed, fmt.Sprintf("you may read %s in %d of the %d clusters that serve it", kr.GroupResource(), len(allowed), len(candidates)), nil
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

func (rv *Reviews) selfRulesReview(w http.ResponseWriter, r *http.Request) {
	var rev authorizationv1.SelfSubjectRulesReview
	cat, cluster, ok := rv.read(w, r, &rev)
	if !ok {
		return
	}
	byGroup := map[string][]string{}
	for _, kr := range cat.Resources { // clusters.multicache.io among them
		clusters, _, err := rv.readable(r.Context(), kr, cluster)
		if err != nil {
			writeError(w, err)
			return
		}
		if len(clusters) > 0 {
			byGroup[kr.GVK.Group] = append(byGroup[kr.GVK.Group], kr.API.Name)
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
		verbs := ReadVerbs
		if g == ClustersResource.GVK.Group {
			verbs = ClustersResource.API.Verbs
		}
		rev.Status.ResourceRules = append(rev.Status.ResourceRules, authorizationv1.ResourceRule{Verbs: verbs, APIGroups: []string{g}, Resources: res})
	}
	rev.Status.NonResourceRules = []authorizationv1.NonResourceRule{{Verbs: []string{"get"}, NonResourceURLs: readablePaths}}
	rev.TypeMeta.Kind, rev.TypeMeta.APIVersion = "SelfSubjectRulesReview", authorizationv1.SchemeGroupVersion.String()
	writeCreated(w, &rev)
}

// anonymous is who a caller is when auth is off, as kube-apiserver names an anonymous caller.
var anonymous = &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}

func (rv *Reviews) selfReview(w http.ResponseWriter, r *http.Request) {
	var rev authenticationv1.SelfSubjectReview
	if _, _, ok := rv.read(w, r, &rev); !ok {
		return
	}
	u := auth.UserOf(auth.AccessOf(r.Context()))
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
