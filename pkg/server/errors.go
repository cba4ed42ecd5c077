package server

import (
	"encoding/json"
	"net/http"

	"github.com/multicache/multicache/pkg/api"
)

var reasons = map[int]string{
	http.StatusBadRequest:          "BadRequest",
	http.StatusUnauthorized:        "Unauthorized",
	http.StatusForbidden:           "Forbidden",
	http.StatusNotFound:            "NotFound",
	http.StatusMethodNotAllowed:    "MethodNotAllowed",
	http.StatusGone:                "Expired",
	http.StatusTooManyRequests:     "TooManyRequests",
	http.StatusServiceUnavailable:  "ServiceUnavailable",
	http.StatusInternalServerError: "InternalError",
	http.StatusGatewayTimeout:      "Timeout",
}

// writeError answers an api.Error.
func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(api.Error{Code: code, Reason: reasons[code], Message: msg})
}
