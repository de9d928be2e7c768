// Package certs is beside the pipeline (cluster mode): the node's
// certificates from the API server, as the kubelet gets them. The client
// certificate comes through TLS bootstrapping (a CSR with signer
// kubernetes.io/kube-apiserver-client-kubelet sent with the
// --bootstrap-kubeconfig credentials), is stored under --cert-dir as
// kubelet-client-current.pem with a --kubeconfig pointing at it, and is
// rotated before it expires (client-go's certificate manager); LoadClient
// does the first, Client.Run the second, and Client.RESTConfig is the API
// client configuration that always presents the current certificate. The
// serving certificate of the secure port comes through CSRs with signer
// kubernetes.io/kubelet-serving when serverTLSBootstrap is set (Serving).
package certs

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Names in the certificate directory: the store (certstore, through
// pairStore) keeps <prefix>-<time>-<rand>.pem files (certificate and key,
// 0600) and a <prefix>-current.pem link to the one in use, as the
// kubelet's file store does (whose <prefix>-<time>.pem files it reads).
const (
	clientPairPrefix  = "kubelet-client"
	servingPairPrefix = "kubelet-server"
	// bootstrapKeyFile holds the key of a client CSR not yet issued, so
	// that a restarted nodelet finds its CSR again instead of making a new
	// one.
	bootstrapKeyFile = "kubelet-client.key.tmp"
)

// ProtobufContentType is what the node's clients send and prefer, as the
// kubelet's (contentType in KubeletConfiguration).
const ProtobufContentType = "application/vnd.kubernetes.protobuf"

// Deps are what the certificate parts use.
type Deps struct {
	Clock clock.Clock
	Log   *slog.Logger
	// NewClientset makes the clients that send CSRs; nil is
	// kubernetes.NewForConfig. Tests return a fake clientset.
	NewClientset func(*rest.Config) (kubernetes.Interface, error)
}

func (d Deps) withDefaults() Deps {
	if d.Clock == nil {
		d.Clock = clock.RealClock{}
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.NewClientset == nil {
		d.NewClientset = func(c *rest.Config) (kubernetes.Interface, error) { return kubernetes.NewForConfig(c) }
	}
	return d
}

// klogContext is a context carrying log as the klog logger that
// client-go's certificate manager logs through. It is never
// cancelled: the manager stops when its owner's Run returns.
func klogContext(log *slog.Logger) context.Context {
	return klog.NewContext(context.Background(), klogLogger(log))
}

// klogLogger is log as a klog (logr) logger.
func klogLogger(log *slog.Logger) klog.Logger {
	return logr.FromSlogHandler(log.Handler())
}

// errTimeout is the cause of a wait cut short by its own bound.
var errTimeout = errors.New("timed out")

// withClockTimeout is context.WithTimeout on clk: the context is cancelled
// with errTimeout once d has passed on clk.
func withClockTimeout(ctx context.Context, clk clock.Clock, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	t := clk.NewTimer(d)
	go func() {
		defer t.Stop()
		select {
		case <-t.C():
			cancel(errTimeout)
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// timedOut says whether ctx ended because of withClockTimeout's bound.
func timedOut(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), errTimeout)
}
