package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/guest/api"
	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
	"github.com/airlock-sandbox/airlock/guest/api/execwire"
)

// Spec describes one task. Exactly one of Argv and Shell is set.
type Spec struct {
	ID      string
	Argv    []string
	Shell   string
	Env     []string
	Cwd     string
	Root    bool
	TTY     bool
	Rows    uint16
	Cols    uint16
	Timeout time.Duration
}

// Size is a terminal size.
type Size struct{ Rows, Cols uint16 }

// Stdio connects a task to the caller. Nil readers and writers mean none:
// no stdin (the task reads /dev/null), output discarded.
type Stdio struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Resize, when not nil, delivers terminal size changes for TTY tasks.
	Resize <-chan Size
	// Signal, when not nil, delivers signals for the task's process group.
	Signal <-chan int
	// Started, when not nil, is called with the task's pid in the guest.
	Started func(pid int)
}

// Exit is how a task ended.
type Exit struct {
	// Code is the exit status of a task that exited.
	Code int
	// Signal is the signal that ended the task, or 0.
	Signal int
	// TimedOut is set when the guest ended the task at its deadline.
	TimedOut bool
	// Duration is the task's run time measured by the guest.
	Duration time.Duration
}

// ShellCode maps an Exit to a shell-style status: the code, or 128+signal.
func (e Exit) ShellCode() int {
	if e.Signal != 0 {
		return 128 + e.Signal
	}
	return e.Code
}

// stdinChunk is the most stdin one message carries. A read of stdin sends
// what it got at once, so a small chunk only splits big input: each
// message is a decode, a queue hand-off and a pipe write in the guest, and
// 256 KiB moves input into a task faster than 32 KiB under TCG, where 1 MiB
// is no better (docs/performance.md, Figures behind the code).
const stdinChunk = 256 << 10

// maxSignal is the highest Linux signal number (SIGRTMAX).
const maxSignal = 64

// maxDurationMs is the longest run time a time.Duration holds: a larger one
// from the guest would overflow into a negative duration.
const maxDurationMs = int64(math.MaxInt64 / int64(time.Millisecond))

// ErrBadExit means the agent reported an exit status no process can have.
var ErrBadExit = errors.New("guest agent reported an impossible exit status")

// Exec runs a task and streams its input and output until it exits. When ctx
// is cancelled the call is abandoned and the guest kills the task's tree.
//
// Errors: a task the guest refused or could not start is the guest's
// *agentv1.Error (agentv1.ErrNotFound: command not found, and so on); a
// broken transport matches agentv1.ErrUnavailable, an abandoned call
// ErrCanceled or ErrDeadlineExceeded; a guest breaking the protocol is
// ErrNoExit, ErrBadExit or execwire.ErrFrame. Each is wrapped ("exec: ...").
func (c *Client) Exec(ctx context.Context, spec Spec, stdio Stdio) (Exit, error) {
	if (len(spec.Argv) == 0) == (spec.Shell == "") {
		return Exit{}, errors.New("exec: exactly one of argv and shell is needed")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := &agentv1.ExecStart{
		Id: spec.ID, Argv: spec.Argv, Shell: spec.Shell, Env: spec.Env, Cwd: spec.Cwd,
		Root: spec.Root, Tty: spec.TTY, Rows: uint32(spec.Rows), Cols: uint32(spec.Cols),
		TimeoutMs: spec.Timeout.Milliseconds(), Stdin: stdio.Stdin != nil,
	}
	wbuf, err := execwire.AppendMessage(nil, execwire.KindRequest, &agentv1.ExecRequest{Msg: &agentv1.ExecRequest_Start{Start: start}})
	if err != nil {
		return Exit{}, fmt.Errorf("exec: start: %w", err)
	}
	conn, err := c.startTask(ctx, wbuf)
	if err != nil {
		return Exit{}, c.streamErr(ctx, err)
	}
	defer conn.Close()
	// Closing the stream is how a task is abandoned, and what ends a read
	// or write waiting on a guest that stopped answering.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	// The next task's stream opens while this one runs.
	c.refillSpare()

	// Requests come from up to three goroutines; each is one write.
	var sendMu sync.Mutex
	send := func(r *agentv1.ExecRequest) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		b, err := execwire.AppendMessage(wbuf[:0], execwire.KindRequest, r)
		if err != nil {
			return err
		}
		wbuf = b
		_, err = conn.Write(b)
		return err
	}
	if stdio.Stdin != nil {
		go pumpStdin(stdio.Stdin, send)
	}
	if stdio.Resize != nil || stdio.Signal != nil {
		go pumpControl(ctx, stdio.Resize, stdio.Signal, send)
	}
	h := events{stdio: stdio, out: orDiscard(stdio.Stdout), errOut: orDiscard(stdio.Stderr)}
	var bp *[]byte // taken at the first output: a task without any needs none
	defer func() {
		if bp != nil {
			copyBufs.Put(bp)
		}
	}()
	r := execwire.NewReader(conn)
	for {
		k, n, err := r.Next()
		// io.EOF itself is the guest ending the stream; a transport that
		// failed says so with an error of its own (which may wrap io.EOF).
		if err == io.EOF && ctx.Err() == nil {
			return Exit{}, ErrNoExit
		}
		if err != nil {
			return Exit{}, c.streamErr(ctx, err)
		}
		switch k {
		case execwire.KindStdout, execwire.KindStderr:
			w, name := h.out, "stdout"
			if k == execwire.KindStderr {
				w, name = h.errOut, "stderr"
			}
			if bp == nil {
				bp = copyBufs.Get().(*[]byte)
			}
			if err := r.Copy(w, n, *bp); err != nil {
				if we := (*execwire.WriteError)(nil); errors.As(err, &we) {
					return Exit{}, fmt.Errorf("exec: write %s: %w", name, we.Err)
				}
				return Exit{}, c.streamErr(ctx, err)
			}
		case execwire.KindEvent:
			var ev agentv1.ExecEvent
			if err := r.Message(n, &ev); err != nil {
				return Exit{}, c.streamErr(ctx, err)
			}
			if exit, done, err := h.handle(&ev); done || err != nil {
				return exit, err
			}
		default:
			return Exit{}, c.streamErr(ctx, fmt.Errorf("%w: a %s frame from the guest", execwire.ErrFrame, k))
		}
	}
}

