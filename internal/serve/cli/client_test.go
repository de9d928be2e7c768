package cli

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/base/events"
)

// keyPair is a generated certificate and key, PEM-encoded.
type keyPair struct {
	cert     *x509.Certificate
	certPEM  []byte
	keyPEM   []byte
	tlsCerts tls.Certificate
}

// selfSigned makes a self-signed certificate: a serving one for 127.0.0.1
// or a client one for user cn.
func selfSigned(t *testing.T, cn string, server bool) keyPair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	kp := keyPair{
		cert:    cert,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
	if kp.tlsCerts, err = tls.X509KeyPair(kp.certPEM, kp.keyPEM); err != nil {
		t.Fatal(err)
	}
	return kp
}

func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// newTestServer serves h over TLS with a self-signed serving certificate,
// answering 401 to requests without a client certificate it knows. It
// returns a Config with a client certificate the server accepts.
func newTestServer(t *testing.T, h http.Handler) Config {
	t.Helper()
	serving := selfSigned(t, "nodelet", true)
	client := selfSigned(t, "nodelet-cli", false)
	clientCAs := x509.NewCertPool()
	clientCAs.AddCert(client.cert)

	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{serving.tlsCerts},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    clientCAs,
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	dir := t.TempDir()
	return Config{
		Server:   srv.URL,
		CAFile:   writeFile(t, dir, "ca.crt", serving.certPEM),
		CertFile: writeFile(t, dir, "client.crt", client.certPEM),
		KeyFile:  writeFile(t, dir, "client.key", client.keyPEM),
		Timeout:  10 * time.Second,
	}
}

func newTestClient(t *testing.T, cfg Config) *Client {
	t.Helper()
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func TestPodsAndEvents(t *testing.T) {
	at := time.Date(2025, 6, 1, 12, 0, 0, 123000000, time.UTC)
	pod := v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "u1"},
		Status: v1.PodStatus{Phase: v1.PodRunning, PodIP: "10.88.0.5"}}
	ev := events.Event{PodUID: "u1", Namespace: "default", Pod: "web", Type: v1.EventTypeNormal,
		Reason: "Started", Message: "Started container web", Count: 2, FirstTime: at, LastTime: at.Add(time.Second)}
	var serverForm atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("GET /pods", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, v1.PodList{Items: []v1.Pod{pod}})
	})
	mux.HandleFunc("GET /events", func(w http.ResponseWriter, _ *http.Request) {
		if !serverForm.Load() {
			writeJSON(w, []events.Event{ev})
			return
		}
		// As internal/serve/server encodes them, a node event after the pod's.
		fmt.Fprintf(w, `[{"podUID":"u1","namespace":"default","pod":"web","type":"Normal","reason":"Started",`+
			`"message":"Started container web","count":2,"firstTimestamp":%q,"lastTimestamp":%q},`+
			`{"podUID":"","namespace":"","pod":"","kind":"Node","node":"node1","type":"Warning","reason":"FailedToLoadManifest",`+
			`"message":"/m/a.yaml: bad","count":1,"firstTimestamp":%[1]q,"lastTimestamp":%[1]q}]`,
			at.Format(time.RFC3339Nano), at.Add(time.Second).Format(time.RFC3339Nano))
	})
	c := newTestClient(t, newTestServer(t, mux))

	pods, err := c.Pods(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 1 || pods[0].Name != "web" || pods[0].Status.PodIP != "10.88.0.5" {
		t.Errorf("pods: %+v", pods)
	}
	for _, form := range []bool{false, true} {
		serverForm.Store(form)
		evs, err := c.Events(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int{false: 1, true: 2}[form]; len(evs) != want {
			t.Fatalf("events: %+v, want %d", evs, want)
		}
		if form {
			wantNode := events.Event{Node: "node1", Type: v1.EventTypeWarning, Reason: "FailedToLoadManifest", Message: "/m/a.yaml: bad",
				Count: 1, FirstTime: at, LastTime: at}
			if got := evs[1]; !got.FirstTime.Equal(at) || !got.LastTime.Equal(at) {
				t.Errorf("node event times %v %v, want %v", got.FirstTime, got.LastTime, at)
			} else if got.FirstTime, got.LastTime = at, at; got != wantNode {
				t.Errorf("node event %+v, want %+v", got, wantNode)
			}
		}
		got := evs[0]
		if !got.FirstTime.Equal(ev.FirstTime) || !got.LastTime.Equal(ev.LastTime) {
			t.Errorf("server form %v: times %v %v, want %v %v", form, got.FirstTime, got.LastTime, ev.FirstTime, ev.LastTime)
		}
		got.FirstTime, got.LastTime = ev.FirstTime, ev.LastTime
		if got != ev {
			t.Errorf("server form %v: %+v, want %+v", form, got, ev)
		}
	}
}

// notifyingWriter passes each write on to a channel.
type notifyingWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	wrote chan string
}

func (w *notifyingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.buf.Write(p)
	w.mu.Unlock()
	w.wrote <- string(p)
	return len(p), nil
}

