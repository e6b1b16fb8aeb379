package qemu

// QMP, QEMU's machine protocol, is one JSON object per line each way: QEMU
// greets, the client answers qmp_capabilities, and from then on each
// command gets one reply carrying the id it was sent with, while events
// (QEMU's own announcements: STOP, RESUME, SHUTDOWN...) may arrive between
// a command and its reply.
//
// What QEMU sends is untrusted: QEMU emulates the guest's devices, and a
// guest that takes it over speaks for it. So a line is bounded, so is the
// number of messages read while waiting for one reply, QEMU's words are
// made printable before they reach an error, and a stream that stops
// making sense is not read again.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"
)

const (
	// qmpMaxLine bounds one reply or event. The replies to the commands
	// used here are well under a few KiB.
	qmpMaxLine = 1 << 20
	// qmpMaxSkipped bounds the messages (events, replies to commands
	// given up on) read while waiting for one reply.
	qmpMaxSkipped = 1000
	// qmpKeptEvents is how many skipped events are kept for diagnostics,
	// and qmpKeptData how much of each one's data.
	qmpKeptEvents = 8
	qmpKeptData   = 1 << 10
)

var (
	// errQMPClosed is QEMU having closed the connection: it quit or
	// died.
	errQMPClosed = errors.New("QEMU closed the connection")
	// errQMPLineTooLong is a line from QEMU over qmpMaxLine.
	errQMPLineTooLong = errors.New("line from QEMU over 1 MiB")
)

// qmp is a QMP client over one connection to QEMU's monitor, already
// connected: the host keeps one end of a socket pair and QEMU inherits the
// other, so no socket path exists for anyone else to reach. Commands run
// one at a time.
type qmp struct {
	c *net.UnixConn
	r *bufio.Reader

	mu      sync.Mutex // one command at a time; guards the fields below
	nextID  uint64
	partial []byte // a line read in part when a command was given up on
	broken  error  // why the stream can no longer be trusted
	version qmpVersion
	events  []qmpEvent // the last ones skipped, oldest first
}

// qmpVersion is the QEMU version from the greeting, for features that
// depend on it.
type qmpVersion struct {
	Major, Minor, Micro int
	Package             string // the distribution's build, e.g. "Debian 1:7.2+dfsg-7"
}

// qmpEvent is an event skipped while waiting for a reply, kept because
// what QEMU announced (SHUTDOWN, GUEST_PANICKED) often says why a command
// failed.
type qmpEvent struct {
	Event string          `json:"event"`
	Data  json.RawMessage `json:"data,omitempty"` // nil when over qmpKeptData
}

// qmpError is an error reply from QEMU. Class is the error's kind
// ("GenericError", "CommandNotFound", "DeviceNotFound"...), for callers
// that branch on it; Desc is QEMU's message.
type qmpError struct {
	Class string `json:"class"`
	Desc  string `json:"desc"`
}

func (e *qmpError) Error() string {
	return printable(e.Class, 64) + ": " + printable(e.Desc, 512)
}

// qmpMessage is any message from QEMU: the greeting (QMP), a reply (id
// and return or error) or an event.
type qmpMessage struct {
	QMP *struct {
		Version struct {
			QEMU struct {
				Major int `json:"major"`
				Minor int `json:"minor"`
				Micro int `json:"micro"`
			} `json:"qemu"`
			Package string `json:"package"`
		} `json:"version"`
	} `json:"QMP"`
	ID     json.RawMessage `json:"id"`
	Return json.RawMessage `json:"return"`
	Error  *qmpError       `json:"error"`
	Event  string          `json:"event"`
	Data   json.RawMessage `json:"data"`
}

// qmpCommand is a command as sent.
type qmpCommand struct {
	Execute   string `json:"execute"`
	Arguments any    `json:"arguments,omitempty"`
	ID        uint64 `json:"id"`
}

// newQMP reads QEMU's greeting and enters command mode, bounded by ctx.
// The connection is the client's from the call on: it is closed if the
// handshake fails.
func newQMP(ctx context.Context, c *net.UnixConn) (*qmp, error) {
	q := &qmp{c: c, r: bufio.NewReader(c), nextID: 1}
	if err := q.greet(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("qemu: qmp: greeting: %w", err)
	}
	if err := q.execute(ctx, "qmp_capabilities", nil, nil); err != nil {
		c.Close()
		return nil, err
	}
	return q, nil
}

