package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/filters"
	"github.com/multicache/multicache/pkg/table"
)

// CustomResourceDefinitions, read-only (apiextensions.k8s.io/v1 customresourcedefinitions):
// one entry per definition of a custom resource the daemon caches, as the first cluster (by
// name) that serves it served it when the resource was resolved there, with every cluster
// that serves it in the annotation multicache.io/clusters. Clients that build their view of
// the API from the definitions (k9s) read them; a definition the daemon does not cache is not
// listed, as discovery does not list its resource.
//
// The set is small and changes rarely, so it is built on each request rather than cached:
// from this replica's Registry, and in a sharded fleet's view from every replica's part. Its
// resourceVersion is a hash of the set. A watch sends the set, then polls it every
// crdPollInterval and sends what changed (ADDED, MODIFIED, DELETED) at the new hash; a watch
// from a hash that is not the current one ends with 410, and the client lists again. A poll
// is skipped while a cluster has no live owner (it is moving), so that a move never reads as
// a definition deleted.

// ClustersAnnotation, on a CustomResourceDefinition the Kubernetes API serves, lists the
// clusters that serve it, comma-separated and sorted.
const ClustersAnnotation = "multicache.io/clusters"

// crdPollInterval is how often a watch of the definitions looks for changes.
var crdPollInterval = 5 * time.Second

var crdsResource = &kubeResource{
	gvk:      apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"),
	versions: []string{apiextensionsv1.SchemeGroupVersion.Version},
	api: metav1.APIResource{Name: "customresourcedefinitions", SingularName: "customresourcedefinition", Kind: "CustomResourceDefinition",
		Verbs: readVerbs, ShortNames: []string{"crd", "crds"}, Categories: []string{"api-extensions"}},
}

// isCRDPath reports whether p names the definitions (collection or one) in the fleet's or a
// cluster's view.
func isCRDPath(p kubePath) bool {
	return p.what == "object" && p.group == crdsResource.gvk.Group && p.resource == crdsResource.api.Name
}

// crdEntry is one definition as served: def is the first cluster's (from), never modified.
type crdEntry struct {
	def      *apiextensionsv1.CustomResourceDefinition
	from     string
	clusters []string // sorted
}

// crdGather reads the definitions a request may see.
type crdGather func(ctx context.Context, r *http.Request, kq kubeRequest) ([]crdEntry, error)

// localCRDs are the definitions of this replica's clusters: of kq's cluster only in its view,
// of a fleet part's clusters only when a peer asks for its part, of the clusters its label
// selector's cluster requirements select, and of the clusters the caller may read; each
// cluster's definition only when it matches the selector's other requirements, so that an
// entry is shown from the first cluster whose definition is selected wherever it is merged.
func (s *Server) localCRDs(ctx context.Context, _ *http.Request, kq kubeRequest) ([]crdEntry, error) {
	only := s.partOf(kq.vals)
	clusterReqs, objects, err := clusterRequirements(kq.opts.LabelSelector)
	if err != nil {
		return nil, err
	}
	var names []string
	statuses := s.reg.Status() // sorted by name
	for _, cs := range statuses {
		if (kq.p.cluster == "" || cs.Name == kq.p.cluster) && (only == nil || slices.Contains(only, cs.Name)) {
			names = append(names, cs.Name)
		}
	}
	allowed, err := s.allowedClusters(ctx, selectClusters(names, clusterReqs))
	if err != nil {
		return nil, err
	}
	if only != nil {
		// A fleet part: a cluster planned here that has not started or resolved its
		// resources yet (it is moving here) would be missing from the answer, as if its
		// definitions were gone. Ask again.
		var waiting []string
		for _, c := range selectClusters(only, clusterReqs) {
			if slices.Contains(allowed, c) || !slices.Contains(names, c) {
				if s.resolving(c) {
					waiting = append(waiting, c)
				}
			}
		}
		if len(waiting) > 0 {
			return nil, &errMoving{waiting}
		}
	}
	byName := map[string]*crdEntry{}
	for _, cs := range statuses {
		if !slices.Contains(allowed, cs.Name) {
			continue
		}
		for _, rs := range cs.Resources {
			if rs.Definition == nil || rs.State == clusterset.NotServed || !objects.Matches(labels.Set(rs.Definition.Labels)) {
				continue
			}
			e := byName[rs.Definition.Name]
			if e == nil {
				e = &crdEntry{def: rs.Definition, from: cs.Name}
				byName[rs.Definition.Name] = e
			}
			if !slices.Contains(e.clusters, cs.Name) {
				e.clusters = append(e.clusters, cs.Name)
			}
		}
	}
	return sortedEntries(byName), nil
}

