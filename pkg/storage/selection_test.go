package storage

import "testing"

// TestClusterFilter: no list accepts every cluster, an empty one none, a list its own.
func TestClusterFilter(t *testing.T) {
	for _, tc := range []struct {
		names []string
		want  map[string]bool
	}{
		{nil, map[string]bool{"c0": true, "c1": true, "": true}},
		{[]string{}, map[string]bool{"c0": false, "c1": false, "": false}},
		{[]string{"c1", "c1", "c3"}, map[string]bool{"c0": false, "c1": true, "c3": true, "": false}},
	} {
		f := FilterOf(tc.names)
		for c, want := range tc.want {
			if got := f.Has(c); got != want {
				t.Errorf("FilterOf(%#v).Has(%q) = %v, want %v", tc.names, c, got, want)
			}
		}
	}
}
