package filters

import (
	"encoding/json"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Reasons is the metav1.StatusReason of each HTTP code the APIs answer, as kube-apiserver
// gives them.
var Reasons = map[int]metav1.StatusReason{
	http.StatusBadRequest:          metav1.StatusReasonBadRequest,
	http.StatusUnauthorized:        metav1.StatusReasonUnauthorized,
	http.StatusForbidden:           metav1.StatusReasonForbidden,
	http.StatusNotFound:            metav1.StatusReasonNotFound,
	http.StatusMethodNotAllowed:    metav1.StatusReasonMethodNotAllowed,
	http.StatusNotAcceptable:       metav1.StatusReasonNotAcceptable,
	http.StatusConflict:            metav1.StatusReasonConflict,
	http.StatusGone:                metav1.StatusReasonExpired,
	http.StatusTooManyRequests:     metav1.StatusReasonTooManyRequests,
	http.StatusServiceUnavailable:  metav1.StatusReasonServiceUnavailable,
	http.StatusInternalServerError: metav1.StatusReasonInternalError,
	http.StatusGatewayTimeout:      metav1.StatusReasonTimeout,
}

// StatusOf is the metav1.Status of an error answer. Both APIs answer errors with one: the
// native API's api.Error reads its code, reason and message.
func StatusOf(code int, msg string) *metav1.Status {
	return &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Code: int32(code), Reason: Reasons[code], Message: msg}
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