func (q *qmp) greet(ctx context.Context) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	defer q.bind(ctx)()
	line, err := q.readLine(ctx)
	if err != nil {
		return err
	}
	var m qmpMessage
	if err := json.Unmarshal(line, &m); err != nil || m.QMP == nil {
		return fmt.Errorf("not a QMP greeting: %.80q", line)
	}
	v := m.QMP.Version
	q.version = qmpVersion{Major: v.QEMU.Major, Minor: v.QEMU.Minor, Micro: v.QEMU.Micro, Package: v.Package}
	return nil
}

// execute runs cmd with args (nil for none; else anything that marshals to
// a JSON object) and decodes the reply's return value into result, unless
// result is nil. An error reply is a *qmpError.
//
// A command given up on (ctx done) may still run in QEMU; its reply, if
// it comes, is skipped by the next command.
func (q *qmp) execute(ctx context.Context, cmd string, args, result any) error {
	if err := q.roundTrip(ctx, cmd, args, result, nil); err != nil {
		return fmt.Errorf("qemu: qmp: %s: %w", cmd, err)
	}
	return nil
}

// sendFD passes f to QEMU under name, for commands that take "fd:name"
// (migrate, add-fd users). The descriptor travels as SCM_RIGHTS on the
// same message as the getfd command: QEMU takes the descriptors that came
// with the bytes of a command, so sending it apart could attach it to the
// wrong one. QEMU keeps its own copy; the caller may close f on return.
func (q *qmp) sendFD(ctx context.Context, name string, f *os.File) error {
	if f == nil {
		return fmt.Errorf("qemu: qmp: getfd %s: no file", name)
	}
	if err := q.roundTrip(ctx, "getfd", map[string]string{"fdname": name}, nil, f); err != nil {
		return fmt.Errorf("qemu: qmp: getfd %s: %w", name, err)
	}
	return nil
}

// Close closes the connection, which also ends a command waiting for its
// reply.
func (q *qmp) Close() error { return q.c.Close() }

// recentEvents is a copy of the last events skipped while waiting for
// replies, oldest first.
func (q *qmp) recentEvents() []qmpEvent {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]qmpEvent(nil), q.events...)
}

func (q *qmp) roundTrip(ctx context.Context, cmd string, args, result any, f *os.File) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.broken != nil {
		return q.broken
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	id := q.nextID
	q.nextID++
	line, err := json.Marshal(qmpCommand{Execute: cmd, Arguments: args, ID: id})
	if err != nil {
		return err
	}
	defer q.bind(ctx)()
	if err := q.send(ctx, append(line, '\n'), f); err != nil {
		return err
	}
	return q.await(ctx, id, result)
}

// bind makes ctx's deadline the connection's and has ctx's cancellation
// end a pending read or write, until the returned func is called.
func (q *qmp) bind(ctx context.Context) (unbind func()) {
	d, _ := ctx.Deadline() // zero: none
	q.c.SetDeadline(d)
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		q.c.SetDeadline(time.Unix(1, 0)) // in the past: now
		close(fired)
	})
	return func() {
		// Once the callback has started, wait for it: it must not move
		// the next command's deadline into the past.
		if !stop() {
			<-fired
		}
	}
}

// send writes one command line, with f's descriptor attached if f is not
// nil.
func (q *qmp) send(ctx context.Context, line []byte, f *os.File) error {
	var n int
	var err error
	if f != nil {
		rc, cerr := f.SyscallConn()
		if cerr != nil {
			return cerr
		}
		// Control keeps the descriptor open while it is sent, without
		// switching f to blocking mode as Fd would.
		if cerr := rc.Control(func(fd uintptr) {
			n, _, err = q.c.WriteMsgUnix(line, unixRights(int(fd)), nil)
		}); cerr != nil {
			return cerr
		}
	}
	if err == nil && n < len(line) {
		var m int
		m, err = q.c.Write(line[n:])
		n += m
	}
	if err == nil {
		return nil
	}
	if gone(err) {
		err = q.closed(err)
	}
	// Half a command would run into the next one's bytes in QEMU's
	// parser; nothing sent at all leaves the stream as it was.
	return q.fail(ctx, err, n > 0)
}

