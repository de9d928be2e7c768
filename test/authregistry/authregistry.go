// Package authregistry is a registry for tests of image pull credentials:
// an in-memory OCI distribution registry (go-containerregistry's) on
// 127.0.0.1 that answers every request without the right basic-auth
// credentials with 401 and a WWW-Authenticate challenge, as a private
// registry does. It serves plain HTTP (containerd talks HTTP to a loopback
// registry it has no configuration for) or HTTPS with a certificate of its
// own test CA for 127.0.0.1, and remembers every request it answered, so a
// test can check which credentials a pull carried.
//
// It is test tooling, not part of nodelet.
package authregistry

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Options configure a Registry.
type Options struct {
	// User and Password are the one pair of credentials the registry
	// accepts; with User empty it accepts every request (a public
	// registry, still on its own address).
	User, Password string
	// TLS serves HTTPS with a certificate for 127.0.0.1 signed by the
	// registry's own CA (Registry.CAPEM).
	TLS bool
}

// Request is one request the registry answered.
type Request struct {
	Method, Path string
	// User is the basic-auth user the request carried ("" for none).
	User   string
	Status int
}

// Registry is a running test registry.
type Registry struct {
	// Host is the registry's host:port (127.0.0.1:N): the registry part
	// of an image reference.
	Host string
	// CAPEM is the PEM of the CA that signed the registry's certificate;
	// nil without TLS.
	CAPEM []byte

	opts   Options
	srv    *http.Server
	ln     net.Listener
	client *http.Client

	mu       sync.Mutex
	requests []Request
}

// Start starts a registry on a free port of 127.0.0.1.
func Start(opts Options) (*Registry, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("authregistry: listen: %w", err)
	}
	r := &Registry{Host: ln.Addr().String(), opts: opts, ln: ln}
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	r.srv = &http.Server{Handler: r.guard(inner), ReadHeaderTimeout: 10 * time.Second}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	if opts.TLS {
		caPEM, cert, err := issue()
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("authregistry: certificates: %w", err)
		}
		r.CAPEM = caPEM
		r.ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(caPEM)
		transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	r.client = &http.Client{Transport: transport}
	go func() { _ = r.srv.Serve(r.ln) }()
	return r, nil
}

// guard answers a request without the right credentials with 401 and
// records every request.
func (r *Registry) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		user, pass, _ := req.BasicAuth()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		if r.opts.User != "" && (user != r.opts.User || pass != r.opts.Password) {
			w.Header().Set("WWW-Authenticate", `Basic realm="authregistry"`)
			w.Header().Set("Content-Type", "application/json")
			rec.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(rec, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
		} else {
			next.ServeHTTP(rec, req)
		}
		r.mu.Lock()
		r.requests = append(r.requests, Request{Method: req.Method, Path: req.URL.Path, User: user, Status: rec.status})
		r.mu.Unlock()
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (s *statusRecorder) WriteHeader(code int) {
	if !s.wrote {
		s.status, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	s.wrote = true
	return s.ResponseWriter.Write(b)
}

// Push pushes img as <Host>/<repo>:<tag> with the registry's credentials
// and returns the reference by tag.
func (r *Registry) Push(repo, tag string, img v1.Image) (string, error) {
	ref := r.Host + "/" + repo + ":" + tag
	tagRef, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		return "", fmt.Errorf("authregistry: %w", err)
	}
	auth := authn.Anonymous
	if r.opts.User != "" {
		auth = &authn.Basic{Username: r.opts.User, Password: r.opts.Password}
	}
	if err := remote.Write(tagRef, img, remote.WithAuth(auth), remote.WithTransport(r.client.Transport)); err != nil {
		return "", fmt.Errorf("authregistry: push %s: %w", ref, err)
	}
	return ref, nil
}

// Requests returns the requests answered so far, oldest first.
func (r *Registry) Requests() []Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Request(nil), r.requests...)
}

// Close stops the registry.
func (r *Registry) Close() error {
	err := r.srv.Close()
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// issue makes a CA and a server certificate for 127.0.0.1 it signed,
// valid for a day.
func issue() (caPEM []byte, leaf tls.Certificate, err error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, leaf, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "authregistry test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, leaf, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, leaf, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, leaf, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, leaf, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
