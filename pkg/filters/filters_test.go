package filters

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/multicache/multicache/pkg/auth"
)

// named is an Access that says who its caller is.
type named struct {
	auth.Everything
	name string
}

func (n named) User() user.Info { return &user.DefaultInfo{Name: n.name} }

// byHeader authenticates X-Test-User; "broken" cannot be checked.
type byHeader struct{}

func (byHeader) Authorize(r *http.Request) (auth.Access, error) {
	switch u := r.Header.Get("X-Test-User"); u {
	case "":
		return nil, auth.ErrUnauthenticated
	case "broken":
		return nil, errors.New("review failed")
	default:
		return named{name: u}, nil
	}
}

func (byHeader) AccessFor(u user.Info) auth.Access { return named{name: "peer:" + u.GetName()} }

// vouching believes X-Remote-User on requests that carry X-Test-Peer-Cert.
type vouching struct{}

func (vouching) AuthenticateRequest(r *http.Request) (*authenticator.Response, bool, error) {
	if r.Header.Get("X-Test-Peer-Cert") == "" || r.Header.Get(auth.PeerUserHeader) == "" {
		return nil, false, nil
	}
	return &authenticator.Response{User: &user.DefaultInfo{Name: r.Header.Get(auth.PeerUserHeader)}}, true, nil
}

