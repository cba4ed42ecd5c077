package kubeapi

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/http"
	"slices"
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
	"github.com/multicache/multicache/pkg/filters"
	"github.com/multicache/multicache/pkg/kubeapi/discovery"
	"github.com/multicache/multicache/pkg/storage"
	"github.com/multicache/multicache/pkg/table"
)

// CustomResourceDefinitions, read-only (apiextensions.k8s.io/v1 customresourcedefinitions):
// one entry per definition of a custom resource the daemon caches, as the first cluster (by
// name) that serves it served it when the resource was resolved there, with every cluster that
// serves it in the annotation multicache.io/clusters. Clients that build their view of the API
// from the definitions (k9s) read them; a definition the daemon does not cache is not listed,
// as discovery does not list its resource.
//
// The set is small and changes rarely, so it is read on each request (storage.Status's
// Definitions: this replica's clusters, and in a sharded fleet every owner's). Its
// resourceVersion is a hash of the set. A watch sends the set, then reads it every
// definitionsPollInterval and sends what changed (ADDED, MODIFIED, DELETED) at the new hash; a
// watch from a hash that is not the current one ends with 410, and the client lists again. A
// read is skipped while a cluster has no live owner (it is moving), so that a move never reads
// as a definition deleted.

// ClustersAnnotation, on a CustomResourceDefinition the Kubernetes API serves, lists the
// clusters that serve it, comma-separated and sorted.
const ClustersAnnotation = "multicache.io/clusters"

// definitionsPollInterval is how often a watch of the definitions looks for changes.
var definitionsPollInterval = 5 * time.Second

// SetDefinitionsPollInterval sets how often a watch of the definitions looks for changes, for
// tests; the function it returns sets it back.
func SetDefinitionsPollInterval(d time.Duration) (restore func()) {
	was := definitionsPollInterval
	definitionsPollInterval = d
	return func() { definitionsPollInterval = was }
}

// definitions answers a get, list or watch of the definitions, in any form the API serves.
func (a *API) definitions(ctx context.Context, w http.ResponseWriter, r *http.Request, rq request) {
	if _, err := crdSelect(nil, rq.list.opts, ""); err != nil {
		writeError(w, err)
		return
	}
	opts := storage.ClusterOptions{LabelSelector: rq.list.opts.LabelSelector}
	if rq.p.cluster != "" {
		opts.Clusters = []string{rq.p.cluster}
	}
	if rq.list.watch {
		a.opts.Limits.Watch(w, func() { a.watchDefinitions(w, r, rq, opts) })
		return
	}
	a.limited(ctx, w, func(ctx context.Context) {
		all, err := a.opts.Status.Definitions(ctx, opts)
		if err != nil {
			writeError(w, err)
			return
		}
		rv := crdVersion(all)
		entries, err := crdSelect(all, rq.list.opts, rq.p.name)
		if err != nil {
			writeError(w, err)
			return
		}
		if rq.p.name != "" && len(entries) == 0 {
			gr := discovery.DefinitionsResource.GroupResource()
			writeError(w, storage.NotFound(gr, rq.p.name, fmt.Sprintf("%s %q not found", gr, rq.p.name)))
			return
		}
		out, err := crdAnswer(ctx, rq, entries, rv, false, rq.p.name != "")
		if err != nil {
			writeError(w, storage.Error(http.StatusInternalServerError, err.Error()))
			return
		}
		writeJSON(w, out)
	})
}

// crdVersion is the resourceVersion of a set of definitions: a hash of what each entry shows.
func crdVersion(entries []storage.Definition) string {
	h := fnv.New64a()
	for _, e := range entries {
		fmt.Fprintf(h, "%s\x00%s\x00", e.Def.Name, entryVersion(e))
	}
	return strconv.FormatUint(h.Sum64()&(1<<53-1)|1, 10) // a positive integer that JSON numbers keep
}

// entryVersion tells whether an entry changed.
func entryVersion(e storage.Definition) string {
	return e.From + "/" + string(e.Def.UID) + "/" + e.Def.ResourceVersion + "/" + strings.Join(e.Clusters, ",")
}

