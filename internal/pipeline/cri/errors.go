package cri

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	remote "k8s.io/cri-client/pkg"
)

// Error classes. Every error returned by Client wraps exactly one of them.
var (
	ErrNotFound           = errors.New("not found")
	ErrAlreadyExists      = errors.New("already exists")
	ErrUnavailable        = errors.New("unavailable")
	ErrDeadlineExceeded   = errors.New("deadline exceeded")
	ErrCanceled           = errors.New("canceled")
	ErrInvalidArgument    = errors.New("invalid argument")
	ErrUnimplemented      = errors.New("unimplemented")
	ErrResourceExhausted  = errors.New("resource exhausted")
	ErrFailedPrecondition = errors.New("failed precondition")
	ErrUnknown            = errors.New("unknown")
)

// IsNotFound reports whether err is of class ErrNotFound.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsAlreadyExists reports whether err is of class ErrAlreadyExists.
func IsAlreadyExists(err error) bool { return errors.Is(err, ErrAlreadyExists) }

// IsUnavailable reports whether err is of class ErrUnavailable.
func IsUnavailable(err error) bool { return errors.Is(err, ErrUnavailable) }

// IsDeadlineExceeded reports whether err is of class ErrDeadlineExceeded.
func IsDeadlineExceeded(err error) bool { return errors.Is(err, ErrDeadlineExceeded) }

// IsCanceled reports whether err is of class ErrCanceled.
func IsCanceled(err error) bool { return errors.Is(err, ErrCanceled) }

// IsInvalidArgument reports whether err is of class ErrInvalidArgument.
func IsInvalidArgument(err error) bool { return errors.Is(err, ErrInvalidArgument) }

// IsUnimplemented reports whether err is of class ErrUnimplemented.
func IsUnimplemented(err error) bool { return errors.Is(err, ErrUnimplemented) }

// IsResourceExhausted reports whether err is of class ErrResourceExhausted.
func IsResourceExhausted(err error) bool { return errors.Is(err, ErrResourceExhausted) }

// IsFailedPrecondition reports whether err is of class ErrFailedPrecondition.
func IsFailedPrecondition(err error) bool { return errors.Is(err, ErrFailedPrecondition) }

// IsUnknown reports whether err is of class ErrUnknown.
func IsUnknown(err error) bool { return errors.Is(err, ErrUnknown) }

// translate turns an error of the transport into "op: class: message".
// nil stays nil. The message is the runtime's own text, on one line, without
// gRPC's "rpc error: code = ... desc = ..." decoration.
func translate(err error, op string) error {
	if err == nil {
		return nil
	}
	msg, class := classify(err)
	if msg == "" {
		return fmt.Errorf("%s: %w", op, class)
	}
	return fmt.Errorf("%s: %w: %s", op, class, oneLine(msg))
}

// classify finds the message worth keeping and the class of err.
func classify(err error) (msg string, class error) {
	if st, ok := status.FromError(err); ok {
		return statusMessage(err), codeClass(st.Code())
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, remote.ErrCommandTimedOut):
		return err.Error(), ErrDeadlineExceeded
	case errors.Is(err, context.Canceled):
		return err.Error(), ErrCanceled
	}
	return err.Error(), ErrUnknown
}

// statusMessage returns the message of the innermost gRPC status in err's
// chain; status.FromError would return the whole err.Error() for a wrapped one.
func statusMessage(err error) string {
	var gs interface{ GRPCStatus() *status.Status }
	if errors.As(err, &gs) {
		return gs.GRPCStatus().Message()
	}
	return err.Error()
}

// codeClass maps a gRPC status code to an error class.
func codeClass(c codes.Code) error {
	switch c {
	case codes.NotFound:
		return ErrNotFound
	case codes.AlreadyExists:
		return ErrAlreadyExists
	case codes.Unavailable:
		return ErrUnavailable
	case codes.DeadlineExceeded:
		return ErrDeadlineExceeded
	case codes.Canceled:
		return ErrCanceled
	case codes.InvalidArgument, codes.OutOfRange:
		return ErrInvalidArgument
	case codes.Unimplemented:
		return ErrUnimplemented
	case codes.ResourceExhausted:
		return ErrResourceExhausted
	case codes.FailedPrecondition:
		return ErrFailedPrecondition
	default:
		return ErrUnknown
	}
}

// oneLine folds a multi-line message onto a single line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// unreachableError is what Dial returns when nothing answers at the endpoint.
// Its text is deliberately one short line; the cause stays in the chain.
type unreachableError struct {
	endpoint string
	cause    error
}

func (e *unreachableError) Error() string {
	return fmt.Sprintf("no CRI runtime at %s: is containerd running?", e.endpoint)
}

func (e *unreachableError) Unwrap() []error { return []error{ErrUnavailable, e.cause} }
