// Package qemu is the Linux backend of vm.Machine: a QEMU child process
// with no network card, one shared folder and the guest transport on
// vhost-vsock when the host has it, else on one virtio-serial port carrying
// the guest/mux stream multiplexer.
//
// The shared folder is 9p, served by QEMU with the rights of the folder's
// owner and no more: QEMU runs as the user running Airlock, or, when that is
// root and the folder belongs to a user, is started as that user; root's
// own folder is shared with the guest's owners and modes kept in xattrs.
// chooseShare has the table and the reasons (guest root must not be able
// to leave setuid-root programs or device nodes on the host).
package qemu

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/vm"
)

var _ vm.Restorer = (*Machine)(nil)

// settle is how long Start watches a fresh QEMU for an early exit (a bad
// option, a kernel it cannot load) before it reports the machine running.
const settle = 300 * time.Millisecond

// Machine is one QEMU virtual machine: its configuration, the transport
// to its guest (transport.go), the template start when its guest parks
// (park.go), and the QEMU process it runs in.
type Machine struct {
	vm.StateHub
	cfg  vm.Config
	opts resolved
	log  *slog.Logger

	tr       transport      // chosen once, in New
	tpl      *templateStart // nil: the guest never parks (templateStartFor)
	cpuModel string         // overrides plan.cpu, for measurements

	sp sharePlan // how the share is served, decided in New

	// The QEMU process and what it runs with, set as the machine starts
	// and ends.
	mu        sync.Mutex
	share     string // "", "virtiofs" or "9p", once started
	accel     string
	machine   string // the machine type, once started
	cmd       *exec.Cmd
	virtiofsd *virtiofsd
	ram       *os.File // the guest's memory file (a parking guest's), closed at the end
	stderr    *tail
	stopAsked bool
	// abortStart ends a Start in progress (Stop).
	abortStart context.CancelFunc
	bootErr    error         // why the host ended a boot that went wrong (the park)
	exitErr    error         // why QEMU ended, nil after a power-off
	exited     chan struct{} // closed once QEMU has been reaped and cleaned up
	cleanOnce  sync.Once
}

// New prepares a machine; nothing runs until Start. Listen works from here
// on, so the caller can be ready for the guest before it boots.
func New(cfg vm.Config, opts Options) (*Machine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("qemu: %w", err)
	}
	r, err := resolveOptions(opts, os.Getenv, exec.LookPath)
	if err != nil {
		return nil, fmt.Errorf("qemu: %w", err)
	}
	var owner hostUser
	if cfg.Share != nil && isRoot() {
		if owner, err = folderOwner(cfg.Share.HostPath); err != nil {
			return nil, fmt.Errorf("qemu: %w: shared folder: %w", vm.ErrInvalidConfig, err)
		}
	}
	sp, err := chooseShare(cfg.Share, r.Share, r.Virtiofsd, os.Geteuid(), owner, r.TrustedVirtiofs)
	if err != nil {
		return nil, fmt.Errorf("qemu: %w", err)
	}
	m := &Machine{cfg: cfg, opts: r, sp: sp, log: cfg.Log().With("backend", "qemu"), exited: make(chan struct{})}
	if m.cfg.ConsoleLog == "" {
		m.cfg.ConsoleLog = filepath.Join(cfg.Dir, "console.log")
	}
	if m.tr, err = newTransport(usable("/dev/vhost-vsock")); err != nil {
		return nil, fmt.Errorf("qemu: transport: %w", err)
	}
	m.tpl = templateStartFor(m)
	return m, nil
}

// Start boots the machine: it picks the accelerator (probing KVM once per
// host kernel and QEMU binary), starts virtiofsd if the share uses it, and
// spawns QEMU.
func (m *Machine) Start(ctx context.Context) error {
	m.mu.Lock()
	if m.State() != vm.StateNew || m.cmd != nil {
		m.mu.Unlock()
		return fmt.Errorf("qemu: %w", vm.ErrAlreadyStarted)
	}
	m.cmd = &exec.Cmd{} // claims the start
	// A Stop during the start ends it (a template may take a while to
	// load, and until it runs there is no QEMU of the machine's to stop).
	ctx, m.abortStart = context.WithCancel(ctx)
	defer m.abortStart()
	m.mu.Unlock()
	m.Set(vm.StateStarting)
	if err := m.start(ctx); err != nil {
		m.finish(err)
		return err
	}
	m.Set(vm.StateRunning)
	return nil
}

