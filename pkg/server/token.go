package server

import (
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/multicache/multicache/pkg/aggregate"
)

// token is a watch position, a list's resourceVersion: the watch hub's epoch and sequence.
// Clients treat it as opaque.
type token struct {
	Epoch string `json:"e"`
	Seq   uint64 `json:"s"`
}

func (t token) encode() string { return encodeJSON(t) }

func parseToken(s string) (token, error) {
	var t token
	if err := decodeJSON(s, &t); err != nil || t.Epoch == "" {
		return t, fmt.Errorf("resourceVersion %q: not a multicache token", s)
	}
	return t, nil
}

// continueToken resumes a paged list: the last key served, and the first page's watch
// position, which every page of the list carries.
type continueToken struct {
	Last string `json:"k"`
	RV   string `json:"rv"`
	// Exact: the list reads the hub's snapshot at RV (resourceVersionMatch=Exact), not the
	// stores.
	Exact bool `json:"x,omitempty"`
}

func (c continueToken) encode() string { return encodeJSON(c) }

// parseContinue returns the key to continue after and the list's resourceVersion.
func parseContinue(s string) (aggregate.Key, string, error) {
	k, rv, _, err := parseContinueExact(s)
	return k, rv, err
}

// parseContinueExact is parseContinue, and whether the list reads a snapshot.
func parseContinueExact(s string) (aggregate.Key, string, bool, error) {
	var c continueToken
	err := decodeJSON(s, &c)
	var k aggregate.Key
	if err == nil {
		k, err = aggregate.ParseKey(c.Last)
	}
	if err != nil {
		return k, "", false, fmt.Errorf("continue %q: malformed token", s)
	}
	return k, c.RV, c.Exact, nil
}

// Tokens are base64url JSON, unpadded.
func encodeJSON(v any) string {
	b, _ := json.Marshal(v)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeJSON(s string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}