// crdObject is what the API serves of e at resourceVersion rv: a copy of its definition with
// the cluster annotations; its cluster's own resourceVersion moves to an annotation.
func crdObject(e storage.Definition, rv string) *apiextensionsv1.CustomResourceDefinition {
	out := e.Def.DeepCopy()
	out.Kind, out.APIVersion = discovery.DefinitionsResource.GVK.Kind, discovery.DefinitionsResource.GVK.GroupVersion().String()
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations[api.ClusterAnnotation] = e.From
	out.Annotations[ClustersAnnotation] = strings.Join(e.Clusters, ",")
	out.Annotations[api.ResourceVersionAnnotation] = e.Def.ResourceVersion
	out.ResourceVersion = rv
	return out
}

// crdSelect keeps the entries a list's selectors select: the label selector's requirements
// on anything but the cluster key (those select clusters: the gather applied them) and the
// field selector (metadata.name only). With no entries it checks the selectors.
func crdSelect(entries []storage.Definition, opts metav1.ListOptions, name string) ([]storage.Definition, error) {
	_, objects, err := storage.SplitSelector(opts.LabelSelector)
	if err != nil {
		return nil, err
	}
	fs := fields.Everything()
	if opts.FieldSelector != "" {
		if fs, err = fields.ParseSelector(opts.FieldSelector); err != nil {
			return nil, storage.Errorf(http.StatusBadRequest, "fieldSelector %q: %v", opts.FieldSelector, err)
		}
		for _, req := range fs.Requirements() {
			if req.Field != "metadata.name" {
				return nil, storage.Errorf(http.StatusBadRequest, "fieldSelector %q: field label not supported: %s (customresourcedefinitions select on metadata.name only)", opts.FieldSelector, req.Field)
			}
		}
	}
	var out []storage.Definition
	for _, e := range entries {
		if (name == "" || e.Def.Name == name) && objects.Matches(labels.Set(e.Def.Labels)) && fs.Matches(fields.Set{"metadata.name": e.Def.Name}) {
			out = append(out, e)
		}
	}
	return out, nil
}

