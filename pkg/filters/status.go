package filters

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"

	"github.com/multicache/multicache/pkg/storage"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// StatusOf is the metav1.Status of an error answer. Both APIs answer errors with one: the
// native API's api.Error reads its code, reason and message.
func StatusOf(code int, msg string) *metav1.Status {
	return &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Code: int32(code), Reason: storage.Reasons[code], Message: msg}
}

// WriteError answers a metav1.Status with code and msg.
func WriteError(w http.ResponseWriter, code int, msg string) {
	WriteStatus(w, StatusOf(code, msg))
}

// WriteStatus answers st, with its code.
func WriteStatus(w http.ResponseWriter, st *metav1.Status) {
	if st.Kind == "" {
		st.Kind, st.APIVersion = "Status", "v1"
	}
	if st.Status == "" {
		st.Status = metav1.StatusFailure
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(st.Code))
	_ = json.NewEncoder(w).Encode(st)
}

// WriteAPIError answers err: its Status when it is an apierrors.APIStatus (a read's refusal),
// with Retry-After when its details say; else 500 with its message.
func WriteAPIError(w http.ResponseWriter, err error) {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	s := st.Status()
	if s.Details != nil && s.Details.RetryAfterSeconds > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(s.Details.RetryAfterSeconds)))
	}
	WriteStatus(w, &s)
}

// AddWarning adds msg to the answer's Warning headers (kubectl prints them), once.
func AddWarning(h http.Header, msg string) {
	hv, err := utilnet.NewWarningHeader(299, "-", msg)
	if err == nil && !slices.Contains(h.Values("Warning"), hv) {
		h.Add("Warning", hv)
	}
}