func (m *Machine) start(ctx context.Context) error {
	for _, f := range []struct{ what, path string }{{"kernel", m.cfg.Kernel}, {"initrd", m.cfg.Initrd}} {
		if err := checkFile(f.what, f.path); err != nil {
			return fmt.Errorf("qemu: start: %w", err)
		}
	}
	accel, err := chooseAccel(ctx, m.opts.accelMode, m.opts.Arch, hostArch(), m.opts.QEMU,
		realKVM{timeout: m.opts.ProbeTimeout, dir: m.cfg.Dir}, accelCache{path: m.cacheFile()})
	if err != nil {
		return fmt.Errorf("qemu: start: %w", err)
	}
	share := m.sp.FS
	p := m.plan(accel, share)
	if err := p.checkMachine(); err != nil {
		return fmt.Errorf("qemu: start: %w", err)
	}
	if share == ShareVirtiofs {
		d, err := startVirtiofsd(ctx, m.opts.Virtiofsd, p.VirtiofsSocket, p.SharePath, m.log)
		switch {
		case err != nil && m.opts.Share == ShareVirtiofs:
			return fmt.Errorf("qemu: start: %w", err)
		case err != nil:
			m.log.Warn("virtiofsd failed, sharing with 9p instead", "err", err)
			share = Share9P
			p = m.plan(accel, share)
		default:
			m.mu.Lock()
			m.virtiofsd = d
			m.mu.Unlock()
		}
	}

	if m.parks(share) {
		p.Park = true
		return m.tpl.start(ctx, p, accel)
	}
	m.tr.begin()
	pr, err := m.spawn(ctx, p, accel, launch{})
	if err != nil {
		return err
	}
	m.commit(pr, p)
	return m.settle(ctx)
}

// settle watches a QEMU just committed for an early exit (a bad option, a
// kernel it cannot load) before Start reports the machine running.
func (m *Machine) settle(ctx context.Context) error {
	t := time.NewTimer(settle)
	defer t.Stop()
	select {
	case <-m.exited:
		return m.exitErr
	case <-t.C:
		return nil
	case <-ctx.Done():
		m.kill()
		<-m.exited
		return fmt.Errorf("qemu: start: %w", ctx.Err())
	}
}

// proc is one QEMU process, started but not yet the machine's (commit):
// a QEMU loading a template is one until it runs the guest.
type proc struct {
	cmd        *exec.Cmd
	stderr     *tail
	qmp        *qmp          // when spawn was asked for the machine protocol
	ram        *os.File      // the guest's memory file, when it has one
	incomingFD int           // QEMU's descriptor of the template's state, when loading one
	exited     chan struct{} // closed once QEMU has been waited for; err is then set
	err        error
}

// launch is what a QEMU is spawned with besides its plan.
type launch struct {
	qmp      bool     // serve the machine protocol on an inherited socket
	incoming *os.File // a template's machine state to load
	ram      *os.File // a memory file for the guest's RAM (ram_linux.go)
}

// kill ends a QEMU that was never committed and waits for it.
func (pr *proc) kill() {
	pr.cmd.Process.Kill()
	<-pr.exited
	if pr.qmp != nil {
		pr.qmp.Close()
	}
}

