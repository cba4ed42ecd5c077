package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"reflect"
	"strings"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/table"
	"github.com/multicache/multicache/pkg/watchcache"
)

// form is what a Kubernetes API client asked an answer to be, from its Accept header.
type form struct {
	as           string // "" (objects), "Table" or "PartialObjectMetadata"
	tableVersion string // meta.k8s.io version of a Table: v1 or v1beta1
}

// negotiate reads the Accept header: the first entry the server can answer wins. JSON is the
// only encoding; a client that offers protobuf first (generated clients do) offers JSON too.
func negotiate(r *http.Request) (form, error) {
	accept := r.Header.Get("Accept")
	if strings.TrimSpace(accept) == "" {
		return form{}, nil
	}
	for _, entry := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(entry))
		if err != nil {
			continue
		}
		if mt != "application/json" && mt != "*/*" && mt != "application/*" {
			continue
		}
		switch as := params["as"]; {
		case as == "":
			return form{}, nil
		case as == "Table" && params["g"] == "meta.k8s.io" && (params["v"] == "v1" || params["v"] == "v1beta1"):
			return form{as: "Table", tableVersion: params["v"]}, nil
		case (as == "PartialObjectMetadata" || as == "PartialObjectMetadataList") && params["g"] == "meta.k8s.io" && params["v"] == "v1":
			return form{as: "PartialObjectMetadata"}, nil
		}
	}
	return form{}, fmt.Errorf("none of the media types accepted (%s) can be served: the server answers application/json, as objects, Table (meta.k8s.io v1, v1beta1) or PartialObjectMetadata (meta.k8s.io v1)", accept)
}

// kubeObject returns what the Kubernetes API serves of it: a copy of its object that carries
// the cluster annotation (and apiVersion and kind when typeMeta), with Secrets redacted unless
// allowed. Its resourceVersion is a position of the watch cache (epoch, it.Seq) that a watch
// resumes from, as client-go's reflectors do with the last object they received; the
// cluster's own resourceVersion moves to an annotation. Without an epoch (clusters) it is
// left alone. The cache's object is never modified: the copy is shallow, with its own metadata
// and annotations.
func (s *Server) kubeObject(it item, epoch string, kr *kubeResource, typeMeta bool) (runtime.Object, error) {
	return s.kubeObjectAt(it, epoch, "", kr, typeMeta)
}

// kubeObjectAt is kubeObject with the resourceVersion rv when it is set (a fan-in's position
// after the object's event), instead of the object's own position.
func (s *Server) kubeObjectAt(it item, epoch, rv string, kr *kubeResource, typeMeta bool) (runtime.Object, error) {
	cluster, obj := it.Key.Cluster, it.Object
	if rv == "" && epoch != "" {
		rv = watchcache.Position{Epoch: epoch, Seq: it.Seq}.String()
	}
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if !s.opts.AllowSecretData {
		obj = redactSecret(obj, kr.gvk.Group == "" && kr.gvk.Kind == "Secret")
	}
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		c := make(map[string]any, len(o.Object))
		for k, v := range o.Object {
			c[k] = v
		}
		md, _ := o.Object["metadata"].(map[string]any)
		mdc := make(map[string]any, len(md)+1)
		for k, v := range md {
			mdc[k] = v
		}
		ann, _ := md["annotations"].(map[string]any)
		annc := make(map[string]any, len(ann)+1)
		for k, v := range ann {
			annc[k] = v
		}
		annc[api.ClusterAnnotation] = cluster
		if rv != "" {
			if own, ok := md["resourceVersion"].(string); ok {
				annc[api.ResourceVersionAnnotation] = own
			}
			mdc["resourceVersion"] = rv
		}
		mdc["annotations"] = annc
		c["metadata"] = mdc
		if _, has := c["kind"]; !has && typeMeta {
			c["apiVersion"], c["kind"] = kr.gvk.GroupVersion().String(), kr.gvk.Kind
		}
		return &unstructured.Unstructured{Object: c}, nil
	case runtime.Object:
		v := reflect.ValueOf(o)
		if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
			return nil, fmt.Errorf("cluster %q: cannot copy a %T", cluster, obj)
		}
		cp := reflect.New(v.Elem().Type())
		cp.Elem().Set(v.Elem())
		c := cp.Interface().(runtime.Object)
		m, err := meta.Accessor(c)
		if err != nil {
			return nil, fmt.Errorf("cluster %q: %w", cluster, err)
		}
		ann := make(map[string]string, len(m.GetAnnotations())+1)
		for k, v := range m.GetAnnotations() {
			ann[k] = v
		}
		ann[api.ClusterAnnotation] = cluster
		if rv != "" {
			ann[api.ResourceVersionAnnotation] = m.GetResourceVersion()
			m.SetResourceVersion(rv)
		}
		m.SetAnnotations(ann)
		gvk := kr.gvk
		if _, isPartial := c.(*metav1.PartialObjectMetadata); !isPartial {
			if kinds, _, err := scheme.Scheme.ObjectKinds(c); err == nil && len(kinds) > 0 {
				gvk = kinds[0] // the version this cluster's informer decodes, whatever the first cluster's
			}
		}
		if !typeMeta {
			gvk = schema.GroupVersionKind{} // as kube-apiserver lists typed objects
		}
		c.GetObjectKind().SetGroupVersionKind(gvk)
		return c, nil
	}
	return nil, fmt.Errorf("cluster %q: cannot serve a %T", cluster, obj)
}

