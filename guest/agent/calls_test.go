//go:build linux

package agent

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

// The agent calls over the host's client, as the host makes them.
func TestAgentCalls(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	info, err := e.client.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.GetAgentVersion() != Version || info.GetTransport() != "test" || info.GetUserUid() != 1000 || info.GetCpus() == 0 || info.GetKernel() == "" {
		t.Fatalf("info %v", info)
	}
	// The instance tells this agent process from a restarted one.
	again, err := e.client.Info(ctx)
	if err != nil || info.GetAgentInstance() == 0 || again.GetAgentInstance() != info.GetAgentInstance() || info.GetAgentInstance() != e.srv.Instance() {
		t.Fatalf("instance %d, then %d (%v), server's %d", info.GetAgentInstance(), again.GetAgentInstance(), err, e.srv.Instance())
	}
	if other := New(Config{}); other.Instance() == e.srv.Instance() {
		t.Fatalf("two agents drew instance %d", other.Instance())
	}

	at := time.Unix(1_800_000_000, 5)
	if err := e.client.SetTime(ctx, at); err != nil {
		t.Fatal(err)
	}
	wantCode(t, e.client.SetTime(ctx, time.Unix(0, 0)), codes.InvalidArgument, "unix_nanos must be positive")

	if err := e.client.Shutdown(ctx, true); err != nil {
		t.Fatal(err)
	}
	e.srv.Wait() // the power-off follows the answer
	e.mu.Lock()
	defer e.mu.Unlock()
	if !slices.Equal(e.clock, []time.Time{at}) || !slices.Equal(e.poweroff, []bool{true}) {
		t.Fatalf("clock set %v, power-offs %v", e.clock, e.poweroff)
	}
}

// An agent that cannot power off says so with the code callers check.
func TestShutdownUnimplemented(t *testing.T) {
	e := newEnv(t)
	e.srv.cfg.PowerOff = nil
	wantCode(t, e.client.Shutdown(testCtx(t), false), codes.Unimplemented, "cannot power the guest off")
}