func sortedEntries(byName map[string]*crdEntry) []crdEntry {
	out := make([]crdEntry, 0, len(byName))
	for _, e := range byName {
		sort.Strings(e.clusters)
		out = append(out, *e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].def.Name < out[j].def.Name })
	return out
}

// errMoving is a gather while a cluster it spans has no live owner, or has not started or
// resolved its resources at its owner yet: its definitions would read as gone.
type errMoving struct{ clusters []string }

func (e *errMoving) Error() string {
	return "clusters " + strings.Join(e.clusters, ", ") + " are moving between replicas or starting; retry"
}

// fleetCRDs are the definitions of every replica's part, merged: one entry per name, from the
// first cluster by name, with the union of the clusters.
func (s *Server) fleetCRDs(ctx context.Context, r *http.Request, kq kubeRequest) ([]crdEntry, error) {
	pl := s.plan(nil)
	if len(pl.down) > 0 {
		down := make([]string, 0, len(pl.down))
		for c := range pl.down {
			down = append(down, c)
		}
		sort.Strings(down)
		return nil, &errMoving{down}
	}
	var parts [][]crdEntry
	for _, p := range pl.parts {
		var got []crdEntry
		var err error
		if p.self {
			got, err = s.localCRDs(ctx, r, kubeRequest{vals: restrictTo(nil, p.clusters), opts: kq.opts})
		} else {
			pctx, cancel := context.WithTimeout(ctx, s.opts.PeerTimeout)
			got, err = s.peerCRDs(pctx, r, p, kq.opts.LabelSelector)
			cancel()
		}
		if err != nil {
			return nil, err
		}
		parts = append(parts, got)
	}
	return mergeCRDs(parts...), nil
}

// mergeCRDs merges the parts' entries: one per name, shown from the first cluster by name,
// with the union of their clusters.
func mergeCRDs(parts ...[]crdEntry) []crdEntry {
	byName := map[string]*crdEntry{}
	for _, part := range parts {
		for _, e := range part {
			have := byName[e.def.Name]
			if have == nil {
				byName[e.def.Name] = &crdEntry{def: e.def, from: e.from, clusters: slices.Clone(e.clusters)}
				continue
			}
			if e.from < have.from {
				have.def, have.from = e.def, e.from
			}
			for _, c := range e.clusters {
				if !slices.Contains(have.clusters, c) {
					have.clusters = append(have.clusters, c)
				}
			}
		}
	}
	return sortedEntries(byName)
}

// peerCRDs reads a peer's part of the definitions, of the clusters selector selects.
func (s *Server) peerCRDs(ctx context.Context, r *http.Request, p part, selector string) ([]crdEntry, error) {
	r2 := r.Clone(ctx)
	r2.Header.Set("Accept", "application/json")
	q := url.Values{}
	if selector != "" {
		q.Set("labelSelector", selector)
	}
	resp, err := s.peers.call(ctx, r2, p, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", restrictTo(q, p.clusters), "crds")
	if err != nil {
		return nil, err
	}
	defer drain(resp.Body)
	if err := checkAnswer(p, resp); err != nil {
		return nil, err
	}
	var list apiextensionsv1.CustomResourceDefinitionList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, fmt.Errorf("replica %q: customresourcedefinitions: %w", p.peer, err)
	}
	out := make([]crdEntry, 0, len(list.Items))
	for i := range list.Items {
		def := &list.Items[i]
		e := crdEntry{def: def, from: def.Annotations[api.ClusterAnnotation], clusters: strings.Split(def.Annotations[ClustersAnnotation], ",")}
		// Back to the definition as its cluster serves it: the peer's resourceVersion is a
		// hash of its own set, and the annotations are added again when served.
		def.ResourceVersion = def.Annotations[api.ResourceVersionAnnotation]
		for _, a := range []string{api.ClusterAnnotation, ClustersAnnotation, api.ResourceVersionAnnotation} {
			delete(def.Annotations, a)
		}
		e.clusters = slices.DeleteFunc(e.clusters, func(c string) bool { return !slices.Contains(p.clusters, c) })
		if e.from == "" || len(e.clusters) == 0 {
			continue
		}
		out = append(out, e)
	}
	return out, nil
}

