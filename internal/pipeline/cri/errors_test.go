package cri

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	remote "k8s.io/cri-client/pkg"
)

var allClasses = []error{
	ErrNotFound, ErrAlreadyExists, ErrUnavailable, ErrDeadlineExceeded, ErrCanceled,
	ErrInvalidArgument, ErrUnimplemented, ErrResourceExhausted, ErrFailedPrecondition, ErrUnknown,
}

func TestTranslate(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		class   error
		wantMsg string
	}{
		{"not found", status.Error(codes.NotFound, `container "abc" not found`), ErrNotFound, `op: not found: container "abc" not found`},
		{"already exists", status.Error(codes.AlreadyExists, "name reserved"), ErrAlreadyExists, "op: already exists: name reserved"},
		{"unavailable", status.Error(codes.Unavailable, "connection refused"), ErrUnavailable, "op: unavailable: connection refused"},
		{"deadline", status.Error(codes.DeadlineExceeded, "too slow"), ErrDeadlineExceeded, "op: deadline exceeded: too slow"},
		{"canceled", status.Error(codes.Canceled, "gone"), ErrCanceled, "op: canceled: gone"},
		{"invalid argument", status.Error(codes.InvalidArgument, "bad"), ErrInvalidArgument, "op: invalid argument: bad"},
		{"out of range", status.Error(codes.OutOfRange, "bad"), ErrInvalidArgument, "op: invalid argument: bad"},
		{"unimplemented", status.Error(codes.Unimplemented, "no"), ErrUnimplemented, "op: unimplemented: no"},
		{"resource exhausted", status.Error(codes.ResourceExhausted, "disk"), ErrResourceExhausted, "op: resource exhausted: disk"},
		{"failed precondition", status.Error(codes.FailedPrecondition, "running"), ErrFailedPrecondition, "op: failed precondition: running"},
		{"unknown code", status.Error(codes.Unknown, "boom"), ErrUnknown, "op: unknown: boom"},
		{"internal code", status.Error(codes.Internal, "boom"), ErrUnknown, "op: unknown: boom"},
		{"permission denied", status.Error(codes.PermissionDenied, "no"), ErrUnknown, "op: unknown: no"},
		{"empty message", status.Error(codes.NotFound, ""), ErrNotFound, "op: not found"},
		{"multi-line message", status.Error(codes.Internal, "line one\nline two"), ErrUnknown, "op: unknown: line one line two"},
		{"wrapped status", fmt.Errorf("validate: %w", status.Error(codes.Unavailable, "dial unix /x: no such file")), ErrUnavailable, "op: unavailable: dial unix /x: no such file"},
		{"doubly wrapped status", fmt.Errorf("a: %w", fmt.Errorf("b: %w", status.Error(codes.NotFound, "nope"))), ErrNotFound, "op: not found: nope"},
		{"context deadline", context.DeadlineExceeded, ErrDeadlineExceeded, "op: deadline exceeded: context deadline exceeded"},
		{"wrapped context canceled", fmt.Errorf("x: %w", context.Canceled), ErrCanceled, "op: canceled: x: context canceled"},
		{"exec timed out", fmt.Errorf("%w: %q timed out after 1s", remote.ErrCommandTimedOut, "sleep 9"), ErrDeadlineExceeded, `op: deadline exceeded: command timed out: "sleep 9" timed out after 1s`},
		{"plain error", errors.New("something odd"), ErrUnknown, "op: unknown: something odd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := translate(tt.err, "op")
			assertOnlyClass(t, got, tt.class)
			if got.Error() != tt.wantMsg {
				t.Errorf("Error() = %q, want %q", got.Error(), tt.wantMsg)
			}
			if strings.Contains(got.Error(), "rpc error") || strings.Contains(got.Error(), "\n") {
				t.Errorf("Error() is not one clean line: %q", got.Error())
			}
		})
	}
}

func TestTranslateNil(t *testing.T) {
	if err := translate(nil, "op"); err != nil {
		t.Fatalf("translate(nil) = %v, want nil", err)
	}
}

func TestIsHelpers(t *testing.T) {
	helpers := map[error]func(error) bool{
		ErrNotFound: IsNotFound, ErrAlreadyExists: IsAlreadyExists, ErrUnavailable: IsUnavailable,
		ErrDeadlineExceeded: IsDeadlineExceeded, ErrCanceled: IsCanceled, ErrInvalidArgument: IsInvalidArgument,
		ErrUnimplemented: IsUnimplemented, ErrResourceExhausted: IsResourceExhausted,
		ErrFailedPrecondition: IsFailedPrecondition, ErrUnknown: IsUnknown,
	}
	for class, is := range helpers {
		err := fmt.Errorf("op: %w", class)
		for other, otherIs := range helpers {
			if got := otherIs(err); got != (other == class) {
				t.Errorf("helper for %q on %q = %v", other, class, got)
			}
		}
		if is(errors.New(class.Error())) {
			t.Errorf("helper for %q matched by text", class)
		}
	}
}

// assertOnlyClass checks that err is of class want and of no other class.
func assertOnlyClass(t *testing.T, err, want error) {
	t.Helper()
	for _, class := range allClasses {
		if got := errors.Is(err, class); got != (class == want) {
			t.Errorf("errors.Is(%q, %q) = %v", err, class, got)
		}
	}
}