// kubeList is one answer to a Kubernetes list: its items, in key order, and its position.
type kubeList struct {
	kr            *kubeResource
	items         []item
	rv, cont      string
	epoch         string // of the items' resourceVersions; "" for clusters
	includeObject string // of a Table: None, Metadata (the default) or Object
}

// listChunk is how many items of a Kubernetes list are encoded before they are written: a
// list without a limit may hold every cached object, and is streamed so that its encoding
// never sits in memory whole.
const listChunk = 1000

// writeKubeList answers l in the form the client asked for: a {Kind}List, a Table, or a
// PartialObjectMetadataList, written listChunk items at a time. An error before the first
// write is returned (the caller answers it); after it, the response is aborted, so that the
// client sees a failed transfer rather than a truncated list.
func (s *Server) writeKubeList(ctx context.Context, w http.ResponseWriter, f form, l kubeList) error {
	buf := getBuffer()
	defer putBuffer(buf)
	started := false
	flush := func() {
		if !started {
			w.Header().Set("Content-Type", "application/json")
			started = true
		}
		_, _ = w.Write(buf.Bytes())
		buf.Reset()
	}
	fail := func(err error) error {
		if started {
			s.opts.Logger.Warn("list aborted mid-answer", zap.String("resource", l.kr.api.Name), zap.Error(err))
			panic(http.ErrAbortHandler)
		}
		return err
	}
	for start := 0; start == 0 || start < len(l.items); start += listChunk {
		part := l.items[start:min(len(l.items), start+listChunk)]
		if start > 0 {
			buf.WriteByte(',')
		}
		switch f.as {
		case "Table":
			t, err := s.kubeTable(ctx, l.kr, part, l.epoch, false, l.includeObject, f.tableVersion)
			if err != nil {
				return fail(err)
			}
			if start == 0 {
				// The table without its rows, then the rows one by one: "rows" is its last
				// field, and is never omitted.
				rows := t.Rows
				t.Rows, t.ResourceVersion, t.Continue = nil, l.rv, l.cont
				head, err := json.Marshal(t)
				if err != nil || !bytes.HasSuffix(head, []byte(`"rows":null}`)) {
					return fail(fmt.Errorf("encode table of %s: %v", l.kr.api.Name, err))
				}
				buf.Write(head[:len(head)-len(`null}`)])
				buf.WriteByte('[')
				t.Rows = rows
			}
			for i, row := range t.Rows {
				if i > 0 {
					buf.WriteByte(',')
				}
				b, err := json.Marshal(row)
				if err != nil {
					return fail(err)
				}
				buf.Write(b)
			}
		default:
			if start == 0 {
				kind, apiVersion := l.kr.gvk.Kind+"List", l.kr.gvk.GroupVersion().String()
				if f.as == "PartialObjectMetadata" {
					kind, apiVersion = "PartialObjectMetadataList", metav1.SchemeGroupVersion.String()
				}
				md, _ := json.Marshal(metav1.ListMeta{ResourceVersion: l.rv, Continue: l.cont})
				fmt.Fprintf(buf, `{"kind":%q,"apiVersion":%q,"metadata":%s,"items":[`, kind, apiVersion, md)
			}
			err := encodeEach(buf, len(part), func(buf *bytes.Buffer, i int) error {
				return s.appendKubeObject(buf, f, l.kr, part[i], l.epoch, false)
			})
			if err != nil {
				return fail(err)
			}
		}
		if start+listChunk < len(l.items) {
			flush()
		}
	}
	buf.WriteString("]}\n")
	flush()
	return nil
}

