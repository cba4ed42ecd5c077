package storage

import (
	"slices"
	"testing"
	"time"

	"github.com/multicache/multicache/pkg/aggregate"
)

// TestSortValueOrders: encodings compare as the values do: none first, numbers and resource
// quantities by value (negative, fractions, exponents, 9 before 10, 100m before 0.25, 2Ki
// before 1M), then text bytewise (timestamps in time).
func TestSortValueOrders(t *testing.T) {
	ordered := [][]string{
		nil,
		{"-1e3"}, {"-2.5"}, {"-0.5"}, {"0"}, {"100m"}, {"0.25"}, {"9"}, {"10"}, {"1e3"}, {"2Ki"}, {"1M"}, {"12345678901"}, {"1Ti"},
		{"-"}, {"1.2.3"}, {"10abc"}, {"2026-01-02T00:00:00Z"}, {"2026-11-27T04:00:00Z"}, {"Inf"}, {"a"}, {"b", "0"},
	}
	for i := 1; i < len(ordered); i++ {
		a, b := SortValue(ordered[i-1]), SortValue(ordered[i])
		if a >= b {
			t.Errorf("%v (%q) does not sort before %v (%q)", ordered[i-1], a, ordered[i], b)
		}
	}
	if SortValue([]string{"7", "1"}) != SortValue([]string{"7"}) {
		t.Error("the first value does not decide")
	}
	if SortValue([]string{"1000m"}) != SortValue([]string{"1"}) || SortValue([]string{"1Ki"}) != SortValue([]string{"1024"}) {
		t.Error("equal quantities do not sort as equal")
	}
	// Exponent forms that are not JSON numbers are text: parsing them as quantities raises 10
	// to the exponent (minutes for this one, a valid object name).
	done := make(chan string, 1)
	go func() { done <- SortValue([]string{"01e-2000000000"}) }()
	select {
	case v := <-done:
		if v != "2"+"01e-2000000000" {
			t.Errorf("01e-2000000000 sorts as %q, want it as text", v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("SortValue of 01e-2000000000 has not returned in 10 s")
	}
}

// TestCompareSorted: the sort value decides, reversed when descending; ties go by key,
// ascending in both orders.
func TestCompareSorted(t *testing.T) {
	k := func(c, n string) aggregate.Key { return aggregate.Key{Cluster: c, Namespace: "ns", Name: n} }
	items := []Item{
		{Key: k("b", "x"), Sort: SortValue([]string{"2"})},
		{Key: k("a", "y"), Sort: SortValue([]string{"10"})},
		{Key: k("a", "x"), Sort: SortValue([]string{"2"})},
		{Key: k("c", "z")},
	}
	names := func(desc bool) []string {
		s := slices.Clone(items)
		slices.SortFunc(s, func(a, b Item) int { return CompareSorted(a, b, desc) })
		var out []string
		for _, it := range s {
			out = append(out, it.Key.Cluster+"/"+it.Key.Name)
		}
		return out
	}
	if got, want := names(false), []string{"c/z", "a/x", "b/x", "a/y"}; !slices.Equal(got, want) {
		t.Errorf("ascending: %v, want %v", got, want)
	}
	if got, want := names(true), []string{"a/y", "a/x", "b/x", "c/z"}; !slices.Equal(got, want) {
		t.Errorf("descending: %v, want %v", got, want)
	}
	if r := (Count{Total: 10, Before: 4}).Remaining(3); r != 3 {
		t.Errorf("remaining: %d, want 3", r)
	}
	if r := (Count{Total: 5, Before: 4}).Remaining(3); r != 0 {
		t.Errorf("remaining after a shrink: %d, want 0", r)
	}
}
