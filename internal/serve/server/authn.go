package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Well-known users and groups, as Kubernetes names them.
const (
	AnonymousUser        = "system:anonymous"
	UnauthenticatedGroup = "system:unauthenticated"
	AuthenticatedGroup   = "system:authenticated"
)

const bearerPrefix = "bearer "

// UserInfo is who made a request.
type UserInfo struct {
	Name   string
	UID    string
	Groups []string
	// Extra are the user's further attributes, as a TokenReview's
	// status.user.extra gives them (scopes, the credential's ID, the pod a
	// service account token is bound to); they go into every
	// SubjectAccessReview. Users of client certificates and static
	// tokens have none.
	Extra map[string][]string
}

// clone returns a copy of u sharing no slice or map with it.
func (u UserInfo) clone() UserInfo {
	out := UserInfo{Name: u.Name, UID: u.UID, Groups: slices.Clone(u.Groups)}
	if u.Extra != nil {
		out.Extra = make(map[string][]string, len(u.Extra))
		for k, v := range u.Extra {
			out.Extra[k] = slices.Clone(v)
		}
	}
	return out
}

// Authenticator tells who made a request: ok is false when the request
// carries no credentials this authenticator understands; err is set when
// it carries credentials that are invalid (which must not fall back to
// anonymous).
type Authenticator interface {
	Authenticate(r *http.Request) (u UserInfo, ok bool, err error)
}

// TokenAuthenticator resolves a bearer token. The static token file is
// one (StaticTokens); in cluster mode a TokenReview client against the API
// server is another (Config.TokenReview).
type TokenAuthenticator interface {
	AuthenticateToken(ctx context.Context, token string) (u UserInfo, ok bool, err error)
}

// StaticTokens are the tokens of a --token-auth-file, kept as SHA-256
// digests. A lookup compares the presented token's digest with every
// entry in constant time and never stops early, so neither the time taken
// nor a map's hashing tells how much of a token was right; hashing first
// makes every comparison the same length whatever the tokens' lengths.
type StaticTokens struct {
	entries []tokenEntry
	// equal compares two digests; nil is subtle.ConstantTimeCompare
	// (tests count the comparisons).
	equal func(a, b []byte) int
}

type tokenEntry struct {
	digest [sha256.Size]byte
	user   UserInfo
}

// NewStaticTokens keeps the digests of tokens (token → user), not the
// tokens.
func NewStaticTokens(tokens map[string]UserInfo) *StaticTokens {
	t := &StaticTokens{entries: make([]tokenEntry, 0, len(tokens))}
	for tok, u := range tokens {
		t.entries = append(t.entries, tokenEntry{digest: sha256.Sum256([]byte(tok)), user: u})
	}
	return t
}

// AuthenticateToken implements TokenAuthenticator.
func (t *StaticTokens) AuthenticateToken(_ context.Context, token string) (UserInfo, bool, error) {
	equal := t.equal
	if equal == nil {
		equal = subtle.ConstantTimeCompare
	}
	digest := sha256.Sum256([]byte(token))
	var found UserInfo
	match := 0
	for i := range t.entries {
		eq := equal(digest[:], t.entries[i].digest[:])
		if eq == 1 {
			found = t.entries[i].user
		}
		match |= eq
	}
	return found, match == 1, nil
}

// LoadTokenFile reads a static token file as kube-apiserver's
// --token-auth-file: CSV records "token,user,uid[,"group1,group2"]".
// Records with an empty token are skipped; a repeated token keeps its last
// record.
func LoadTokenFile(path string) (map[string]UserInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.FieldsPerRecord = -1
	r.TrimLeadingSpace = true
	tokens := make(map[string]UserInfo)
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return tokens, nil
		}
		if err != nil {
			return nil, fmt.Errorf("token file %s: %w", path, err)
		}
		if len(rec) < 3 {
			line, _ := r.FieldPos(0)
			return nil, fmt.Errorf("token file %s line %d: want at least 3 columns (token, user name, user uid), found %d", path, line, len(rec))
		}
		if rec[0] == "" {
			continue
		}
		u := UserInfo{Name: rec[1], UID: rec[2]}
		if len(rec) >= 4 {
			for g := range strings.SplitSeq(rec[3], ",") {
				if g = strings.TrimSpace(g); g != "" {
					u.Groups = append(u.Groups, g)
				}
			}
		}
		tokens[rec[0]] = u
	}
}

// requestAuthenticator is the kubelet's chain: a client certificate
// verified against the client CA pool, else a bearer token, else anonymous
// when enabled. Invalid credentials are an error, never anonymous.
type requestAuthenticator struct {
	clientCA  *x509.CertPool // nil: client certificates are ignored
	tokens    []TokenAuthenticator
	anonymous bool
	clock     clock.PassiveClock
	// verified remembers the chains verified against clientCA, which
	// does not change: one ECDSA verification per request was the
	// largest cost of serving a cached /stats/summary.
	verified verifiedChains
}

