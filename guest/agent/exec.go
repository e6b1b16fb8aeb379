//go:build linux

package agent

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"

	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
	"github.com/airlock-sandbox/airlock/guest/api/execwire"
)

const (
	// stdinQueue bounds stdin chunks waiting for the task to read them;
	// beyond it the receive loop, and so the host, waits.
	stdinQueue = 8
	// drainGrace is how long output is still read after the main process
	// exited, before what the task left behind is killed.
	drainGrace = 250 * time.Millisecond
	// killGrace separates SIGTERM and SIGKILL at a task's deadline.
	killGrace = 2 * time.Second
	// closeGrace bounds waiting for output pipes after the kill; a pipe
	// still open then was passed outside the task and is closed under it.
	closeGrace = 2 * time.Second
)

// ctrlD ends a line discipline's input: with a terminal, close_stdin sends
// it instead of closing the PTY, which would hang up the task.
var ctrlD = []byte{4}

// ExecStream is one task's stream from the host (execwire.Stream; tests and
// the hostile agent wrap it). Its context ends when the host abandons the
// task.
type ExecStream interface {
	Context() context.Context
	Recv() (*agentv1.ExecRequest, error)
	Send(*agentv1.ExecEvent) error
	// SendOutput sends framed[execwire.HeaderSize:] as one output frame of
	// kind k, writing the header into framed's first bytes.
	SendOutput(k execwire.Kind, framed []byte) error
}

// ServeExec runs the tasks whose streams arrive on l (api.PortExec) until l
// is closed. A task that cannot start is answered with an Error event; a
// panic in one ends that task with an Internal error, not the agent.
func (s *Server) ServeExec(l net.Listener) error {
	go s.refillSpare() // the first task need not wait for its init
	return execwire.Serve(l, func(st *execwire.Stream) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = s.recovered("Exec", r)
			}
		}()
		return s.Exec(st)
	})
}

// Exec runs one task: the first request must be its start; then it streams
// stdin, signals and resizes in, started, output and the exit status out.
// An error returned means the task did not run (the caller reports it).
func (s *Server) Exec(stream ExecStream) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil {
		return agentv1.Errorf(agentv1.Code_INVALID_ARGUMENT, "exec: the first message must be start")
	}
	if s.tasks.Add(1) > maxTasks {
		s.tasks.Add(-1)
		return agentv1.Errorf(agentv1.Code_RESOURCE_EXHAUSTED, "exec: more than %d tasks running", maxTasks)
	}
	defer s.taskDone()

	sp, err := s.prepare(start)
	if err != nil {
		return err
	}
	if s.cfg.Tasks != nil {
		defer s.cfg.Tasks.Add(sp.env)()
	}
	p, err := s.start(sp)
	if err != nil {
		if derr := s.checkDir(sp); derr != nil {
			return derr // the child's chdir failed, not its exec
		}
		if !errors.As(err, new(*agentv1.Error)) {
			err = execError(sp.argv[0], err)
		}
		return err
	}
	// Only with debug logging: formatting the attributes costs every task.
	debug := s.log.Enabled(stream.Context(), slog.LevelDebug)
	if debug {
		s.log.Debug("task started", "task", sp.id, "pid", p.pgid, "path", sp.path, "root", sp.root, "tty", sp.tty)
	}
	if !sp.root {
		defer func() { go s.refillSpare() }()
	}
	t := &task{Server: s, sp: sp, p: p, stream: stream, started: time.Now()}
	exit, err := t.run()
	if debug {
		s.log.Debug("task ended", "task", sp.id, "pid", p.pgid, "code", exit.GetCode(), "signal", exit.GetSignal(), "timed_out", exit.GetTimedOut(), "err", err)
	}
	return err
}

// task is one running Exec.
type task struct {
	*Server
	sp      *spec
	p       *process
	stream  ExecStream
	started time.Time

	mu     sync.Mutex
	reaped bool // the main process is gone: its pgid may be reused
}

type waitResult struct {
	ws  syscall.WaitStatus
	err error
}

