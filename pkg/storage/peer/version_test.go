package peer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
		"list":    "continue count countOnly desc " + encodingFields + " limit resourceVersion resourceVersionMatch sortBy " + selectionV4,
		"get":     encodingFields + " name " + selectionV4,
		"watch":   "bookmarks " + encodingFields + " initial resourceVersion startBookmark timeout " + selectionV4,
		"summary": "by " + selectionV4,
		"cluster": "clusters labelSelector part",
	},
	// As 07e2257, the last commit of version 3, sent them.
	"3": {
		"list":    "continue " + encodingFields + " limit resourceVersion resourceVersionMatch " + selectionV3,
		"get":     encodingFields + " name " + selectionV3,
		"watch":   "bookmarks " + encodingFields + " initial resourceVersion startBookmark timeout " + selectionV3,
		"summary": "by " + selectionV3,
		"cluster": "clusters labelSelector part",
	},
}

const (
	selectionV4    = "clusters fieldSelector index labelSelector namespace owner part resource value where"
	selectionV3    = "clusters fieldSelector index labelSelector namespace part resource value where"
	encodingFields = "encoding.api encoding.as encoding.includeObject encoding.tableVersion encoding.typeMeta"
)

// TestEnvelopeCallsChangeWithTheVersion fails when a call's options change while
// ProtocolVersion stays: raise it (and OldestProtocolVersion with it: see ProtocolVersion) and
// record the new fields above.
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
			t.Errorf("the %s call's options changed within protocol %s (new %v, gone %v): raise ProtocolVersion (version.go) and record them", call, ProtocolVersion, added, gone)
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

// calls are the envelope's calls by name, each with its options' zero value.
var calls = map[string]any{
	"list":    storage.ListOptions{},
	"get":     storage.GetOptions{},
	"watch":   storage.WatchOptions{},
	"summary": storage.SummaryOptions{},
	"cluster": storage.ClusterOptions{},
}

// TestOlderCallsAskOnlyWhatTheirVersionKnows: each call, with every option it sends set, asked
// in OldestProtocolVersion: refused when it sorts, filters by owner or summarizes by owner
// (a replica of that version would answer unsorted or unfiltered); otherwise it carries only
// the fields that version's calls carried, a count the caller may go without dropped, and a
// count-only list asks for the part's position alone (narrowed to no cluster).
func TestOlderCallsAskOnlyWhatTheirVersionKnows(t *testing.T) {
	known := envelopeCalls[OldestProtocolVersion]
	for name, zero := range calls {
		full := reflect.New(reflect.TypeOf(zero)).Elem()
		fillSent(full)
		if _, err := olderCall(OldestProtocolVersion, full.Interface()); (err == nil) != (name == "cluster") {
			t.Errorf("%s with every option set, in protocol %s: %v", name, OldestProtocolVersion, err)
		}
		// What it cannot ask, unset one at a time: each alone is refused.
		var unset []string
		switch name {
		case "list":
			unset = []string{"SortBy", "Desc", "Owner", "Index"}
			full.FieldByName("CountOptional").SetBool(true)
		case "get", "watch":
			unset = []string{"Owner", "Index"}
		case "summary":
			unset = []string{"Owner", "Index"}
			full.FieldByName("By").Set(reflect.ValueOf([]string{"cluster", "owner"}))
		}
		for i, f := range unset {
			alone := reflect.New(full.Type()).Elem()
			alone.Set(full)
			for _, g := range unset[:i] {
				alone.FieldByName(g).SetZero()
			}
			for _, g := range unset[i+1:] {
				alone.FieldByName(g).SetZero()
			}
			if name == "summary" {
				alone.FieldByName("By").Set(reflect.ValueOf([]string{"cluster"}))
			}
			if _, err := olderCall(OldestProtocolVersion, alone.Interface()); err == nil {
				t.Errorf("%s with %s set, in protocol %s: asked", name, f, OldestProtocolVersion)
			}
		}
		for _, f := range unset {
			full.FieldByName(f).SetZero()
		}
		if name == "summary" {
			if _, err := olderCall(OldestProtocolVersion, full.Interface()); err == nil || !strings.Contains(err.Error(), "owner") {
				t.Errorf("a summary by owner in protocol %s: %v, want refused", OldestProtocolVersion, err)
			}
			full.FieldByName("By").Set(reflect.ValueOf([]string{"cluster"}))
		}
		older, err := olderCall(OldestProtocolVersion, full.Interface())
		if err != nil {
			t.Errorf("%s with what protocol %s knows: %v", name, OldestProtocolVersion, err)
			continue
		}
		body, err := json.Marshal(older)
		if err != nil {
			t.Fatal(err)
		}
		keys, err := jsonKeys(body)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if !slices.Contains(strings.Fields(known[name]), k) {
				t.Errorf("%s in protocol %s carries %q, which its calls did not", name, OldestProtocolVersion, k)
			}
		}
		if lo, ok := older.(storage.ListOptions); ok && (lo.Count || lo.CountOnly || lo.Selection.Part == nil || len(lo.Selection.Part) != 0) {
			t.Errorf("a count-only list in protocol %s: %+v, want uncounted and narrowed to no cluster", OldestProtocolVersion, lo)
		}
	}
	lo := storage.ListOptions{Selection: storage.Selection{Part: []string{"a"}}, Count: true, CountOptional: true, Limit: 5}
	if older, err := olderCall(OldestProtocolVersion, lo); err != nil || older.(storage.ListOptions).Count || !slices.Equal(older.(storage.ListOptions).Selection.Part, []string{"a"}) {
		t.Errorf("a counted page whose count is optional, in protocol %s: %+v %v, want it uncounted and its part kept", OldestProtocolVersion, older, err)
	}
	if _, err := olderCall("2", storage.ClusterOptions{}); err == nil {
		t.Errorf("a call in protocol 2: asked")
	}
}