// maxVerifiedChains bounds the verified chains remembered; beyond it the
// memory starts over.
const maxVerifiedChains = 256

// verifiedChains remembers which presented chains verified, with the
// window in which that answer holds: against a fixed pool of roots,
// whether a chain verifies depends only on the time, through the
// validity of the certificates. A chain is known by the digest of its
// certificates; a chain that failed is not remembered.
type verifiedChains struct {
	mu      sync.Mutex
	entries map[[sha256.Size]byte]verifiedChain
}

type verifiedChain struct {
	user                UserInfo
	notBefore, notAfter time.Time
}

func chainKey(chain []*x509.Certificate) [sha256.Size]byte {
	h := sha256.New()
	for _, c := range chain {
		d := sha256.Sum256(c.Raw)
		h.Write(d[:])
	}
	var k [sha256.Size]byte
	h.Sum(k[:0])
	return k
}

func (v *verifiedChains) get(k [sha256.Size]byte, now time.Time) (UserInfo, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	e, ok := v.entries[k]
	if !ok || now.Before(e.notBefore) || now.After(e.notAfter) {
		return UserInfo{}, false
	}
	return UserInfo{Name: e.user.Name, Groups: slices.Clone(e.user.Groups)}, true
}

func (v *verifiedChains) put(k [sha256.Size]byte, e verifiedChain) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.entries == nil || len(v.entries) >= maxVerifiedChains {
		v.entries = make(map[[sha256.Size]byte]verifiedChain)
	}
	v.entries[k] = e
}

var _ Authenticator = (*requestAuthenticator)(nil)

func (a *requestAuthenticator) Authenticate(r *http.Request) (UserInfo, bool, error) {
	u, ok, err := a.authenticateCredentials(r)
	if err != nil {
		return UserInfo{}, false, err
	}
	if ok {
		if !slices.Contains(u.Groups, AuthenticatedGroup) {
			u.Groups = append(slices.Clone(u.Groups), AuthenticatedGroup)
		}
		return u, true, nil
	}
	if a.anonymous {
		return UserInfo{Name: AnonymousUser, Groups: []string{UnauthenticatedGroup}}, true, nil
	}
	return UserInfo{}, false, nil
}

func (a *requestAuthenticator) authenticateCredentials(r *http.Request) (UserInfo, bool, error) {
	if a.clientCA != nil && r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		return a.authenticateCert(r.TLS.PeerCertificates)
	}
	auth := strings.TrimSpace(r.Header.Get("Authorization"))
	if len(auth) < len(bearerPrefix) || !strings.EqualFold(auth[:len(bearerPrefix)], bearerPrefix) {
		return UserInfo{}, false, nil
	}
	token := strings.TrimSpace(auth[len(bearerPrefix):])
	if token == "" {
		return UserInfo{}, false, nil
	}
	for _, t := range a.tokens {
		u, ok, err := t.AuthenticateToken(r.Context(), token)
		if err != nil {
			return UserInfo{}, false, fmt.Errorf("bearer token: %w", err)
		}
		if ok {
			return u, true, nil
		}
	}
	return UserInfo{}, false, errors.New("invalid bearer token")
}

// authenticateCert verifies the client's chain for client authentication
// and maps it to a user: CN is the name, O are the groups. A chain that
// verified is verified again only outside the validity of the chain it
// verified with (verifiedChains).
func (a *requestAuthenticator) authenticateCert(chain []*x509.Certificate) (UserInfo, bool, error) {
	now := a.clock.Now()
	key := chainKey(chain)
	if u, ok := a.verified.get(key, now); ok {
		return u, true, nil
	}
	opts := x509.VerifyOptions{
		Roots:         a.clientCA,
		Intermediates: x509.NewCertPool(),
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	for _, c := range chain[1:] {
		opts.Intermediates.AddCert(c)
	}
	leaf := chain[0]
	chains, err := leaf.Verify(opts)
	if err != nil {
		return UserInfo{}, false, fmt.Errorf("client certificate %q: %w", leaf.Subject.CommonName, err)
	}
	if leaf.Subject.CommonName == "" {
		return UserInfo{}, false, errors.New("client certificate has no common name")
	}
	u := UserInfo{Name: leaf.Subject.CommonName, Groups: slices.Clone(leaf.Subject.Organization)}
	// The answer holds while every certificate of every chain that
	// verified is valid (a narrower window than needed when several
	// chains verify, which only costs a verification).
	e := verifiedChain{user: UserInfo{Name: u.Name, Groups: slices.Clone(u.Groups)}, notBefore: leaf.NotBefore, notAfter: leaf.NotAfter}
	for _, ch := range chains {
		for _, c := range ch {
			if c.NotBefore.After(e.notBefore) {
				e.notBefore = c.NotBefore
			}
			if c.NotAfter.Before(e.notAfter) {
				e.notAfter = c.NotAfter
			}
		}
	}
	a.verified.put(key, e)
	return u, true, nil
}
