package server

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/multicache/multicache/pkg/filters"
)

// paramCodec is the codec kube-apiserver's handlers decode query parameters with. (That of
// metav1, metav1.ParameterCodec, only encodes them: its scheme has no conversions from
// url.Values.)
var paramCodec = metainternalversionscheme.ParameterCodec

// listOptions decodes the query parameters of a list or a watch, of either API, into
// metav1.ListOptions as kube-apiserver's handlers decode them (paramCodec, from
// metav1.SchemeGroupVersion), so that every parameter means here what it means there:
//   - a boolean (watch, allowWatchBookmarks, sendInitialEvents) is false when absent, "0" or
//     "false" in any case, and true for any other value, "True" and "" included (the Python
//     client sends watch=True);
//   - an integer (limit, timeoutSeconds) is base 10 and 64 bits, its first value counts, and a
//     malformed one is a *paramError naming the parameter, which callers answer with 400.
//
// Parameters ListOptions does not have are ignored. Callers decode a request once and read what
// they need from the result; range checks (a negative limit, say) stay with them.
func listOptions(vals url.Values) (metav1.ListOptions, error) {
	var opts metav1.ListOptions
	if err := paramCodec.DecodeParameters(vals, metav1.SchemeGroupVersion, &opts); err != nil {
		return metav1.ListOptions{}, malformed(vals, err)
	}
	return opts, nil
}

// isWatch reports whether a request asks for a watch by its watch parameter, as listOptions
// decodes it. It cannot fail, whatever the other parameters hold: for decisions made before a
// handler validates the query (compressing the answer, routing it).
func isWatch(vals url.Values) bool {
	v, ok := vals["watch"]
	if !ok {
		return false
	}
	var opts metav1.ListOptions
	// A boolean decodes from any value: the error is always nil.
	_ = paramCodec.DecodeParameters(url.Values{"watch": v}, metav1.SchemeGroupVersion, &opts)
	return opts.Watch
}

// paramError is a query parameter whose value does not decode.
type paramError struct {
	name, value string // value is the first one, the one decoded
	err         error  // the codec's
}

func (e *paramError) Error() string {
	var ne *strconv.NumError
	if errors.As(e.err, &ne) {
		return fmt.Sprintf("%s %q: want an integer: %v", e.name, e.value, ne.Err)
	}
	return fmt.Sprintf("%s %q: %v", e.name, e.value, e.err)
}

func (e *paramError) Unwrap() error { return e.err }

// malformed names the parameter that made the codec fail with err, by decoding each parameter
// alone, in name order so that the first malformed name is the one reported. The codec's own
// error names none.
func malformed(vals url.Values, err error) error {
	for _, name := range slices.Sorted(maps.Keys(vals)) {
		var opts metav1.ListOptions
		if e := paramCodec.DecodeParameters(url.Values{name: vals[name]}, metav1.SchemeGroupVersion, &opts); e != nil {
			return &paramError{name: name, value: vals.Get(name), err: e}
		}
	}
	return fmt.Errorf("query parameters: %w", err) // no parameter fails alone: not expected
}

// nativeLimit is a native list's page size: the limit asked for, capped at max, or max for no
// limit (or 0). A negative limit is an error naming it.
func nativeLimit(opts metav1.ListOptions, vals url.Values, max int) (int, error) {
	switch n := opts.Limit; {
	case n < 0:
		return 0, fmt.Errorf("limit %q: want a non-negative integer", vals.Get("limit"))
	case n > 0 && n < int64(max):
		return int(n), nil
	}
	return max, nil
}

// kubeOptions decodes the ListOptions of a Kubernetes-API request, once: a list or a watch
// decodes them, a malformed one being a 400 as in kube-apiserver; a get reads none of them,
// and fails on none. It writes the 400 itself (ok false).
func kubeOptions(w http.ResponseWriter, p kubePath, vals url.Values) (watch bool, opts metav1.ListOptions, ok bool) {
	watch = p.watchPath || isWatch(vals)
	if watch || p.name == "" {
		var err error
		if opts, err = listOptions(vals); err != nil {
			filters.WriteError(w, http.StatusBadRequest, err.Error())
			return false, opts, false
		}
	}
	return watch, opts, true
}

// tableOptions decodes the TableOptions of a request (includeObject), as kube-apiserver does
// for a Table answer; an includeObject other than None, Metadata or Object is an error that
// names it.
func tableOptions(vals url.Values) (metav1.TableOptions, error) {
	var opts metav1.TableOptions
	if err := paramCodec.DecodeParameters(vals, metav1.SchemeGroupVersion, &opts); err != nil {
		return opts, fmt.Errorf("query parameters: %w", err)
	}
	switch opts.IncludeObject {
	case "", metav1.IncludeNone, metav1.IncludeMetadata, metav1.IncludeObject:
		return opts, nil
	}
	return opts, fmt.Errorf("includeObject %q: want None, Metadata or Object", opts.IncludeObject)
}

// getOptions decodes the GetOptions of a get (its resourceVersion) as kube-apiserver does. A get
// is answered from the cache as it is now, whatever resourceVersion it names: the cache is
// never older than a position of this run, and a position of another run or cluster cannot
// be compared.
func getOptions(vals url.Values) (metav1.GetOptions, error) {
	var opts metav1.GetOptions
	if err := paramCodec.DecodeParameters(vals, metav1.SchemeGroupVersion, &opts); err != nil {
		return opts, fmt.Errorf("query parameters: %w", err)
	}
	return opts, nil
}

// initialEvents reports whether a watch with opts starts with the current objects, as
// kube-apiserver's does: sendInitialEvents=true, or no resourceVersion (or "0") unless
// sendInitialEvents=false.
func initialEvents(opts metav1.ListOptions) bool {
	if opts.SendInitialEvents != nil {
		return *opts.SendInitialEvents
	}
	return opts.ResourceVersion == "" || opts.ResourceVersion == "0"
}