// fillSent sets every field v's calls send (not those tagged "-") to a value that is not its
// zero value.
func fillSent(v reflect.Value) {
	for i := range v.NumField() {
		f, sf := v.Field(i), v.Type().Field(i)
		if !sf.IsExported() || strings.HasPrefix(sf.Tag.Get("json"), "-") {
			continue
		}
		switch f.Kind() {
		case reflect.Struct:
			fillSent(f)
		case reflect.String:
			f.SetString("x")
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Int, reflect.Int32, reflect.Int64:
			f.SetInt(1)
		case reflect.Slice:
			f.Set(reflect.ValueOf([]string{"x"}))
		default:
			panic(fmt.Sprintf("fillSent: %s of kind %s", sf.Name, f.Kind()))
		}
	}
}

// jsonKeys lists, sorted, the keys of a JSON object, a nested object's as "name.key".
func jsonKeys(body []byte) ([]string, error) {
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("%s: %v", body, err)
	}
	var out []string
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			if inner, ok := v.(map[string]any); ok {
				walk(prefix+k+".", inner)
				continue
			}
			out = append(out, prefix+k)
		}
	}
	walk("", m)
	slices.Sort(out)
	return out, nil
}

// previousRelease serves h as a replica of OldestProtocolVersion would: a call of another
// version is refused with 503 and that version's header, as that release's handler refused it;
// a call of that version must carry only the options its calls carried, and is answered by h,
// today's Handler, in that version. It counts the calls of each version, and the connections
// opened to it.
func previousRelease(t *testing.T, h http.Handler) (*httptest.Server, *sync.Map, *atomic.Int32) {
	t.Helper()
	byVersion, conns := &sync.Map{}, &atomic.Int32{}
	names := map[string]string{ListPath: "list", GetPath: "get", WatchPath: "watch", SummaryPath: "summary", ClustersPath: "cluster"}
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := r.Header.Get(ProtocolHeader)
		n, _ := byVersion.LoadOrStore(v, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		if v != OldestProtocolVersion {
			w.Header().Set(ProtocolHeader, OldestProtocolVersion)
			writeError(w, storage.Retry(http.StatusServiceUnavailable, fmt.Sprintf("this replica speaks peer protocol %q, the caller %q", OldestProtocolVersion, v)))
			return
		}
		body, _ := io.ReadAll(r.Body)
		keys, err := jsonKeys(body)
		if err != nil {
			t.Errorf("a call of protocol %s to %s: %v", v, r.URL.Path, err)
		}
		for _, k := range keys {
			if !slices.Contains(strings.Fields(envelopeCalls[OldestProtocolVersion][names[r.URL.Path]]), k) {
				t.Errorf("a call of protocol %s to %s carries %q, which that version does not know", v, r.URL.Path, k)
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		h.ServeHTTP(withoutNewest{w}, r)
	}))
	hs.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	hs.Start()
	t.Cleanup(hs.Close)
	return hs, byVersion, conns
}