type stdinItem struct {
	data  []byte
	close bool
}

// run streams the task until its main process exits and its tree is gone,
// then sends Exit. Every goroutine it starts has ended when it returns,
// except the receive loop, which ends when the RPC does.
func (t *task) run() (*agentv1.Exit, error) {
	ctx := t.stream.Context()
	done := make(chan struct{}) // closed when the task is over
	stdout, stderr := newOutput(), newOutput()
	exitEv := make(chan *agentv1.ExecEvent, 1)
	started := make(chan struct{}) // closed once Started has gone: output may follow
	var sendErr error
	sent := make(chan struct{})
	go func() { // the only caller of stream.Send
		defer close(sent)
		send := func(ev *agentv1.ExecEvent) bool {
			if sendErr != nil {
				return false
			}
			sendErr = t.stream.Send(ev)
			return true
		}
		// Output is taken even after a failed send, so readers never stall.
		flush := func(o *output, k execwire.Kind) {
			data, _ := o.take()
			if len(data) <= room {
				return
			}
			if sendErr == nil {
				sendErr = t.stream.SendOutput(k, data)
			}
			o.recycle(data) // written: the buffer is free again
		}
		send(&agentv1.ExecEvent{Event: &agentv1.ExecEvent_Started{Started: &agentv1.Started{Pid: int32(t.p.pgid)}}})
		close(started)
		for {
			select {
			case <-stdout.ready:
				flush(stdout, execwire.KindStdout)
			case <-stderr.ready:
				flush(stderr, execwire.KindStderr)
			case ev := <-exitEv: // the readers are done: send what is left
				flush(stdout, execwire.KindStdout)
				flush(stderr, execwire.KindStderr)
				send(ev)
				return
			}
		}
	}()

	var readers sync.WaitGroup
	readers.Add(1)
	go stdout.pump(&readers, t.p.stdout, t.p.pty == nil, execwire.KindStdout, t.stream, started)
	if t.p.stderr != nil {
		readers.Add(1)
		go stderr.pump(&readers, t.p.stderr, true, execwire.KindStderr, t.stream, started)
	}
	readersDone := make(chan struct{})
	go func() { readers.Wait(); close(readersDone) }()

	var stdinQ chan stdinItem
	var writer sync.WaitGroup
	if t.p.stdin != nil {
		stdinQ = make(chan stdinItem, stdinQueue)
		writer.Add(1)
		go t.writeStdin(&writer, stdinQ, done)
	}
	go t.receive(stdinQ, done)

	waited := make(chan waitResult, 1)
	go func() {
		ws, err := t.p.wait()
		t.mu.Lock()
		t.reaped = true
		t.mu.Unlock()
		waited <- waitResult{ws, err}
	}()

	var deadline, grace <-chan time.Time
	if t.sp.timeout > 0 {
		tm := time.NewTimer(t.sp.timeout)
		defer tm.Stop()
		deadline = tm.C
	}
	timedOut := false
	ctxDone := ctx.Done()
	var res *waitResult
	for res == nil {
		select {
		case r := <-waited:
			res = &r
		case <-ctxDone:
			ctxDone = nil
			t.p.killTree()
		case <-deadline:
			deadline, timedOut = nil, true
			t.signal(syscall.SIGTERM)
			gt := time.NewTimer(killGrace)
			defer gt.Stop()
			grace = gt.C
		case <-grace:
			grace = nil
			t.p.killTree()
		}
	}
	elapsed := time.Since(t.started)

	// The main process is gone. Let its output drain, then end what it
	// left behind: that also closes the pipes the leftovers held.
	select {
	case <-readersDone:
	case <-time.After(drainGrace):
	}
	t.p.awaitInit(initExitGrace)
	t.p.killTree()
	t.p.collectInit()
	closeOutput := func() {
		t.p.stdout.Close() // unblocks a reader still going
		if t.p.stderr != nil {
			t.p.stderr.Close()
		}
	}
	select {
	case <-readersDone:
		// Both pipes are at their end: closing them waits until Exit
		// has left, which it need not wait for.
		defer closeOutput()
	case <-time.After(closeGrace):
		t.log.Warn("task output still open after kill; closing it", "task", t.sp.id)
		closeOutput()
		<-readersDone
	}
	close(done)
	if t.p.stdin != nil && t.p.stdin != t.p.pty {
		t.p.stdin.Close() // unblocks a write to a pipe nobody reads
	}
	writer.Wait()

	exit := &agentv1.Exit{TimedOut: timedOut, DurationMs: elapsed.Milliseconds(), Code: -1}
	if res.err != nil {
		t.log.Error("wait for task", "task", t.sp.id, "err", res.err)
	} else if res.ws.Signaled() {
		exit.Code, exit.Signal = 0, int32(res.ws.Signal())
	} else {
		exit.Code = int32(res.ws.ExitStatus())
	}
	exitEv <- &agentv1.ExecEvent{Event: &agentv1.ExecEvent_Exit{Exit: exit}}
	<-sent
	stdout.release()
	stderr.release()
	// The tree is dead. An empty cgroup goes back to the pool at once;
	// one whose leftovers were killed is removed once they are gone,
	// before the RPC ends.
	if t.p.cg != nil {
		if err := t.cgroups.release(t.p.cg); err != nil {
			t.log.Warn("task cgroup", "task", t.sp.id, "err", err)
		}
	}
	return exit, sendErr
}

