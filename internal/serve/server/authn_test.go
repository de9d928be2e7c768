package server

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

func writeTokenFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadTokenFile(t *testing.T) {
	p := writeTokenFile(t, `abc123,alice,uid-1,"group1,group2"
def456,bob,uid-2

,nobody,uid-3
ghi789, carol ,uid-4,""
`)
	tokens, err := LoadTokenFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(tokens) != 3 {
		t.Fatalf("tokens = %+v", tokens)
	}
	if u := tokens["abc123"]; u.Name != "alice" || u.UID != "uid-1" || !slices.Equal(u.Groups, []string{"group1", "group2"}) {
		t.Errorf("alice = %+v", u)
	}
	if u := tokens["def456"]; u.Name != "bob" || u.UID != "uid-2" || u.Groups != nil {
		t.Errorf("bob = %+v", u)
	}
	if u := tokens["ghi789"]; u.Name != "carol " || u.Groups != nil {
		t.Errorf("carol = %+v", u)
	}

	for name, content := range map[string]string{
		"two columns": "abc,alice\n",
		"bad quoting": "abc,\"alice,uid\n",
	} {
		if _, err := LoadTokenFile(writeTokenFile(t, content)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := LoadTokenFile(filepath.Join(t.TempDir(), "missing.csv")); err == nil {
		t.Error("missing file accepted")
	}
}

func TestBearerTokens(t *testing.T) {
	tokens, err := LoadTokenFile(writeTokenFile(t, "abc123,alice,uid-1,\"group1,group2\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	deps, _, _ := testDeps()
	for _, anonymous := range []bool{false, true} {
		s := newTestServer(t, Config{Tokens: tokens, AuthorizationMode: AuthorizationAlwaysAllow}, deps)
		if anonymous {
			anonymousAlwaysAllowed(s)
		}
		bearer := func(v string) http.Header { return http.Header{"Authorization": {v}} }
		if code, _ := do(t, s, "GET", "/pods", bearer("Bearer abc123")); code != 200 {
			t.Errorf("anonymous=%v valid token: %d", anonymous, code)
		}
		if code, _ := do(t, s, "GET", "/pods", bearer("bearer  abc123 ")); code != 200 {
			t.Errorf("anonymous=%v lower-case scheme: %d", anonymous, code)
		}
		// An invalid token is never anonymous.
		if code, _ := do(t, s, "GET", "/pods", bearer("Bearer nope")); code != 401 {
			t.Errorf("anonymous=%v invalid token: %d, want 401", anonymous, code)
		}
		want := 401
		if anonymous {
			want = 200
		}
		if code, _ := do(t, s, "GET", "/pods", bearer("Basic YWxpY2U6eA==")); code != want {
			t.Errorf("anonymous=%v other scheme: %d, want %d", anonymous, code, want)
		}
		if code, _ := do(t, s, "GET", "/pods", nil); code != want {
			t.Errorf("anonymous=%v no credentials: %d, want %d", anonymous, code, want)
		}
	}
}

type reviewer map[string]UserInfo

func (r reviewer) AuthenticateToken(_ context.Context, token string) (UserInfo, bool, error) {
	u, ok := r[token]
	return u, ok, nil
}

func TestAuthenticatorUsers(t *testing.T) {
	deps, _, _ := testDeps()
	s := newTestServer(t, Config{
		Tokens:            map[string]UserInfo{"static": {Name: "alice", Groups: []string{"g"}}},
		TokenReview:       reviewer{"reviewed": {Name: "system:serviceaccount:kube-system:metrics", UID: "u"}},
		AnonymousAuth:     true,
		AuthorizationMode: AuthorizationNodeletGroups,
	}, deps)
	for _, c := range []struct {
		auth string
		want UserInfo
	}{
		{"Bearer static", UserInfo{Name: "alice", Groups: []string{"g", AuthenticatedGroup}}},
		{"Bearer reviewed", UserInfo{Name: "system:serviceaccount:kube-system:metrics", UID: "u", Groups: []string{AuthenticatedGroup}}},
		{"", UserInfo{Name: AnonymousUser, Groups: []string{UnauthenticatedGroup}}},
	} {
		r, _ := http.NewRequest("GET", "/pods", nil)
		if c.auth != "" {
			r.Header.Set("Authorization", c.auth)
		}
		u, ok, err := s.authn.Authenticate(r)
		if err != nil || !ok || u.Name != c.want.Name || u.UID != c.want.UID || !slices.Equal(u.Groups, c.want.Groups) {
			t.Errorf("%q: %+v %v %v, want %+v", c.auth, u, ok, err, c.want)
		}
	}
}

func TestStaticTokensCompareEveryEntry(t *testing.T) {
	tokens := NewStaticTokens(map[string]UserInfo{
		"abc123":         {Name: "alice"},
		"s3cr3t-longer":  {Name: "bob"},
		"x":              {Name: "carol"},
		"0123456789abcd": {Name: "dave"},
	})
	compared := 0
	tokens.equal = func(a, b []byte) int {
		compared++
		if len(a) != len(b) {
			t.Errorf("compared %d bytes with %d: lengths must not depend on the tokens", len(a), len(b))
		}
		return subtle.ConstantTimeCompare(a, b)
	}
	for _, c := range []struct {
		token string
		want  string // "" is no user
	}{
		{"abc123", "alice"},
		{"s3cr3t-longer", "bob"},
		{"x", "carol"},
		{"0123456789abcd", "dave"},
		{"abc12", ""},   // a prefix
		{"abc1234", ""}, // an extension
		{"ABC123", ""},
		{"s3cr3t", ""},
		{"", ""},
		{"nope", ""},
	} {
		compared = 0
		u, ok, err := tokens.AuthenticateToken(t.Context(), c.token)
		if err != nil || ok != (c.want != "") || u.Name != c.want {
			t.Errorf("%q: %+v %v %v, want user %q", c.token, u, ok, err, c.want)
		}
		// Hit or miss, first entry or last: every entry is compared.
		if compared != 4 {
			t.Errorf("%q: %d comparisons, want 4 (one per token)", c.token, compared)
		}
	}
	if s := fmt.Sprintf("%+v", tokens); strings.Contains(s, "abc123") || strings.Contains(s, "s3cr3t") {
		t.Errorf("the tokens are kept in the clear: %s", s)
	}
}

// A client chain that verified is not verified again while it is valid,
// and is verified again (and refused) outside its validity.
func TestClientCertVerificationRemembered(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	clk := testingclock.NewFakePassiveClock(now)
	creds, err := EnsureAdminCredentials(dir, clk)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := LoadCertPool(creds.CACert)
	if err != nil {
		t.Fatal(err)
	}
	admin := parseCertFile(t, creds.ClientCert)
	a := &requestAuthenticator{clientCA: pool, clock: clk}
	req := func() *http.Request {
		r, _ := http.NewRequest("GET", "/stats/summary", nil)
		r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{admin}}
		return r
	}
	u, ok, err := a.Authenticate(req())
	if err != nil || !ok || u.Name != AdminUser || !slices.Equal(u.Groups, []string{AdminGroup, AuthenticatedGroup}) {
		t.Fatalf("first: %+v %v %v", u, ok, err)
	}
	// Remembered: with the roots gone the chain still authenticates,
	// which only the memory can do.
	a.clientCA = x509.NewCertPool()
	if u, ok, err := a.Authenticate(req()); err != nil || !ok || u.Name != AdminUser || !slices.Equal(u.Groups, []string{AdminGroup, AuthenticatedGroup}) {
		t.Fatalf("remembered: %+v %v %v", u, ok, err)
	}
	// Past the certificate's end, and before its start, it is verified
	// again: refused.
	a.clientCA = pool
	for _, at := range []time.Time{admin.NotAfter.Add(time.Second), admin.NotBefore.Add(-time.Second)} {
		clk.SetTime(at)
		if _, ok, err := a.Authenticate(req()); err == nil || ok {
			t.Errorf("at %v: authenticated (%v, %v), want an error", at, ok, err)
		}
	}
	// A chain the roots do not sign is refused every time, never
	// remembered.
	clk.SetTime(now)
	other, err := EnsureAdminCredentials(t.TempDir(), clk)
	if err != nil {
		t.Fatal(err)
	}
	foreign := parseCertFile(t, other.ClientCert)
	for range 2 {
		r := req()
		r.TLS.PeerCertificates = []*x509.Certificate{foreign}
		if _, ok, err := a.Authenticate(r); err == nil || ok {
			t.Errorf("foreign chain: %v %v, want an error", ok, err)
		}
	}
	if n := len(a.verified.entries); n != 1 {
		t.Errorf("%d chains remembered, want 1", n)
	}
}

func TestVerifiedChainsBounded(t *testing.T) {
	var v verifiedChains
	end := time.Now().Add(time.Hour)
	for i := range maxVerifiedChains + 10 {
		var k [32]byte
		k[0], k[1] = byte(i), byte(i>>8)
		v.put(k, verifiedChain{user: UserInfo{Name: fmt.Sprint(i)}, notAfter: end})
	}
	if n := len(v.entries); n > maxVerifiedChains {
		t.Errorf("%d entries, want at most %d", n, maxVerifiedChains)
	}
}
