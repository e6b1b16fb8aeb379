//go:build linux

// Command hostileagent is a guest agent that attacks the host. It is the
// real guest's init (guest/boot) with a different agent in it
// (boot.RunAgent): tests/robust packs it as /init into a copy of the real
// initramfs, so it runs in the real kernel, on the real transport, against
// the real host code.
//
// On a guest booted to park it parks first, as the real agent does. What
// it does is chosen on the kernel command line with airlock.hostile=:
//
//	garbage-park   writes random bytes instead of the parked record
//	               (api.Parked), on a guest booted to park
//	garbage-hello  writes random bytes instead of the multiplexer's hello
//	bogus-ready    sends malformed, oversized and dribbled readiness
//	               messages before a valid one
//	mute           announces readiness but never answers an agent call or a task
//	(anything else) a working agent whose tasks misbehave on request:
//	               argv[0] "hostile:<what>" (see misbehave; "restart" returns
//	               to init, which runs this agent again), any other
//	               command runs as in the real agent; its agent calls are
//	               answered right, each followed by a stray answer (see
//	               serveCalls)
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/guest/agent"
	"github.com/airlock-sandbox/airlock/guest/api"
	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
	"github.com/airlock-sandbox/airlock/guest/api/execwire"
	"github.com/airlock-sandbox/airlock/guest/boot"
	"github.com/airlock-sandbox/airlock/guest/console"
	"github.com/airlock-sandbox/airlock/guest/egress"
	"github.com/airlock-sandbox/airlock/guest/mux"
	"github.com/airlock-sandbox/airlock/guest/transport"
)

func main() {
	boot.RunAgent(func(_ context.Context, _ *slog.Logger, opts agent.Options) error {
		err := run(opts)
		if err != nil {
			fmt.Fprintln(os.Stderr, "hostileagent:", err)
		}
		return err
	})
}

func mode() string {
	b, _ := os.ReadFile("/proc/cmdline")
	for _, w := range strings.Fields(string(b)) {
		if v, ok := strings.CutPrefix(w, "airlock.hostile="); ok {
			return v
		}
	}
	return ""
}

