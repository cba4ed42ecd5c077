package filters

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
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/multicache/multicache/pkg/storage"
)

// paramCodec is the codec kube-apiserver's handlers decode query parameters with. (That of
// metav1, metav1.ParameterCodec, only encodes them: its scheme has no conversions from
// url.Values.)
var paramCodec = metainternalversionscheme.ParameterCodec

// DecodeParameters decodes query parameters into a metav1 options type (ListOptions,
// GetOptions, TableOptions) as kube-apiserver's handlers do, so that every parameter means here
// what it means there:
//   - a boolean (watch, allowWatchBookmarks, sendInitialEvents) is false when absent, "0" or
//     "false" in any case, and true for any other value, "True" and "" included (the Python
//     client sends watch=True);
//   - an integer (limit, timeoutSeconds) is base 10 and 64 bits, its first value counts, and a
//     malformed one is an error naming the parameter: a 400.
//
// Parameters the type does not have are ignored. Both APIs read their queries through it, and
// decodeParameters is the one call of the codec.
func DecodeParameters(vals url.Values, into runtime.Object) error {
	if err := decodeParameters(vals, into); err != nil {
		return storage.Error(http.StatusBadRequest, malformed(vals, into, err).Error())
	}
	return nil
}

func decodeParameters(vals url.Values, into runtime.Object) error {
	return paramCodec.DecodeParameters(vals, metav1.SchemeGroupVersion, into)
}

// IsWatch reports whether a request asks for a watch by its watch parameter, as
// DecodeParameters decodes it. It cannot fail, whatever the other parameters hold: for
// decisions made before a handler validates the query (compressing the answer, routing it).
func IsWatch(vals url.Values) bool {
	v, ok := vals["watch"]
	if !ok {
		return false
	}
	var opts metav1.ListOptions
	// A boolean decodes from any value: the error is always nil.
	_ = decodeParameters(url.Values{"watch": v}, &opts)
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
func malformed(vals url.Values, into runtime.Object, err error) error {
	for _, name := range slices.Sorted(maps.Keys(vals)) {
		if e := decodeParameters(url.Values{name: vals[name]}, into.DeepCopyObject()); e != nil {
			return &paramError{name: name, value: vals.Get(name), err: e}
		}
	}
	return fmt.Errorf("query parameters: %w", err) // no parameter fails alone: not expected
}

// InitialEvents reports whether a watch with opts starts with the current objects, as
// kube-apiserver's does: sendInitialEvents=true, or no resourceVersion (or "0") unless
// sendInitialEvents=false.
func InitialEvents(opts metav1.ListOptions) bool {
	if opts.SendInitialEvents != nil {
		return *opts.SendInitialEvents
	}
	return opts.ResourceVersion == "" || opts.ResourceVersion == "0"
}
