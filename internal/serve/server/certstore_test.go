package server

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

var errCrash = errors.New("crashed")

// crashAfterStep returns a crashAfter hook that fails the k-th step
// (0-based) and records the steps it saw.
func crashAfterStep(k int, seen *[]string) func(string) error {
	return func(step string) error {
		*seen = append(*seen, step)
		if len(*seen) == k+1 {
			return errCrash
		}
		return nil
	}
}

// stepsOf lists the steps of one uninterrupted replacement.
func stepsOf(t *testing.T, setup func(t *testing.T, dir string), replace func(*certStore) error, clk *testingclock.FakePassiveClock) []string {
	t.Helper()
	dir := t.TempDir()
	setup(t, dir)
	var steps []string
	s := testStore(t, dir, clk, func(step string) error { steps = append(steps, step); return nil })
	if err := replace(s); err != nil {
		t.Fatal(err)
	}
	return steps
}

// testStore opens the store of dir with the crash hook afterStep.
func testStore(t *testing.T, dir string, clk *testingclock.FakePassiveClock, afterStep func(string) error) *certStore {
	t.Helper()
	s, err := openCertStore(dir, clk, afterStep)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// handshake proves cert serves TLS to a client that trusts roots (and,
// with client, presents it to a server that trusts clientRoots).
func handshake(t *testing.T, serving tls.Certificate, roots *x509.CertPool, client *tls.Certificate, clientRoots *x509.CertPool, now time.Time) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srvCfg := &tls.Config{Certificates: []tls.Certificate{serving}, Time: func() time.Time { return now }}
	cliCfg := &tls.Config{RootCAs: roots, ServerName: "localhost", Time: func() time.Time { return now }}
	if client != nil {
		srvCfg.ClientAuth, srvCfg.ClientCAs = tls.RequireAndVerifyClientCert, clientRoots
		cliCfg.Certificates = []tls.Certificate{*client}
	}
	done := make(chan error, 1)
	go func() {
		s, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer s.Close()
		done <- tls.Server(s, srvCfg).Handshake()
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), cliCfg)
	if err != nil {
		t.Errorf("client handshake: %v", err)
	} else {
		// The server verifies the client's certificate after the
		// client's handshake is done: wait for its verdict.
		defer c.Close()
	}
	if err := <-done; err != nil && c != nil {
		t.Errorf("server handshake: %v", err)
	}
}

func poolOf(certs ...*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range certs {
		p.AddCert(c)
	}
	return p
}

// names lists dir.
func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// writeLegacyServing writes the layout before certStore: nodelet.crt and
// nodelet.key. With mismatched, the key is another pair's, as a crash
// between the old code's two writes left it.
func writeLegacyServing(t *testing.T, dir string, hosts []string, now time.Time, mismatched bool) *x509.Certificate {
	t.Helper()
	pair, err := newServingPair(servingNames(hosts), now)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := pair.data[bytes.Index(pair.data, []byte("-----BEGIN PRIVATE KEY")):]
	if mismatched {
		other, err := newServingPair(servingNames(hosts), now)
		if err != nil {
			t.Fatal(err)
		}
		keyPEM = other.data[bytes.Index(other.data, []byte("-----BEGIN PRIVATE KEY")):]
	}
	certPEM := pair.data[:bytes.Index(pair.data, []byte("-----BEGIN PRIVATE KEY"))]
	if err := os.WriteFile(filepath.Join(dir, "nodelet.crt"), certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "nodelet.key"), keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return pair.cert.Leaf
}

