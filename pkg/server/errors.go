package server

import (
	"encoding/json"
	"net/http"
)

// apiError is the error body every endpoint uses.
type apiError struct {
	Code    int    `json:"code"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

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

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(apiError{Code: code, Reason: reasons[code], Message: msg})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
