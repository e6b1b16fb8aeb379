//go:build linux

package qemu

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/guest/mux"
	"github.com/airlock-sandbox/airlock/vm"
)

// The templates' flows (park.go, template.go) against a fake QEMU: this
// test binary, run by a script standing in for qemu-system-x86_64, with
// the mode in its environment. The fake speaks just enough QMP on the
// inherited machine-protocol socket, and plays the guest on the mux
// socket: it parks when the kernel command line says so (or is already
// parked when given -incoming), reads the host's Wake, then serves the
// multiplexer with an echo on fakeEchoPort. It leaves what it saw in a
// records folder, one file per kind and process, for the test to check.

const (
	envFakeQEMU    = "AIRLOCK_FAKE_QEMU"     // the fake's mode; set only in the fake's process
	envFakeQEMUDir = "AIRLOCK_FAKE_QEMU_DIR" // its records folder
	fakeEchoPort   = 1024
	fakeStateMagic = "FAKESTATE"
	// fakeMemoryAt is where in its memory the fake guest keeps its line.
	fakeMemoryAt = 1 << 20
)

// Modes of the fake QEMU. Each changes one thing, and only where it says:
// a mode about loading a template leaves the boot that saved it alone.
const (
	fakeNormal     = "normal"
	fakeLoadExits  = "load-exits"  // -incoming: exits 1 before the machine protocol's greeting
	fakeLoadBroken = "load-broken" // -incoming: query-status says "internal-error"
	fakeSilent     = "silent"      // -incoming: reads the Wake and never greets
	fakeGarbage    = "garbage"     // writes garbage where api.Parked belongs
	fakeSaveFails  = "save-fails"  // query-migrate says the migration failed
	fakeSaveHangs  = "save-hangs"  // query-migrate says "active" for ever
	fakeLoadHangs  = "load-hangs"  // -incoming: query-status says "inmigrate" for ever
)

// TestFakeQEMUHelper is the fake QEMU, when run as one (parkFake); in the
// test run itself it does nothing.
func TestFakeQEMUHelper(t *testing.T) {
	mode := os.Getenv(envFakeQEMU)
	if mode == "" {
		t.Skip("the fake QEMU of park_test.go: only run as QEMU")
	}
	args := os.Args
	if i := slices.Index(args, "--"); i >= 0 {
		args = args[i+1:]
	}
	os.Exit(runFakeQEMU(mode, os.Getenv(envFakeQEMUDir), args))
}

// fakeArgs is what the fake takes from QEMU's command line; -1: absent.
type fakeArgs struct {
	mux, qmp, ram int
	incoming      bool // -incoming defer: the state's descriptor comes by migrate-incoming
	park          bool // airlock.park=1 in -append
}

func parseFakeArgs(args []string) (fakeArgs, error) {
	fa := fakeArgs{mux: -1, qmp: -1, ram: -1}
	for i := 0; i+1 < len(args); i++ {
		v := args[i+1]
		switch args[i] {
		case "-chardev":
			opts := strings.Split(v, ",")
			if opts[0] != "socket" {
				continue
			}
			id, fd := "", -1
			for _, o := range opts[1:] {
				switch k, val, _ := strings.Cut(o, "="); k {
				case "id":
					id = val
				case "fd":
					fd, _ = strconv.Atoi(val)
				}
			}
			switch id {
			case "mux":
				fa.mux = fd
			case "qmp":
				fa.qmp = fd
			}
		case "-incoming":
			if v != "defer" {
				return fa, fmt.Errorf("-incoming %q: want defer", v)
			}
			fa.incoming = true
		case "-object":
			if !strings.HasPrefix(v, "memory-backend-file,id=ram,") {
				continue
			}
			for _, o := range strings.Split(v, ",") {
				if path, ok := strings.CutPrefix(o, "mem-path=/proc/self/fd/"); ok {
					fa.ram, _ = strconv.Atoi(path)
				}
			}
		case "-append":
			fa.park = slices.Contains(strings.Fields(v), "airlock.park=1")
		}
	}
	if fa.mux < 0 {
		return fa, errors.New("no -chardev socket,id=mux,fd=N")
	}
	return fa, nil
}

