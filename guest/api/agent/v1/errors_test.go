package agentv1

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
)

func TestErrorSentinels(t *testing.T) {
	for _, ce := range codeErrors {
		t.Run(ce.code.String(), func(t *testing.T) {
			err := fmt.Errorf("exec: %w", Errorf(ce.code, "why"))
			if !errors.Is(err, ce.err) {
				t.Errorf("errors.Is(%v, %v) = false", err, ce.err)
			}
			for _, other := range codeErrors {
				if other.code != ce.code && errors.Is(err, other.err) {
					t.Errorf("%v also matches %v", err, other.err)
				}
			}
			if got := CodeOf(err); got != ce.code {
				t.Errorf("CodeOf = %v, want %v", got, ce.code)
			}
			if got := CodeOf(fmt.Errorf("wrapped: %w", ce.err)); got != ce.code {
				t.Errorf("CodeOf(wrapped sentinel) = %v, want %v", got, ce.code)
			}
		})
	}
}

func TestErrorHostileCode(t *testing.T) {
	// A code this host does not know, or OK on an error, is UNKNOWN.
	for _, c := range []Code{Code_OK, 6, 42, -1} {
		e := &Error{Code: c, Message: "m"}
		if !errors.Is(e, ErrUnknown) || CodeOf(e) != Code_UNKNOWN {
			t.Errorf("code %d: Is(ErrUnknown) %v, CodeOf %v", c, errors.Is(e, ErrUnknown), CodeOf(e))
		}
		if got := FromError(e).GetCode(); got != Code_UNKNOWN {
			t.Errorf("code %d: FromError's code %v", c, got)
		}
	}
}

func TestFromError(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code Code
		msg  string
	}{
		{fmt.Errorf("spawn: %w", Errorf(Code_NOT_FOUND, "no such command")), Code_NOT_FOUND, "no such command"},
		{fmt.Errorf("wait: %w", context.DeadlineExceeded), Code_DEADLINE_EXCEEDED, "wait: context deadline exceeded"},
		{io.ErrUnexpectedEOF, Code_UNKNOWN, "unexpected EOF"},
	} {
		e := FromError(tc.err)
		if e.GetCode() != tc.code || e.GetMessage() != tc.msg {
			t.Errorf("FromError(%v) = %v %q, want %v %q", tc.err, e.GetCode(), e.GetMessage(), tc.code, tc.msg)
		}
	}
	if CodeOf(nil) != Code_OK {
		t.Error("CodeOf(nil) is not OK")
	}
}

func TestErrorText(t *testing.T) {
	if got := Errorf(Code_NOT_FOUND, "exec: %q", "x").Error(); got != `not found: exec: "x"` {
		t.Errorf("Error() = %q", got)
	}
	if got := (&Error{Code: Code_UNAVAILABLE}).Error(); got != "unavailable" {
		t.Errorf("Error() = %q", got)
	}
}
