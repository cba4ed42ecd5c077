package storage

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Every read answers its refusals as an *apierrors.StatusError: the code, reason and message
// the fronts write (a metav1.Status in the Kubernetes API, an api.Error in the native one) and,
// in Details.RetryAfterSeconds, the Retry-After to write with it. A front writes them in one
// place; no reader writes an answer.

// Reasons is the metav1.StatusReason of each HTTP code reads answer, as kube-apiserver gives
// them.
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

// Error is the refusal code with msg.
func Error(code int, msg string) *apierrors.StatusError {
	return &apierrors.StatusError{ErrStatus: metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Code: int32(code), Reason: Reasons[code], Message: msg}}
}

// Errorf is Error with a formatted message.
func Errorf(code int, format string, args ...any) *apierrors.StatusError {
	return Error(code, fmt.Sprintf(format, args...))
}

// Retry is the refusal code with msg, to be retried after a second: 429 while a cluster an
// answer spans is not complete, 503 while its owner cannot be asked.
func Retry(code int, msg string) *apierrors.StatusError {
	e := Error(code, msg)
	e.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: 1}
	return e
}

// NotFound is 404 for name of gr, with its details, as kube-apiserver answers it.
func NotFound(gr schema.GroupResource, name, msg string) *apierrors.StatusError {
	e := Error(http.StatusNotFound, msg)
	e.ErrStatus.Details = &metav1.StatusDetails{Name: name, Group: gr.Group, Kind: gr.Resource}
	return e
}

// StatusOf is err as a refusal: its own when it is one, else 500 with its message.
func StatusOf(err error) *apierrors.StatusError {
	var se *apierrors.StatusError
	if errors.As(err, &se) {
		return se
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		return &apierrors.StatusError{ErrStatus: st.Status()}
	}
	return Error(http.StatusInternalServerError, err.Error())
}

// Code is err's HTTP code: its status's, else 500; 0 for nil.
func Code(err error) int {
	if err == nil {
		return 0
	}
	return int(StatusOf(err).ErrStatus.Code)
}

// RetryAfter is the seconds err says to retry after, 0 when it says nothing.
func RetryAfter(err error) int {
	if d := StatusOf(err).ErrStatus.Details; d != nil {
		return int(d.RetryAfterSeconds)
	}
	return 0
}

// Unanswered is the error of a read of what replicas say of their clusters (Status) that some
// of the clusters' owners did not answer, or that have no live owner: what the others said
// comes with it. It names each such cluster with why.
type Unanswered map[string]string

func (u Unanswered) Error() string {
	names := make([]string, 0, len(u))
	for c, why := range u {
		names = append(names, fmt.Sprintf("%s (%s)", c, why))
	}
	slices.Sort(names)
	return "no answer for clusters " + strings.Join(names, ", ")
}
