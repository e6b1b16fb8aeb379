package vmservice

import (
	"bufio"
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/vm"
	"github.com/airlock-sandbox/airlock/vm/hcs"
)

// harness runs a Server and gives clients for any caller.
type harness struct {
	srv *Server
	h   *fakeHCS
	wg  sync.WaitGroup
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := newFakeHCS()
	hs := &harness{h: h, srv: &Server{HCS: h, Policy: testPolicy(), Files: newFakeFiles(), MaxPerUser: 2}}
	t.Cleanup(hs.wg.Wait)
	return hs
}

func (hs *harness) client(c Caller) *hcs.Client {
	return &hcs.Client{Dial: func(ctx context.Context) (net.Conn, error) {
		a, b := net.Pipe()
		hs.wg.Add(1)
		go func() {
			defer hs.wg.Done()
			hs.srv.ServeConn(context.Background(), b, c)
		}()
		return a, nil
	}}
}

func TestServerLifecycle(t *testing.T) {
	hs := newHarness(t)
	ctx := context.Background()
	cl := hs.client(aliceCaller())
	sess, info, err := cl.Create(ctx, goodRequest())
	if err != nil {
		t.Fatal(err)
	}
	sys := hs.h.system(info.ID)
	if sys == nil || info.RuntimeID != sys.runtimeID || info.State != hcs.VMCreated {
		t.Fatalf("create: %+v", info)
	}
	// The document is the service's own, for the caller.
	doc := hs.h.docs[0]
	if got := doc.VirtualMachine.Devices.HvSocket.HvSocketConfig.DefaultBindSecurityDescriptor; !strings.Contains(got, alice) {
		t.Errorf("socket SDDL %q does not admit the caller", got)
	}
	if hs.h.openGrants() != 1 || len(hs.h.grants[info.ID]) != 2 {
		t.Errorf("boot files not granted: %v", hs.h.grants)
	}
	if err := sess.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if len(sys.modifies) != 1 || sys.identity[0] != 42 {
		t.Fatalf("share not added with the caller's token: %+v %v", sys.modifies, sys.identity)
	}
	share := sys.modifies[0].Settings.(hcs.Plan9Share)
	// LinuxMetadata (0x4) and, with the caller's token, UseShareRootIdentity
	// (0x10), as WSL's AddPlan9Share.
	if share.Path != project || share.Flags != 0x14 || share.Port != 564 {
		t.Errorf("share %+v", share)
	}
	if err := sess.Start(ctx); !errors.Is(err, vm.ErrAlreadyStarted) {
		t.Errorf("second start = %v", err)
	}
	if st, err := sess.Status(ctx); err != nil || st.State != hcs.VMRunning {
		t.Errorf("status %+v %v", st, err)
	}

	// Another account cannot see, wait for or stop it.
	bobc := hs.client(Caller{SID: bob, Profile: `C:\Users\bob`})
	if _, err := bobc.Wait(ctx, info.ID); !errors.Is(err, hcs.ErrRefused) {
		t.Errorf("bob's wait = %v", err)
	}

	waited := make(chan hcs.Exit, 1)
	go func() {
		e, err := cl.Wait(ctx, info.ID)
		if err != nil {
			t.Error(err)
		}
		waited <- e
	}()
	sys.powerOff(hcs.Exit{Type: "GracefulExit"})
	if e := <-waited; !e.Graceful() {
		t.Errorf("exit %+v", e)
	}
	sess.Close()
	eventually(t, "release", func() bool { return sys.isClosed() && hs.h.openGrants() == 0 })
}

func TestServerTerminatesOnDisconnect(t *testing.T) {
	hs := newHarness(t)
	ctx := context.Background()
	sess, info, err := hs.client(aliceCaller()).Create(ctx, goodRequest())
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.Start(ctx); err != nil {
		t.Fatal(err)
	}
	sys := hs.h.system(info.ID)
	sess.Close() // the app died
	eventually(t, "terminate", func() bool {
		select {
		case <-sys.Exited():
			return sys.isClosed()
		default:
			return false
		}
	})
	if sys.ExitStatus().Type != "ForcedExit" {
		t.Errorf("exit %+v", sys.ExitStatus())
	}
}