// crdAnswer is entries in kq's form: a list, or the one object when one is true; a Table has
// its columns unless noHeaders.
func crdAnswer(ctx context.Context, rq request, entries []storage.Definition, rv string, noHeaders, one bool) (runtime.Object, error) {
	objs := make([]*apiextensionsv1.CustomResourceDefinition, len(entries))
	for i, e := range entries {
		objs[i] = crdObject(e, rv)
	}
	switch rq.enc.As {
	case "Table":
		rows := make([]table.Row, len(entries))
		for i, e := range entries {
			rows[i] = table.Row{Cluster: strings.Join(e.Clusters, ","), Object: objs[i]}
		}
		t, err := table.Build(ctx, definitionColumns{}, rows, noHeaders)
		if err != nil {
			return nil, fmt.Errorf("%s: table: %w", discovery.DefinitionsResource.GroupResource(), err)
		}
		t.ResourceVersion = rv
		if rq.enc.TableVersion == "v1beta1" {
			t.APIVersion = "meta.k8s.io/v1beta1"
		}
		switch metav1.IncludeObjectPolicy(rq.list.table.IncludeObject) {
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
	l.Kind, l.APIVersion, l.ResourceVersion = "CustomResourceDefinitionList", discovery.DefinitionsResource.GVK.GroupVersion().String(), rv
	return l, nil
}

// watchDefinitions streams the definitions' changes (see the top of this file).
func (a *API) watchDefinitions(w http.ResponseWriter, r *http.Request, rq request, opts storage.ClusterOptions) {
	ctx := r.Context()
	if t := rq.list.opts.TimeoutSeconds; t != nil && *t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(*t)*time.Second)
		defer cancel()
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, storage.Error(http.StatusInternalServerError, "streaming unsupported"))
		return
	}
	all, err := a.opts.Status.Definitions(ctx, opts)
	if err != nil {
		writeError(w, err)
		return
	}
	rv := crdVersion(all)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	enc := rq.enc
	enc.TypeMeta = true
	sink := &watchSink{w: w, fl: fl, en: &encoder{ctx: ctx, kr: discovery.DefinitionsResource, e: enc}}
	lo := rq.list.opts
	columnsSent := false
	send := func(typ string, e storage.Definition, rv string) error {
		obj, err := crdAnswer(ctx, rq, []storage.Definition{e}, rv, columnsSent, true)
		if err != nil {
			return err
		}
		columnsSent = true
		if t, ok := obj.(*metav1.Table); ok {
			t.ResourceVersion = rv
		}
		return sink.control(typ, obj)
	}
	initial := filters.InitialEvents(lo)
	if from := lo.ResourceVersion; !initial && from != "" && from != "0" && from != rv {
		sink.fail(storage.Errorf(http.StatusGone, "%s: the definitions changed since resourceVersion %s (now %s): list them again", discovery.DefinitionsResource.GroupResource(), lo.ResourceVersion, rv))
		return
	}
	shown, _ := crdSelect(all, lo, "")
	if initial {
		for _, e := range shown {
			if send("ADDED", e, rv) != nil {
				return
			}
		}
		if lo.SendInitialEvents != nil && *lo.SendInitialEvents && lo.AllowWatchBookmarks {
			if sink.Bookmark(rv, true) != nil {
				return
			}
		}
	}
	fl.Flush()
	tick := time.NewTicker(definitionsPollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		next, err := a.opts.Status.Definitions(ctx, opts)
		if storage.Code(err) == http.StatusForbidden || storage.Code(err) == http.StatusNotFound {
			sink.fail(storage.Error(http.StatusGone, "the fleet changed: "+err.Error()+"; list again"))
			return
		}
		if err != nil {
			continue // a replica that does not answer, or a move: look again at the next tick
		}
		nrv := crdVersion(next)
		if nrv == rv {
			if lo.AllowWatchBookmarks {
				if sink.Bookmark(rv, false) != nil {
					return
				}
				fl.Flush()
			}
			continue
		}
		now, _ := crdSelect(next, lo, "")
		// Each event at its own resourceVersion, the last at the set's: a client that resumes
		// from one in the middle (its stream broke there) gets 410, not a gap.
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
	entry storage.Definition
}

// crdDiff is what changed from before to after (both sorted by name): deletes carry the last
// entry shown.
func crdDiff(before, after []storage.Definition) []crdEvent {
	var out []crdEvent
	old := map[string]storage.Definition{}
	for _, e := range before {
		old[e.Def.Name] = e
	}
	for _, e := range after {
		prev, ok := old[e.Def.Name]
		switch {
		case !ok:
			out = append(out, crdEvent{"ADDED", e})
		case entryVersion(prev) != entryVersion(e):
			out = append(out, crdEvent{"MODIFIED", e})
		}
		delete(old, e.Def.Name)
	}
	for _, e := range before {
		if _, gone := old[e.Def.Name]; gone {
			out = append(out, crdEvent{"DELETED", e})
		}
	}
	return out
}

// applyCRDEvent is entries after ev.
func applyCRDEvent(entries []storage.Definition, ev crdEvent) []storage.Definition {
	out := slices.DeleteFunc(entries, func(e storage.Definition) bool { return e.Def.Name == ev.entry.Def.Name })
	if ev.typ != "DELETED" {
		out = append(out, ev.entry)
	}
	return out
}

// definitionColumns are the Table columns of a definition after CLUSTER (the clusters that serve it),
// as kube-apiserver's: its name and when it was created.
type definitionColumns struct{}

func (definitionColumns) Columns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		{Name: "Name", Type: "string", Format: "name", Description: "The definition's name: plural.group."},
		{Name: "Created At", Type: "date", Description: "When the definition was created in the cluster it is shown from."},
	}
}

func (definitionColumns) Cells(_ context.Context, obj runtime.Object) ([]any, error) {
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