// spareDialTimeout bounds the dial of a spare task stream.
const spareDialTimeout = 30 * time.Second

// startTask sends a task's framed start request on a stream: the spare
// when there is one, else a new one. A spare that cannot take the request
// (its agent is gone: it restarted, and the spare was the old agent's) is
// closed and the request goes on a new stream; the spare's agent never saw
// it. While ctx lasts, closing ctx's stream is the caller's to arrange.
func (c *Client) startTask(ctx context.Context, start []byte) (net.Conn, error) {
	if conn := c.takeSpare(); conn != nil {
		stop := context.AfterFunc(ctx, func() { conn.Close() })
		n, err := conn.Write(start)
		stop()
		if err == nil && ctx.Err() == nil {
			return conn, nil
		}
		conn.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if n > 0 {
			return nil, fmt.Errorf("start: %w", err)
		}
	}
	conn, err := c.dial(ctx, api.PortExec)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	_, err = conn.Write(start)
	stop()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("start: %w", err)
	}
	return conn, nil
}

// takeSpare returns the spare task stream, or nil.
func (c *Client) takeSpare() net.Conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	conn := c.spare
	c.spare = nil
	return conn
}

// refillSpare dials a spare task stream in the background unless there is
// one or one is being dialled: the next task then does not wait for the
// transport's round trip of opening a stream. A failed dial leaves no
// spare; the next task dials its own. The guest holds a spare's stream
// open, waiting for its start, as long as the host keeps it.
func (c *Client) refillSpare() {
	c.mu.Lock()
	if c.closed || c.spare != nil || c.dialing {
		c.mu.Unlock()
		return
	}
	c.dialing = true
	c.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(c.ctx, spareDialTimeout)
		conn, err := c.dial(ctx, api.PortExec)
		cancel()
		c.mu.Lock()
		c.dialing = false
		if err == nil && !c.closed && c.spare == nil {
			c.spare, conn = conn, nil
		}
		c.mu.Unlock()
		if conn != nil {
			conn.Close()
		}
	}()
}

// copyBufs carry task output from the stream to the caller's writers.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// streamErr says why a task's stream failed: the call was abandoned, the
// guest broke the protocol, or the transport broke.
func (c *Client) streamErr(ctx context.Context, err error) error {
	return fmt.Errorf("exec: %w", callErr(ctx, err))
}

// events hands what the guest sends about one task to the caller.
type events struct {
	stdio       Stdio
	out, errOut io.Writer
}

// handle takes one event from the guest; done is set by the exit status,
// which is checked (the guest is not trusted to report a possible one), or
// by an error the guest reports instead.
func (h *events) handle(ev *agentv1.ExecEvent) (exit Exit, done bool, err error) {
	switch e := ev.GetEvent().(type) {
	case *agentv1.ExecEvent_Started:
		if h.stdio.Started != nil {
			h.stdio.Started(int(e.Started.GetPid()))
		}
	case *agentv1.ExecEvent_Error:
		return Exit{}, true, fmt.Errorf("exec: %w", guestError(e.Error))
	case *agentv1.ExecEvent_Exit:
		x := e.Exit
		if c, sig := x.GetCode(), x.GetSignal(); c < 0 || c > 255 || sig < 0 || sig > maxSignal || x.GetDurationMs() < 0 || x.GetDurationMs() > maxDurationMs {
			return Exit{}, true, fmt.Errorf("exec: %w (code %d, signal %d, duration %d ms)", ErrBadExit, c, sig, x.GetDurationMs())
		}
		return Exit{
			Code: int(x.GetCode()), Signal: int(x.GetSignal()), TimedOut: x.GetTimedOut(),
			Duration: time.Duration(x.GetDurationMs()) * time.Millisecond,
		}, true, nil
	}
	return Exit{}, false, nil
}

func pumpStdin(r io.Reader, send func(*agentv1.ExecRequest) error) {
	buf := make([]byte, stdinChunk)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			chunk := append([]byte(nil), buf[:n]...)
			if send(&agentv1.ExecRequest{Msg: &agentv1.ExecRequest_Stdin{Stdin: chunk}}) != nil {
				return
			}
		}
		if err != nil {
			_ = send(&agentv1.ExecRequest{Msg: &agentv1.ExecRequest_CloseStdin{CloseStdin: true}})
			return
		}
	}
}

func pumpControl(ctx context.Context, resize <-chan Size, sig <-chan int, send func(*agentv1.ExecRequest) error) {
	for {
		var req *agentv1.ExecRequest
		select {
		case <-ctx.Done():
			return
		case s, ok := <-resize:
			if !ok {
				resize = nil
				continue
			}
			req = &agentv1.ExecRequest{Msg: &agentv1.ExecRequest_Resize{Resize: &agentv1.Resize{Rows: uint32(s.Rows), Cols: uint32(s.Cols)}}}
		case n, ok := <-sig:
			if !ok {
				sig = nil
				continue
			}
			req = &agentv1.ExecRequest{Msg: &agentv1.ExecRequest_Signal{Signal: int32(n)}}
		}
		if send(req) != nil {
			return
		}
	}
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