// port opens the virtio-serial port that carries the multiplexer.
func port() (*os.File, error) {
	for range 100 {
		name, err := transport.FindSerialPort("/sys", api.SerialPortName)
		if err == nil {
			return os.OpenFile(filepath.Join("/dev", name), os.O_RDWR, 0)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, fmt.Errorf("no serial port %s", api.SerialPortName)
}

func run(opts agent.Options) error {
	log := console.NewLogger(os.Stderr, "hostile", true)
	m := mode()
	log.Info("hostile agent", "mode", m)
	f, err := port()
	if err != nil {
		return err
	}
	defer f.Close() // returning, the agent lets go of the port for the next one
	log.Info("port open")
	if m == "garbage-park" {
		// Where the host waits for the parked record (api.Parked).
		junk := make([]byte, 1<<20)
		rand.Read(junk)
		f.Write(junk)
		select {}
	}
	if opts.Park != nil {
		// Parked as the real agent does (the host may have saved this
		// machine there): what is under test comes after.
		w, err := transport.Park(f)
		if err != nil {
			return err
		}
		opts.Park(w)
	}
	if m == "garbage-hello" {
		junk := make([]byte, 1<<20)
		rand.Read(junk)
		f.Write(junk)
		select {} // keep the port open; the host must give up by itself
	}
	// A guest that opens as many streams as it likes: the host's limits
	// are what is under test, not the guest's.
	sess := mux.Server(f, mux.Config{MaxStreams: 1 << 20, AcceptBacklog: 1024})
	l, err := sess.Listen(api.PortAgent)
	if err != nil {
		return err
	}
	if m == "mute" {
		for _, port := range []uint32{api.PortAgent, api.PortExec} {
			ml := l
			if port != api.PortAgent {
				if ml, err = sess.Listen(port); err != nil {
					return err
				}
			}
			go func() {
				for {
					c, err := ml.Accept()
					if err != nil {
						return
					}
					go io.Copy(io.Discard, c) // read everything, answer nothing
				}
			}()
		}
		if err := agent.AnnounceReady(context.Background(), sess.Dial, ready()); err != nil {
			return err
		}
		<-sess.Done()
		return sess.Err()
	}
	// The proxies, so that ordinary tasks have a network like in the real guest.
	fwd := egress.New(egress.Config{Dial: sess.Dial, Logger: log})
	ectx, stopEgress := context.WithCancel(context.Background())
	defer stopEgress()
	if wait, err := fwd.Start(ectx, egress.DefaultRoutes()); err != nil {
		log.Error("egress", "err", err)
	} else {
		// Closed before a restarted agent binds the same ports.
		defer func() { stopEgress(); wait() }()
	}
	cfg := agent.Config{Transport: api.TransportSerial, Logger: log, PowerOff: func(bool) error { return nil }, Reaper: opts.Reaper,
		UID: opts.Boot.UID, GID: opts.Boot.GID}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		cfg.CgroupRoot = agent.CgroupTasks
	}
	h := &hostile{Server: agent.New(cfg), sess: sess, port: f, log: log}
	go h.serveCalls(l)
	el, err := sess.Listen(api.PortExec)
	if err != nil {
		return err
	}
	go h.serveExec(el)
	if m == "bogus-ready" {
		bogusReady(sess.Dial, log)
	}
	r := ready()
	r.AgentInstance = h.Server.Instance()
	if err := agent.AnnounceReady(context.Background(), sess.Dial, r); err != nil {
		// As the real agent: after a restart the host takes the new
		// agent's hello and does not wait for readiness.
		log.Error("readiness", "err", err)
	} else {
		log.Info("ready")
	}
	<-sess.Done()
	return sess.Err()
}

// serveCalls answers the agent calls as the real agent does, on streams
// the host keeps, but follows every answer with a stray one that no call
// asked for: an error. The host must end a stream that carries one and
// make its next call on a new stream; a host that took the stray for the
// next call's answer would fail every health check after the first, and
// lose the VM.
func (h *hostile) serveCalls(l net.Listener) {
	stray, _ := execwire.AppendMessage(nil, execwire.KindEvent, &agentv1.AgentResponse{Result: &agentv1.AgentResponse_Error{
		Error: &agentv1.Error{Code: agentv1.Code_FAILED_PRECONDITION, Message: "hostile: a stray answer"},
	}})
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			r := execwire.NewReader(c)
			for {
				k, n, err := r.Next()
				var req agentv1.AgentRequest
				if err != nil || k != execwire.KindRequest || r.Message(n, &req) != nil {
					return
				}
				b, _ := execwire.AppendMessage(nil, execwire.KindEvent, execwire.Dispatch(context.Background(), h.Server, &req, nil))
				if _, err := c.Write(append(b, stray...)); err != nil {
					return
				}
			}
		}()
	}
}

func ready() api.Ready {
	return api.Ready{AgentVersion: "hostile", BootMillis: agent.Uptime().Milliseconds()}
}

type dialer func(context.Context, uint32) (net.Conn, error)

// bogusReady sends readiness messages the host must refuse, one per
// connection, before the real one.
func bogusReady(dial dialer, log *slog.Logger) {
	send := func(what string, write func(net.Conn)) {
		c, err := dial(context.Background(), api.PortReady)
		if err != nil {
			log.Error("bogus ready", "what", what, "err", err)
			return
		}
		write(c)
		c.Close()
	}
	encode := func(r api.Ready) []byte {
		b, _ := r.MarshalVT()
		return b
	}
	send("not protobuf", func(c net.Conn) { c.Write([]byte("hello, host\n")) })
	send("truncated", func(c net.Conn) {
		b := encode(api.Ready{AgentVersion: "hostile", BootMillis: 1})
		c.Write(b[:len(b)-3])
	})
	send("no version", func(c net.Conn) { c.Write(encode(api.Ready{BootMillis: 1, AgentInstance: 2})) })
	send("long version", func(c net.Conn) { c.Write(encode(api.Ready{AgentVersion: strings.Repeat("v", 3000), BootMillis: 1})) })
	send("oversized", func(c net.Conn) {
		c.SetWriteDeadline(time.Now().Add(6 * time.Second))
		c.Write(bytes.Repeat([]byte{0x18, 0x01}, 4<<20)) // the host stops reading at 4 KiB
	})
	send("dribble", func(c net.Conn) {
		// One byte a second: the host's 5 s deadline must end it.
		for range 8 {
			if _, err := c.Write([]byte(" ")); err != nil {
				return
			}
			time.Sleep(time.Second)
		}
	})
}