// runFakeQEMU is the fake QEMU's main; it returns the exit status.
func runFakeQEMU(mode, dir string, args []string) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "fake qemu: "+format+"\n", a...)
		return 1
	}
	// Stop's SIGTERM ends QEMU as it would; the timer keeps a fake whose
	// test went wrong from lingering.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	go func() { <-sig; os.Exit(0) }()
	time.AfterFunc(time.Minute, func() { os.Exit(3) })

	pid := os.Getpid()
	record := func(kind, line string) {
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("%d.%s", pid, kind)), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err == nil {
			f.WriteString(line + "\n") // one write: a reader sees whole lines
			f.Close()
		}
	}
	b, _ := json.Marshal(args)
	record("args", string(b))
	fa, err := parseFakeArgs(args)
	if err != nil {
		return fail("%v", err)
	}
	incoming := fa.incoming
	if incoming && mode == fakeLoadExits {
		return fail("load of migration failed (mode %s)", mode)
	}
	conn, err := fdConn(fa.mux, "mux")
	if err != nil {
		return fail("mux: %v", err)
	}
	// The guest's memory, when it lives in a file the host shares: the
	// fake guest keeps a line of its own there (fakeMemoryAt), which a
	// machine started from its template must find.
	var ram *os.File
	if fa.ram >= 0 {
		ram = os.NewFile(uintptr(fa.ram), "ram")
	}
	loaded := make(chan struct{})
	incomingFD := make(chan int, 1)
	if fa.qmp >= 0 {
		c, err := fdConn(fa.qmp, "qmp")
		if err != nil {
			return fail("qmp: %v", err)
		}
		s := &fakeQMPServer{c: c.(*net.UnixConn), mode: mode, pid: pid, incoming: incoming, loaded: loaded, incomingFD: incomingFD,
			record: func(cmd string) { record("qmp", cmd) }, fds: map[string]*os.File{}}
		go s.serve()
	}

	parked := incoming || fa.park
	switch {
	case incoming:
		// Started from a template: the guest is parked already, in
		// ReadWake, once QEMU has loaded the state (which the host
		// names with migrate-incoming) and finds its memory.
		f := os.NewFile(uintptr(<-incomingFD), "incoming")
		state, err := io.ReadAll(f)
		f.Close()
		if err != nil || !bytes.HasPrefix(state, []byte(fakeStateMagic)) {
			return fail("load of migration failed: %.24q (%v)", state, err)
		}
		if ram != nil {
			line := make([]byte, 64)
			ram.ReadAt(line, fakeMemoryAt)
			record("memory", string(bytes.TrimRight(line, "\x00")))
		}
		close(loaded)
	case fa.park:
		if ram != nil {
			ram.WriteAt([]byte(fmt.Sprintf("booted by pid %d", pid)), fakeMemoryAt)
		}
		rec := api.ParkedRecord()
		if mode == fakeGarbage {
			rec = []byte("GARBAGE-NOT-PARK")
		}
		if _, err := conn.Write(rec); err != nil {
			return fail("write parked: %v", err)
		}
	}
	if parked {
		w, err := api.ReadWake(conn)
		if err != nil {
			return fail("%v", err)
		}
		record("wake", hex.EncodeToString(w.GetEntropy())+" "+strconv.FormatInt(w.GetUnixNanos(), 10))
	}
	if incoming && mode == fakeSilent {
		io.Copy(io.Discard, conn)
		return 0
	}
	sess := mux.Server(conn, mux.Config{})
	ln, err := sess.Listen(fakeEchoPort)
	if err != nil {
		return fail("listen: %v", err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	<-sess.Done()
	return 0
}

// fdConn is the socket at inherited descriptor fd.
func fdConn(fd int, name string) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	return net.FileConn(f)
}

// fakeQMPServer is the fake's machine protocol: what the host's templates
// use of QMP, one command at a time, in order.
type fakeQMPServer struct {
	c          *net.UnixConn
	mode       string
	pid        int
	incoming   bool
	loaded     <-chan struct{} // closed once the incoming state was read
	incomingFD chan<- int      // migrate-incoming's descriptor
	record     func(cmd string)
	// ignoreShared: x-ignore-shared was set, as both ends of a migration
	// must have it (the stream's layout depends on it).
	ignoreShared bool

	status  string
	queried bool
	fds     map[string]*os.File // getfd's, by name
	rights  []int               // descriptors received and not yet named
	pending []byte
}