// TestCallsToAReplicaOfThePreviousEnvelope: during a rolling update from the previous
// release, a replica of OldestProtocolVersion refuses this release's calls naming its version;
// the first call is made again in it and answered, and so are the next ones that mean the
// same in it, in it at once while the refusal is remembered (a list, a counted page whose
// count is optional, uncounted, a count-only part read as its position, a get, a watch, a
// summary); past rememberOlder the newest version is tried first again. Today's Handler
// answers a call of that version in it. A call that does not mean the same (a sorted list, an
// owner filter, a count the caller needs, a path) is a 503 to retry that says why, and is not
// made in the older version at all.
func TestCallsToAReplicaOfThePreviousEnvelope(t *testing.T) {
	items := []storage.Item{{Key: key("a", "x"), Object: "X", Seq: 7}, {Key: key("b", "y"), Object: "Y", Seq: 9}}
	fr := &fakeReader{
		list: func(o storage.ListOptions) (*storage.List, error) {
			l := &storage.List{ResourceVersion: "rv1", Epoch: "e1"}
			for _, it := range items {
				if o.Selection.Part == nil || slices.Contains(o.Selection.Part, it.Key.Cluster) {
					l.Items = append(l.Items, it)
				}
			}
			if o.Count || o.CountOnly {
				l.Count = &storage.Count{Total: int64(len(l.Items))}
			}
			if o.CountOnly {
				l.Items = nil
			}
			return l, nil
		},
		events: func(_ context.Context, sink storage.Sink) error {
			_ = sink.Event("ADDED", storage.Item{Key: key("a", "x"), Object: 1, RV: "p1"})
			_ = sink.Bookmark("p2", true)
			sink.Flush()
			return nil
		},
	}
	hs, byVersion, conns := previousRelease(t, &Handler{Reader: summarizing{fr}, Encoders: encoders})
	clients := NewClients(nil, 5*time.Second)
	now := time.Now()
	clients.now = func() time.Time { return now }
	c := &Client{ID: "r-old", URL: hs.URL, Clients: clients, Timeout: 5 * time.Second}
	callsIn := func() (newest, oldest int32) {
		for v, p := range map[string]*int32{ProtocolVersion: &newest, OldestProtocolVersion: &oldest} {
			if n, ok := byVersion.Load(v); ok {
				*p = n.(*atomic.Int32).Swap(0)
			}
		}
		return newest, oldest
	}
	ctx := context.Background()
	sel := storage.Selection{Resource: "pods", Part: []string{"a", "b"}}

	for _, tc := range []struct {
		name  string
		opts  storage.ListOptions
		items int
	}{
		{"a list", storage.ListOptions{Selection: sel}, 2},
		{"a page whose count is optional", storage.ListOptions{Selection: sel, Limit: 5, Count: true, CountOptional: true}, 2},
		{"a count-only part whose count is optional", storage.ListOptions{Selection: sel, Limit: 5, CountOnly: true, CountOptional: true}, 0},
	} {
		l, err := c.List(ctx, tc.opts)
		if err == nil {
			err = storage.Drain(l)
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if len(l.Items) != tc.items || l.Count != nil || l.ResourceVersion != "rv1" {
			t.Errorf("%s: %d items, count %+v, position %q; want %d, none, rv1", tc.name, len(l.Items), l.Count, l.ResourceVersion, tc.items)
		}
		// The first call learns the replica's version; the next ones, within rememberOlder,
		// go in it at once.
		want4 := int32(0)
		if tc.name == "a list" {
			want4 = 1
		}
		if n4, n3 := callsIn(); n4 != want4 || n3 != 1 {
			t.Errorf("%s: %d calls in %s and %d in %s, want %d and 1", tc.name, n4, ProtocolVersion, n3, OldestProtocolVersion, want4)
		}
	}
	if asked := fr.lists[len(fr.lists)-1]; asked.CountOnly || asked.Selection.Part == nil || len(asked.Selection.Part) != 0 {
		t.Errorf("a count-only part in protocol %s asked %+v, want its position alone (no cluster)", OldestProtocolVersion, asked)
	}

	l, err := c.Get(ctx, storage.GetOptions{Selection: sel, Name: "x"})
	if err != nil || len(l.Items) != 2 {
		t.Errorf("a get: %v, %+v", err, l)
	}
	w, err := c.Watch(ctx, storage.WatchOptions{Selection: sel})
	if err != nil {
		t.Fatalf("a watch: %v", err)
	}
	rec := &recordSink{}
	if err := w.Run(ctx, rec); err != nil || fmt.Sprint(rec.got) != "[ADDED a|ns/x p1 BOOKMARK p2 true]" {
		t.Errorf("a watch: %v %v", err, rec.got)
	}
	sum, err := c.Summarize(ctx, storage.SummaryOptions{Selection: sel, By: []string{"cluster"}})
	if err != nil || sum.Total != 2 {
		t.Errorf("a summary by cluster: %v, %+v", err, sum)
	}
	if n4, n3 := callsIn(); n4 != 0 || n3 != 3 {
		t.Errorf("a get, a watch and a summary: %d calls in %s and %d in %s, want 0 and 3", n4, ProtocolVersion, n3, OldestProtocolVersion)
	}
	// Past rememberOlder, this release's version is tried first again (the replica may have
	// been updated in place), and the refusal is learned again.
	now = now.Add(rememberOlder + time.Second)
	if _, err := c.Get(ctx, storage.GetOptions{Selection: sel, Name: "x"}); err != nil {
		t.Errorf("a get past rememberOlder: %v", err)
	}
	if n4, n3 := callsIn(); n4 != 1 || n3 != 1 {
		t.Errorf("a get past rememberOlder: %d calls in %s and %d in %s, want one each", n4, ProtocolVersion, n3, OldestProtocolVersion)
	}

	for _, tc := range []struct {
		name string
		call func() error
		why  string
	}{
		{"a sorted list", func() error {
			_, err := c.List(ctx, storage.ListOptions{Selection: sel, SortBy: "metadata.name"})
			return err
		}, "does not sort"},
		{"a count the caller needs", func() error {
			_, err := c.List(ctx, storage.ListOptions{Selection: sel, Limit: 5, Count: true})
			return err
		}, "does not count"},
		{"an owner's list", func() error {
			_, err := c.List(ctx, storage.ListOptions{Selection: storage.Selection{Resource: "pods", Owner: "apps/Deployment/ns/web"}})
			return err
		}, "owner"},
		{"an owner's get", func() error {
			_, err := c.Get(ctx, storage.GetOptions{Selection: storage.Selection{Resource: "pods", Owner: "apps/Deployment/ns/web"}, Name: "x"})
			return err
		}, "owner"},
		{"an owner's watch", func() error {
			_, err := c.Watch(ctx, storage.WatchOptions{Selection: storage.Selection{Resource: "pods", Owner: "apps/Deployment/ns/web"}})
			return err
		}, "owner"},
		{"a summary by owner", func() error {
			_, err := c.Summarize(ctx, storage.SummaryOptions{Selection: sel, By: []string{"owner"}})
			return err
		}, "owner"},
		{"a summary by a path", func() error {
			_, err := c.Summarize(ctx, storage.SummaryOptions{Selection: sel, By: []string{"cluster", "field:metadata.creationTimestamp"}})
			return err
		}, "differently"},
		{"a list by a configured index", func() error {
			_, err := c.List(ctx, storage.ListOptions{Selection: storage.Selection{Resource: "pods", Index: "by-start", Value: "x"}})
			return err
		}, "differently"},
	} {
		err := tc.call()
		if storage.Code(err) != http.StatusServiceUnavailable || storage.RetryAfter(err) == 0 || !strings.Contains(err.Error(), tc.why) || !strings.Contains(err.Error(), `"r-old"`) {
			t.Errorf("%s: %v (%d), want a 503 to retry saying it %s", tc.name, err, storage.Code(err), tc.why)
		}
		if n4, n3 := callsIn(); n4 != 1 || n3 != 0 {
			t.Errorf("%s: %d calls in %s and %d in %s, want one in %s alone", tc.name, n4, ProtocolVersion, n3, OldestProtocolVersion, ProtocolVersion)
		}
	}
	// Each refused call's answer was read and closed before the next call: one connection
	// served them all, but the watch's, which held its own while it ran.
	if n := conns.Load(); n > 2 {
		t.Errorf("%d connections opened for calls made one at a time: a refused answer was left open", n)
	}
}

// summarizing is a fakeReader that summarizes too: every object it lists, in one group.
type summarizing struct{ *fakeReader }

func (s summarizing) Summarize(ctx context.Context, opts storage.SummaryOptions) (*storage.Summary, error) {
	l, err := s.List(ctx, storage.ListOptions{Selection: opts.Selection})
	if err != nil {
		return nil, err
	}
	out := &storage.Summary{}
	out.By, out.Total = opts.By, len(l.Items)
	return out, nil
}

// TestWhatTheReleasesAnswerAlike: version 3 reads a time or a quantity of a typed object by a
// path as nothing (version 4 as its JSON), and has no owner filter: a call by an owner, by a
// path or by a configured index is not made in it, and not answered to it; the built-in
// indexes and the other keys are alike.
func TestWhatTheReleasesAnswerAlike(t *testing.T) {
	v := OldestProtocolVersion
	for _, tc := range []struct {
		opts  any
		alike bool
	}{
		{storage.SummaryOptions{By: []string{"cluster", "namespace", "label:tier", "index:image", "index:pod-node"}}, true},
		{storage.SummaryOptions{By: []string{"cluster", "field:status.phase"}}, false},
		{storage.SummaryOptions{By: []string{"index:by-start"}}, false},
		{storage.SummaryOptions{By: []string{"owner"}}, false},
		{storage.ListOptions{Selection: storage.Selection{Index: "pod-node", Value: "n1"}}, true},
		{storage.ListOptions{Selection: storage.Selection{Index: "cluster-namespace", Value: "a/ns"}}, true},
		{storage.WatchOptions{Selection: storage.Selection{Index: "by-start", Value: "x"}}, false},
		{storage.GetOptions{Selection: storage.Selection{Owner: "apps/Deployment/ns/web"}}, false},
		{storage.ListOptions{Selection: storage.Selection{Where: "object.metadata.name == 'x'", LabelSelector: "a=b"}}, true},
		{storage.ClusterOptions{Part: []string{"a"}}, true},
	} {
		err := notMeantAlike(v, tc.opts)
		if (err == nil) != tc.alike {
			t.Errorf("%+v: %v, want alike %v", tc.opts, err, tc.alike)
		}
		if _, cerr := olderCall(v, tc.opts); (cerr == nil) != tc.alike {
			t.Errorf("%+v in protocol %s: %v, want made %v", tc.opts, v, cerr, tc.alike)
		}
	}

	// Answering a caller of version 3: what the releases answer differently is refused, in
	// the caller's version; what they answer alike is answered.
	fr := &fakeReader{list: func(storage.ListOptions) (*storage.List, error) { return &storage.List{ResourceVersion: "rv"}, nil }}
	h := &Handler{Reader: summarizing{fr}, Encoders: encoders}
	for body, want := range map[string]int{
		`{"resource":"pods","part":null,"by":["field:metadata.creationTimestamp"]}`: http.StatusServiceUnavailable,
		`{"resource":"pods","part":null,"by":["cluster"]}`:                          http.StatusOK,
	} {
		req := httptest.NewRequest(http.MethodPost, SummaryPath, strings.NewReader(body))
		req.Header.Set(ProtocolHeader, v)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != want || rec.Header().Get(ProtocolHeader) != v || (want != http.StatusOK && rec.Header().Get("Retry-After") == "") {
			t.Errorf("a summary of protocol %s %s: %d %v %s, want %d in its version", v, body, rec.Code, rec.Header(), rec.Body, want)
		}
	}
}

// TestAnOlderReplicasOwnRefusalStands: a replica of the previous release that refuses a call
// for its own reasons (its limits: 429, its access: 403) answers in its version; that is its
// answer, with its Retry-After, not a refusal of the version to call again in it.
func TestAnOlderReplicasOwnRefusalStands(t *testing.T) {
	for _, code := range []int{http.StatusTooManyRequests, http.StatusForbidden} {
		var calls atomic.Int32
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			w.Header().Set(ProtocolHeader, OldestProtocolVersion)
			w.Header().Set("Retry-After", "7")
			writeError(w, storage.Error(code, "the replica's own words"))
		}))
		c := &Client{ID: "r-old", URL: hs.URL, Clients: NewClients(nil, 5*time.Second)}
		_, err := c.List(context.Background(), storage.ListOptions{SortBy: "metadata.name"})
		hs.Close()
		if storage.Code(err) != code || !strings.Contains(err.Error(), "the replica's own words") || calls.Load() != 1 {
			t.Errorf("%d of a replica of protocol %s: %v (%d) after %d calls, want its own %d after one", code, OldestProtocolVersion, err, storage.Code(err), calls.Load(), code)
		}
		if code == http.StatusTooManyRequests && storage.RetryAfter(err) != 7 {
			t.Errorf("its 429's Retry-After: %d, want 7", storage.RetryAfter(err))
		}
	}
}

