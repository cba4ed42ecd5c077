package kubeapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/kubeapi/discovery"
	"github.com/multicache/multicache/pkg/storage"
	"github.com/multicache/multicache/pkg/table"
)

// encoder writes the objects of one resource in one form of the Kubernetes API (a
// storage.Encoder): each object, its PartialObjectMetadata, or its Table row. Every object
// carries the cluster annotation and shows a position as its resourceVersion (the cluster's own
// moves to an annotation); the cache's object is never modified.
type encoder struct {
	ctx  context.Context
	kr   *discovery.Resource
	e    storage.Encoding
	conv table.Convertor // for a Table
	// shared holds watch events' encodings for every watch of the API (events.go); nil
	// encodes each event for its own watch.
	shared *eventCache
}

// encoder is the encoder of e for kr.
func (a *API) encoder(ctx context.Context, e storage.Encoding, kr *discovery.Resource) (*encoder, error) {
	en := &encoder{ctx: ctx, kr: kr, e: e, shared: a.events}
	if e.As == "Table" {
		var err error
		if en.conv, err = a.convertor(kr); err != nil {
			return nil, storage.Error(http.StatusInternalServerError, err.Error())
		}
	}
	return en, nil
}

// Encoders makes the encoders a peer answers a request of this API with: of a resource by its
// configured name, in the fleet's view.
func (a *API) Encoders(ctx context.Context, e storage.Encoding, resource string) (storage.Encoder, error) {
	v, _ := a.opts.Catalog.View(ctx, "", false)
	kr := v.ByName(resource)
	if kr == nil {
		if v, _ = a.opts.Catalog.View(ctx, "", true); v.ByName(resource) == nil {
			return nil, storage.Errorf(http.StatusNotFound, "resource %q is not served here", resource)
		}
		kr = v.ByName(resource)
	}
	return a.encoder(ctx, e, kr)
}

// convertor is kr's table.Convertor.
func (a *API) convertor(kr *discovery.Resource) (table.Convertor, error) {
	switch kr {
	case discovery.ClustersResource:
		return clusterColumns{}, nil
	case discovery.DefinitionsResource:
		return definitionColumns{}, nil
	}
	return a.tables.For(kr.GVK, kr.Columns, kr.Mode == clusterset.ModeMetadata)
}

// Append appends it, showing rv as its resourceVersion ("" leaves it alone). An object a peer
// encoded is written as it is, rv put in place of the resourceVersion it showed.
func (en *encoder) Append(buf *bytes.Buffer, it storage.Item, rv string) error {
	if it.Raw != nil {
		return splice(buf, it.Raw, it.RawRV, rv, en.e.As == "Table")
	}
	if en.e.As == "Table" {
		row, err := en.row(it, rv)
		if err != nil {
			return err
		}
		if err := storage.AppendJSON(buf, row); err != nil {
			return fmt.Errorf("cluster %q: encode %s: %w", it.Key.Cluster, it.Key, err)
		}
		return nil
	}
	obj, err := object(it, rv, en.kr, en.e.TypeMeta || en.e.As == "PartialObjectMetadata")
	if err != nil {
		return err
	}
	var v any = obj
	if en.e.As == "PartialObjectMetadata" {
		m, err := meta.Accessor(obj)
		if err != nil {
			return fmt.Errorf("cluster %q: %w", it.Key.Cluster, err)
		}
		p := meta.AsPartialObjectMetadata(m)
		p.Kind, p.APIVersion = "PartialObjectMetadata", metav1.SchemeGroupVersion.String()
		v = p
	}
	if err := storage.AppendJSON(buf, v); err != nil {
		return fmt.Errorf("cluster %q: encode %s: %w", it.Key.Cluster, it.Key, err)
	}
	return nil
}

// row is it's Table row: CLUSTER, then the kind's cells, and its object as IncludeObject says
// (its PartialObjectMetadata by default).
func (en *encoder) row(it storage.Item, rv string) (metav1.TableRow, error) {
	obj, err := object(it, rv, en.kr, true)
	if err != nil {
		return metav1.TableRow{}, err
	}
	t, err := table.Build(en.ctx, en.conv, []table.Row{{Cluster: it.Key.Cluster, Object: obj}}, true)
	if err != nil {
		return metav1.TableRow{}, fmt.Errorf("%s: table: %w", en.kr.GroupResource(), err)
	}
	row := t.Rows[0]
	switch metav1.IncludeObjectPolicy(en.e.IncludeObject) {
	case metav1.IncludeNone:
		row.Object = runtime.RawExtension{}
	case metav1.IncludeObject:
		row.Object = runtime.RawExtension{Object: obj}
	}
	return row, nil
}

// table is an empty Table of the encoder's form: its columns unless noHeaders.
func (en *encoder) table(noHeaders bool) *metav1.Table {
	t := &metav1.Table{}
	t.Kind, t.APIVersion = "Table", metav1.SchemeGroupVersion.String()
	if en.e.TableVersion == "v1beta1" {
		t.APIVersion = "meta.k8s.io/v1beta1"
	}
	if !noHeaders {
		t.ColumnDefinitions = append([]metav1.TableColumnDefinition{table.ClusterColumn}, en.conv.Columns()...)
	}
	return t
}

// object returns what the Kubernetes API serves of it: a copy of its object that carries the
// cluster annotation (and apiVersion and kind when typeMeta), with rv as its resourceVersion
// when rv is set and the cluster's own in an annotation. The copy is shallow, with its own
// metadata and annotations: the cache's object is never modified.
func object(it storage.Item, rv string, kr *discovery.Resource, typeMeta bool) (runtime.Object, error) {
	cluster, obj := it.Key.Cluster, it.Object
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
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
			c["apiVersion"], c["kind"] = kr.GVK.GroupVersion().String(), kr.GVK.Kind
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
			if own := m.GetResourceVersion(); own != "" {
				ann[api.ResourceVersionAnnotation] = own
			}
			m.SetResourceVersion(rv)
		}
		m.SetAnnotations(ann)
		gvk := kr.GVK
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

// splice appends raw, an object (or a Table row) a peer encoded showing the resourceVersion
// old, with rv in its place. The position the peer gave it is a token of base64 characters: in
// the object's JSON, `"resourceVersion":"<token>"` is a key and its value (inside a string value
// the quotes would be escaped). When it occurs once, it is the object's own, and it is replaced
// where it is: nothing is encoded again. Otherwise (another field holds the same key and token,
// or the object has none) an object is decoded, changed and encoded again; a row is left as it
// is (its object, when it has one, shows the peer's position).
func splice(buf *bytes.Buffer, raw []byte, old, rv string, row bool) error {
	if old == "" || rv == "" || old == rv {
		buf.Write(raw)
		return nil
	}
	key := []byte(`"resourceVersion":"` + old + `"`)
	if i := bytes.Index(raw, key); i >= 0 && bytes.Count(raw, key) == 1 {
		buf.Write(raw[:i])
		buf.WriteString(`"resourceVersion":"`)
		buf.WriteString(rv)
		buf.WriteByte('"')
		buf.Write(raw[i+len(key):])
		return nil
	}
	if row {
		buf.Write(raw)
		return nil
	}
	var obj, md map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return err
	}
	_ = json.Unmarshal(obj["metadata"], &md)
	if md == nil {
		md = map[string]json.RawMessage{}
	}
	md["resourceVersion"], _ = json.Marshal(rv)
	obj["metadata"], _ = json.Marshal(md)
	b, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	buf.Write(b)
	return nil
}
