package clusterset

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// podListServer serves GET /api/v1/pods as kube-apiserver would: the first n Pods of total
// (limit), with remainingItemCount, in protobuf or JSON as asked; /api/v1/gone answers 410.
func podListServer(t *testing.T, total int) *httptest.Server {
	t.Helper()
	pods := make([]corev1.Pod, total)
	for i := range pods {
		pods[i] = corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%d", i), Namespace: "ns", ResourceVersion: strconv.Itoa(10 + i),
				Labels: map[string]string{"app": "a"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m", FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:spec":{}}`)}}},
			Spec: corev1.PodSpec{NodeName: "n", Containers: []corev1.Container{{Name: "c", Image: "i",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}}},
		}
	}
	codecs := scheme.Codecs
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ct := runtime.ContentTypeJSON
		if bytes.Contains([]byte(r.Header.Get("Accept")), []byte(runtime.ContentTypeProtobuf)) && r.URL.Query().Get("json") == "" {
			ct = runtime.ContentTypeProtobuf
		}
		info, _ := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), ct)
		enc := codecs.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion)
		var obj runtime.Object
		status := http.StatusOK
		switch r.URL.Path {
		case "/api/v1/pods":
			list := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "99"}, Items: pods}
			if l, _ := strconv.Atoi(r.URL.Query().Get("limit")); l > 0 && l < total {
				rest := int64(total - l)
				list.Items, list.Continue, list.RemainingItemCount = pods[:l], "next", &rest
			}
			if n, err := strconv.Atoi(r.URL.Query().Get("only")); err == nil { // the collection has shrunk to n
				list.Items = pods[:n]
			}
			obj = list
		case "/api/v1/expired-ok": // a failure Status with 200
			obj = &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusGone, Reason: metav1.StatusReasonExpired, Message: "too old resource version"}
		case "/api/v1/gone":
			status = http.StatusGone
			obj = &metav1.Status{Status: metav1.StatusFailure, Code: int32(status), Reason: metav1.StatusReasonExpired, Message: "too old resource version"}
		default:
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", ct)
		w.WriteHeader(status)
		if err := enc.Encode(obj, w); err != nil {
			t.Errorf("encode: %v", err)
		}
	}))
}

// TestSizedListsDecodeAsTheRESTClient: the same request, decoded by sizedLists and by the REST
// client's Do().Get(), gives equal lists, in protobuf and in JSON, whole and as a page; a list
// after a page of one has room for every item; errors are Do's.
func TestSizedListsDecodeAsTheRESTClient(t *testing.T) {
	srv := podListServer(t, 50)
	defer srv.Close()
	rc, err := typedClient(&rest.Config{Host: srv.URL, QPS: -1}, corev1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lists := newSizedLists(corev1.SchemeGroupVersion.WithKind("PodList"))
	for _, c := range []struct {
		name  string
		query map[string]string
	}{
		{"a page of one, protobuf", map[string]string{"limit": "1"}},
		{"whole, protobuf", nil},
		{"whole, JSON", map[string]string{"json": "1"}},
		{"a page of 7, JSON", map[string]string{"limit": "7", "json": "1"}},
	} {
		var opts metav1.ListOptions
		req := func() *rest.Request {
			r := rc.Get().Resource("pods")
			for k, v := range c.query {
				r = r.Param(k, v)
			}
			if l, ok := c.query["limit"]; ok {
				opts.Limit, _ = strconv.ParseInt(l, 10, 64)
			}
			return r
		}
		want, err := req().Do(ctx).Get()
		if err != nil {
			t.Fatalf("%s: Do: %v", c.name, err)
		}
		got, err := lists.list(ctx, req(), opts)
		if err != nil {
			t.Fatalf("%s: sizedLists: %v", c.name, err)
		}
		if !apiequality.Semantic.DeepEqual(got, want) {
			t.Fatalf("%s: lists differ:\n got %+v\nwant %+v", c.name, got, want)
		}
		if got.GetObjectKind().GroupVersionKind() != want.GetObjectKind().GroupVersionKind() {
			t.Errorf("%s: kind %v, the REST client gives %v", c.name, got.GetObjectKind().GroupVersionKind(), want.GetObjectKind().GroupVersionKind())
		}
		if c.name == "a page of one, protobuf" {
			if b, n := lists.expect(metav1.ListOptions{}); n != 50 || b <= 0 {
				t.Errorf("after a page of 1 of 50: expects %d items in %d bytes", n, b)
			}
		}
		if c.name == "whole, protobuf" {
			// Room made at once for the 50 expected and a sixteenth more; grown by append
			// from nothing, as the REST client's decoder does, it would be 64.
			if l := got.(*corev1.PodList); cap(l.Items) != 50+50/16 || len(l.Items) != 50 {
				t.Errorf("whole list after a page: %d items with room for %d, want room made for 50 (and 3 more) at once", len(l.Items), cap(l.Items))
			}
		}
	}

	for _, res := range []string{"gone", "expired-ok"} {
		_, wantErr := rc.Get().Resource(res).Do(ctx).Get()
		_, err = lists.list(ctx, rc.Get().Resource(res), metav1.ListOptions{})
		if !apierrors.IsResourceExpired(err) || err.Error() != wantErr.Error() {
			t.Errorf("%s: got %v, the REST client gives %v", res, err, wantErr)
		}
	}

	// The collection shrank: the room made for items follows the body, not the last list;
	// and no items decode to nil, as the REST client's do.
	for _, n := range []int{5, 0} {
		want, _ := rc.Get().Resource("pods").Param("only", strconv.Itoa(n)).Do(ctx).Get()
		got, err := lists.list(ctx, rc.Get().Resource("pods").Param("only", strconv.Itoa(n)), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		l := got.(*corev1.PodList)
		if !apiequality.Semantic.DeepEqual(got, want) || len(l.Items) != n || cap(l.Items) > 2*n+1 || (n == 0) != (l.Items == nil) {
			t.Errorf("a list of %d after one of 50: %d items, room for %d (nil: %v)", n, len(l.Items), cap(l.Items), l.Items == nil)
		}
		// Back to 50 for the next round: the whole list teaches the size again.
		if _, err := lists.list(ctx, rc.Get().Resource("pods"), metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSizedListsRetryAsDo: a GET whose connection is dropped before an answer is sent again,
// as rest.Request.Do does.
func TestSizedListsRetryAsDo(t *testing.T) {
	inner := podListServer(t, 3)
	defer inner.Close()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close() // dropped: the client reads EOF
			}
			return
		}
		inner.Config.Handler.ServeHTTP(w, r)
	}))
	defer srv.Close()
	rc, err := typedClient(&rest.Config{Host: srv.URL, QPS: -1}, corev1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	got, err := newSizedLists(corev1.SchemeGroupVersion.WithKind("PodList")).list(context.Background(), rc.Get().Resource("pods"), metav1.ListOptions{})
	if err != nil || meta.LenList(got) != 3 || calls.Load() != 2 {
		t.Fatalf("after a dropped connection: %d items, %d requests, error %v; want 3 items in 2 requests", meta.LenList(got), calls.Load(), err)
	}
}

// TestProtobufRaw takes apart the envelopes kube-apiserver writes, and turns down what it is
// not sure of.
func TestProtobufRaw(t *testing.T) {
	s := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	list := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "7"}, Items: []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "a"}}}}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	var buf bytes.Buffer
	if err := s.Encode(list, &buf); err != nil {
		t.Fatal(err)
	}
	body := buf.Bytes()
	podList := corev1.SchemeGroupVersion.WithKind("PodList")
	raw, ok := protobufRaw(body, podList)
	if !ok {
		t.Fatal("a PodList body was not taken apart")
	}
	var got corev1.PodList
	if err := got.Unmarshal(raw); err != nil || got.ResourceVersion != "7" || len(got.Items) != 1 || got.Items[0].Name != "a" {
		t.Fatalf("raw decodes to %+v (%v)", got, err)
	}
	for _, other := range []schema.GroupVersionKind{corev1.SchemeGroupVersion.WithKind("ServiceList"), {Group: "apps", Version: "v1", Kind: "PodList"}} {
		if _, ok := protobufRaw(body, other); ok {
			t.Errorf("a v1 PodList body taken for a %v", other)
		}
	}
	// An envelope of raw bytes alone, no kind named.
	untyped := protowire.AppendBytes(protowire.AppendTag(bytes.Clone(protobufPrefix), 2, protowire.BytesType), raw)
	for name, b := range map[string][]byte{
		"JSON":      []byte(`{"kind":"PodList"}`),
		"truncated": body[:len(body)-3],
		"encoded":   append(bytes.Clone(body), 0x1a, 4, 'g', 'z', 'i', 'p'), // contentEncoding: gzip
		"empty":     protobufPrefix,
		"untyped":   untyped,
	} {
		if _, ok := protobufRaw(b, podList); ok {
			t.Errorf("%s: taken apart", name)
		}
	}
}

// TestSizedListsExpect: a page is expected to hold its limit, unless the server answers whole
// (resourceVersion "0"); what is set aside is bounded however large the guess.
func TestSizedListsExpect(t *testing.T) {
	s := &sizedLists{perItem: 1000, total: 20000}
	for _, c := range []struct {
		opts         metav1.ListOptions
		bytes, items int
	}{
		{metav1.ListOptions{}, 20000 * 1000, 20000},
		{metav1.ListOptions{Limit: 500}, 500 * 1000, 500},
		{metav1.ListOptions{Limit: 500, ResourceVersion: "0"}, 20000 * 1000, 20000},
		{metav1.ListOptions{Limit: 500, ResourceVersion: "42"}, 500 * 1000, 500},
		{metav1.ListOptions{Limit: 50000}, 20000 * 1000, 20000},
	} {
		if b, n := s.expect(c.opts); b != c.bytes || n != c.items {
			t.Errorf("%+v: expects %d items in %d bytes, want %d in %d", c.opts, n, b, c.items, c.bytes)
		}
	}
	huge := &sizedLists{perItem: 1 << 20, total: 1 << 22}
	if b, n := huge.expect(metav1.ListOptions{}); b != maxExpectedListBytes || n != maxExpectedListItems {
		t.Errorf("a huge guess sets aside %d items in %d bytes, want the bounds %d and %d", n, b, maxExpectedListItems, maxExpectedListBytes)
	}
}
