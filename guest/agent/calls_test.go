//go:build linux

package agent

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
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
	// The instance tells this agent from a restarted one.
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
	wantCode(t, e.client.SetTime(ctx, time.Unix(0, 0)), agentv1.Code_INVALID_ARGUMENT, "unix_nanos must be positive")

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

// TrustCA writes the CA's own file (replacing it) and appends it to the
// system bundle on a line of its own, making both and their folder when
// missing; what is not a PEM certificate, or too large, changes nothing.
func TestTrustCA(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	caFile, bundle := e.srv.cfg.CAFile, e.srv.cfg.CABundle
	pem := "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----" // no final newline
	if err := e.client.TrustCA(ctx, []byte(pem)); err != nil {
		t.Fatal(err)
	}
	want := pem + "\n"
	if b, err := os.ReadFile(bundle); err != nil || string(b) != want {
		t.Fatalf("new bundle %q (%v), want %q", b, err, want)
	}
	// An existing bundle whose last line lacks its newline.
	os.WriteFile(bundle, []byte("system CA"), 0o644)
	if err := e.client.TrustCA(ctx, []byte(pem+"\n")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(bundle); string(b) != "system CA\n"+want {
		t.Fatalf("bundle %q, want %q", b, "system CA\n"+want)
	}
	if b, err := os.ReadFile(caFile); err != nil || string(b) != want {
		t.Fatalf("CA file %q (%v), want %q", b, err, want)
	}
	if fi, err := os.Stat(caFile); err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("CA file mode %v (%v), want 0644 (tasks run unprivileged)", fi.Mode(), err)
	}
	for _, bad := range [][]byte{nil, []byte("not a certificate"), bytes.Repeat([]byte(pem), 64<<10/len(pem)+1)} {
		wantCode(t, e.client.TrustCA(ctx, bad), agentv1.Code_INVALID_ARGUMENT, "trust_ca")
	}
	if b, _ := os.ReadFile(bundle); string(b) != "system CA\n"+want {
		t.Fatalf("bundle after refused calls %q", b)
	}
	if names, _ := os.ReadDir(filepath.Dir(caFile)); len(names) != 2 {
		t.Fatalf("left behind in the certificates folder: %v", names)
	}
}

// An agent that cannot power off says so with the code callers check.
func TestShutdownUnimplemented(t *testing.T) {
	e := newEnv(t)
	e.srv.cfg.PowerOff = nil
	wantCode(t, e.client.Shutdown(testCtx(t), false), agentv1.Code_UNIMPLEMENTED, "cannot power the guest off")
}

// The power-off follows the Shutdown answer as soon as it is written, not
// after shutdownDelay; an answer that is never written (the host went)
// still powers off after shutdownDelay.
func TestShutdownAfterReply(t *testing.T) {
	defer func(d time.Duration) { shutdownDelay = d }(shutdownDelay)
	poweredOff := func(e *env) bool {
		deadline := time.Now().Add(10 * time.Second) // a bound for a broken test, not a timing
		for time.Now().Before(deadline) {
			e.mu.Lock()
			n := len(e.poweroff)
			e.mu.Unlock()
			if n > 0 {
				return true
			}
			time.Sleep(5 * time.Millisecond)
		}
		return false
	}

	shutdownDelay = time.Hour // only the written answer can let it go
	e := newEnv(t)
	if err := e.client.Shutdown(testCtx(t), false); err != nil {
		t.Fatal(err)
	}
	if !poweredOff(e) {
		// Let the waiting power-off go, so the test ends.
		e.srv.Replied(&agentv1.AgentRequest{Call: &agentv1.AgentRequest_Shutdown{Shutdown: &agentv1.ShutdownRequest{}}})
		t.Fatal("no power-off after the Shutdown answer was written")
	}

	shutdownDelay = time.Millisecond
	e = newEnv(t)
	if _, err := e.srv.Shutdown(testCtx(t), &agentv1.ShutdownRequest{}); err != nil { // answered to nobody
		t.Fatal(err)
	}
	if !poweredOff(e) {
		t.Fatal("no power-off without an answer written")
	}
	e.srv.Wait()
}