// appendKubeObject appends it as the Kubernetes API serves it: the object, or its
// PartialObjectMetadata.
func (s *Server) appendKubeObject(buf *bytes.Buffer, f form, kr *kubeResource, it item, epoch string, typeMeta bool) error {
	return s.appendKubeObjectAt(buf, f, kr, it, epoch, "", typeMeta)
}

// appendKubeObjectAt is appendKubeObject with the resourceVersion rv when it is set.
func (s *Server) appendKubeObjectAt(buf *bytes.Buffer, f form, kr *kubeResource, it item, epoch, rv string, typeMeta bool) error {
	obj, err := s.kubeObjectAt(it, epoch, rv, kr, typeMeta || f.as == "PartialObjectMetadata")
	if err != nil {
		return err
	}
	var v any = obj
	if f.as == "PartialObjectMetadata" {
		m, err := meta.Accessor(obj)
		if err != nil {
			return fmt.Errorf("cluster %q: %w", it.Key.Cluster, err)
		}
		p := meta.AsPartialObjectMetadata(m)
		p.Kind, p.APIVersion = "PartialObjectMetadata", metav1.SchemeGroupVersion.String()
		v = p
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("cluster %q: encode %s: %w", it.Key.Cluster, it.Key, err)
	}
	buf.Write(b)
	return nil
}

// kubeTable makes the Table of items: CLUSTER, then the kind's columns (none when noHeaders),
// each row's object as includeObject says.
func (s *Server) kubeTable(ctx context.Context, kr *kubeResource, items []item, epoch string, noHeaders bool, includeObject, version string) (*metav1.Table, error) {
	conv, err := s.convertor(kr)
	if err != nil {
		return nil, err
	}
	rows := make([]table.Row, len(items))
	for i, it := range items {
		obj, err := s.kubeObject(it, epoch, kr, true)
		if err != nil {
			return nil, err
		}
		rows[i] = table.Row{Cluster: it.Key.Cluster, Object: obj}
	}
	t, err := table.Build(ctx, conv, rows, noHeaders)
	if err != nil {
		return nil, fmt.Errorf("%s: table: %w", kr.groupResource(), err)
	}
	if version == "v1beta1" {
		t.APIVersion = "meta.k8s.io/v1beta1"
	}
	switch metav1.IncludeObjectPolicy(includeObject) {
	case metav1.IncludeNone:
		for i := range t.Rows {
			t.Rows[i].Object = runtime.RawExtension{}
		}
	case metav1.IncludeObject:
		for i := range t.Rows {
			t.Rows[i].Object = runtime.RawExtension{Object: rows[i].Object}
		}
	}
	return t, nil
}

// convertor is kr's table.Convertor.
func (s *Server) convertor(kr *kubeResource) (table.Convertor, error) {
	switch kr {
	case clustersResource:
		return clusterColumns{}, nil
	case crdsResource:
		return crdColumns{}, nil
	}
	return s.tables.For(kr.gvk, kr.columns, kr.mode == clusterset.ModeMetadata)
}