func (s *fakeQMPServer) serve() {
	defer s.c.Close()
	s.status = "running"
	if s.incoming {
		s.status = "inmigrate"
	}
	s.write(`{"QMP":{"version":{"qemu":{"micro":22,"minor":2,"major":7},"package":"fake"},"capabilities":[]}}`)
	buf := make([]byte, 64<<10)
	oob := make([]byte, syscall.CmsgSpace(4*4))
	for {
		n, oobn, _, _, err := s.c.ReadMsgUnix(buf, oob)
		if oobn > 0 {
			msgs, _ := syscall.ParseSocketControlMessage(oob[:oobn])
			for i := range msgs {
				if fds, err := syscall.ParseUnixRights(&msgs[i]); err == nil {
					s.rights = append(s.rights, fds...)
				}
			}
		}
		s.pending = append(s.pending, buf[:n]...)
		for {
			i := bytes.IndexByte(s.pending, '\n')
			if i < 0 {
				break
			}
			line := s.pending[:i]
			s.pending = s.pending[i+1:]
			s.handle(line)
		}
		if err != nil {
			return // the host is done with the protocol; QEMU goes on
		}
	}
}

func (s *fakeQMPServer) write(line string) { s.c.Write([]byte(line + "\n")) }

func (s *fakeQMPServer) reply(id json.RawMessage, ret any) {
	b, _ := json.Marshal(map[string]any{"return": ret, "id": id})
	s.write(string(b))
}

func (s *fakeQMPServer) fail(id json.RawMessage, class, desc string) {
	b, _ := json.Marshal(map[string]any{"error": map[string]string{"class": class, "desc": desc}, "id": id})
	s.write(string(b))
}

func (s *fakeQMPServer) event(name string) {
	s.write(`{"timestamp":{"seconds":1,"microseconds":2},"event":"` + name + `"}`)
}

func (s *fakeQMPServer) handle(line []byte) {
	var cmd struct {
		Execute   string          `json:"execute"`
		Arguments json.RawMessage `json:"arguments"`
		ID        json.RawMessage `json:"id"`
	}
	if err := json.Unmarshal(line, &cmd); err != nil {
		s.fail(nil, "GenericError", "JSON parse error")
		return
	}
	s.record(cmd.Execute)
	var args struct {
		FDName string `json:"fdname"`
		URI    string `json:"uri"`
	}
	json.Unmarshal(cmd.Arguments, &args)
	switch cmd.Execute {
	case "qmp_capabilities", "migrate-set-parameters", "migrate_cancel":
		s.reply(cmd.ID, struct{}{})
	case "migrate-set-capabilities":
		var caps struct {
			Capabilities []struct {
				Capability string `json:"capability"`
				State      bool   `json:"state"`
			} `json:"capabilities"`
		}
		json.Unmarshal(cmd.Arguments, &caps)
		for _, c := range caps.Capabilities {
			if c.Capability == "x-ignore-shared" {
				s.ignoreShared = c.State
			}
		}
		s.reply(cmd.ID, struct{}{})
	case "migrate-incoming":
		n, err := strconv.Atoi(strings.TrimPrefix(args.URI, "fd:"))
		switch {
		case !s.incoming:
			s.fail(cmd.ID, "GenericError", "The incoming migration has not been deferred")
		case !s.ignoreShared:
			s.fail(cmd.ID, "GenericError", "fake: x-ignore-shared not set: the stream would not parse")
		case !strings.HasPrefix(args.URI, "fd:") || err != nil:
			s.fail(cmd.ID, "GenericError", "fake: want fd:N")
		default:
			s.incomingFD <- n
			s.reply(cmd.ID, struct{}{})
		}
	case "stop":
		s.status = "paused"
		s.event("STOP") // before the reply, as QEMU does: the client skips it
		s.reply(cmd.ID, struct{}{})
	case "cont":
		s.status = "running"
		s.event("RESUME")
		s.reply(cmd.ID, struct{}{})
	case "query-status":
		if s.status == "inmigrate" && s.queried && !(s.incoming && s.mode == fakeLoadHangs) {
			select {
			case <-s.loaded:
				s.status = "paused" // the template was saved paused
			default:
			}
		}
		s.queried = true // the first answer is always "inmigrate": the host polls
		st := s.status
		if s.incoming && s.mode == fakeLoadBroken {
			st = "internal-error"
		}
		s.reply(cmd.ID, map[string]any{"status": st, "running": st == "running", "singlestep": false})
	case "getfd":
		if len(s.rights) == 0 {
			s.fail(cmd.ID, "GenericError", "No file descriptor supplied via SCM_RIGHTS")
			return
		}
		fd := s.rights[len(s.rights)-1]
		for _, extra := range s.rights[:len(s.rights)-1] {
			syscall.Close(extra)
		}
		s.rights = nil
		s.fds[args.FDName] = os.NewFile(uintptr(fd), args.FDName)
		s.reply(cmd.ID, struct{}{})
	case "migrate":
		if !s.ignoreShared {
			s.fail(cmd.ID, "GenericError", "fake: x-ignore-shared not set: the guest's memory would be in the stream")
			return
		}
		name, _ := strings.CutPrefix(args.URI, "fd:")
		f := s.fds[name]
		if f == nil {
			s.fail(cmd.ID, "GenericError", fmt.Sprintf("File descriptor named '%s' has not been found", name))
			return
		}
		delete(s.fds, name)
		state := fmt.Sprintf("%s pid=%d\n", fakeStateMagic, s.pid)
		if s.mode == fakeSaveFails {
			state = state[:len(state)/2] // cut off by the full disk
		} else {
			state += strings.Repeat("device state ", 1000)
		}
		f.WriteString(state)
		f.Close()
		s.reply(cmd.ID, struct{}{})
	case "query-migrate":
		if s.mode == fakeSaveFails {
			s.reply(cmd.ID, map[string]any{"status": "failed", "error-desc": "No space left on device"})
			return
		}
		if s.mode == fakeSaveHangs {
			s.reply(cmd.ID, map[string]any{"status": "active"})
			return
		}
		s.reply(cmd.ID, map[string]any{"status": "completed"})
	default:
		s.fail(cmd.ID, "CommandNotFound", "The command "+cmd.Execute+" has not been found")
	}
}