// withoutNewest answers as the previous release did: without NewestProtocolHeader, which it
// did not know (peertest.PreviousRelease's writer, which this package's tests cannot import).
type withoutNewest struct{ http.ResponseWriter }

func (w withoutNewest) WriteHeader(code int) {
	w.Header().Del(NewestProtocolHeader)
	w.ResponseWriter.WriteHeader(code)
}

func (w withoutNewest) Write(b []byte) (int, error) {
	w.Header().Del(NewestProtocolHeader)
	return w.ResponseWriter.Write(b)
}

func (w withoutNewest) Flush() { w.ResponseWriter.(http.Flusher).Flush() }

// TestARememberedOlderReplica: calls to a replica remembered to speak only the previous
// version go in it at once, and then: its own refusal (429, with its Retry-After) is its
// answer; an answer that says it was updated in place (NewestProtocolHeader) stands and makes
// the next call go in this release's version; an answer of another version (a later release
// under the same name) is not read, and the call is made in this release's version at once.
func TestARememberedOlderReplica(t *testing.T) {
	var mode atomic.Value // what the replica is now
	var mu sync.Mutex
	byVersion := map[string]int{}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := r.Header.Get(ProtocolHeader)
		mu.Lock()
		byVersion[v]++
		mu.Unlock()
		answer := func(in string) {
			w.Header().Set(ProtocolHeader, in)
			_, _ = io.WriteString(w, "h {\"rv\":\"rv-"+in+"\"}\ne\n")
		}
		switch mode.Load().(string) {
		case "previous": // speaks 3 alone
			w.Header().Set(ProtocolHeader, OldestProtocolVersion)
			if v != OldestProtocolVersion {
				writeError(w, storage.Retry(http.StatusServiceUnavailable, "speaks 3"))
				return
			}
			answer(v)
		case "overloaded previous":
			w.Header().Set(ProtocolHeader, OldestProtocolVersion)
			w.Header().Set("Retry-After", "7")
			writeError(w, storage.Error(http.StatusTooManyRequests, "too many requests"))
		case "updated": // this release
			w.Header().Set(NewestProtocolHeader, ProtocolVersion)
			answer(v)
		case "later": // speaks 5 and 4
			w.Header().Set(NewestProtocolHeader, "5")
			if v != ProtocolVersion && v != "5" {
				w.Header().Set(ProtocolHeader, "5")
				writeError(w, storage.Retry(http.StatusServiceUnavailable, "speaks 5 and 4"))
				return
			}
			answer(v)
		}
	}))
	t.Cleanup(hs.Close)
	c := &Client{ID: "r", URL: hs.URL, Clients: NewClients(nil, 5*time.Second)}
	list := func(step string, want4, want3 int, wantRV string, wantCode int) {
		t.Helper()
		mu.Lock()
		clear(byVersion)
		mu.Unlock()
		l, err := c.List(context.Background(), storage.ListOptions{Selection: storage.Selection{Resource: "pods"}})
		if err == nil {
			err = storage.Drain(l)
		}
		mu.Lock()
		n4, n3 := byVersion[ProtocolVersion], byVersion[OldestProtocolVersion]
		mu.Unlock()
		switch {
		case n4 != want4 || n3 != want3:
			t.Errorf("%s: %d calls in %s and %d in %s, want %d and %d", step, n4, ProtocolVersion, n3, OldestProtocolVersion, want4, want3)
		case wantCode != 0 && (storage.Code(err) != wantCode || storage.RetryAfter(err) != 7):
			t.Errorf("%s: %v (%d, Retry-After %d), want %d with Retry-After 7", step, err, storage.Code(err), storage.RetryAfter(err), wantCode)
		case wantCode == 0 && (err != nil || l.ResourceVersion != wantRV):
			t.Errorf("%s: %v, %+v; want the answer in %s", step, err, l, wantRV)
		}
	}
	mode.Store("previous")
	list("the first call", 1, 1, "rv-3", 0)
	list("the next", 0, 1, "rv-3", 0)
	mode.Store("overloaded previous")
	list("its own 429", 0, 1, "", http.StatusTooManyRequests)
	mode.Store("updated")
	list("updated in place", 0, 1, "rv-3", 0)
	list("after the update", 1, 0, "rv-4", 0)
	mode.Store("previous")
	list("the previous release again", 1, 1, "rv-3", 0)
	mode.Store("later")
	list("a later release under the same name", 1, 1, "rv-4", 0)
	list("after it", 1, 0, "rv-4", 0)
}

