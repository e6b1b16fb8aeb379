package agentv1

import (
	"context"
	"errors"
	"fmt"
)

// The sentinels for the codes an Error carries: errors.Is(err, ErrNotFound)
// is true for an Error whose code is NOT_FOUND, and so on. ErrCanceled and
// ErrDeadlineExceeded are the context package's errors, so a call the host
// abandoned and one the guest reports abandoned match the same sentinel.
var (
	ErrCanceled           = context.Canceled
	ErrUnknown            = errors.New("unknown error")
	ErrInvalidArgument    = errors.New("invalid argument")
	ErrDeadlineExceeded   = context.DeadlineExceeded
	ErrNotFound           = errors.New("not found")
	ErrPermissionDenied   = errors.New("permission denied")
	ErrResourceExhausted  = errors.New("resource exhausted")
	ErrFailedPrecondition = errors.New("failed precondition")
	ErrUnimplemented      = errors.New("unimplemented")
	ErrInternal           = errors.New("internal error")
	ErrUnavailable        = errors.New("unavailable")
)

// codeErrors is the one table between codes and sentinels. A code missing
// from it (OK, or a number a newer or hostile guest sends) is ErrUnknown.
var codeErrors = [...]struct {
	code Code
	err  error
}{
	{Code_CANCELED, ErrCanceled},
	{Code_UNKNOWN, ErrUnknown},
	{Code_INVALID_ARGUMENT, ErrInvalidArgument},
	{Code_DEADLINE_EXCEEDED, ErrDeadlineExceeded},
	{Code_NOT_FOUND, ErrNotFound},
	{Code_PERMISSION_DENIED, ErrPermissionDenied},
	{Code_RESOURCE_EXHAUSTED, ErrResourceExhausted},
	{Code_FAILED_PRECONDITION, ErrFailedPrecondition},
	{Code_UNIMPLEMENTED, ErrUnimplemented},
	{Code_INTERNAL, ErrInternal},
	{Code_UNAVAILABLE, ErrUnavailable},
}

// known is c as this side knows it (UNKNOWN for a code not in the
// table), and its sentinel.
func (c Code) known() (Code, error) {
	for _, ce := range codeErrors {
		if ce.code == c {
			return c, ce.err
		}
	}
	return Code_UNKNOWN, ErrUnknown
}

// Errorf returns an *Error with code c and a formatted message: what a
// guest handler returns to have the host see that code.
func Errorf(c Code, format string, a ...any) error {
	return &Error{Code: c, Message: fmt.Sprintf(format, a...)}
}

// Error is the code's sentinel text and the message. The message may be
// the guest's: whoever shows it to a person escapes it first.
func (e *Error) Error() string {
	_, err := e.GetCode().known()
	s := err.Error()
	if m := e.GetMessage(); m != "" {
		return s + ": " + m
	}
	return s
}

// Is reports whether target is the sentinel of e's code.
func (e *Error) Is(target error) bool {
	_, err := e.GetCode().known()
	return target != nil && err == target
}

// CodeOf is the code err carries: that of the first *Error in its chain,
// else that of the first sentinel it matches (a context's error included),
// else UNKNOWN; OK for nil. A code not in the table is UNKNOWN.
func CodeOf(err error) Code {
	if err == nil {
		return Code_OK
	}
	if e := (*Error)(nil); errors.As(err, &e) {
		c, _ := e.GetCode().known()
		return c
	}
	for _, ce := range codeErrors {
		if errors.Is(err, ce.err) {
			return ce.code
		}
	}
	return Code_UNKNOWN
}

// FromError is err as the guest reports it: the first *Error in err's
// chain with its code and message, or err's code (CodeOf) and text.
func FromError(err error) *Error {
	if e := (*Error)(nil); errors.As(err, &e) {
		return &Error{Code: CodeOf(e), Message: e.GetMessage()}
	}
	return &Error{Code: CodeOf(err), Message: err.Error()}
}