// spawn starts QEMU for p, with what l adds.
func (m *Machine) spawn(ctx context.Context, p plan, accel string, l launch) (*proc, error) {
	files := m.tr.files() // from fd 3 on (transport.configure)
	var qmpHost, qmpChild *os.File
	if l.qmp {
		var err error
		if qmpHost, qmpChild, err = socketPair(); err != nil {
			return nil, fmt.Errorf("qemu: start: machine protocol: %w", err)
		}
		// Closed once QEMU has its copy, so that QEMU's exit ends the
		// protocol's reads.
		defer qmpChild.Close()
		files = append(files, qmpChild)
		p.QMPFD = 3 + len(files) - 1
	}
	if l.incoming != nil {
		files = append(files, l.incoming)
		p.IncomingFD = 3 + len(files) - 1
	}
	if l.ram != nil {
		files = append(files, l.ram)
		p.RAMFD = 3 + len(files) - 1
	}
	var groups []uint32
	if m.sp.RunAs != nil {
		opened, err := m.handOver(&p, len(files))
		defer closeAll(opened)
		if err != nil {
			if qmpHost != nil {
				qmpHost.Close()
			}
			return nil, fmt.Errorf("qemu: start: %w", err)
		}
		files = append(files, opened...)
		if g, ok := groupID("kvm"); ok && accel == "kvm" {
			groups = append(groups, g)
		}
	}
	cmd := exec.Command(m.opts.QEMU, p.args()...)
	stderr := newTail(8 << 10)
	cmd.Stdout = stderr
	cmd.Stderr = stderr
	cmd.Dir = m.cfg.Dir
	cmd.ExtraFiles = files
	setProcAttr(cmd)
	if u := m.sp.RunAs; u != nil {
		runAs(cmd, *u, groups)
		cmd.Dir = "/" // the runtime folder may be closed to the folder's owner
	}
	m.log.Info("starting", "qemu", m.opts.QEMU, "accel", accel, "transport", m.tr.kind(), "share", p.Share,
		"security_model", p.SecurityModel, "run_as", m.sp.RunAs, "park", p.Park, "template", l.incoming != nil, "args", p.args())
	if err := cmd.Start(); err != nil {
		if qmpHost != nil {
			qmpHost.Close()
		}
		return nil, fmt.Errorf("qemu: start %s: %w (apt install %s)", m.opts.QEMU, err, packageFor(m.opts.Arch))
	}
	pr := &proc{cmd: cmd, stderr: stderr, ram: l.ram, incomingFD: p.IncomingFD, exited: make(chan struct{})}
	go func() {
		pr.err = cmd.Wait()
		close(pr.exited)
	}()
	if qmpHost != nil {
		qmpChild.Close()
		q, err := openQMP(ctx, qmpHost)
		if err != nil {
			pr.kill()
			return nil, &qemuFailed{fmt.Errorf("qemu: start: %w%s", err, stderrHint(stderr))}
		}
		pr.qmp = q
	}
	return pr, nil
}

// qemuFailed is an error of a QEMU that started and then failed before it
// spoke its machine protocol (spawn): on a template, the template's fault.
type qemuFailed struct{ err error }

func (e *qemuFailed) Error() string { return e.err.Error() }
func (e *qemuFailed) Unwrap() error { return e.err }

// commit makes pr the machine's QEMU: from here on its exit ends the
// machine.
func (m *Machine) commit(pr *proc, p plan) {
	m.tr.committed()
	m.mu.Lock()
	m.cmd, m.stderr, m.share, m.accel, m.machine = pr.cmd, pr.stderr, string(p.Share), p.Accel, p.machine()
	m.ram = pr.ram
	stopping := m.stopAsked
	m.mu.Unlock()
	go m.reap(pr)
	if stopping {
		// Stop came while this QEMU was starting (a template loads for
		// a tenth of a second or more): it had nothing to stop yet.
		pr.cmd.Process.Kill()
	}
}

// stderrHint is the end of QEMU's stderr, for an error.
func stderrHint(t *tail) string {
	if s := t.String(); s != "" {
		return ": " + s
	}
	return ""
}

// plan resolves the command line for this machine.
func (m *Machine) plan(accel, share string) plan {
	p := plan{
		Arch: m.opts.Arch, Accel: accel, CPU: m.cpuModel,
		Kernel: m.cfg.Kernel, Initrd: m.cfg.Initrd, Cmdline: m.cfg.Cmdline,
		CPUs: m.cfg.CPUs, MemoryMiB: m.cfg.MemoryMiB,
		ConsoleLog: m.cfg.ConsoleLog,
		PIDFile:    filepath.Join(m.cfg.Dir, "qemu.pid"),
		Name:       "airlock",
		Disks:      m.cfg.Disks, Reclaim: m.cfg.ReclaimMemory,
	}
	m.tr.configure(&p)
	p.GuestTSCkHz = guestTSCkHz(m.opts.Arch, accel, m.opts.CacheDir)
	p.KernelHZ = m.cfg.KernelHZ
	if m.opts.Machine != MachineAuto {
		p.Machine = m.opts.Machine
	}
	if s := m.cfg.Share; s != nil && share != "" {
		p.SharePath, p.ShareReadOnly = s.HostPath, s.ReadOnly
		switch share {
		case ShareVirtiofs:
			p.Share = api.ShareVirtiofs
			p.VirtiofsSocket = filepath.Join(m.cfg.Dir, "virtiofsd.sock")
		case Share9P:
			p.Share = api.Share9P
			p.SecurityModel = m.sp.SecurityModel
		}
	}
	return p
}

