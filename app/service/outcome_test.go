package service

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/app/tasks"
	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
	"github.com/airlock-sandbox/airlock/guest/client"
)

func TestOutcome(t *testing.T) {
	rpc := func(c agentv1.Code) error { return fmt.Errorf("exec: %w", agentv1.Errorf(c, "%s", "why")) }
	tests := []struct {
		name      string
		exit      client.Exit
		err       error
		cancelled bool
		state     tasks.State
		want      tasks.Exit
	}{
		{"exited", client.Exit{Code: 3}, nil, false, tasks.Exited, tasks.Exit{Code: 3}},
		{"signalled", client.Exit{Signal: 9}, nil, false, tasks.Exited, tasks.Exit{Signal: 9}},
		{"timed out", client.Exit{Signal: 15, TimedOut: true}, nil, false, tasks.TimedOut, tasks.Exit{Signal: 15}},
		{"cancelled, exited", client.Exit{Signal: 15}, nil, true, tasks.Killed, tasks.Exit{Signal: 15}},
		{"cancelled, call cut", client.Exit{}, errors.New("context canceled"), true, tasks.Killed, tasks.Exit{Signal: 9}},
		{"not found", client.Exit{}, rpc(agentv1.Code_NOT_FOUND), false, tasks.Exited, tasks.Exit{Code: 127}},
		{"not runnable", client.Exit{}, rpc(agentv1.Code_PERMISSION_DENIED), false, tasks.Exited, tasks.Exit{Code: 126}},
		{"refused", client.Exit{}, rpc(agentv1.Code_INVALID_ARGUMENT), false, tasks.Exited, tasks.Exit{Code: 125}},
		{"transport gone", client.Exit{}, rpc(agentv1.Code_UNAVAILABLE), false, tasks.Lost, tasks.Exit{}},
		{"no exit", client.Exit{}, client.ErrNoExit, false, tasks.Lost, tasks.Exit{}},
		{"impossible exit", client.Exit{}, fmt.Errorf("exec: %w", client.ErrBadExit), false, tasks.Lost, tasks.Exit{}},
		{"unknown code", client.Exit{}, rpc(agentv1.Code(9999)), false, tasks.Lost, tasks.Exit{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state, ex, reason := Outcome(tt.exit, tt.err, tt.cancelled, time.Second)
			if state != tt.state || ex != tt.want {
				t.Fatalf("Outcome = %s %+v %q; want %s %+v", state, ex, reason, tt.state, tt.want)
			}
			if state != tasks.Exited && reason == "" || ex.Code >= 125 && reason != "why" {
				t.Fatalf("reason %q", reason)
			}
			if state == tasks.Lost && strings.Contains(reason, "stopped") != (tt.name == "transport gone") {
				t.Fatalf("reason %q blames the wrong party", reason)
			}
		})
	}
}

func TestOutcomeClipsReason(t *testing.T) {
	long := agentv1.Errorf(agentv1.Code_NOT_FOUND, "%s", strings.Repeat("é", 4<<10)+"\xff")
	_, _, reason := Outcome(client.Exit{}, fmt.Errorf("exec: %w", long), false, 0)
	if len(reason) > MaxReason+64 || !strings.HasSuffix(reason, "bytes cut)") || !utf8.ValidString(reason) {
		t.Fatalf("reason of %d bytes: %.80q…", len(reason), reason)
	}
}
