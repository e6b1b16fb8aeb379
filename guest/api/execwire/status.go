package execwire

import (
	"errors"
	"fmt"

	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
)

// Code is why a task or an agent call failed, as agentv1.Error carries it.
// The numbers are gRPC's (google.golang.org/grpc/codes), so the host turns
// an error from the guest into a gRPC status error that its callers
// classify as before; the guest itself does not link gRPC.
type Code uint32

// The codes the agent uses.
const (
	OK                 Code = 0
	Canceled           Code = 1
	Unknown            Code = 2
	InvalidArgument    Code = 3
	DeadlineExceeded   Code = 4
	NotFound           Code = 5
	PermissionDenied   Code = 7
	ResourceExhausted  Code = 8
	FailedPrecondition Code = 9
	Unimplemented      Code = 12
	Internal           Code = 13
	Unavailable        Code = 14
)

// Error is an error with a Code: what a handler returns to have the host
// see that code.
type Error struct {
	Code    Code
	Message string
}

// Errorf returns an *Error with code c and a formatted message.
func Errorf(c Code, format string, a ...any) error {
	return &Error{Code: c, Message: fmt.Sprintf(format, a...)}
}

func (e *Error) Error() string { return fmt.Sprintf("code %d: %s", e.Code, e.Message) }

// ToProto is err as the guest reports it: an *Error's code and message
// (the first in err's chain), or Unknown and err's text.
func ToProto(err error) *agentv1.Error {
	if e := (*Error)(nil); errors.As(err, &e) {
		c := e.Code
		if c == OK {
			c = Unknown
		}
		return &agentv1.Error{Code: uint32(c), Message: e.Message}
	}
	return &agentv1.Error{Code: uint32(Unknown), Message: err.Error()}
}