// parkFake is a fake QEMU in one mode, with an image for it to boot.
type parkFake struct {
	records string
	cfg     vm.Config
	opts    Options
}

// newParkFake writes the script standing in for QEMU, a kernel and an
// initrd, in the shape of fakeQEMU (machine_test.go) but with templates
// on.
func newParkFake(t *testing.T, mode string) *parkFake {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	f := &parkFake{records: filepath.Join(dir, "records")}
	if err := os.Mkdir(f.records, 0o700); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "qemu-system-x86_64")
	// A race-enabled binary sleeps a second before it exits, by default.
	script := fmt.Sprintf("#!/bin/sh\nexport %s=%s %s=%s GORACE=\"${GORACE:+$GORACE }atexit_sleep_ms=0\"\nexec %s -test.run='^TestFakeQEMUHelper$' -- \"$@\"\n",
		envFakeQEMU, shellQuote(mode), envFakeQEMUDir, shellQuote(f.records), shellQuote(exe))
	writeFile(t, bin, script)
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	k, i := filepath.Join(dir, "vmlinux"), filepath.Join(dir, "initrd")
	writeFile(t, k, "k")
	writeFile(t, i, "i")
	f.cfg = vm.Config{Kernel: k, Initrd: i, CPUs: 1, MemoryMiB: 256}
	f.opts = Options{Arch: "amd64", Accel: AccelTCG, QEMU: bin, CacheDir: filepath.Join(dir, "cache"), Templates: TemplatesAuto}
	return f
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// start starts a machine of f's config, in a run folder of its own,
// stopped at cleanup.
func (f *parkFake) start(t *testing.T, opts Options) *Machine {
	t.Helper()
	// The fake's script was just written: a process another parallel
	// test forked meanwhile may still hold it open for writing until it
	// execs, and then exec fails with ETXTBSY (golang.org/issue/22315).
	// Such a start never ran the fake; a new machine tries again.
	for range 10 {
		m, err := f.tryStart(t, opts)
		if !errors.Is(err, syscall.ETXTBSY) {
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			return m
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("Start: the fake QEMU's script stayed busy (ETXTBSY)")
	return nil
}

// tryStart is start's one try.
func (f *parkFake) tryStart(t *testing.T, opts Options) (*Machine, error) {
	t.Helper()
	cfg := f.cfg
	cfg.Dir = t.TempDir()
	m, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m.Stop(ctx)
	})
	if m.tr.kind() != api.TransportSerial {
		t.Skip("this host has vhost-vsock: templates need the serial transport")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return m, m.Start(ctx)
}

// fakeRun is what one fake QEMU process saw.
type fakeRun struct {
	pid  int
	args []string
	wake string   // the Wake's entropy in hex, "" if none came
	qmp  []string // the commands, in order
	// memory is the line a fake started from a template found in its
	// guest memory (fakeMemoryAt).
	memory string
}

func (r fakeRun) incoming() bool { return slices.Contains(r.args, "-incoming") }

// run is what the fake QEMU with process id pid saw.
func (f *parkFake) run(t *testing.T, pid int) fakeRun {
	t.Helper()
	r := fakeRun{pid: pid}
	read := func(kind string) []string {
		b, err := os.ReadFile(filepath.Join(f.records, fmt.Sprintf("%d.%s", pid, kind)))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		return strings.Fields(string(b))
	}
	b, err := os.ReadFile(filepath.Join(f.records, fmt.Sprintf("%d.args", pid)))
	if err != nil {
		t.Fatalf("no record of a fake QEMU with pid %d: %v", pid, err)
	}
	if err := json.Unmarshal(b, &r.args); err != nil {
		t.Fatal(err)
	}
	if w := read("wake"); len(w) == 2 {
		r.wake = w[0]
		ns, _ := strconv.ParseInt(w[1], 10, 64)
		if d := time.Since(time.Unix(0, ns)); d < 0 || d > time.Minute {
			t.Errorf("the Wake's clock is %v off", d)
		}
	}
	r.qmp = read("qmp")
	r.memory = strings.Join(read("memory"), " ")
	return r
}

// runs is every fake QEMU started so far, in the order they started.
func (f *parkFake) runs(t *testing.T) []fakeRun {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(f.records, "*.args"))
	var rs []fakeRun
	started := map[int]time.Time{}
	for _, n := range names {
		pid, err := strconv.Atoi(strings.TrimSuffix(filepath.Base(n), ".args"))
		fi, serr := os.Stat(n)
		if err != nil || serr != nil {
			t.Fatal(n, err, serr)
		}
		started[pid] = fi.ModTime()
		rs = append(rs, f.run(t, pid))
	}
	slices.SortFunc(rs, func(a, b fakeRun) int { return started[a.pid].Compare(started[b.pid]) })
	return rs
}

