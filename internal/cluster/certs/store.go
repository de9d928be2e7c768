package certs

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/certificate"

	"github.com/nodelet/nodelet/internal/base/certstore"
)

// pairStore is client-go's certificate.Store over the one certificate
// store (certstore) of --cert-dir: the certificate manager reads and
// replaces one pair through it. The names are those of client-go's file
// store and the kubelet, which it reads too: the current pair
// <prefix>-current.pem, else the files the configuration names
// (certFile, keyFile), else <prefix>.crt and <prefix>.key in the
// directory. Rotated pairs are kept, as the kubelet keeps them.
type pairStore struct {
	store             *certstore.Store
	pair              certstore.Pair
	certFile, keyFile string
	// onUpdate, when set, is told about every pair stored, before the
	// certificate manager starts handing it out.
	onUpdate func(*tls.Certificate)
}

// newPairStore opens the store of dir for the pairs named prefix and
// cleans what a crash left of them (a swap client-go's store left half
// done is finished, as it did).
func newPairStore(dir, prefix, certFile, keyFile string, opts certstore.Options) (*pairStore, error) {
	st, err := certstore.Open(dir, opts)
	if err != nil {
		return nil, err
	}
	s := &pairStore{store: st, pair: certstore.Pair{Prefix: prefix, KeepReplaced: true}, certFile: certFile, keyFile: keyFile}
	if err := st.Clean(s.pair); err != nil {
		return nil, err
	}
	return s, nil
}

// CurrentPath is the path of the current pair's link, which a kubeconfig
// names.
func (s *pairStore) CurrentPath() string {
	return filepath.Join(s.store.Path(), s.pair.Link())
}

// Current is the pair in use. None is client-go's NoCertKeyError; one
// that cannot be read or used is another error.
func (s *pairStore) Current() (*tls.Certificate, error) {
	data, _, err := s.store.Current(s.pair)
	if err == nil {
		return parsePair(data, data, s.CurrentPath())
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if s.certFile != "" && s.keyFile != "" {
		certPEM, err1 := readBounded(s.certFile)
		keyPEM, err2 := readBounded(s.keyFile)
		switch {
		case err1 == nil && err2 == nil:
			return parsePair(certPEM, keyPEM, s.certFile)
		case !errors.Is(err1, fs.ErrNotExist) && err1 != nil:
			return nil, err1
		case !errors.Is(err2, fs.ErrNotExist) && err2 != nil:
			return nil, err2
		}
	}
	certName, keyName := s.pair.Prefix+".crt", s.pair.Prefix+".key"
	certPEM, err1 := s.store.ReadFile(certName)
	keyPEM, err2 := s.store.ReadFile(keyName)
	switch {
	case err1 == nil && err2 == nil:
		return parsePair(certPEM, keyPEM, filepath.Join(s.store.Path(), certName))
	case !errors.Is(err1, fs.ErrNotExist) && err1 != nil:
		return nil, err1
	case !errors.Is(err2, fs.ErrNotExist) && err2 != nil:
		return nil, err2
	}
	noPair := certificate.NoCertKeyError(fmt.Sprintf("no certificate and key in %s, (%q, %q) or %s",
		s.CurrentPath(), s.certFile, s.keyFile, filepath.Join(s.store.Path(), certName)))
	return nil, &noPair
}

// Update stores the certificates (leaf first) and key as the current
// pair, one PEM file.
func (s *pairStore) Update(certPEM, keyPEM []byte) (*tls.Certificate, error) {
	certs, err := certutil.ParseCertsPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("invalid certificate data: %w", err)
	}
	var data []byte
	for _, c := range certs {
		data = append(data, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	keyBlock, _ := pem.Decode(keyPEM)
	if keyBlock == nil {
		return nil, errors.New("invalid key data")
	}
	data = append(data, pem.EncodeToMemory(keyBlock)...)
	cert, err := parsePair(data, data, s.pair.Prefix)
	if err != nil {
		return nil, err
	}
	if _, err := s.store.Install(s.pair, data); err != nil {
		return nil, err
	}
	if err := s.store.Clean(s.pair); err != nil {
		return nil, err
	}
	if s.onUpdate != nil {
		s.onUpdate(cert)
	}
	return cert, nil
}

// parsePair is the pair with its parsed leaf; what names it in errors.
func parsePair(certPEM, keyPEM []byte, what string) (*tls.Certificate, error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("certificate and key %s: %w", what, err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("certificate %s: %w", what, err)
		}
	}
	return &cert, nil
}