// writeLegacyAdmin writes ca.crt, ca.key, admin.crt and admin.key as plain
// files; with mismatched, admin.key is not admin.crt's key.
func writeLegacyAdmin(t *testing.T, dir string, now time.Time, mismatched bool) *adminUnit {
	t.Helper()
	u, err := newAdminCA(now)
	if err != nil {
		t.Fatal(err)
	}
	if err := u.issueAdmin(now); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for k, v := range u.pem {
		files[k] = v
	}
	if mismatched {
		other := &adminUnit{pem: map[string][]byte{}, ca: u.ca}
		if err := other.issueAdmin(now); err != nil {
			t.Fatal(err)
		}
		files[adminKeyFile] = other.pem[adminKeyFile]
	}
	for _, f := range adminUnitSpec.Files {
		if err := os.WriteFile(filepath.Join(dir, f.Name), files[f.Name], f.Mode); err != nil {
			t.Fatal(err)
		}
	}
	return u
}

// checkServingLayout: exactly the current link and the file it points to.
func checkServingLayout(t *testing.T, dir string) {
	t.Helper()
	got := names(t, dir)
	target, err := os.Readlink(filepath.Join(dir, ServingCurrentFile))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{ServingCurrentFile, target}; !sameSet(got, want) || !strings.HasPrefix(target, servingPrefix) {
		t.Errorf("certificate directory holds %q, want %q", got, want)
	}
}

