package hcs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/vm"
)

func TestMessageRoundTrip(t *testing.T) {
	var b bytes.Buffer
	in := Request{V: 1, Op: OpCreateVM, Create: &CreateRequest{Kernel: `C:\k`, Initrd: `C:\i`, CPUs: 2, MemoryMiB: 512, Share: &ShareRequest{Path: `D:\w`, ReadOnly: true}}}
	if err := WriteMessage(&b, in); err != nil {
		t.Fatal(err)
	}
	var out Request
	if err := ReadMessage(bufio.NewReader(&b), &out); err != nil {
		t.Fatal(err)
	}
	if out.Create == nil || *out.Create.Share != *in.Create.Share || out.Op != in.Op {
		t.Fatalf("got %+v", out)
	}
}

func TestReadMessageRefuses(t *testing.T) {
	for name, input := range map[string]string{
		"too long":      `{"v":1,"op":"` + strings.Repeat("x", MaxMessage) + `"}` + "\n",
		"unknown field": `{"v":1,"op":"start","evil":true}` + "\n",
		"trailing":      `{"v":1,"op":"start"} {"v":1}` + "\n",
		"not json":      "hello\n",
		"cut":           `{"v":1,"op":"st`,
		"empty":         "",
	} {
		t.Run(name, func(t *testing.T) {
			var r Request
			if err := ReadMessage(bufio.NewReaderSize(strings.NewReader(input), 4096), &r); err == nil {
				t.Fatalf("accepted %q", input)
			}
		})
	}
}

func TestWireErrors(t *testing.T) {
	for _, tc := range []struct {
		code Code
		want error
	}{
		{CodePlatform, ErrPlatformMissing},
		{CodeTooOld, ErrWindowsTooOld},
		{CodeBootFiles, ErrBootFilesAccess},
		{CodeDisk, ErrDiskRefused},
		{CodeExit, ErrUnexpectedExit},
		{CodeUnsupported, ErrUnsupported},
		{CodeResources, ErrOutOfResources},
		{CodeNotRunning, vm.ErrNotRunning},
		{CodeAlreadyStart, vm.ErrAlreadyStarted},
		{CodeInvalid, vm.ErrInvalidConfig},
		{CodeInvalid, ErrRefused},
		{CodeDenied, ErrRefused},
		{CodeNotFound, ErrRefused},
		{CodeLimit, ErrRefused},
	} {
		err := (&WireError{Code: tc.code, Message: "because"}).Err()
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), "because") {
			t.Errorf("%s: %v, want %v", tc.code, err, tc.want)
		}
	}
	// And back: the service sends the code the client maps to the same error.
	for _, err := range []error{ErrPlatformMissing, ErrWindowsTooOld, ErrBootFilesAccess, ErrDiskRefused,
		ErrUnexpectedExit, ErrUnsupported, ErrOutOfResources, vm.ErrNotRunning} {
		back := (&WireError{Code: CodeOf(err), Message: err.Error()}).Err()
		if !errors.Is(back, err) {
			t.Errorf("%v does not survive the wire: %v", err, back)
		}
	}
	if CodeOf(Diagnose(OpStart, 0x80370102, "")) != CodePlatform {
		t.Error("a diagnosed HCS error does not map to its code")
	}
	if CodeOf(errors.New("boom")) != CodeInternal {
		t.Error("unknown errors are not internal")
	}
}

// scripted is a fake service that answers each request with the next of
// its responses and records the requests.
func scripted(t *testing.T, responses ...Response) (*Client, <-chan Request) {
	t.Helper()
	reqs := make(chan Request, 16)
	c := &Client{Dial: func(ctx context.Context) (net.Conn, error) {
		a, b := net.Pipe()
		go func() {
			defer b.Close()
			r := bufio.NewReader(b)
			for _, resp := range responses {
				var req Request
				if err := ReadMessage(r, &req); err != nil {
					return
				}
				reqs <- req
				if resp.V == 0 {
					resp.V = ProtocolVersion
				}
				if WriteMessage(b, resp) != nil {
					return
				}
			}
		}()
		return a, nil
	}}
	return c, reqs
}

const (
	id1 = "0e8bd9a0-1b7c-4d6f-9a3b-2c1d0e9f8a7b"
	rt1 = "5f6a7b8c-9d0e-4f1a-8b2c-3d4e5f6a7b8c"
)