// TestVersionsArePrevious: the versions this release speaks are its own and the one before,
// each with a record of its calls' options (olderCall and notMeantAlike are written for that
// pair: a new version moves both up, and they are written again).
func TestVersionsArePrevious(t *testing.T) {
	newest, err1 := strconv.Atoi(ProtocolVersion)
	oldest, err2 := strconv.Atoi(OldestProtocolVersion)
	if err1 != nil || err2 != nil || oldest+1 != newest {
		t.Errorf("versions %q and %q: want this release's and the one before", ProtocolVersion, OldestProtocolVersion)
	}
	for _, v := range spoken {
		if _, ok := envelopeCalls[v]; !ok {
			t.Errorf("version %s has no record of its calls' options", v)
		}
	}
}

// TestClientsForgetOlderPeers: what Clients remember of a replica that spoke an older version
// is gone a minute later, and dropped from memory when another is remembered.
func TestClientsForgetOlderPeers(t *testing.T) {
	cl := NewClients(nil, time.Second)
	now := time.Now()
	cl.now = func() time.Time { return now }
	cl.noteOlder("r1", "https://r1", OldestProtocolVersion)
	if v := cl.olderOf("r1", "https://r1"); v != OldestProtocolVersion {
		t.Errorf("r1 right after: %q", v)
	}
	if v := cl.olderOf("r1", "https://r1-moved"); v != "" {
		t.Errorf("r1 at another URL: %q", v)
	}
	now = now.Add(rememberOlder + time.Second)
	if v := cl.olderOf("r1", "https://r1"); v != "" {
		t.Errorf("r1 past rememberOlder: %q", v)
	}
	cl.noteOlder("r2", "https://r2", OldestProtocolVersion)
	if len(cl.older) != 1 {
		t.Errorf("%d replicas remembered, want r2 alone: %v", len(cl.older), cl.older)
	}
}