// checkAdminLayout: the current link, its unit, and the stable links.
func checkAdminLayout(t *testing.T, dir string) {
	t.Helper()
	got := names(t, dir)
	target, err := os.Readlink(filepath.Join(dir, adminCurrent))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{adminCurrent, target, "ca.crt", "admin.crt", "admin.key"}; !sameSet(got, want) {
		t.Errorf("certificate directory holds %q, want %q", got, want)
	}
	for _, name := range adminUnitSpec.Links {
		if l, err := os.Readlink(filepath.Join(dir, name)); err != nil || l != filepath.Join(adminCurrent, name) {
			t.Errorf("%s links to %q (%v)", name, l, err)
		}
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// A crash between any two steps of replacing the serving certificate
// leaves a matching pair that serves TLS: the old one until the current
// link is renamed, the new one after; the next start then finishes
// without making a third and leaves no leftovers.
func TestServingReplacementSurvivesACrashAtEveryStep(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := testingclock.NewFakePassiveClock(now)
	hostsA, hostsB := []string{"node-a"}, []string{"node-b"}
	for _, sc := range []struct {
		name  string
		setup func(t *testing.T, dir string) // the old pair
		hosts []string                       // what the replacement is asked for
		keeps bool                           // the new pair is the old one, moved
	}{
		{"first start", func(*testing.T, string) {}, hostsA, false},
		{"new host", func(t *testing.T, dir string) {
			if _, err := LoadOrCreateServingCert(dir, "", "", hostsA, clk); err != nil {
				t.Fatal(err)
			}
		}, hostsB, false},
		{"expired", func(t *testing.T, dir string) {
			if _, err := LoadOrCreateServingCert(dir, "", "", hostsA, testingclock.NewFakePassiveClock(now.Add(-366*24*time.Hour))); err != nil {
				t.Fatal(err)
			}
		}, hostsA, false},
		{"old layout", func(t *testing.T, dir string) { writeLegacyServing(t, dir, hostsA, now, false) }, hostsA, true},
	} {
		replace := func(s *certStore) error { _, err := s.servingCert(sc.hosts); return err }
		steps := stepsOf(t, sc.setup, replace, clk)
		swap := slices.Index(steps, "rename "+ServingCurrentFile)
		if swap < 0 || len(steps) < 5 {
			t.Fatalf("%s: steps %q", sc.name, steps)
		}
		for k := range steps {
			dir := t.TempDir()
			sc.setup(t, dir)
			before, _, err := testStore(t, dir, clk, nil).loadServing()
			if err != nil {
				t.Fatal(err)
			}
			var seen []string
			s := testStore(t, dir, clk, crashAfterStep(k, &seen))
			if err := replace(s); !errors.Is(err, errCrash) {
				t.Fatalf("%s: crash after %q: %v", sc.name, steps[k], err)
			}

			after, _, err := testStore(t, dir, clk, nil).loadServing()
			if err != nil {
				t.Errorf("%s: crash after %q: %v", sc.name, steps[k], err)
				continue
			}
			switch {
			case k < swap && before == nil:
				if after != nil {
					t.Errorf("%s: crash after %q: a pair before the link was made", sc.name, steps[k])
				}
				continue
			case k < swap || sc.keeps:
				if after == nil || !bytes.Equal(after.cert.Leaf.Raw, before.cert.Leaf.Raw) {
					t.Errorf("%s: crash after %q: not the old pair", sc.name, steps[k])
					continue
				}
			default:
				if after == nil || (before != nil && bytes.Equal(after.cert.Leaf.Raw, before.cert.Leaf.Raw)) || !coversNames(after.cert.Leaf, sc.hosts) {
					t.Errorf("%s: crash after %q: not the new pair", sc.name, steps[k])
					continue
				}
			}
			// Old pairs may be expired: shake hands while it is valid.
			handshake(t, after.cert, poolOf(after.cert.Leaf), nil, nil, after.cert.Leaf.NotBefore.Add(time.Hour))

			next, err := LoadOrCreateServingCert(dir, "", "", sc.hosts, clk)
			if err != nil {
				t.Fatalf("%s: start after a crash after %q: %v", sc.name, steps[k], err)
			}
			if k >= swap && !bytes.Equal(next.Leaf.Raw, after.cert.Leaf.Raw) {
				t.Errorf("%s: start after a crash after %q made another pair", sc.name, steps[k])
			}
			checkServingLayout(t, dir)
		}
	}
}

// The same for the admin credentials: CA, CA key, client certificate and
// key are one unit, never mixed.
func TestAdminReplacementSurvivesACrashAtEveryStep(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, sc := range []struct {
		name     string
		setup    func(t *testing.T, dir string)
		at       time.Time // when the replacement runs
		keepsCA  bool
		keepsAll bool
	}{
		{"first start", func(*testing.T, string) {}, t0, false, false},
		{"admin expired", func(t *testing.T, dir string) {
			if _, err := EnsureAdminCredentials(dir, testingclock.NewFakePassiveClock(t0)); err != nil {
				t.Fatal(err)
			}
		}, t0.Add(400 * 24 * time.Hour), true, false},
		{"CA expired", func(t *testing.T, dir string) {
			if _, err := EnsureAdminCredentials(dir, testingclock.NewFakePassiveClock(t0)); err != nil {
				t.Fatal(err)
			}
		}, t0.Add(11 * 365 * 24 * time.Hour), false, false},
		{"old layout", func(t *testing.T, dir string) { writeLegacyAdmin(t, dir, t0, false) }, t0, true, true},
		{"old layout, admin key mismatched", func(t *testing.T, dir string) { writeLegacyAdmin(t, dir, t0, true) }, t0, true, false},
	} {
		clk := testingclock.NewFakePassiveClock(sc.at)
		replace := func(s *certStore) error { _, err := s.adminCredentials(); return err }
		steps := stepsOf(t, sc.setup, replace, clk)
		swap := slices.Index(steps, "rename "+adminCurrent)
		if swap < 0 || len(steps) < 8 {
			t.Fatalf("%s: steps %q", sc.name, steps)
		}
		for k := range steps {
			dir := t.TempDir()
			sc.setup(t, dir)
			before, _, _, err := testStore(t, dir, clk, nil).loadAdmin()
			if err != nil {
				t.Fatal(err)
			}
			var seen []string
			s := testStore(t, dir, clk, crashAfterStep(k, &seen))
			if err := replace(s); !errors.Is(err, errCrash) {
				t.Fatalf("%s: crash after %q: %v", sc.name, steps[k], err)
			}

			after, _, _, err := testStore(t, dir, clk, nil).loadAdmin()
			if err != nil {
				t.Errorf("%s: crash after %q: %v", sc.name, steps[k], err)
				continue
			}
			same := func(a, b *tls.Certificate) bool { return a != nil && b != nil && bytes.Equal(a.Leaf.Raw, b.Leaf.Raw) }
			switch {
			case k < swap && before == nil:
				if after != nil {
					t.Errorf("%s: crash after %q: credentials before the link was made", sc.name, steps[k])
				}
				continue
			case k < swap:
				if after == nil || !same(after.ca, before.ca) || (before.admin != nil && !same(after.admin, before.admin)) {
					t.Errorf("%s: crash after %q: not the old credentials", sc.name, steps[k])
					continue
				}
				if after.admin == nil {
					continue // the old layout's broken pair, as it was
				}
			default:
				var beforeCA *tls.Certificate
				if before != nil {
					beforeCA = before.ca
				}
				if after == nil || after.admin == nil || same(after.ca, beforeCA) != sc.keepsCA ||
					(before != nil && same(after.admin, before.admin) != sc.keepsAll) {
					t.Errorf("%s: crash after %q: not the new credentials", sc.name, steps[k])
					continue
				}
			}
			// The client certificate and key match (loadAdmin parsed the
			// pair) and its CA accepts it in a handshake.
			// Old credentials may be expired: shake hands while they are valid.
			at := after.admin.Leaf.NotBefore.Add(time.Hour)
			serving, err := newServingPair([]string{"localhost"}, at)
			if err != nil {
				t.Fatal(err)
			}
			handshake(t, serving.cert, poolOf(serving.cert.Leaf), after.admin, poolOf(after.ca.Leaf), at)

			creds, err := EnsureAdminCredentials(dir, clk)
			if err != nil {
				t.Fatalf("%s: start after a crash after %q: %v", sc.name, steps[k], err)
			}
			if k >= swap && !bytes.Equal(readAll(t, creds.ClientCert)[0], after.pem[adminCertFile]) {
				t.Errorf("%s: start after a crash after %q made other credentials", sc.name, steps[k])
			}
			checkAdminLayout(t, dir)
		}
	}
}

// The old layout's files are moved into the new one, the same
// certificates kept; a pair the old code left mismatched (a crash between
// writing the key and the certificate) is replaced instead of refused.
func TestOldLayoutUpgrades(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := testingclock.NewFakePassiveClock(now)
	dir := t.TempDir()
	oldServing := writeLegacyServing(t, dir, []string{"node-a"}, now, false)
	oldAdmin := writeLegacyAdmin(t, dir, now, false)

	cert, err := LoadOrCreateServingCert(dir, "", "", []string{"node-a"}, clk)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(cert.Leaf.Raw, oldServing.Raw) {
		t.Error("the old serving certificate was not kept")
	}
	creds, err := EnsureAdminCredentials(dir, clk)
	if err != nil {
		t.Fatal(err)
	}
	for name, path := range map[string]string{"ca.crt": creds.CACert, "ca.key": creds.CAKey, "admin.crt": creds.ClientCert, "admin.key": creds.ClientKey} {
		if !bytes.Equal(readAll(t, path)[0], oldAdmin.pem[name]) {
			t.Errorf("%s was not kept", name)
		}
	}
	for _, name := range []string{"nodelet.crt", "nodelet.key", "ca.key"} {
		if _, err := os.Lstat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("old %s left behind: %v", name, err)
		}
	}
	if got := ServingCertPath(dir); !strings.HasPrefix(filepath.Base(got), servingPrefix) || !bytes.Equal(parseCertFile(t, got).Raw, oldServing.Raw) {
		t.Errorf("ServingCertPath = %s", got)
	}

	for _, mismatched := range []string{"serving", "admin"} {
		dir := t.TempDir()
		writeLegacyServing(t, dir, []string{"node-a"}, now, mismatched == "serving")
		old := writeLegacyAdmin(t, dir, now, mismatched == "admin")
		cert, err := LoadOrCreateServingCert(dir, "", "", []string{"node-a"}, clk)
		if err != nil {
			t.Fatalf("%s mismatched: %v", mismatched, err)
		}
		handshake(t, cert, poolOf(cert.Leaf), nil, nil, now)
		creds, err := EnsureAdminCredentials(dir, clk)
		if err != nil {
			t.Fatalf("%s mismatched: %v", mismatched, err)
		}
		admin, err := tls.LoadX509KeyPair(creds.ClientCert, creds.ClientKey)
		if err != nil {
			t.Fatalf("%s mismatched: %v", mismatched, err)
		}
		if !bytes.Equal(readAll(t, creds.CACert)[0], old.pem[adminCACertFile]) {
			t.Errorf("%s mismatched: the CA was replaced although it was fine", mismatched)
		}
		handshake(t, cert, poolOf(cert.Leaf), &admin, poolOf(old.ca.Leaf), now)
	}
}

// The certificate directory is 0700 even if it existed with other modes,
// keys are 0600, and the old layout's world-readable files are gone.
func TestCertDirModes(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := testingclock.NewFakePassiveClock(now)
	for _, legacy := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "pki")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if legacy {
			writeLegacyServing(t, dir, nil, now, false)
			writeLegacyAdmin(t, dir, now, false)
		}
		if _, err := LoadOrCreateServingCert(dir, "", "", nil, clk); err != nil {
			t.Fatal(err)
		}
		creds, err := EnsureAdminCredentials(dir, clk)
		if err != nil {
			t.Fatal(err)
		}
		for path, want := range map[string]os.FileMode{
			dir:                                    0o700,
			filepath.Join(dir, ServingCurrentFile): 0o600,
			filepath.Dir(creds.CACert):             0o700,
			creds.CAKey:                            0o600,
			creds.ClientKey:                        0o600,
			creds.CACert:                           0o644,
			creds.ClientCert:                       0o644,
			filepath.Join(dir, "admin.key"):        0o600,
		} {
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != want {
				t.Errorf("legacy %v: %s is %v, want %v", legacy, path, st.Mode().Perm(), want)
			}
		}
		checkServingLayoutWithAdmin(t, dir)
	}
}

