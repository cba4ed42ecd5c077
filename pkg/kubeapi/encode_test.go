package kubeapi

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestSplice: a peer's object shows the fleet's position in place of the peer's: replaced
// where it is when the peer's `"resourceVersion":"<token>"` occurs once, decoded and encoded
// again when another field holds the same key and token (whose value then stays); an object
// without one gets it; a Table row is written as it came.
func TestSplice(t *testing.T) {
	type meta struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Data map[string]any `json:"data"`
	}
	for _, tc := range []struct {
		name, raw string
		row       bool
		want      string // the object's metadata.resourceVersion after
		keep      string // data.x's value after, when set
	}{
		{"once", `{"metadata":{"name":"a","resourceVersion":"p1"},"data":{"y":"1"}}`, false, "fleet", ""},
		{"twice", `{"metadata":{"name":"a","resourceVersion":"p1"},"data":{"x":{"resourceVersion":"p1"}}}`, false, "fleet", "p1"},
		{"none", `{"metadata":{"name":"a"}}`, false, "fleet", ""},
		{"a row, twice", `{"metadata":{"resourceVersion":"p1"},"data":{"x":{"resourceVersion":"p1"}}}`, true, "p1", "p1"},
	} {
		var buf bytes.Buffer
		if err := splice(&buf, []byte(tc.raw), "p1", "fleet", tc.row); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var m meta
		if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
			t.Fatalf("%s: %s: %v", tc.name, buf.Bytes(), err)
		}
		if m.Metadata.ResourceVersion != tc.want {
			t.Errorf("%s: resourceVersion %q, want %q: %s", tc.name, m.Metadata.ResourceVersion, tc.want, buf.Bytes())
		}
		if tc.keep != "" {
			if x, _ := m.Data["x"].(map[string]any); x["resourceVersion"] != tc.keep {
				t.Errorf("%s: data.x changed: %s", tc.name, buf.Bytes())
			}
		}
	}
}