func TestClientSession(t *testing.T) {
	ctx := context.Background()
	c, reqs := scripted(t,
		Response{VM: &VMInfo{ID: id1, RuntimeID: rt1, State: VMCreated}},
		Response{VM: &VMInfo{ID: id1, RuntimeID: rt1, State: VMRunning}},
		Response{Error: &WireError{Code: CodeNotRunning, Message: "not running"}},
		Response{VM: &VMInfo{ID: id1, RuntimeID: rt1, State: VMStopped}},
	)
	s, info, err := c.Create(ctx, CreateRequest{Kernel: `C:\k`})
	if err != nil || info.RuntimeID != rt1 || s.ID() != id1 {
		t.Fatalf("Create = %+v, %v", info, err)
	}
	defer s.Close()
	if r := <-reqs; r.Op != OpCreateVM || r.V != ProtocolVersion || r.Create.Kernel != `C:\k` {
		t.Errorf("create request %+v", r)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-reqs; r.Op != OpStartVM || r.ID != id1 {
		t.Errorf("start request %+v", r)
	}
	// A refusal keeps the session usable.
	if err := s.Stop(ctx); !errors.Is(err, vm.ErrNotRunning) {
		t.Fatalf("Stop = %v", err)
	}
	<-reqs
	if st, err := s.Status(ctx); err != nil || st.State != VMStopped {
		t.Fatalf("Status = %+v, %v", st, err)
	}
}

func TestClientRefusesBadAnswers(t *testing.T) {
	ctx := context.Background()
	for name, resp := range map[string]Response{
		"no ids":      {VM: &VMInfo{}},
		"bad ids":     {VM: &VMInfo{ID: "x", RuntimeID: "y"}},
		"old service": {V: 7, VM: &VMInfo{ID: id1, RuntimeID: rt1}},
		"no vm":       {},
	} {
		t.Run(name, func(t *testing.T) {
			c, _ := scripted(t, resp)
			if _, _, err := c.Create(ctx, CreateRequest{}); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestClientContext(t *testing.T) {
	// A service that never answers: the context ends the wait, and the
	// session refuses to be used again (a late answer would desynchronise it).
	a, b := net.Pipe()
	defer b.Close()
	go func() {
		r := bufio.NewReader(b)
		var req Request
		_ = ReadMessage(r, &req)
		_ = WriteMessage(b, Response{V: 1, VM: &VMInfo{ID: id1, RuntimeID: rt1}})
		for ReadMessage(r, &req) == nil {
		}
	}()
	c := &Client{Dial: func(context.Context) (net.Conn, error) { return a, nil }}
	s, _, err := c.Create(context.Background(), CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Start(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Start = %v", err)
	}
	if err := s.Stop(context.Background()); err == nil || !strings.Contains(err.Error(), "session") {
		t.Fatalf("Stop after a broken request = %v", err)
	}
}

func TestClientWait(t *testing.T) {
	c, reqs := scripted(t, Response{Exit: &Exit{Type: "GracefulExit"}})
	e, err := c.Wait(context.Background(), id1)
	if err != nil || !e.Graceful() {
		t.Fatalf("Wait = %+v, %v", e, err)
	}
	if r := <-reqs; r.Op != OpWaitVM || r.ID != id1 {
		t.Errorf("wait request %+v", r)
	}
}

// TestWireDiagnosisOnce: a diagnosis carried over the wire reads as the
// service's message with the diagnosis once (the service sends
// err.Error(), which already ends with it).
func TestWireDiagnosisOnce(t *testing.T) {
	sent := Diagnose(OpLoad, 0x8007007E, "computecore.dll")
	got := (&WireError{Code: CodeOf(sent), Message: sent.Error()}).Err()
	if !errors.Is(got, ErrPlatformMissing) {
		t.Fatalf("%v is not ErrPlatformMissing", got)
	}
	if n := strings.Count(got.Error(), ErrPlatformMissing.Error()); n != 1 {
		t.Errorf("the diagnosis appears %d times in %q", n, got)
	}
}

// TestWireInvalidOnce: a refusal for an invalid configuration names the
// reason once (the service's message starts with it).
func TestWireInvalidOnce(t *testing.T) {
	sent := fmt.Errorf("%w: 10000 CPUs", vm.ErrInvalidConfig)
	got := (&WireError{Code: CodeOf(sent), Message: sent.Error()}).Err()
	if !errors.Is(got, vm.ErrInvalidConfig) || !errors.Is(got, ErrRefused) {
		t.Fatalf("%v: want ErrRefused and vm.ErrInvalidConfig", got)
	}
	if n := strings.Count(got.Error(), vm.ErrInvalidConfig.Error()); n != 1 || !strings.HasSuffix(got.Error(), ": 10000 CPUs") {
		t.Errorf("%q: the reason %d times", got, n)
	}
}