func TestLogsFollowCopiesAsDataArrives(t *testing.T) {
	next := make(chan struct{})
	query := make(chan string, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /containerLogs/{ns}/{pod}/{container}", func(w http.ResponseWriter, r *http.Request) {
		query <- r.URL.RawQuery
		if r.PathValue("ns") != "default" || r.PathValue("pod") != "web" || r.PathValue("container") != "app" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, "one\n")
		w.(http.Flusher).Flush()
		<-next // the client has shown "one" before "two" is written
		fmt.Fprint(w, "two\n")
	})
	c := newTestClient(t, newTestServer(t, mux))

	out := &notifyingWriter{wrote: make(chan string, 10)}
	done := make(chan error, 1)
	tail := int64(5)
	go func() {
		done <- c.Logs(t.Context(), "default", "web", "app",
			LogOptions{Follow: true, TailLines: &tail, Previous: true, Timestamps: true}, out)
	}()
	if got := <-out.wrote; got != "one\n" {
		t.Fatalf("first write %q", got)
	}
	close(next)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := out.buf.String(); got != "one\ntwo\n" {
		t.Errorf("log %q", got)
	}
	if want := "follow=true&previous=true&tailLines=5&timestamps=true"; <-query != want {
		t.Errorf("query is not %q", want)
	}
}

func TestLogsFollowEndsWithContext(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /containerLogs/{ns}/{pod}/{container}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "one\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	c := newTestClient(t, newTestServer(t, mux))
	ctx, cancel := context.WithCancel(t.Context())
	out := &notifyingWriter{wrote: make(chan string, 10)}
	done := make(chan error, 1)
	go func() { done <- c.Logs(ctx, "default", "web", "app", LogOptions{Follow: true}, out) }()
	<-out.wrote
	cancel()
	if err := <-done; err != nil {
		t.Errorf("canceled follow: %v", err)
	}
}

func TestLogsNotFound(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /containerLogs/{ns}/{pod}/{container}", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `pod "x" not found`, http.StatusNotFound)
	})
	c := newTestClient(t, newTestServer(t, mux))
	err := c.Logs(t.Context(), "default", "x", "app", LogOptions{}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "pod default/x not found") {
		t.Fatalf("got %v", err)
	}
	var se *StatusError
	if !errors.As(err, &se) || se.Code != http.StatusNotFound {
		t.Errorf("not a 404 StatusError: %#v", err)
	}
}

func TestUnauthorized(t *testing.T) {
	cfg := newTestServer(t, http.NotFoundHandler())
	cfg.CertFile, cfg.KeyFile = "", ""
	c := newTestClient(t, cfg)
	_, err := c.Pods(t.Context())
	if err == nil {
		t.Fatal("no error")
	}
	want := "list pods: server " + cfg.Server + ": 401 Unauthorized: Unauthorized"
	if !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "client certificate") {
		t.Errorf("got %q, want it to start with %q and mention the client certificate", err, want)
	}
}

// A server certificate the CA file does not vouch for is explained, with
// the hint, for plain requests and for the streaming ones.
func TestUnknownServerCertificate(t *testing.T) {
	cfg := newTestServer(t, http.NotFoundHandler())
	other := selfSigned(t, "other", true)
	cfg.CAFile = writeFile(t, t.TempDir(), "other.crt", other.certPEM)
	cfg.TrustHint = "pass the right --root-dir"
	c := newTestClient(t, cfg)
	want := "the nodelet at " + cfg.Server + " presented a certificate not signed by the CA in " + cfg.CAFile + ": pass the right --root-dir"
	_, err := c.Pods(t.Context())
	var unknown x509.UnknownAuthorityError
	if err == nil || !strings.Contains(err.Error(), want) || !errors.As(err, &unknown) {
		t.Errorf("pods: got %v, want it to contain %q", err, want)
	}
	err = c.Exec(t.Context(), "default", "web", "app", []string{"true"}, nil, io.Discard, nil, false)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("exec: got %v, want it to contain %q", err, want)
	}
	cfg.CAFile = ""
	if _, err := newTestClient(t, cfg).Pods(t.Context()); err == nil || !strings.Contains(err.Error(), "not signed by a CA this machine trusts") {
		t.Errorf("system roots: got %v", err)
	}
}

func TestConnectionRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c := newTestClient(t, Config{Server: "https://" + addr})
	_, err = c.Pods(t.Context())
	if err == nil || !strings.Contains(err.Error(), "is nodelet running? (--port)") {
		t.Errorf("got %v", err)
	}
	err = c.Logs(t.Context(), "default", "web", "app", LogOptions{}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "is nodelet running? (--port)") || !strings.Contains(err.Error(), "default/web") {
		t.Errorf("logs: got %v", err)
	}
}

func TestNewClientErrors(t *testing.T) {
	dir := t.TempDir()
	notPEM := writeFile(t, dir, "ca.crt", []byte("hello"))
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Server: "http://127.0.0.1:10250"}, "want https://host:port"},
		{Config{CAFile: filepath.Join(dir, "missing")}, "read CA file"},
		{Config{CAFile: notPEM}, "no PEM certificate"},
		{Config{CertFile: notPEM}, "both the certificate and the key"},
		{Config{CertFile: notPEM, KeyFile: notPEM}, "load client certificate"},
	} {
		if _, err := NewClient(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want %q", tc.cfg, err, tc.want)
		}
	}
	c, err := NewClient(Config{})
	if err != nil || c.server.String() != DefaultServer {
		t.Errorf("default server: %v %v", c, err)
	}
}