// writeStdin feeds the task's stdin from q. After a write error (the task
// closed its stdin) it keeps draining q so the receive loop never blocks.
func (t *task) writeStdin(wg *sync.WaitGroup, q <-chan stdinItem, done <-chan struct{}) {
	defer wg.Done()
	w := t.p.stdin
	broken := false
	for {
		select {
		case <-done:
			return
		case it := <-q:
			switch {
			case broken:
			case it.close && w == t.p.pty:
				_, _ = w.Write(ctrlD)
			case it.close:
				w.Close()
				broken = true
			default:
				if _, err := w.Write(it.data); err != nil {
					broken = true
				}
			}
		}
	}
}

// receive handles the host's messages after start until the stream ends.
// The host never half-closes a task's stream: its end means the task is
// abandoned, and the stream's context, which ends with it, kills the task.
func (t *task) receive(q chan<- stdinItem, done <-chan struct{}) {
	push := func(it stdinItem) bool {
		if q == nil {
			return true // stdin was not asked for: ignore
		}
		select {
		case q <- it:
			return true
		case <-done:
			return false
		}
	}
	for {
		req, err := t.stream.Recv()
		if err != nil {
			return
		}
		switch m := req.GetMsg().(type) {
		case *agentv1.ExecRequest_Stdin:
			if len(m.Stdin) > 0 && !push(stdinItem{data: m.Stdin}) {
				return
			}
		case *agentv1.ExecRequest_CloseStdin:
			if m.CloseStdin && !push(stdinItem{close: true}) {
				return
			}
		case *agentv1.ExecRequest_Signal:
			if m.Signal >= 1 && m.Signal <= 64 {
				t.signal(syscall.Signal(m.Signal))
			} else {
				t.log.Debug("ignoring bad signal", "task", t.sp.id, "signal", m.Signal)
			}
		case *agentv1.ExecRequest_Resize:
			t.resize(m.Resize.GetRows(), m.Resize.GetCols())
		}
	}
}

// signal sends sig to the task's process group while its leader exists;
// after that the pgid could name someone else's group.
func (t *task) signal(sig syscall.Signal) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.reaped {
		t.p.signalGroup(sig)
	}
}

func (t *task) resize(rows, cols uint32) {
	if t.p.pty == nil || rows == 0 || cols == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.reaped {
		return // the PTY may be closed by now
	}
	_ = pty.Setsize(t.p.pty, &pty.Winsize{Rows: uint16(min(rows, maxTermDim)), Cols: uint16(min(cols, maxTermDim))})
}
