package certs

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/connrotation"
	"k8s.io/utils/clock"
)

// rotatingCert is the client certificate the node's API connections
// present. Every TLS handshake asks it for the current certificate; when
// the certificate changes, every connection is closed, so that requests
// from then on (watches reconnect) authenticate with the new one, as the
// kubelet's transport does after a rotation.
type rotatingCert struct {
	// mu makes a change and the closing of the old connections one
	// step: whoever sees the new certificate (a handshake, Current) sees
	// no connection made with the old one.
	mu     sync.RWMutex
	cur    *tls.Certificate
	dialer *connrotation.Dialer
	clock  clock.PassiveClock
	log    *slog.Logger
}

func newRotatingCert(clk clock.PassiveClock, log *slog.Logger) *rotatingCert {
	return &rotatingCert{
		dialer: connrotation.NewDialer((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext),
		clock:  clk,
		log:    log,
	}
}

// set makes c the certificate of new connections and closes the
// connections made with another one.
func (r *rotatingCert) set(c *tls.Certificate) {
	if c == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.cur
	r.cur = c
	if old != nil && old != c {
		r.log.Info("client certificate rotated: closing the API connections so that new ones use it", "notAfter", notAfter(c))
		r.dialer.CloseAll()
	}
}

// current is the certificate in use, nil when none or expired.
func (r *rotatingCert) current() *tls.Certificate {
	r.mu.RLock()
	c := r.cur
	r.mu.RUnlock()
	if c == nil || (c.Leaf != nil && r.clock.Now().After(c.Leaf.NotAfter)) {
		return nil
	}
	return c
}

// getClientCertificate is the TLS callback: the current certificate, or
// none (the API server then answers 401) when there is none.
func (r *rotatingCert) getClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	if c := r.current(); c != nil {
		return c, nil
	}
	return &tls.Certificate{}, nil
}

// restConfig is base (the server, its CA, the client settings) with a
// transport of its own that presents r's certificate instead of the one
// base names.
func (r *rotatingCert) restConfig(base *rest.Config) (*rest.Config, error) {
	noCert := rest.CopyConfig(base)
	noCert.CertData, noCert.KeyData, noCert.CertFile, noCert.KeyFile = nil, nil, "", ""
	tlsCfg, err := rest.TLSConfigFor(noCert)
	if err != nil {
		return nil, fmt.Errorf("TLS configuration for %s: %w", base.Host, err)
	}
	if tlsCfg == nil {
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	tlsCfg.Certificates = nil
	tlsCfg.GetClientCertificate = r.getClientCertificate
	proxy := base.Proxy
	if proxy == nil {
		proxy = http.ProxyFromEnvironment
	}
	out := rest.AnonymousClientConfig(base)
	out.TLSClientConfig = rest.TLSClientConfig{}
	out.Dial, out.Proxy = nil, nil
	out.Transport = utilnet.SetTransportDefaults(&http.Transport{
		Proxy:               proxy,
		TLSHandshakeTimeout: 10 * time.Second,
		TLSClientConfig:     tlsCfg,
		MaxIdleConnsPerHost: 25,
		DialContext:         r.dialer.DialContext,
	})
	return out, nil
}

func notAfter(c *tls.Certificate) time.Time {
	if c == nil || c.Leaf == nil {
		return time.Time{}
	}
	return c.Leaf.NotAfter
}