// templates lists the templates and the temporary files of saves in the
// cache folder.
func (f *parkFake) templates(t *testing.T) (saved, tmp []string) {
	t.Helper()
	dir := filepath.Join(f.opts.CacheDir, "templates")
	saved, _ = filepath.Glob(filepath.Join(dir, "*"+templateExt))
	tmp, _ = filepath.Glob(filepath.Join(dir, "*.tmp"))
	return saved, tmp
}

// savedBy checks there is exactly one template, no temporary file, and
// that the fake QEMU pid wrote the template.
func (f *parkFake) savedBy(t *testing.T, pid int) {
	t.Helper()
	saved, tmp := f.templates(t)
	if len(saved) != 1 || len(tmp) != 0 {
		t.Fatalf("templates %q, temporary files %q: want one template, no temporary file", saved, tmp)
	}
	b, err := os.ReadFile(saved[0])
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%s pid=%d\n", fakeStateMagic, pid); !bytes.HasPrefix(b, []byte(want)) {
		t.Errorf("template %s holds %.40q, want the state the fake QEMU %d saved", saved[0], b, pid)
	}
}

// echo checks a stream to the fake guest's echo port: the multiplexer
// runs, which in a parking guest it does only after the Wake.
func echo(t *testing.T, m *Machine) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := m.Dial(ctx, fakeEchoPort)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	msg := []byte("ping " + t.Name())
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("echo: %q, %v", got, err)
	}
}

// inOrder reports whether want are among got, in that order.
func inOrder(got, want []string) bool {
	for _, w := range want {
		i := slices.Index(got, w)
		if i < 0 {
			return false
		}
		got = got[i+1:]
	}
	return true
}

// wait is m's Wait, bounded.
func wait(t *testing.T, m *Machine) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := m.Wait(ctx)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		t.Fatal("the machine did not end")
	}
	return err
}