// hostile serves the real agent, except for tasks whose argv[0] starts with
// "hostile:".
type hostile struct {
	*agent.Server
	sess *mux.Session
	port *os.File
	log  *slog.Logger
}

// replay hands the first message, already read, to the real Exec.
type replay struct {
	agent.ExecStream
	first *agentv1.ExecRequest
}

func (r *replay) Recv() (*agentv1.ExecRequest, error) {
	if f := r.first; f != nil {
		r.first = nil
		return f, nil
	}
	return r.ExecStream.Recv()
}

// task is one task's stream, with its connection for writes outside the
// protocol.
type task struct {
	*execwire.Stream
	conn net.Conn
}

func (h *hostile) serveExec(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			t := task{execwire.NewStream(c), c}
			defer t.Close()
			if err := h.exec(t); err != nil {
				t.SendError(err)
			}
		}()
	}
}

func (h *hostile) exec(t task) error {
	first, err := t.Recv()
	if err != nil {
		return err
	}
	argv := first.GetStart().GetArgv()
	if len(argv) == 0 || !strings.HasPrefix(argv[0], "hostile:") {
		return h.Server.Exec(&replay{t.Stream, first})
	}
	what := strings.TrimPrefix(argv[0], "hostile:")
	n := 0
	if len(argv) > 1 {
		n, _ = strconv.Atoi(argv[1])
	}
	h.log.Info("misbehaving", "what", what, "n", n)
	return h.misbehave(t, what, n)
}

// stdout sends b as task output.
func (t task) stdout(b []byte) error {
	return t.SendOutput(execwire.KindStdout, append(make([]byte, execwire.HeaderSize), b...))
}

func exit(code int) *agentv1.ExecEvent {
	return &agentv1.ExecEvent{Event: &agentv1.ExecEvent_Exit{Exit: &agentv1.Exit{Code: int32(code)}}}
}

// waitHost reads until the host closes the task's stream.
func (t task) waitHost() {
	for {
		if _, err := t.Recv(); err != nil {
			return
		}
	}
}

// misbehave runs one attack. n is its size where it has one.
func (h *hostile) misbehave(t task, what string, n int) error {
	t.Send(&agentv1.ExecEvent{Event: &agentv1.ExecEvent_Started{Started: &agentv1.Started{Pid: 4242}}})
	switch what {
	case "oversize":
		// One frame of n MiB, over the host's 4 MiB limit, written past
		// the sender's own check.
		b := make([]byte, execwire.HeaderSize+n<<20)
		execwire.PutHeader(b, execwire.KindStdout, n<<20)
		_, err := t.conn.Write(b)
		return err
	case "flood":
		// Output as fast as the transport takes it, until the host hangs up.
		chunk := append(make([]byte, execwire.HeaderSize), bytes.Repeat([]byte("flood "), 64<<10/6)...)
		for {
			if err := t.SendOutput(execwire.KindStdout, chunk); err != nil {
				return err
			}
		}
	case "hang":
		// Started, then nothing ever again.
		t.waitHost()
		return nil
	case "noexit":
		t.stdout([]byte("half a task\n"))
		return nil
	case "bogus-exit":
		// An exit status no process can have.
		return t.Send(&agentv1.ExecEvent{Event: &agentv1.ExecEvent_Exit{Exit: &agentv1.Exit{Code: -5, Signal: 1 << 30, DurationMs: -1}}})
	case "panic-code":
		// A code the contract does not have, with a 1 MiB message.
		return t.Send(&agentv1.ExecEvent{Event: &agentv1.ExecEvent_Error{Error: &agentv1.Error{Code: 9999, Message: strings.Repeat("e", 1<<20)}}})
	case "bad-kind":
		// A frame of a kind the protocol does not have.
		b := make([]byte, execwire.HeaderSize+3)
		execwire.PutHeader(b, 9, 3)
		t.conn.Write(b)
		t.waitHost()
		return nil
	case "bad-event":
		// An event frame that is not protobuf.
		b := append(make([]byte, execwire.HeaderSize), 0xff, 0xff, 0xff, 0xff)
		execwire.PutHeader(b, execwire.KindEvent, 4)
		t.conn.Write(b)
		t.waitHost()
		return nil
	case "cut-frame":
		// Half a frame, then the stream ends.
		b := make([]byte, execwire.HeaderSize+10)
		execwire.PutHeader(b, execwire.KindStdout, 1000)
		t.conn.Write(b)
		return nil
	case "streams":
		t.stdout(h.streams(n))
		return t.Send(exit(0))
	case "slowloris":
		t.stdout(h.slowloris(n, func(opened, refused int64) {
			t.stdout(fmt.Appendf(nil, "dialled: %d opened, %d refused\n", opened, refused))
		}))
		return t.Send(exit(0))
	case "restart":
		// The agent returns, as the real one does when its transport
		// fails: init runs it again, and the new one greets the host on
		// the same VM (a fresh hello, which the host must take). This
		// task ends first, and the session is closed only once the host
		// has hung up on it: closing cuts a write in progress, the host
		// takes a hello only where a frame starts, and it runs a task
		// whose start it never heard of again.
		if err := t.Send(exit(0)); err != nil {
			return err
		}
		t.waitHost()
		h.log.Info("returning to init")
		h.sess.Close()
		return nil
	case "garbage":
		// Random bytes on the transport, in the middle of the host's frames.
		junk := make([]byte, 64<<10)
		rand.Read(junk)
		h.port.Write(junk)
		t.waitHost()
		return nil
	}
	return agentv1.Errorf(agentv1.Code_INVALID_ARGUMENT, "unknown misbehaviour %q", what)
}

