package filters

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// decodedParams are the query parameters DecodeParameters' callers read, as both decodings give them.
type decodedParams struct {
	Watch, AllowWatchBookmarks bool
	SendInitialEvents          *bool
	Limit                      int64
	TimeoutSeconds             *int64
	ResourceVersion            string
}

// TestDecodeParametersAsKubeAPIServer: DecodeParameters reads every query as kube-apiserver's list
// handler does (ParameterCodec.DecodeParameters of metainternalversionscheme, from
// metav1.SchemeGroupVersion, into metainternalversion.ListOptions): the same values, and an
// error exactly when it fails, one that names the malformed parameter. IsWatch agrees with it.
func TestDecodeParametersAsKubeAPIServer(t *testing.T) {
	for _, tc := range []struct {
		query string
		bad   string // the parameter named by the error; "" when the query decodes
	}{
		{query: ""},
		{query: "watch=true"},
		{query: "watch=True"},
		{query: "watch=TRUE"},
		{query: "watch=1"},
		{query: "watch=yes"},
		{query: "watch=false"},
		{query: "watch=False"},
		{query: "watch=0"},
		{query: "watch="},
		{query: "watch"},
		{query: "watch=false&watch=true"},
		{query: "limit=0"},
		{query: "limit=5"},
		{query: "limit=-1"},
		{query: "limit=%2B7"},
		{query: "limit=abc", bad: "limit"},
		{query: "limit=", bad: "limit"},
		{query: "limit=5abc", bad: "limit"},
		{query: "limit=1.5", bad: "limit"},
		{query: "limit=99999999999999999999", bad: "limit"},
		{query: "limit=5&limit=abc"},
		{query: "timeoutSeconds=30"},
		{query: "timeoutSeconds=0"},
		{query: "timeoutSeconds=-1"},
		{query: "timeoutSeconds=x", bad: "timeoutSeconds"},
		{query: "watch=True&timeoutSeconds=30&allowWatchBookmarks=True&sendInitialEvents=True&resourceVersionMatch=NotOlderThan&resourceVersion=0"},
		{query: "watch=1&sendInitialEvents=0&allowWatchBookmarks=false"},
		{query: "watch=True&limit=abc", bad: "limit"},
		{query: "timeoutSeconds=x&limit=abc", bad: "limit"}, // the first name in order
		{query: "cluster=a&namespace=ns&index=by-node&value=n1&limit=3"},
	} {
		t.Run(tc.query, func(t *testing.T) {
			vals, err := url.ParseQuery(tc.query)
			if err != nil {
				t.Fatal(err)
			}
			var ref metainternalversion.ListOptions
			refErr := metainternalversionscheme.ParameterCodec.DecodeParameters(vals, metav1.SchemeGroupVersion, &ref)
			var opts metav1.ListOptions
			err = DecodeParameters(vals, &opts)
			if (err != nil) != (refErr != nil) {
				t.Fatalf("error %v; kube-apiserver's decoding: %v", err, refErr)
			}
			if got := IsWatch(vals); got != isWatchAlone(t, vals) {
				t.Errorf("isWatch %t, kube-apiserver's decoding of watch alone %t", got, !got)
			}
			if refErr != nil {
				// A 400 whose message starts with the parameter's name.
				if st, ok := err.(apierrors.APIStatus); !ok || st.Status().Code != 400 || !strings.HasPrefix(st.Status().Message, tc.bad+" ") {
					t.Errorf("error %q, want a 400 naming %s", err, tc.bad)
				}
				return
			}
			if tc.bad != "" {
				t.Fatalf("kube-apiserver's decoding accepts the query; the test expects %s to fail", tc.bad)
			}
			got := decodedParams{opts.Watch, opts.AllowWatchBookmarks, opts.SendInitialEvents, opts.Limit, opts.TimeoutSeconds, opts.ResourceVersion}
			want := decodedParams{ref.Watch, ref.AllowWatchBookmarks, ref.SendInitialEvents, ref.Limit, ref.TimeoutSeconds, ref.ResourceVersion}
			if g, w := mustJSON(t, got), mustJSON(t, want); g != w {
				t.Errorf("decoded %s, kube-apiserver's decoding %s", g, w)
			}
			if IsWatch(vals) != opts.Watch {
				t.Errorf("isWatch %t, listOptions' Watch %t", !opts.Watch, opts.Watch)
			}
		})
	}
}

// isWatchAlone is kube-apiserver's decoding of the watch parameter of vals, alone.
func isWatchAlone(t *testing.T, vals url.Values) bool {
	t.Helper()
	var ref metainternalversion.ListOptions
	if v, ok := vals["watch"]; ok {
		if err := metainternalversionscheme.ParameterCodec.DecodeParameters(url.Values{"watch": v}, metav1.SchemeGroupVersion, &ref); err != nil {
			t.Fatal(err)
		}
	}
	return ref.Watch
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
