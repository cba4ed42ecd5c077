package peer

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/multicache/multicache/pkg/storage"
)

// envelopeCalls are the options each call of the envelope carries as its JSON body, recorded
// for the ProtocolVersion they were last changed in. A replica reads a call's body with
// encoding/json, which ignores the fields it does not know: a replica of another version would
// answer a call with a filter it does not know (owner=, where=) unfiltered, or a sorted list in
// its own order. So a call's options gain or lose a field only with a new ProtocolVersion, and
// this record changes with it.
var envelopeCalls = map[string]map[string]string{
	"4": {
		"list": "continue count countOnly desc encoding.api encoding.as encoding.includeObject encoding.tableVersion encoding.typeMeta " +
			"limit resourceVersion resourceVersionMatch sortBy " + selectionV4,
		"get":     "encoding.api encoding.as encoding.includeObject encoding.tableVersion encoding.typeMeta name " + selectionV4,
		"watch":   "bookmarks encoding.api encoding.as encoding.includeObject encoding.tableVersion encoding.typeMeta initial resourceVersion startBookmark timeout " + selectionV4,
		"summary": "by " + selectionV4,
		"cluster": "clusters labelSelector part",
	},
}

const selectionV4 = "clusters fieldSelector index labelSelector namespace owner part resource value where"

// TestEnvelopeCallsChangeWithTheVersion fails when a call's options change while
// ProtocolVersion stays: raise it (replicas of two versions then refuse each other's calls,
// retried, rather than answer them wrongly) and record the new fields above.
func TestEnvelopeCallsChangeWithTheVersion(t *testing.T) {
	want, ok := envelopeCalls[ProtocolVersion]
	if !ok {
		t.Fatalf("ProtocolVersion %q has no record of its calls' options: add one to envelopeCalls", ProtocolVersion)
	}
	for call, v := range map[string]any{
		"list":    storage.ListOptions{},
		"get":     storage.GetOptions{},
		"watch":   storage.WatchOptions{},
		"summary": storage.SummaryOptions{},
		"cluster": storage.ClusterOptions{},
	} {
		got, recorded := jsonFields(reflect.TypeOf(v), ""), strings.Fields(want[call])
		var added, gone []string
		for _, f := range got {
			if !slices.Contains(recorded, f) {
				added = append(added, f)
			}
		}
		for _, f := range recorded {
			if !slices.Contains(got, f) {
				gone = append(gone, f)
			}
		}
		if len(added) > 0 || len(gone) > 0 {
			t.Errorf("the %s call's options changed within protocol %s (new %v, gone %v): raise ProtocolVersion (envelope.go) and record them", call, ProtocolVersion, added, gone)
		}
	}
}

// TestJSONFieldsSeesWhatTheWireCarries: the record above is only as good as jsonFields, which
// must see an embedded struct's fields, a nested struct's, and leave out what is never sent.
func TestJSONFieldsSeesWhatTheWireCarries(t *testing.T) {
	type inner struct {
		B string `json:"b"`
	}
	type Embedded struct {
		E int `json:"e,omitempty"`
	}
	type outer struct {
		Embedded
		A       string `json:"a"`
		In      inner  `json:"in"`
		Skipped int    `json:"-"`
		Plain   bool
		private int
	}
	_ = outer{}.private
	if got, want := jsonFields(reflect.TypeOf(outer{}), ""), []string{"Plain", "a", "e", "in.b"}; !slices.Equal(got, want) {
		t.Errorf("jsonFields: %v, want %v", got, want)
	}
}

// jsonFields lists, sorted, the JSON names encoding/json writes for t's fields, an embedded
// struct's as its own, a nested struct of this module's as prefix "name.".
func jsonFields(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "-" || !f.IsExported() {
			continue
		}
		ft := f.Type
		if f.Anonymous && tag == "" && ft.Kind() == reflect.Struct {
			out = append(out, jsonFields(ft, prefix)...)
			continue
		}
		name := tag
		if name == "" {
			name = f.Name
		}
		if ft.Kind() == reflect.Struct && strings.HasPrefix(ft.PkgPath(), "github.com/multicache/") {
			out = append(out, jsonFields(ft, prefix+name+".")...)
			continue
		}
		out = append(out, prefix+name)
	}
	slices.Sort(out)
	return out
}