func TestServerRefusals(t *testing.T) {
	ctx := context.Background()
	t.Run("invalid", func(t *testing.T) {
		hs := newHarness(t)
		req := goodRequest()
		req.Share.Path = `C:\Users\bob\code`
		if _, _, err := hs.client(aliceCaller()).Create(ctx, req); !errors.Is(err, hcs.ErrRefused) || !strings.Contains(err.Error(), "another account") {
			t.Fatalf("create = %v", err)
		}
		if len(hs.h.docs) != 0 {
			t.Error("HCS was called for a refused request")
		}
	})
	t.Run("limit", func(t *testing.T) {
		hs := newHarness(t)
		cl := hs.client(aliceCaller())
		for i := 0; i < 2; i++ {
			s, _, err := cl.Create(ctx, goodRequest())
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
		}
		if _, _, err := cl.Create(ctx, goodRequest()); !errors.Is(err, hcs.ErrRefused) || !strings.Contains(err.Error(), "limit") {
			t.Fatalf("third create = %v", err)
		}
	})
	t.Run("unavailable", func(t *testing.T) {
		hs := newHarness(t)
		hs.srv.Unavailable = hcs.Diagnose(hcs.OpLoad, 0x8007007E, "computecore.dll")
		if _, _, err := hs.client(aliceCaller()).Create(ctx, goodRequest()); !errors.Is(err, hcs.ErrPlatformMissing) {
			t.Fatalf("create = %v", err)
		}
		// A request the service would never carry out is refused as such
		// on a machine without Hyper-V too (what the Wine test shows).
		bad := goodRequest()
		bad.Kernel = `C:\Users\alice\vmlinux`
		if _, _, err := hs.client(aliceCaller()).Create(ctx, bad); !errors.Is(err, hcs.ErrRefused) || errors.Is(err, hcs.ErrPlatformMissing) {
			t.Fatalf("invalid create on a machine without Hyper-V = %v, want a refusal", err)
		}
	})
	t.Run("grant fails", func(t *testing.T) {
		hs := newHarness(t)
		hs.h.failWith["grant"] = hcs.Diagnose(hcs.OpGrant, 0x80070005, kernel)
		if _, _, err := hs.client(aliceCaller()).Create(ctx, goodRequest()); !errors.Is(err, hcs.ErrBootFilesAccess) {
			t.Fatalf("create = %v", err)
		}
		for _, s := range hs.h.systems {
			if !s.isClosed() {
				t.Error("VM left behind after a failed grant")
			}
		}
	})
	t.Run("platform missing at create", func(t *testing.T) {
		hs := newHarness(t)
		hs.h.failWith["create"] = hcs.Diagnose(hcs.OpCreate, 0x80370102, "")
		if _, _, err := hs.client(aliceCaller()).Create(ctx, goodRequest()); !errors.Is(err, hcs.ErrPlatformMissing) {
			t.Fatalf("create = %v", err)
		}
	})
	t.Run("share fails", func(t *testing.T) {
		hs := newHarness(t)
		hs.h.failWith["modify"] = errBoom
		sess, info, err := hs.client(aliceCaller()).Create(ctx, goodRequest())
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		if err := sess.Start(ctx); err == nil || !strings.Contains(err.Error(), "boom") {
			t.Fatalf("start = %v", err)
		}
		select {
		case <-hs.h.system(info.ID).Exited():
		default:
			t.Error("a VM without its workspace keeps running")
		}
	})
	t.Run("out of resources at start", func(t *testing.T) {
		hs := newHarness(t)
		hs.h.failWith["start"] = hcs.Diagnose(hcs.OpStart, 0x800705AA, "") // ERROR_NO_SYSTEM_RESOURCES
		sess, _, err := hs.client(aliceCaller()).Create(ctx, goodRequest())
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		if err := sess.Start(ctx); !errors.Is(err, hcs.ErrOutOfResources) {
			t.Fatalf("start = %v", err)
		}
	})
	t.Run("start never finishes", func(t *testing.T) {
		hs := newHarness(t)
		hs.srv.OpTimeout = 100 * time.Millisecond
		hs.h.hangStart = true
		sess, info, err := hs.client(aliceCaller()).Create(ctx, goodRequest())
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		start := time.Now()
		if err := sess.Start(ctx); err == nil || !strings.Contains(err.Error(), "deadline") {
			t.Fatalf("start = %v", err)
		}
		if el := time.Since(start); el > 2*time.Second {
			t.Errorf("start took %v with a 100ms bound", el)
		}
		if st, err := sess.Status(ctx); err != nil || st.ID != info.ID {
			t.Errorf("the connection is not served after a bounded start: %+v %v", st, err)
		}
	})
	t.Run("wrong version", func(t *testing.T) {
		hs := newHarness(t)
		a, b := net.Pipe()
		go hs.srv.ServeConn(ctx, b, aliceCaller())
		defer a.Close()
		go func() { _ = hcs.WriteMessage(a, hcs.Request{V: 99, Op: hcs.OpStatusVM}) }()
		var resp hcs.Response
		if err := hcs.ReadMessage(bufio.NewReader(a), &resp); err != nil || resp.Error == nil || resp.Error.Code != hcs.CodeVersion {
			t.Fatalf("resp %+v, %v", resp, err)
		}
	})
	t.Run("start without create", func(t *testing.T) {
		hs := newHarness(t)
		a, b := net.Pipe()
		go hs.srv.ServeConn(ctx, b, aliceCaller())
		defer a.Close()
		go func() {
			_ = hcs.WriteMessage(a, hcs.Request{V: 1, Op: hcs.OpStartVM, ID: "0e8bd9a0-1b7c-4d6f-9a3b-2c1d0e9f8a7b"})
		}()
		var resp hcs.Response
		if err := hcs.ReadMessage(bufio.NewReader(a), &resp); err != nil || resp.Error == nil || resp.Error.Code != hcs.CodeNotFound {
			t.Fatalf("resp %+v, %v", resp, err)
		}
	})
}

