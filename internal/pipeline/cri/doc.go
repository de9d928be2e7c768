// Package cri is the last stage of the pipeline: it talks to the container
// runtime (containerd or any other CRI v1 implementation) over its gRPC
// socket and is the only package of the project that imports gRPC.
//
// Transport is k8s.io/cri-client: its remote runtime and image services own
// the dialer, the CRI v1 API and the message size limits. This package is a
// thin layer on top of the k8s.io/cri-api interfaces
// internalapi.RuntimeService and internalapi.ImageManagerService that adds:
//
//   - per-call timeouts chosen here (see Timeouts) rather than cri-client's
//     single connection timeout;
//   - error classes: every gRPC status code is translated into one of the
//     sentinels of this package (ErrNotFound, ErrUnavailable, ...), so that no
//     other package needs to know about gRPC;
//   - logging: cri-client logs through klog.FromContext, so every call carries
//     a logr built from our *slog.Logger and those logs end up in our logger;
//   - a version handshake when dialling.
//
// Because Client wraps the interfaces, the cri-api fakes
// (k8s.io/cri-api/pkg/apis/testing FakeRuntimeService and FakeImageService)
// plug straight into New for unit tests of other packages.
package cri
