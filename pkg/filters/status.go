package filters

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/multicache/multicache/pkg/storage"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/sets"
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

// An answer's warnings are bounded as kube-apiserver bounds them: once their text passes
// 4 Ki runes, each further warning is cut to 256 runes (its recorder's limits). And in number:
// over a thousand clusters, one warning per cluster that is syncing or unavailable would be a
// thousand headers, and Python's http.client, under the official Python client, refuses an
// answer with more than 100 headers.
const (
	maxWarningRunes = 4 * 1024
	cutWarningRunes = 256
	maxWarnings     = 50
)

// AddWarning adds msg to the answer's Warning headers (kubectl prints them), once, within the
// bounds AddWarnings keeps.
func AddWarning(h http.Header, msg string) { AddWarnings(h, []string{msg}) }

// AddWarnings adds each of msgs to the answer's Warning headers, once each, within the bounds
// above: a warning that does not fit in what is left of maxWarningRunes is cut to
// cutWarningRunes, and once the text is spent, or maxWarnings would be passed, one last
// warning says how many were not shown, and no warning comes after it.
func AddWarnings(h http.Header, msgs []string) {
	have := h.Values("Warning")
	if n := len(have); n > 0 && strings.HasSuffix(have[n-1], notShown+`"`) {
		return // full: told already
	}
	seen := sets.New(have...)
	runes := 0
	for _, v := range have {
		runes += utf8.RuneCountInString(v)
	}
	header := func(msg string) string {
		v, _ := utilnet.NewWarningHeader(299, "-", msg)
		return v
	}
	var todo []string // the headers of msgs not shown yet, each once
	for _, msg := range msgs {
		if v := header(msg); v != "" && !seen.Has(v) {
			todo = append(todo, msg)
			seen.Insert(v)
		}
	}
	shown := len(have)
	for i, msg := range todo {
		if n := utf8.RuneCountInString(msg); runes+n > maxWarningRunes && n > cutWarningRunes {
			msg = string([]rune(msg)[:cutWarningRunes-1]) + "…"
		}
		if runes >= maxWarningRunes || shown >= maxWarnings-1 && i < len(todo)-1 {
			h.Add("Warning", header(fmt.Sprintf("%d more warnings%s", len(todo)-i, notShown)))
			return
		}
		v := header(msg)
		h.Add("Warning", v)
		shown++
		runes += utf8.RuneCountInString(v)
	}
}

// notShown ends the warning that says how many were not shown.
const notShown = " not shown (an answer's warnings are bounded)"
