//go:build linux

package service

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-sandbox/airlock/app/sandbox"
	"github.com/airlock-sandbox/airlock/app/session"
	"github.com/airlock-sandbox/airlock/app/tasks"
	"github.com/airlock-sandbox/airlock/guest/api"
	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
	"github.com/airlock-sandbox/airlock/guest/api/execwire"
	"github.com/airlock-sandbox/airlock/vm"
	"github.com/airlock-sandbox/airlock/vm/vmtest"
)

// benchAgent is a guest agent that runs nothing: `true` exits at once and
// the shell command "out N" sends N bytes of stdout in benchChunk messages,
// so a benchmark measures the host's side of a task and nothing else.
type benchAgent struct {
	execwire.UnimplementedAgent
	off     chan struct{}
	offOnce sync.Once
}

// benchChunk is the size of one stdout message (the real agent sends what
// has piled up, up to 256 KiB, which under load is usually a pipe's 64 KiB).
var benchChunk = 64 << 10

func (a *benchAgent) Info(context.Context, *agentv1.InfoRequest) (*agentv1.InfoResponse, error) {
	return &agentv1.InfoResponse{AgentVersion: "bench"}, nil
}

func (a *benchAgent) SetTime(context.Context, *agentv1.SetTimeRequest) (*agentv1.SetTimeResponse, error) {
	return &agentv1.SetTimeResponse{}, nil
}

func (a *benchAgent) Shutdown(context.Context, *agentv1.ShutdownRequest) (*agentv1.ShutdownResponse, error) {
	a.offOnce.Do(func() { close(a.off) })
	return &agentv1.ShutdownResponse{}, nil
}

func (a *benchAgent) exec(stream *execwire.Stream) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	start := first.GetStart()
	if err := stream.Send(&agentv1.ExecEvent{Event: &agentv1.ExecEvent_Started{Started: &agentv1.Started{Pid: 2}}}); err != nil {
		return err
	}
	if n, ok := strings.CutPrefix(start.GetShell(), "out "); ok {
		left, _ := strconv.Atoi(n)
		data := make([]byte, execwire.HeaderSize+benchChunk)
		for i := range data {
			data[i] = 'a' + byte(i%26)
		}
		for left > 0 {
			k := min(left, benchChunk)
			if err := stream.SendOutput(execwire.KindStdout, data[:execwire.HeaderSize+k]); err != nil {
				return err
			}
			left -= k
		}
	}
	return stream.Send(&agentv1.ExecEvent{Event: &agentv1.ExecEvent_Exit{Exit: &agentv1.Exit{}}})
}

func benchBoot(ctx context.Context, g *vmtest.Guest) error {
	a := &benchAgent{off: make(chan struct{})}
	g.ServeAgent(ctx, a, a.exec, api.Ready{AgentVersion: "bench"}, a.off)
	return nil // a stopped machine is the benchmark's end, not a failure
}

// benchService opens a Service over benchAgent VMs and boots its VM.
func benchService(b *testing.B) *Service {
	b.Helper()
	dir := b.TempDir()
	s, err := Open(Config{
		StateDir: filepath.Join(dir, "state"), SettingsPath: filepath.Join(dir, "settings.json"),
		Image: sandbox.Image{Kernel: "k", Initrd: "i"},
		Start: func(ctx context.Context, o sandbox.Options) (session.Sandbox, error) {
			o.NewMachine = func(cfg vm.Config) (vm.Machine, error) { return vmtest.New(cfg, benchBoot), nil }
			o.GuestCA = nil
			return sandbox.Start(ctx, o)
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close(context.Background()) })
	if err := s.StartVM(context.Background()); err != nil {
		b.Fatal(err)
	}
	return s
}

func benchRunWait(b *testing.B, s *Service, req RunRequest) tasks.Task {
	ctx := context.Background()
	t, err := s.Run(ctx, req)
	if err != nil {
		b.Fatal(err)
	}
	t, err = s.Wait(ctx, t.ID)
	if err != nil || t.State != tasks.Exited {
		b.Fatalf("task %+v: %v", t, err)
	}
	return t
}

// BenchmarkServiceTrue is the host's share of a task round trip: Run and
// Wait of a task the agent ends at once.
func BenchmarkServiceTrue(b *testing.B) {
	s := benchService(b)
	benchRunWait(b, s, RunRequest{Argv: []string{"true"}})
	b.ResetTimer()
	for range b.N {
		benchRunWait(b, s, RunRequest{Argv: []string{"true"}})
	}
}

// BenchmarkServiceStdout16 runs 16 tasks at once, each sending 4 MiB of
// stdout, and reports the aggregate rate the service stores it at.
func BenchmarkServiceStdout16(b *testing.B) {
	const n, size = 16, 4 << 20
	s := benchService(b)
	benchRunWait(b, s, RunRequest{Argv: []string{"true"}})
	b.SetBytes(n * size)
	b.ResetTimer()
	for range b.N {
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				t := benchRunWait(b, s, RunRequest{Shell: fmt.Sprintf("out %d", size)})
				if t.Output.Stdout != size {
					b.Errorf("stored %d bytes, want %d", t.Output.Stdout, size)
				}
			})
		}
		wg.Wait()
	}
}

// BenchmarkServiceStdout1 is one task's 4 MiB, for comparison.
func BenchmarkServiceStdout1(b *testing.B) {
	const size = 4 << 20
	s := benchService(b)
	benchRunWait(b, s, RunRequest{Argv: []string{"true"}})
	b.SetBytes(size)
	b.ResetTimer()
	for range b.N {
		benchRunWait(b, s, RunRequest{Shell: fmt.Sprintf("out %d", size)})
	}
}
