package server

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

func TestServingCertGeneratedPersistedAndReloaded(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := testingclock.NewFakePassiveClock(now)
	hosts := []string{"node-a", "10.0.0.5"}

	c1, err := LoadOrCreateServingCert(dir, "", "", hosts, clk)
	if err != nil {
		t.Fatal(err)
	}
	leaf := c1.Leaf
	if !slices.Equal(leaf.DNSNames, []string{"node-a", "localhost"}) {
		t.Errorf("DNS SANs = %v", leaf.DNSNames)
	}
	if len(leaf.IPAddresses) != 2 || !leaf.IPAddresses[0].Equal(net.ParseIP("10.0.0.5")) || !leaf.IPAddresses[1].Equal(net.ParseIP("127.0.0.1")) {
		t.Errorf("IP SANs = %v", leaf.IPAddresses)
	}
	if k, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P256() {
		t.Errorf("key is %T, want ECDSA P-256", leaf.PublicKey)
	}
	if got := leaf.NotAfter.Sub(now); got != 365*24*time.Hour {
		t.Errorf("valid for %v after now, want a year", got)
	}
	if !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
		t.Errorf("ext key usage = %v", leaf.ExtKeyUsage)
	}
	st, err := os.Stat(filepath.Join(dir, ServingCurrentFile))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("certificate and key file mode = %v", st.Mode().Perm())
	}

	c2, err := LoadOrCreateServingCert(dir, "", "", hosts, clk)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(c1.Leaf.Raw, c2.Leaf.Raw) {
		t.Error("second call did not reload the persisted certificate")
	}

	// A new host name needs a new certificate.
	c3, err := LoadOrCreateServingCert(dir, "", "", []string{"node-b"}, clk)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(c3.Leaf.Raw, c1.Leaf.Raw) || c3.Leaf.VerifyHostname("node-b") != nil {
		t.Error("certificate not regenerated for a new host")
	}

	// So does an expired one.
	clk.SetTime(now.Add(366 * 24 * time.Hour))
	c4, err := LoadOrCreateServingCert(dir, "", "", []string{"node-b"}, clk)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(c4.Leaf.Raw, c3.Leaf.Raw) {
		t.Error("expired certificate not regenerated")
	}
}

func TestServingCertFromFiles(t *testing.T) {
	clk := testingclock.NewFakePassiveClock(time.Now())
	gen := t.TempDir()
	want, err := LoadOrCreateServingCert(gen, "", "", nil, clk)
	if err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	got, err := LoadOrCreateServingCert(other, ServingCertPath(gen), ServingCertPath(gen), []string{"ignored"}, clk)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Leaf.Raw, want.Leaf.Raw) {
		t.Error("given files not used")
	}
	if entries, _ := os.ReadDir(other); len(entries) != 0 {
		t.Errorf("wrote %d files although files were given", len(entries))
	}
	if _, err := LoadOrCreateServingCert(other, ServingCertPath(gen), "", nil, clk); err == nil {
		t.Error("a certificate without its key was accepted")
	}
	if _, err := LoadOrCreateServingCert(other, filepath.Join(other, "missing.crt"), filepath.Join(other, "missing.key"), nil, clk); err == nil {
		t.Error("missing files were accepted")
	}
}

func readAll(t *testing.T, paths ...string) [][]byte {
	t.Helper()
	var out [][]byte
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

func TestAdminCredentialsCreatedOnce(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := testingclock.NewFakePassiveClock(now)
	creds, err := EnsureAdminCredentials(dir, clk)
	if err != nil {
		t.Fatal(err)
	}
	unit := filepath.Dir(creds.CACert)
	want := Credentials{
		CACert: filepath.Join(unit, "ca.crt"), CAKey: filepath.Join(unit, "ca.key"),
		ClientCert: filepath.Join(unit, "admin.crt"), ClientKey: filepath.Join(unit, "admin.key"),
	}
	if creds != want || filepath.Dir(unit) != dir || !strings.HasPrefix(filepath.Base(unit), "admin-") {
		t.Fatalf("credentials = %+v", creds)
	}
	if found, err := AdminCredentials(dir); err != nil || found != creds {
		t.Errorf("AdminCredentials = %+v, %v; want %+v", found, err, creds)
	}
	// The stable names are the same files.
	for _, name := range []string{"ca.crt", "admin.crt", "admin.key"} {
		if !bytes.Equal(readAll(t, filepath.Join(dir, name))[0], readAll(t, filepath.Join(unit, name))[0]) {
			t.Errorf("%s is not the current unit's", name)
		}
	}
	first := readAll(t, creds.CACert, creds.CAKey, creds.ClientCert, creds.ClientKey)

	again, err := EnsureAdminCredentials(dir, clk)
	if err != nil || again != creds {
		t.Fatalf("second call: %+v, %v", again, err)
	}
	for i, b := range readAll(t, creds.CACert, creds.CAKey, creds.ClientCert, creds.ClientKey) {
		if !bytes.Equal(b, first[i]) {
			t.Errorf("file %d rewritten by the second call", i)
		}
	}

	pool, err := LoadCertPool(creds.CACert)
	if err != nil {
		t.Fatal(err)
	}
	admin := parseCertFile(t, creds.ClientCert)
	if admin.Subject.CommonName != AdminUser || !slices.Equal(admin.Subject.Organization, []string{AdminGroup}) {
		t.Errorf("admin subject = %v", admin.Subject)
	}
	if _, err := admin.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("admin certificate does not verify against the admin CA: %v", err)
	}

	// An expired admin certificate is reissued from the same CA.
	clk.SetTime(now.Add(400 * 24 * time.Hour))
	if creds, err = EnsureAdminCredentials(dir, clk); err != nil {
		t.Fatal(err)
	}
	after := readAll(t, creds.CACert, creds.ClientCert)
	if !bytes.Equal(after[0], first[0]) {
		t.Error("CA was replaced when only the admin certificate expired")
	}
	if bytes.Equal(after[1], first[2]) {
		t.Error("expired admin certificate was not reissued")
	}
	if _, err := parseCertFile(t, creds.ClientCert).Verify(x509.VerifyOptions{Roots: pool, CurrentTime: clk.Now(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("reissued admin certificate: %v", err)
	}
}

func parseCertFile(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("%s holds no PEM certificate", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestLoadCertPool(t *testing.T) {
	if p, err := LoadCertPool("", ""); p != nil || err != nil {
		t.Errorf("no paths: %v, %v", p, err)
	}
	bad := filepath.Join(t.TempDir(), "bad.pem")
	if err := os.WriteFile(bad, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCertPool(bad); err == nil {
		t.Error("a file without certificates was accepted")
	}
	if _, err := LoadCertPool(filepath.Join(t.TempDir(), "missing.pem")); err == nil {
		t.Error("a missing file was accepted")
	}
}