// handOver opens, as this process, what QEMU started as the folder's owner
// could not open itself (the image and runtime folders may be closed to
// that user), passes them as descriptors from fd 3+first on, and points p
// at them. The caller closes the files once QEMU has started.
func (m *Machine) handOver(p *plan, first int) ([]*os.File, error) {
	var files []*os.File
	fd := func(f *os.File) int {
		files = append(files, f)
		return 3 + first + len(files) - 1
	}
	procFD := func(what, path string, flag int) (string, error) {
		f, err := os.OpenFile(path, flag, 0o600)
		if err != nil {
			return "", fmt.Errorf("%s: %w", what, err)
		}
		n := fd(f)
		if fi, err := f.Stat(); err == nil && !readableBy(fi, *m.sp.RunAs) {
			return "", fmt.Errorf("%w: %s %s (%v) cannot be read by uid %d, as whom QEMU runs to serve the folder: make it readable by everyone (chmod a+r)",
				vm.ErrInvalidConfig, what, path, fi.Mode(), m.sp.RunAs.UID)
		}
		return "/proc/self/fd/" + strconv.Itoa(n), nil
	}
	var err error
	// QEMU reopens these through /proc/self/fd as the owner: the image must
	// be readable by everyone (the image builder writes it 0644), the
	// folder is the owner's own.
	if p.Kernel, err = procFD("kernel", p.Kernel, os.O_RDONLY); err != nil {
		return files, err
	}
	if p.Initrd != "" {
		if p.Initrd, err = procFD("initrd", p.Initrd, os.O_RDONLY); err != nil {
			return files, err
		}
	}
	if p.SharePath, err = procFD("shared folder", p.SharePath, os.O_RDONLY); err != nil {
		return files, err
	}
	// Disks go in as descriptors QEMU never reopens (an fdset): the base
	// image read-only, a workspace's persistent disk read-write, which may
	// sit in a state folder closed to the owner.
	p.DiskFDs = nil
	for _, d := range p.Disks {
		flags := []int{os.O_RDONLY}
		if !d.ReadOnly {
			flags = append(flags, os.O_RDWR)
		}
		var fds []int
		for _, flag := range flags {
			f, err := os.OpenFile(d.Path, flag, 0)
			if err != nil {
				return files, fmt.Errorf("disk: %w", err)
			}
			fds = append(fds, fd(f))
		}
		p.DiskFDs = append(p.DiskFDs, fds)
	}
	// The console log stays this process's file: QEMU writes through the
	// descriptor (a file chardev on /dev/fdset), never reopening it.
	con, err := os.OpenFile(p.ConsoleLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return files, fmt.Errorf("console log: %w", err)
	}
	p.ConsoleFD = fd(con)
	if p.Transport == api.TransportVsock {
		v, err := os.OpenFile("/dev/vhost-vsock", os.O_RDWR, 0)
		if err != nil {
			return files, fmt.Errorf("vhost-vsock: %w", err)
		}
		p.VhostFD = fd(v)
	}
	p.PIDFile = "" // QEMU could not write it in the runtime folder
	return files, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

func (m *Machine) cacheFile() string {
	if m.opts.CacheDir == "" {
		return ""
	}
	return filepath.Join(m.opts.CacheDir, "kvm-probe.json")
}

// reap waits for QEMU and releases everything the machine holds.
func (m *Machine) reap(pr *proc) {
	<-pr.exited
	err := pr.err
	m.mu.Lock()
	asked := m.stopAsked
	tail := m.stderr.String()
	bootErr := m.bootErr
	m.mu.Unlock()
	var why error
	switch {
	case bootErr != nil:
		// The host ended a boot that went wrong; that is the reason.
		why = bootErr
	case err == nil:
		// -no-reboot: a guest power-off or reboot ends QEMU with status 0.
	case asked:
		// Stopped by us; a kill is the expected way out.
	default:
		why = fmt.Errorf("qemu: %s exited: %w", filepath.Base(m.opts.QEMU), err)
		if tail != "" {
			why = fmt.Errorf("%w: %s", why, tail)
		}
	}
	if why != nil {
		m.log.Warn("qemu exited", "err", why)
	} else {
		m.log.Info("qemu exited", "status", err)
	}
	m.finish(why)
}

// finish releases the machine's resources once, records why it ended and
// moves it to its final state.
func (m *Machine) finish(why error) {
	m.cleanOnce.Do(func() {
		m.mu.Lock()
		d, ram := m.virtiofsd, m.ram
		m.ram = nil
		m.exitErr = why
		m.mu.Unlock()
		if d != nil {
			d.stop()
		}
		if ram != nil {
			ram.Close()
		}
		m.tr.close()
		if why != nil {
			m.Set(vm.StateFailed)
		} else {
			m.Set(vm.StateStopped)
		}
		close(m.exited)
	})
}

// Wait blocks until QEMU has exited: nil after a guest power-off (or a
// Stop), else QEMU's exit status and the end of its stderr.
func (m *Machine) Wait(ctx context.Context) error {
	select {
	case <-m.exited:
		return m.exitErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stop sends QEMU SIGTERM, and SIGKILL once ctx is done; it returns when
// QEMU and virtiofsd are gone and the transport is closed.
func (m *Machine) Stop(ctx context.Context) error {
	m.mu.Lock()
	cmd := m.cmd
	m.stopAsked = true
	if m.abortStart != nil {
		m.abortStart()
	}
	m.mu.Unlock()
	if cmd == nil { // never started
		m.finish(nil)
		return nil
	}
	select {
	case <-m.exited:
		return nil
	default:
	}
	m.Set(vm.StateStopping)
	if cmd.Process != nil {
		terminate(cmd.Process)
	}
	select {
	case <-m.exited:
		return nil
	case <-ctx.Done():
	}
	m.kill()
	<-m.exited
	return nil
}

// kill ends QEMU at once.
func (m *Machine) kill() {
	m.mu.Lock()
	m.stopAsked = true
	cmd := m.cmd
	m.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		cmd.Process.Kill()
	}
}

// Dial opens a stream to a port the guest listens on. Over the serial
// transport it waits for the guest's hello, bounded by ctx.
func (m *Machine) Dial(ctx context.Context, port uint32) (net.Conn, error) {
	switch s := m.State(); s {
	case vm.StateStarting, vm.StateRunning:
	default:
		return nil, fmt.Errorf("qemu: dial guest port %d: %w (%s)", port, vm.ErrNotRunning, s)
	}
	return m.tr.dial(ctx, port)
}

// Listen accepts streams the guest opens to a host port. It works before
// Start.
func (m *Machine) Listen(port uint32) (net.Listener, error) { return m.tr.listen(port) }

// Info describes the machine; the accelerator, machine type and share are
// known once Start has picked them.
func (m *Machine) Info() vm.Info {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := vm.Info{Backend: "qemu", Accelerator: m.accel, Machine: m.machine, Transport: string(m.tr.kind()), Share: m.share,
		ConsoleLog: m.cfg.ConsoleLog}
	if m.cmd != nil && m.cmd.Process != nil {
		i.PID = m.cmd.Process.Pid
	}
	return i
}

// Restored reports whether the machine started from a template
// (vm.Restorer).
func (m *Machine) Restored() bool { return m.tpl != nil && m.tpl.restored() }

// RestoreFailed reports whether the machine ended because the template it
// started from failed: its guest did not answer once woken, and the
// template is discarded (vm.Restorer).
func (m *Machine) RestoreFailed() bool { return m.tpl != nil && m.tpl.failed() }