// TestStopPending: HCS answering a terminate with "operation pending"
// (hcsshim ErrVmcomputeOperationPending) is ending the VM already.
func TestStopPending(t *testing.T) {
	ctx := context.Background()
	hs := newHarness(t)
	sess, info, err := hs.client(aliceCaller()).Create(ctx, goodRequest())
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if err := sess.Start(ctx); err != nil {
		t.Fatal(err)
	}
	hs.h.mu.Lock()
	hs.h.failWith["terminate"] = hcs.Diagnose(hcs.OpTerminate, 0xC0370103, "")
	hs.h.mu.Unlock()
	if err := sess.Stop(ctx); err != nil {
		t.Fatalf("stop = %v", err)
	}
	hs.h.system(info.ID).powerOff(hcs.Exit{Type: "ForcedExit"}) // the pending terminate ends
}

func TestSweep(t *testing.T) {
	hs := newHarness(t)
	hs.h.orphans = []string{"0e8bd9a0-1b7c-4d6f-9a3b-2c1d0e9f8a7b", "1e8bd9a0-1b7c-4d6f-9a3b-2c1d0e9f8a7b"}
	if err := hs.srv.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(hs.h.killed) != 2 {
		t.Fatalf("killed %v", hs.h.killed)
	}
	// An orphan gone by the time it is terminated, in the code hcsshim
	// knows (ErrComputeSystemDoesNotExist), is not a failure.
	hs.h.failWith["terminate"] = hcs.Diagnose(hcs.OpTerminate, 0xC037010E, "")
	if err := hs.srv.Sweep(context.Background()); err != nil {
		t.Fatalf("sweep with the orphan gone: %v", err)
	}
}

func TestPipeSDDL(t *testing.T) {
	// Interactive users and SYSTEM only; network logons denied first;
	// never Everyone, Users or Authenticated Users. Instances and the
	// owner: hcs.TestServicePipeSDDL.
	for _, broad := range []string{";WD)", ";BU)", ";AU)", ";AN)"} {
		if strings.Contains(hcs.ServicePipeSDDL, broad) {
			t.Errorf("ServicePipeSDDL admits %s", broad)
		}
	}
}

// TestGrantsBeforeCreateAsCaller: every file is granted before the VM
// exists; the caller's own disk, which the caller could swap for a link
// after validation, is granted and revoked while impersonating the
// caller (token 42), the installed image's files as the service (0).
func TestGrantsBeforeCreateAsCaller(t *testing.T) {
	hs := newHarness(t)
	ctx := context.Background()
	req := goodRequest()
	req.Kernel = stdDir + `\vmlinuz`
	req.Disks = []hcs.DiskRequest{{Path: rootVHD, ReadOnly: true}, {Path: dataVHD}}
	sess, _, err := hs.client(aliceCaller()).Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"grant " + stdDir + `\vmlinuz as 0`,
		"grant " + initrd + " as 0",
		"grant " + rootVHD + " as 0",
		"grant " + dataVHD + " as 42",
		"create",
	}
	hs.h.mu.Lock()
	got := strings.Join(hs.h.calls, "\n")
	hs.h.mu.Unlock()
	if got != strings.Join(want, "\n") {
		t.Errorf("calls:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	sess.Close()
	eventually(t, "release", func() bool { return hs.h.openGrants() == 0 })
	hs.h.mu.Lock()
	got = strings.Join(hs.h.calls[len(want):], "\n")
	hs.h.mu.Unlock()
	if !strings.Contains(got, "revoke "+dataVHD+" as 42") || !strings.Contains(got, "revoke "+rootVHD+" as 0") {
		t.Errorf("revocations:\n%s", got)
	}

	// A failed create takes the grants back; without the caller's token
	// nothing of the caller's is granted at all.
	hs = newHarness(t)
	hs.h.failWith["create"] = errors.New("boom")
	if _, _, err := hs.client(aliceCaller()).Create(ctx, req); err == nil {
		t.Fatal("create succeeded")
	}
	if hs.h.openGrants() != 0 {
		t.Errorf("grants left after a failed create: %v", hs.h.grants)
	}
	hs = newHarness(t)
	noToken := aliceCaller()
	noToken.Token = 0
	if _, _, err := hs.client(noToken).Create(ctx, req); !errors.Is(err, hcs.ErrRefused) {
		t.Errorf("create without a token = %v", err)
	}
	if hs.h.openGrants() != 0 || len(hs.h.docs) != 0 {
		t.Errorf("without a token: grants %v, %d VMs", hs.h.grants, len(hs.h.docs))
	}
}
