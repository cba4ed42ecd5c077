package storage

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/multicache/multicache/pkg/watchcache"
)

// A sorted list (ListOptions.SortBy) orders its items by their sort value (Item.Sort), ascending
// or, with Desc, descending, and then by key, ascending: a total order, so that pages continue
// after the last item's (sort value, key) and never repeat or skip an item that stays put.

// SortValue encodes the value a list sorts an object by (the first of vals, the values its
// sortBy path gives) so that comparing encodings as strings compares the values: no value first,
// then numbers (a JSON number, such as a restart count, or a resource quantity, such as a CPU
// request of 100m) by value, then text bytewise, which orders RFC 3339 timestamps
// (creationTimestamp) in time.
func SortValue(vals []string) string {
	if len(vals) == 0 {
		return ""
	}
	v := vals[0]
	if f, ok := numberOrQuantity(v); ok {
		// IEEE 754 bits ordered as unsigned integers: negative numbers flipped whole,
		// positive ones above them.
		b := math.Float64bits(f)
		if b>>63 == 1 {
			b = ^b
		} else {
			b |= 1 << 63
		}
		return "1" + hex16(b)
	}
	return "2" + v
}

// hex16 is b as 16 hexadecimal digits: fixed width, so that text order is numeric order.
func hex16(b uint64) string {
	const digits = "0123456789abcdef"
	var out [16]byte
	for i := 15; i >= 0; i-- {
		out[i] = digits[b&0xf]
		b >>= 4
	}
	return string(out[:])
}

// numberOrQuantity is v's value when v is a JSON number, or a resource quantity ("100m",
// "2Gi"), which kubectl's --sort-by compares by value too.
func numberOrQuantity(v string) (float64, bool) {
	if isNumber(v) {
		f, err := strconv.ParseFloat(v, 64)
		return f, err == nil
	}
	if !quantityLike(v) {
		return 0, false
	}
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return 0, false
	}
	return q.AsApproximateFloat64(), true
}

// quantitySuffixes are the suffixes a quantity written by hand has (binary and decimal SI).
var quantitySuffixes = []string{"", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"}

// quantityLike reports whether v has a quantity's plain form: at most 32 bytes, an optional
// sign, digits with at most one point, then one suffix of quantitySuffixes. Exponent forms are
// left to isNumber (a JSON number) or to text: resource.ParseQuantity raises 10 to a written
// exponent, which a crafted value ("01e-2000000000", a valid name) makes take minutes.
func quantityLike(v string) bool {
	if len(v) == 0 || len(v) > 32 {
		return false
	}
	i := 0
	if v[0] == '+' || v[0] == '-' {
		i++
	}
	digits, points := 0, 0
	for ; i < len(v); i++ {
		switch c := v[i]; {
		case c >= '0' && c <= '9':
			digits++
			continue
		case c == '.':
			points++
			continue
		}
		break
	}
	return digits > 0 && points <= 1 && slices.Contains(quantitySuffixes, v[i:])
}

// isNumber reports whether v is a JSON number.
func isNumber(v string) bool {
	if v == "" || (v[0] != '-' && (v[0] < '0' || v[0] > '9')) {
		return false
	}
	return json.Valid([]byte(v))
}

// CompareSorted compares two items of a list sorted with desc: by sort value (reversed when
// desc), then by key.
func CompareSorted(a, b Item, desc bool) int {
	if c := strings.Compare(a.Sort, b.Sort); c != 0 {
		if desc {
			return -c
		}
		return c
	}
	return watchcache.CompareKeys(a.Key, b.Key)
}

// Count is how many items a list spans, counted with its page (ListOptions.Count).
type Count struct {
	// Total is every item the list spans, on every page.
	Total int64 `json:"total"`
	// Before is how many of them come before the page: at or before the item its continue
	// token continues after (0 for the first page).
	Before int64 `json:"before"`
}

// Remaining is how many items follow a page of n items: what the Kubernetes API's
// remainingItemCount says. It is never negative (the items may change between the count and
// the page).
func (c Count) Remaining(n int) int64 { return max(0, c.Total-c.Before-int64(n)) }