// await reads until the reply to command id.
func (q *qmp) await(ctx context.Context, id uint64, result any) error {
	for skipped := 0; ; skipped++ {
		if skipped > qmpMaxSkipped {
			return fmt.Errorf("no reply among %d messages from QEMU", qmpMaxSkipped)
		}
		line, err := q.readLine(ctx)
		if err != nil {
			return err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var m qmpMessage
		if err := json.Unmarshal(line, &m); err != nil {
			return q.fail(ctx, fmt.Errorf("not JSON from QEMU: %.80q", line), true)
		}
		switch {
		case m.Event != "":
			q.keep(m)
			continue
		case m.Return == nil && m.Error == nil:
			continue // not a reply; nothing else QEMU sends is ours to act on
		case !replyTo(m, id):
			continue // the reply to a command given up on
		case m.Error != nil:
			return m.Error
		case result == nil:
			return nil
		}
		if err := json.Unmarshal(m.Return, result); err != nil {
			return fmt.Errorf("decode reply: %w", err)
		}
		return nil
	}
}

// replyTo reports whether m answers command id. An error without an id is
// taken as the current command's: QEMU leaves the id out only when it
// could not read the command, and every command sent here has one.
func replyTo(m qmpMessage, id uint64) bool {
	if m.ID == nil {
		return m.Error != nil
	}
	var got uint64
	return json.Unmarshal(m.ID, &got) == nil && got == id
}

// keep records a skipped event, dropping the oldest beyond qmpKeptEvents.
func (q *qmp) keep(m qmpMessage) {
	e := qmpEvent{Event: printable(m.Event, 64)}
	if len(m.Data) <= qmpKeptData {
		e.Data = m.Data
	}
	if len(q.events) == qmpKeptEvents {
		q.events = append(q.events[:0], q.events[1:]...)
	}
	q.events = append(q.events, e)
}

// readLine returns the next line from QEMU, valid until the next read. A
// line cut short by ctx is kept, and finished by the next command.
func (q *qmp) readLine(ctx context.Context) ([]byte, error) {
	for {
		frag, err := q.r.ReadSlice('\n')
		if len(q.partial)+len(frag) > qmpMaxLine {
			q.partial = nil
			return nil, q.fail(ctx, errQMPLineTooLong, true)
		}
		q.partial = append(q.partial, frag...)
		switch {
		case err == nil:
			line := q.partial
			q.partial = q.partial[:0]
			if cap(q.partial) > 64<<10 {
				q.partial = nil // an outsized line's buffer is not kept
			}
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case gone(err):
			return nil, q.fail(ctx, q.closed(err), true)
		default:
			return nil, q.fail(ctx, err, false) // a deadline, or broken
		}
	}
}

// closed is the error for QEMU having closed the connection (cause says
// how it was seen), with the last event it announced, which usually says
// why.
func (q *qmp) closed(cause error) error {
	last := ""
	if n := len(q.events); n > 0 {
		last = " (last event " + q.events[n-1].Event + ")"
	}
	return fmt.Errorf("%w%s: %w", errQMPClosed, last, cause)
}

// gone reports whether err is the peer's end of the socket being closed.
func gone(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}

// fail turns an I/O error into the command's error. A deadline is ctx's,
// and leaves the stream usable unless a message was lost with it (a
// command half written); any other error, or a lost message, breaks the
// stream for every later command.
func (q *qmp) fail(ctx context.Context, err error, lost bool) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		if err = ctx.Err(); err == nil {
			err = context.DeadlineExceeded // the connection's deadline ran out first
		}
	} else {
		lost = true
	}
	if lost {
		q.broken = fmt.Errorf("connection unusable after an earlier error: %w", err)
	}
	return err
}

// printable clips s to max bytes and replaces control characters: QEMU's
// words end up in logs and terminals.
func printable(s string, max int) string {
	clipped := false
	if len(s) > max {
		for max > 0 && !utf8.RuneStart(s[max]) {
			max--
		}
		s, clipped = s[:max], true
	}
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '?'
		}
		return r
	}, s)
	if clipped {
		s += "..."
	}
	return s
}

// openQMP speaks the machine protocol on f, the host's end of the socket
// pair whose other end QEMU was given. QEMU greets at once; its exit ends
// the wait.
func openQMP(ctx context.Context, f *os.File) (*qmp, error) {
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("machine protocol: %w", err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("machine protocol: not a unix socket")
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	q, err := newQMP(ctx, uc)
	if err != nil {
		uc.Close()
		return nil, err
	}
	return q, nil
}