// crdVersion is the resourceVersion of a set of definitions: a hash of what each entry shows.
func crdVersion(entries []crdEntry) string {
	h := fnv.New64a()
	for _, e := range entries {
		fmt.Fprintf(h, "%s\x00%s\x00", e.def.Name, entryVersion(e))
	}
	return strconv.FormatUint(h.Sum64()&(1<<53-1)|1, 10) // a positive integer that JSON numbers keep
}

// entryVersion tells whether an entry changed.
func entryVersion(e crdEntry) string {
	return e.from + "/" + string(e.def.UID) + "/" + e.def.ResourceVersion + "/" + strings.Join(e.clusters, ",")
}

// crdObject is what the API serves of e at resourceVersion rv: a copy of its definition with
// the cluster annotations; its cluster's own resourceVersion moves to an annotation.
func crdObject(e crdEntry, rv string) *apiextensionsv1.CustomResourceDefinition {
	out := e.def.DeepCopy()
	out.Kind, out.APIVersion = crdsResource.gvk.Kind, crdsResource.gvk.GroupVersion().String()
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations[api.ClusterAnnotation] = e.from
	out.Annotations[ClustersAnnotation] = strings.Join(e.clusters, ",")
	out.Annotations[api.ResourceVersionAnnotation] = e.def.ResourceVersion
	out.ResourceVersion = rv
	return out
}

// crdSelect keeps the entries a list's selectors select: the label selector's requirements
// on anything but the cluster key (those select clusters: the gather applied them) and the
// field selector (metadata.name only). With no entries it checks the selectors.
func crdSelect(entries []crdEntry, opts metav1.ListOptions, name string) ([]crdEntry, error) {
	_, objects, err := clusterRequirements(opts.LabelSelector)
	if err != nil {
		return nil, err
	}
	fs := fields.Everything()
	if opts.FieldSelector != "" {
		if fs, err = fields.ParseSelector(opts.FieldSelector); err != nil {
			return nil, fmt.Errorf("fieldSelector %q: %v", opts.FieldSelector, err)
		}
		for _, req := range fs.Requirements() {
			if req.Field != "metadata.name" {
				return nil, fmt.Errorf("fieldSelector %q: field label not supported: %s (customresourcedefinitions select on metadata.name only)", opts.FieldSelector, req.Field)
			}
		}
	}
	var out []crdEntry
	for _, e := range entries {
		if (name == "" || e.def.Name == name) && objects.Matches(labels.Set(e.def.Labels)) && fs.Matches(fields.Set{"metadata.name": e.def.Name}) {
			out = append(out, e)
		}
	}
	return out, nil
}