// TestAuthentication: every request is authenticated once: 401 without credentials, 503 when
// they cannot be checked; identity headers count only under a peer certificate; a request this
// process sends itself keeps its caller.
func TestAuthentication(t *testing.T) {
	var seen string
	h := Authentication{Authorizer: byHeader{}, Peers: vouching{}}.Wrap(func(w http.ResponseWriter, r *http.Request) {
		seen = auth.UserOf(AccessOf(r.Context())).GetName()
		for k := range r.Header {
			if k == auth.PeerUserHeader || k == auth.PeerGroupHeader || k == auth.PeerUIDHeader || strings.HasPrefix(k, auth.PeerExtraHeaderPrefix) {
				t.Errorf("identity header %s reached the handler", k)
			}
		}
	})
	do := func(ctx context.Context, headers map[string]string) (int, http.Header) {
		seen = ""
		r := httptest.NewRequest("GET", "/", nil).WithContext(ctx)
		for k, v := range headers {
			r.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		h(rec, r)
		return rec.Code, rec.Header()
	}
	bg := context.Background()
	if code, hdr := do(bg, nil); code != 401 || hdr.Get("WWW-Authenticate") != "Bearer" {
		t.Errorf("no credentials: %d %v", code, hdr)
	}
	if code, _ := do(bg, map[string]string{"X-Test-User": "broken"}); code != 503 {
		t.Errorf("credentials that cannot be checked: %d, want 503", code)
	}
	if code, _ := do(bg, map[string]string{"X-Test-User": "alice"}); code != 200 || seen != "alice" {
		t.Errorf("alice: %d as %q", code, seen)
	}
	// A header naming someone else, without a peer certificate, is dropped: the caller is alice.
	if code, _ := do(bg, map[string]string{"X-Test-User": "alice", auth.PeerUserHeader: "admin", auth.PeerUIDHeader: "0",
		auth.PeerExtraHeaderPrefix + "Scopes": "all"}); code != 200 || seen != "alice" {
		t.Errorf("a forged identity header: %d as %q", code, seen)
	}
	if code, _ := do(bg, map[string]string{auth.PeerUserHeader: "admin"}); code != 401 {
		t.Errorf("an identity header alone: %d, want 401", code)
	}
	// Under a peer certificate the named user is the caller, as the Authorizer sees it.
	if code, _ := do(bg, map[string]string{"X-Test-Peer-Cert": "1", auth.PeerUserHeader: "bob"}); code != 200 || seen != "peer:bob" {
		t.Errorf("a peer vouching for bob: %d as %q", code, seen)
	}
	// Without an Authorizer every caller reads everything.
	open := Authentication{}.Wrap(func(w http.ResponseWriter, r *http.Request) {
		if all, _ := AccessOf(r.Context()).All(r.Context()); !all {
			t.Error("auth off: the caller does not read everything")
		}
	})
	open(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
}

// TestLimits: past its cap a request gets 429 with Retry-After and a message naming the setting;
// a released slot is free again.
func TestLimits(t *testing.T) {
	l := NewLimits(1, 1)
	release, ok := l.AcquireWatch(httptest.NewRecorder())
	if !ok {
		t.Fatal("the first watch was refused")
	}
	rec := httptest.NewRecorder()
	if _, ok := l.AcquireWatch(rec); ok || rec.Code != 429 || rec.Header().Get("Retry-After") != "1" {
		t.Fatalf("a second watch: ok %v, %d %v", ok, rec.Code, rec.Header())
	}
	if st := rec.Body.String(); !contains(st, "server.maxWatches is 1") || !contains(st, `"reason":"TooManyRequests"`) {
		t.Errorf("429 body: %s", st)
	}
	release()
	if release, ok := l.AcquireWatch(httptest.NewRecorder()); !ok {
		t.Error("a released slot is not free")
	} else {
		release()
	}
	inner := 0
	h := l.Limited(func(w http.ResponseWriter, r *http.Request) {
		inner++
		rec := httptest.NewRecorder()
		l.Limited(func(http.ResponseWriter, *http.Request) { inner++ })(rec, r) // the one slot is taken
		if rec.Code != 429 {
			t.Errorf("a request past maxRequestsInFlight: %d", rec.Code)
		}
	})
	h(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	if inner != 1 {
		t.Errorf("%d handlers ran, want 1", inner)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// TestAddWarningsBounded: a thousand clusters' warnings (each syncing, say) are not a thousand
// headers. Python's http.client refuses an answer with more than 100 headers; kube-apiserver
// cuts warnings to 256 runes once their text passes 4 Ki. The first that do not fit are
// counted in one last warning, after which nothing is added; repeats are added once.
func TestAddWarningsBounded(t *testing.T) {
	h := http.Header{}
	AddWarning(h, "fleet: first")
	var msgs []string
	for i := range 1000 {
		msgs = append(msgs, fmt.Sprintf("cluster %q: pods not synced yet", fmt.Sprintf("c%d", i)))
	}
	AddWarnings(h, append([]string{"fleet: first", "fleet: second", "fleet: second"}, msgs...))
	got := h.Values("Warning")
	if len(got) != maxWarnings {
		t.Fatalf("%d Warning headers, want %d", len(got), maxWarnings)
	}
	if !strings.Contains(got[0], "fleet: first") || !strings.Contains(got[1], "fleet: second") || strings.Contains(got[2], "fleet: second") {
		t.Errorf("first warnings %q: want fleet: first, fleet: second, once each", got[:3])
	}
	shown := len(got) - 3 // the two fleet warnings and the last
	want := fmt.Sprintf("%d more warnings not shown", 1000-shown)
	if last := got[len(got)-1]; !strings.Contains(last, want) {
		t.Errorf("last warning %q, want it to say %q", last, want)
	}
	AddWarning(h, "after the last")
	if n := len(h.Values("Warning")); n != len(got) {
		t.Errorf("a warning added after the last: %d headers, want %d", n, len(got))
	}

	// Exactly as many as fit: all shown, none counted.
	fit := http.Header{}
	AddWarnings(fit, msgs[:maxWarnings])
	if got := fit.Values("Warning"); len(got) != maxWarnings || !strings.Contains(got[maxWarnings-1], fmt.Sprintf("c%d", maxWarnings-1)) {
		t.Errorf("%d warnings: %d headers, the last %q", maxWarnings, len(got), got[len(got)-1])
	}

	// A warning longer than the text left is cut, as kube-apiserver cuts it, and those after
	// it are still shown until the text is spent.
	long := "990 clusters left out: you may not read " + strings.Repeat("c0-123, ", 990)
	cut := http.Header{}
	AddWarnings(cut, append([]string{long}, msgs[:5]...))
	got = cut.Values("Warning")
	runes := 0
	for _, v := range got {
		runes += utf8.RuneCountInString(v)
	}
	if len(got) != 6 || !strings.Contains(got[0], "990 clusters left out") || utf8.RuneCountInString(got[0]) > cutWarningRunes+20 || runes > maxWarningRunes {
		t.Errorf("a warning of %d runes, then 5: %d headers (%d runes), the first %q", utf8.RuneCountInString(long), len(got), runes, got[0])
	}
	// Long ones only: cut, until the text is spent.
	many := http.Header{}
	AddWarnings(many, []string{long, long + "1", long + "2", long + "3", long + "4", long + "5", long + "6", long + "7", long + "8", long + "9", long + "10",
		long + "11", long + "12", long + "13", long + "14", long + "15", long + "16", long + "17"})
	got = many.Values("Warning")
	if n := len(got); n < 10 || n > 18 || !strings.Contains(got[n-1], "more warnings not shown") {
		t.Errorf("18 long warnings: %d headers, the last %q", n, got[n-1])
	}
}