// checkServingLayoutWithAdmin: both units, nothing else.
func checkServingLayoutWithAdmin(t *testing.T, dir string) {
	t.Helper()
	serving, _ := os.Readlink(filepath.Join(dir, ServingCurrentFile))
	admin, _ := os.Readlink(filepath.Join(dir, adminCurrent))
	want := []string{ServingCurrentFile, serving, adminCurrent, admin, "ca.crt", "admin.crt", "admin.key"}
	if got := names(t, dir); !sameSet(got, want) {
		t.Errorf("certificate directory holds %q, want %q", got, want)
	}
}

// A current unit that does not hold together (not made by nodelet) is an
// error naming it, not silently replaced.
func TestBrokenCurrentUnitIsAnError(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := testingclock.NewFakePassiveClock(now)
	dir := t.TempDir()
	if _, err := LoadOrCreateServingCert(dir, "", "", nil, clk); err != nil {
		t.Fatal(err)
	}
	creds, err := EnsureAdminCredentials(dir, clk)
	if err != nil {
		t.Fatal(err)
	}
	other := writeLegacyAdmin(t, t.TempDir(), now, false)
	if err := os.WriteFile(creds.ClientKey, other.pem[adminKeyFile], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureAdminCredentials(dir, clk); err == nil || !strings.Contains(err.Error(), filepath.Dir(creds.ClientKey)) {
		t.Errorf("mismatched admin key: %v", err)
	}
	if err := os.WriteFile(ServingCertPath(dir), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateServingCert(dir, "", "", nil, clk); err == nil || !strings.Contains(err.Error(), ServingCurrentFile) {
		t.Errorf("garbage serving certificate: %v", err)
	}
}
