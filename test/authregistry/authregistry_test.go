package authregistry

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

func TestPullNeedsTheCredentials(t *testing.T) {
	for _, useTLS := range []bool{false, true} {
		r, err := Start(Options{User: "alice", Password: "s3cret", TLS: useTLS})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		img, err := random.Image(1024, 1)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := r.Push("team/app", "v1", img)
		if err != nil {
			t.Fatalf("tls=%v: %v", useTLS, err)
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		if useTLS {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(r.CAPEM) {
				t.Fatal("bad CA PEM")
			}
			tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		}
		tag, err := name.NewTag(ref)
		if err != nil {
			t.Fatal(err)
		}
		_, err = remote.Image(tag, remote.WithTransport(tr))
		var terr *transport.Error
		if !errors.As(err, &terr) || terr.StatusCode != http.StatusUnauthorized {
			t.Errorf("tls=%v: anonymous pull: got %v, want 401", useTLS, err)
		}
		_, err = remote.Image(tag, remote.WithTransport(tr), remote.WithAuth(&authn.Basic{Username: "alice", Password: "wrong"}))
		if !errors.As(err, &terr) || terr.StatusCode != http.StatusUnauthorized {
			t.Errorf("tls=%v: wrong password: got %v, want 401", useTLS, err)
		}
		got, err := remote.Image(tag, remote.WithTransport(tr), remote.WithAuth(&authn.Basic{Username: "alice", Password: "s3cret"}))
		if err != nil {
			t.Fatalf("tls=%v: pull with credentials: %v", useTLS, err)
		}
		want, _ := img.Digest()
		if d, _ := got.Digest(); d != want {
			t.Errorf("tls=%v: digest %v, want %v", useTLS, d, want)
		}
		var saw401, sawAlice bool
		for _, q := range r.Requests() {
			saw401 = saw401 || q.Status == http.StatusUnauthorized
			sawAlice = sawAlice || (q.User == "alice" && q.Status == http.StatusOK)
		}
		if !saw401 || !sawAlice {
			t.Errorf("tls=%v: requests recorded %+v", useTLS, r.Requests())
		}
	}
}