// streams opens n streams to the host's HTTP egress port at once and holds
// them, sending nothing, for 15 s or until the host closes them. It reports
// how many opened, how many were refused and how many the host closed.
func (h *hostile) streams(n int) []byte {
	var opened, closedByHost, refused atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			c, err := h.sess.Dial(ctx, api.PortEgressHTTP)
			cancel()
			if err != nil {
				refused.Add(1)
				return
			}
			opened.Add(1)
			defer c.Close()
			c.SetReadDeadline(time.Now().Add(15 * time.Second))
			if _, err := io.Copy(io.Discard, c); err == nil {
				closedByHost.Add(1)
			}
		}()
	}
	wg.Wait()
	return fmt.Appendf(nil, "opened=%d refused=%d closed_by_host=%d\n", opened.Load(), refused.Load(), closedByHost.Load())
}

// slowloris opens n egress connections and sends each a request head one
// byte a second, forever. Once every dial has been answered it calls dialled
// with how many opened and how many the host refused; at the end it reports
// how many of the opened ones the host cut off within 60 s.
func (h *hostile) slowloris(n int, dialled func(opened, refused int64)) []byte {
	var cut, opened, refused atomic.Int64
	var dials, conns sync.WaitGroup
	head := []byte("GET http://files.test/ HTTP/1.1\r\nHost: files.test\r\nX-Slow: ")
	for range n {
		dials.Add(1)
		conns.Add(1)
		go func() {
			defer conns.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			c, err := h.sess.Dial(ctx, api.PortEgressHTTP)
			cancel()
			if err != nil {
				refused.Add(1)
				dials.Done()
				return
			}
			opened.Add(1)
			dials.Done()
			defer c.Close()
			conns.Add(1)
			go func() {
				defer conns.Done()
				// The host answers (408/400) or hangs up: either is a cut.
				c.SetReadDeadline(time.Now().Add(60 * time.Second))
				if _, err := io.Copy(io.Discard, c); !os.IsTimeout(err) {
					cut.Add(1)
				}
				c.Close()
			}()
			c.SetWriteDeadline(time.Now().Add(60 * time.Second))
			for i := 0; i < 60; i++ {
				b := head
				if i > 0 {
					b = []byte("x")
				}
				if _, err := c.Write(b); err != nil {
					return
				}
				time.Sleep(time.Second)
			}
		}()
	}
	dials.Wait()
	dialled(opened.Load(), refused.Load())
	conns.Wait()
	return fmt.Appendf(nil, "opened=%d refused=%d cut=%d\n", opened.Load(), refused.Load(), cut.Load())
}