// serveCRDs answers a get, list or watch of the definitions, in any form the API serves.
func (s *Server) serveCRDs(w http.ResponseWriter, r *http.Request, kq kubeRequest, gather crdGather) {
	if _, err := crdSelect(nil, kq.opts, ""); err != nil {
		filters.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	if kq.watch {
		s.limits.Watch(w, func() { s.watchCRDs(w, r, kq, gather) })
		return
	}
	s.limits.Request(w, func() {
		ctx, cancel := context.WithTimeout(r.Context(), s.opts.RequestTimeout)
		defer cancel()
		all, err := gather(ctx, r, kq)
		if err != nil {
			writeGatherError(w, err)
			return
		}
		rv := crdVersion(all)
		entries, err := crdSelect(all, kq.opts, kq.p.name)
		if err != nil {
			filters.WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		if kq.p.name != "" && len(entries) == 0 {
			gr := crdsResource.groupResource()
			st := filters.StatusOf(http.StatusNotFound, fmt.Sprintf("%s %q not found", gr, kq.p.name))
			st.Details = &metav1.StatusDetails{Name: kq.p.name, Group: gr.Group, Kind: gr.Resource}
			filters.WriteStatus(w, st)
			return
		}
		out, err := crdAnswer(ctx, kq, entries, rv, false, kq.p.name != "")
		if err != nil {
			filters.WriteError(w, http.StatusInternalServerError, err.Error())
			return
		}
		writeJSON(w, out)
	})
}

func writeGatherError(w http.ResponseWriter, err error) {
	var moving *errMoving
	switch {
	case errors.As(err, &moving):
		w.Header().Set("Retry-After", "1")
		filters.WriteError(w, http.StatusServiceUnavailable, err.Error())
	default:
		writeScopeError(w, err)
	}
}

// crdAnswer is entries in kq's form: a list, or the one object when one is true; a Table has
// its columns unless noHeaders.
func crdAnswer(ctx context.Context, kq kubeRequest, entries []crdEntry, rv string, noHeaders, one bool) (runtime.Object, error) {
	objs := make([]*apiextensionsv1.CustomResourceDefinition, len(entries))
	for i, e := range entries {
		objs[i] = crdObject(e, rv)
	}
	switch kq.f.as {
	case "Table":
		rows := make([]table.Row, len(entries))
		for i, e := range entries {
			rows[i] = table.Row{Cluster: strings.Join(e.clusters, ","), Object: objs[i]}
		}
		t, err := table.Build(ctx, crdColumns{}, rows, noHeaders)
		if err != nil {
			return nil, fmt.Errorf("%s: table: %w", crdsResource.groupResource(), err)
		}
		t.ResourceVersion = rv
		if kq.f.tableVersion == "v1beta1" {
			t.APIVersion = "meta.k8s.io/v1beta1"
		}
		switch metav1.IncludeObjectPolicy(kq.table.IncludeObject) {
		case metav1.IncludeNone:
			for i := range t.Rows {
				t.Rows[i].Object = runtime.RawExtension{}
			}
		case metav1.IncludeObject:
			for i := range t.Rows {
				t.Rows[i].Object = runtime.RawExtension{Object: objs[i]}
			}
		}
		return t, nil
	case "PartialObjectMetadata":
		partials := make([]metav1.PartialObjectMetadata, len(objs))
		for i, o := range objs {
			partials[i] = *meta.AsPartialObjectMetadata(o)
			partials[i].Kind, partials[i].APIVersion = "PartialObjectMetadata", metav1.SchemeGroupVersion.String()
		}
		if one {
			return &partials[0], nil
		}
		l := &metav1.PartialObjectMetadataList{Items: partials}
		l.Kind, l.APIVersion, l.ResourceVersion = "PartialObjectMetadataList", metav1.SchemeGroupVersion.String(), rv
		return l, nil
	}
	if one {
		return objs[0], nil
	}
	l := &apiextensionsv1.CustomResourceDefinitionList{Items: make([]apiextensionsv1.CustomResourceDefinition, len(objs))}
	for i, o := range objs {
		l.Items[i] = *o
		l.Items[i].TypeMeta = metav1.TypeMeta{}
	}
	l.Kind, l.APIVersion, l.ResourceVersion = "CustomResourceDefinitionList", crdsResource.gvk.GroupVersion().String(), rv
	return l, nil
}

// watchCRDs streams the definitions' changes (see the top of this file).
func (s *Server) watchCRDs(w http.ResponseWriter, r *http.Request, kq kubeRequest, gather crdGather) {
	ctx := r.Context()
	if d, _ := watchTimeout(kq.vals, kq.opts.TimeoutSeconds); d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		filters.WriteError(w, http.StatusInternalServerError, "streaming unsupported")
		return
	}
	all, err := gather(ctx, r, kq)
	if err != nil {
		writeGatherError(w, err)
		return
	}
	rv := crdVersion(all)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	sink := s.newKubeSink(ctx, w, fl, kq, "")
	defer putBuffer(sink.line)
	columnsSent := false
	send := func(typ string, e crdEntry, rv string) error {
		obj, err := crdAnswer(ctx, kq, []crdEntry{e}, rv, columnsSent, true)
		if err != nil {
			return err
		}
		columnsSent = true
		if t, ok := obj.(*metav1.Table); ok {
			t.ResourceVersion = rv
		}
		return sink.control(typ, obj)
	}
	initial := initialEvents(kq.opts)
	if from := kq.opts.ResourceVersion; !initial && from != "" && from != "0" && from != rv {
		sink.gone(fmt.Errorf("%s: the definitions changed since resourceVersion %s (now %s): list them again", crdsResource.groupResource(), kq.opts.ResourceVersion, rv))
		return
	}
	shown, _ := crdSelect(all, kq.opts, "")
	if initial {
		for _, e := range shown {
			if send("ADDED", e, rv) != nil {
				return
			}
		}
		if kq.opts.SendInitialEvents != nil && *kq.opts.SendInitialEvents && kq.opts.AllowWatchBookmarks {
			if sink.bookmarkAt(rv, true) != nil {
				return
			}
		}
	}
	fl.Flush()
	tick := time.NewTicker(crdPollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if kq.p.cluster != "" && !slices.Contains(s.reg.Clusters(), kq.p.cluster) {
			sink.gone(fmt.Errorf("the fleet changed: cluster %q is not run by this replica any more; list again", kq.p.cluster))
			return
		}
		next, err := gather(ctx, r, kq)
		if err != nil {
			continue // a peer that does not answer, or a move: look again at the next tick
		}
		nrv := crdVersion(next)
		if nrv == rv {
			if kq.opts.AllowWatchBookmarks {
				if sink.bookmarkAt(rv, false) != nil {
					return
				}
				fl.Flush()
			}
			continue
		}
		now, _ := crdSelect(next, kq.opts, "")
		// Each event at its own resourceVersion, the last at the set's: a client that
		// resumes from one in the middle (its stream broke there) gets 410, not a gap.
		events := crdDiff(shown, now)
		partial := slices.Clone(shown)
		for i, ev := range events {
			at := nrv
			if i < len(events)-1 {
				partial = applyCRDEvent(partial, ev)
				at = "1" + crdVersion(partial)
			}
			if send(ev.typ, ev.entry, at) != nil {
				return
			}
		}
		fl.Flush()
		shown, rv = now, nrv
	}
}

type crdEvent struct {
	typ   string
	entry crdEntry
}

// crdDiff is what changed from before to after (both sorted by name): deletes carry the last
// entry shown.
func crdDiff(before, after []crdEntry) []crdEvent {
	var out []crdEvent
	old := map[string]crdEntry{}
	for _, e := range before {
		old[e.def.Name] = e
	}
	for _, e := range after {
		prev, ok := old[e.def.Name]
		switch {
		case !ok:
			out = append(out, crdEvent{"ADDED", e})
		case entryVersion(prev) != entryVersion(e):
			out = append(out, crdEvent{"MODIFIED", e})
		}
		delete(old, e.def.Name)
	}
	for _, e := range before {
		if _, gone := old[e.def.Name]; gone {
			out = append(out, crdEvent{"DELETED", e})
		}
	}
	return out
}

// applyCRDEvent is entries after ev.
func applyCRDEvent(entries []crdEntry, ev crdEvent) []crdEntry {
	out := slices.DeleteFunc(entries, func(e crdEntry) bool { return e.def.Name == ev.entry.def.Name })
	if ev.typ != "DELETED" {
		out = append(out, ev.entry)
	}
	return out
}

// crdColumns are the Table columns of a definition after CLUSTER (the clusters that serve it),
// as kube-apiserver's: its name and when it was created.
type crdColumns struct{}

func (crdColumns) Columns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		{Name: "Name", Type: "string", Format: "name", Description: "The definition's name: plural.group."},
		{Name: "Created At", Type: "date", Description: "When the definition was created in the cluster it is shown from."},
	}
}

func (crdColumns) Cells(_ context.Context, obj runtime.Object) ([]any, error) {
	crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
	if !ok {
		return nil, fmt.Errorf("not a CustomResourceDefinition: %T", obj)
	}
	created := "<unknown>"
	if !crd.CreationTimestamp.IsZero() {
		created = crd.CreationTimestamp.UTC().Format(time.RFC3339)
	}
	return []any{crd.Name, created}, nil
}
