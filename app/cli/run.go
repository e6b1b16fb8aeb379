package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/app/changes"
	"github.com/airlock-sandbox/airlock/app/egress"
	"github.com/airlock-sandbox/airlock/app/egress/policy"
	"github.com/airlock-sandbox/airlock/app/sandbox"
	"github.com/airlock-sandbox/airlock/app/service"
	"github.com/airlock-sandbox/airlock/app/tasks"
	"github.com/airlock-sandbox/airlock/app/workspace"
	"github.com/airlock-sandbox/airlock/guest/client"
	"github.com/airlock-sandbox/airlock/internal/printable"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

type runFlags struct {
	workspace   string
	readOnly    bool
	toolConfig  bool
	env         []string
	cwd         string
	timeout     time.Duration
	tty         bool
	root        bool
	cpus        int
	memory      int
	bootTimeout time.Duration
	imageDir    string
	consoleLog  string
	kernelArgs  []string
	verbose     bool
	allow       []string
	deny        []string
	mapHosts    []string
	egressLog   string
	ephemeral   bool

	secrets       []string
	upstreamCAs   []string
	upstreamProxy string
	inspect       bool
	image         string
	keepDisk      bool
	changes       string
}

func newRunCmd(stdio Stdio, g *globals) *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run [flags] -- CMD [ARG...]",
		Short: "Boot a sandbox, run one command in it, and shut it down",
		Long: `Boots a Linux VM that sees only the --workspace folder (at /workspace), runs
CMD in it as an unprivileged user, streams stdin, stdout and stderr, shuts the
VM down and exits with CMD's exit code (128+N when a signal N ended it, 124 when
--timeout ended it). Errors of Airlock itself exit with 125.

When the Airlock service is running (airlock serve, or the desktop app), the
command runs on its warm VM instead, in milliseconds, and appears in
'airlock tasks'; flags that shape a VM (--workspace, --tty, --allow, ...) or
--ephemeral boot a fresh one as above.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return errors.New("no command given")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			f.verbose = g.verbose
			if c := useService(cmd, g); c != nil {
				return runViaService(cmd.Context(), stdio, c, f, args)
			}
			return run(cmd.Context(), stdio, f, args)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.workspace, "workspace", "w", "", "the folder to share at /workspace (nothing is shared when empty)")
	fl.BoolVar(&f.readOnly, "read-only", false, "share the workspace read-only")
	fl.BoolVar(&f.toolConfig, "tool-config-writable", false, "let the command change what your tools run on the host (.git/config, .git/hooks, .envrc, .vscode, .idea), read-only to it otherwise")
	fl.StringArrayVarP(&f.env, "env", "e", nil, "set an environment variable KEY=VALUE for the command (repeatable)")
	fl.StringVar(&f.cwd, "cwd", "", "working folder in the guest (default /workspace)")
	fl.DurationVar(&f.timeout, "timeout", 0, "end the command after this long (e.g. 30s, 5m)")
	fl.BoolVarP(&f.tty, "tty", "t", false, "give the command a terminal (interactive programs)")
	fl.BoolVar(&f.root, "root", false, "run the command as root in the guest")
	fl.IntVar(&f.cpus, "cpus", sandbox.DefaultCPUs, "virtual CPUs")
	fl.IntVar(&f.memory, "memory", sandbox.DefaultMemoryMiB, "memory in MiB")
	fl.DurationVar(&f.bootTimeout, "boot-timeout", sandbox.DefaultBootTimeout, "give up when the guest is not ready after this long")
	fl.StringVar(&f.imageDir, "image-dir", "", "folder of the guest image (default: found next to the program)")
	fl.StringVar(&f.consoleLog, "console-log", "", "file to write the guest's console to (default: a file in the user cache folder)")
	fl.StringArrayVar(&f.kernelArgs, "kernel-arg", nil, "extra kernel command line word, for debugging (repeatable)")
	fl.StringArrayVar(&f.allow, "allow", nil, "let the command connect to HOST, *.DOMAIN, an address or CIDR, optionally :PORT (repeatable)")
	fl.StringArrayVar(&f.deny, "deny", nil, "never let the command connect to PATTERN; wins over --allow (repeatable)")
	fl.StringArrayVar(&f.mapHosts, "map-host", nil, "connect NAME to ADDR for this run (NAME=ADDR, repeatable); --allow NAME[:PORT] still decides which ports are open")
	fl.StringVar(&f.egressLog, "egress-log", "", "append every connection decision to FILE as JSON lines")
	fl.BoolVar(&f.ephemeral, "ephemeral", false, "boot a fresh VM for this command even when the service is running")
	fl.StringArrayVar(&f.secrets, "secret", nil, "give the command NAME=<placeholder> for secret NAME; the gate adds the value on requests to its hosts (repeatable; see airlock secret)")
	fl.StringArrayVar(&f.upstreamCAs, "upstream-ca", nil, "also trust the CA certificates in this PEM file when verifying servers (corporate proxies; repeatable)")
	fl.StringVar(&f.upstreamProxy, "upstream-proxy", "", "send every outbound connection through this HTTP proxy (http://[user:pass@]host:port)")
	fl.BoolVar(&f.inspect, "inspect", false, "terminate TLS for every host, not just those with a secret, so placeholders are caught everywhere")
	fl.StringVar(&f.image, "image", sandbox.DefaultImage, "guest image: minimal (busybox) or standard (Debian with python3, pip, git, curl, ...)")
	fl.StringVar(&f.changes, "changes", string(changes.Auto), "how the workspace takes what the command writes: direct (at once), review (held until you apply: airlock changes --workspace DIR), auto (applied when the command ends, undoable with airlock undo --workspace DIR)")
	fl.BoolVar(&f.keepDisk, "keep-disk", false, "standard image: keep changes outside /workspace (installed packages, home) on the workspace's persistent disk; 'airlock workspace reset-disk' wipes it")
	_ = fl.MarkHidden("kernel-arg")
	fl.SetInterspersed(false)
	return cmd
}

func run(ctx context.Context, stdio Stdio, f runFlags, argv []string) error {
	mode, err := changes.ParseMode(f.changes)
	if err != nil {
		return fmt.Errorf("--changes: %w", err)
	}
	// The rules are the user's to fix: say so before looking for an image.
	if _, err := policy.New(f.allow, f.deny, f.mapHosts); err != nil {
		return err
	}
	opts, err := f.sandboxOptions(stdio)
	if err != nil {
		return err
	}
	var held *service.Held
	if service.Holds(opts.Workspace, mode, opts.ReadOnly) {
		state, err := stateDir()
		if err != nil {
			return err
		}
		if held, err = service.OpenHeld(state, opts.Workspace, mode); err != nil {
			return err
		}
		defer held.Close()
		held.Log = warnLog(stdio)
		if err := held.BootOptions(&opts); err != nil {
			return err
		}
	}
	spec, err := f.spec(argv)
	if err != nil {
		return err
	}
	gcfg, secretEnv, err := f.ephemeralCredentials()
	if err != nil {
		return err
	}
	gcfg.Allow, gcfg.Deny, gcfg.MapHosts, gcfg.LogFile, gcfg.Logger = f.allow, f.deny, f.mapHosts, f.egressLog, opts.Logger
	gate, err := egress.New(gcfg)
	if err != nil {
		return err
	}
	opts.GuestCA = gcfg.CA.CertPEM()
	defer gate.Close()
	opts.Egress = gate
	gctx, stopReport := context.WithCancel(ctx)
	defer stopReport()
	go reportDenials(gctx, gate, stdio.Err)
	user, pass := gate.Credentials(spec.ID)
	spec.Env = slices.Concat(egress.ProxyEnv(user, pass), egress.TrustEnv(), secretEnv, spec.Env)

	sb, err := sandbox.Start(ctx, opts)
	if err != nil {
		if ctx.Err() != nil {
			return exitError{code: 128 + int(syscall.SIGINT)}
		}
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		// The task has ended, and what it left running with it.
		if err := sb.CloseIdle(cctx); err != nil {
			fmt.Fprintf(stdio.Err, "airlock: %s\n", oneLine(err.Error()))
		}
	}()

	if held != nil {
		held = held.On(service.Guest{Agent: sb.Agent()})
		// Then, before the command runs, a layer the guest has forgotten
		// everything of begins its epoch: your edits until now are no
		// conflicts.
		if err := held.AfterBoot(ctx); err != nil {
			return err
		}
		if err := held.Fresh(); err != nil {
			return err
		}
	}

	streams := client.Stdio{Stdin: stdio.In, Stdout: stdio.Out, Stderr: stdio.Err}
	if f.tty {
		restore, resize := attachTerminal(stdio, &spec)
		defer restore()
		streams.Resize = resize
	}
	// The guest enforces the deadline; the host guard only catches a guest
	// that does not.
	ectx := ctx
	if f.timeout > 0 {
		var cancel context.CancelFunc
		ectx, cancel = context.WithTimeout(ctx, f.timeout+30*time.Second)
		defer cancel()
	}
	exit, err := sb.Agent().Exec(ectx, spec, streams)
	if held != nil {
		// What the command wrote is in the guest's layer: take it before
		// the VM goes, even when the command was interrupted.
		pullHeld(context.WithoutCancel(ctx), stdio, held)
	}
	if ctx.Err() != nil {
		fmt.Fprintln(stdio.Err, "airlock: interrupted; the task was killed")
		return exitError{code: 128 + int(syscall.SIGINT)}
	}
	state, ex, reason := service.Outcome(exit, err, false, f.timeout)
	return taskExit(stdio, tasks.Task{ID: spec.ID, State: state, Exit: ex, Reason: reason}, f.timeout)
}

// pullHeld takes what the guest's layer holds into the folder's pending
// changes, applies them in auto mode, and says on stderr when changes wait
// for review. A failure is reported, not fatal: the layer disk keeps the
// changes and the next run's pull finds them. h is on the run's VM.
func pullHeld(ctx context.Context, stdio Stdio, h *service.Held) {
	warn := func(err error) { fmt.Fprintf(stdio.Err, "airlock: %s\n", oneLine(err.Error())) }
	sum, err := h.Pull(ctx)
	if err != nil {
		warn(err)
		return
	}
	for _, r := range sum.Refused {
		fmt.Fprintf(stdio.Err, "airlock: changes: %s is not carried to the folder: %s\n", printable.String(r.Path), printable.String(r.Reason))
	}
	if h.Mode == changes.Auto {
		if _, err := h.ApplyAuto(ctx); err != nil {
			warn(err)
		}
	}
	pending, err := h.Store.Pending()
	if err != nil {
		warn(err)
		return
	}
	if pending > 0 {
		ws := printable.String(h.Workspace)
		fmt.Fprintf(stdio.Err, "airlock: %d change(s) wait for review; see them with: airlock changes --workspace %s\n", pending, ws)
	}
}

func (f runFlags) sandboxOptions(stdio Stdio) (sandbox.Options, error) {
	o := sandbox.Options{
		ReadOnly: f.readOnly, CPUs: f.cpus, MemoryMiB: f.memory,
		BootTimeout: f.bootTimeout, KernelArgs: f.kernelArgs, ConsoleLog: f.consoleLog,
	}
	if f.verbose {
		o.Logger = slog.New(slog.NewTextHandler(stdio.Err, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if n := min(runtime.NumCPU(), 64); f.cpus < 1 || f.cpus > n {
		return o, fmt.Errorf("--cpus %d: this machine has %d CPUs; choose between 1 and %d", f.cpus, runtime.NumCPU(), n)
	}
	if f.memory < 256 || f.memory > 1<<20 {
		return o, fmt.Errorf("--memory %d: choose at least 256 (MiB)", f.memory)
	}
	if f.workspace != "" {
		host, err := workspace.Local(runtime.GOOS)
		if err != nil {
			return o, err
		}
		if o.Workspace, err = host.Validate(f.workspace); err != nil {
			return o, err
		}
		o.UID, o.GID = workspace.Owner(o.Workspace)
		if f.toolConfig {
			o.ToolConfigWritable = []string{o.Workspace}
		}
		if o.UID == 0 && !f.root && !f.readOnly {
			fmt.Fprintf(stdio.Err, "airlock: note: %s is owned by root; the task runs as an unprivileged user and may not be able to write to it (use --root, or share a folder you own)\n", o.Workspace)
			o.UID, o.GID = 0, 0
		}
	}
	if err := sandbox.CheckImageName(f.image); err != nil {
		return o, fmt.Errorf("--image: %w", err)
	}
	dirs := []string(nil)
	if f.imageDir != "" {
		dirs = []string{f.imageDir, filepath.Join(f.imageDir, runtime.GOARCH), filepath.Join(f.imageDir, f.image, runtime.GOARCH)}
	}
	img, err := sandbox.FindNamedImage(f.image, dirs)
	if err != nil {
		return o, err
	}
	o.Image = img
	if f.keepDisk {
		if img.RootDisk == "" {
			return o, fmt.Errorf("--keep-disk needs --image standard (the %s image has no root disk to keep changes over)", img.Name)
		}
		if o.DiskDir, err = stateDir(); err != nil {
			return o, err
		}
	}
	if o.ConsoleLog == "" {
		o.ConsoleLog = defaultConsoleLog()
	}
	return o, nil
}

func (f runFlags) spec(argv []string) (client.Spec, error) {
	for _, kv := range f.env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return client.Spec{}, fmt.Errorf("--env %q: expected KEY=VALUE", kv)
		}
	}
	if f.timeout < 0 {
		return client.Spec{}, fmt.Errorf("--timeout %s: must be positive", f.timeout)
	}
	return client.Spec{
		ID: newID(), Argv: argv, Env: f.env, Cwd: f.cwd, Root: f.root,
		TTY: f.tty, Timeout: f.timeout,
	}, nil
}

// attachTerminal puts a terminal stdin into raw mode and forwards window
// size changes; it returns the function that restores the terminal.
func attachTerminal(stdio Stdio, spec *client.Spec) (restore func(), resize <-chan client.Size) {
	in, ok := stdio.In.(*os.File)
	if !ok || !term.IsTerminal(int(in.Fd())) {
		return func() {}, nil
	}
	fd := int(in.Fd())
	if w, h, err := term.GetSize(fd); err == nil {
		spec.Rows, spec.Cols = uint16(h), uint16(w)
	}
	old, err := term.MakeRaw(fd)
	if err != nil {
		return func() {}, nil
	}
	ch := make(chan client.Size, 1)
	winch := make(chan os.Signal, 1)
	notifyResize(winch)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-winch:
				if w, h, err := term.GetSize(fd); err == nil {
					select {
					case ch <- client.Size{Rows: uint16(h), Cols: uint16(w)}:
					default:
					}
				}
			}
		}
	}()
	return func() {
		signal.Stop(winch)
		close(done)
		_ = term.Restore(fd, old)
	}, ch
}

// reportDenials tells the user, once per destination, that the gate refused
// a connection and how to allow it: the task itself often hides why its
// network failed.
func reportDenials(ctx context.Context, g *egress.Gate, w io.Writer) {
	r := denialReport{w: w, seen: map[string]bool{}}
	for d := range g.Subscribe(ctx) {
		r.add(d)
	}
}

// maxReported bounds the destinations `airlock run` names: the guest
// picks the names, and a flood of distinct ones must neither grow the set
// without end nor bury the task's own output.
const maxReported = 200

// denialReport is what reportDenials has told the user so far.
type denialReport struct {
	w    io.Writer
	seen map[string]bool
	more bool // said that further refusals go unreported
	// service: the task runs in the service's sandbox, whose rules
	// `airlock egress allow` changes; otherwise in a VM of its own, which
	// run's flags shape.
	service bool
}

func (r *denialReport) add(d egress.Decision) {
	if d.Action != egress.ActionDeny || d.Host == "" {
		return
	}
	// The host is whatever the guest asked for, escape sequences
	// included: it reaches the terminal only escaped.
	host := printable.String(d.Host)
	dest := net.JoinHostPort(host, strconv.Itoa(int(d.Port)))
	if r.seen[dest] {
		return
	}
	if len(r.seen) >= maxReported {
		if !r.more {
			r.more = true
			fmt.Fprintf(r.w, "airlock: egress: more than %d destinations refused; not naming more\n", maxReported)
		}
		return
	}
	r.seen[dest] = true
	if d.Reason == egress.ReasonBadRequest {
		// Not a name or address a rule could allow.
		fmt.Fprintf(r.w, "airlock: egress: refused %s (%s)\n", dest, d.Reason)
		return
	}
	allow := "--allow "
	if r.service {
		allow = "airlock egress allow "
	}
	hint := allow + host
	switch {
	case (d.Reason == egress.ReasonPrivateAddress || d.Reason == egress.ReasonMetadataAddress) && strings.HasPrefix(d.Rule, "map-host "):
		// A pinned name on a port no rule allows: the pin is there.
		hint = allow + dest
	case d.Reason == egress.ReasonPrivateAddress || d.Reason == egress.ReasonMetadataAddress:
		// A name that resolves inside the host's networks needs the
		// address itself allowed (or a pin), not just the name.
		if ip, err := netip.ParseAddr(d.Addr); err == nil && d.Host != ip.String() {
			hint = allow + ip.String()
			if !r.service {
				hint += " or --map-host " + host + "=" + ip.String()
			}
		}
	}
	fmt.Fprintf(r.w, "airlock: egress: refused %s (%s); allow it with %s\n", dest, printable.String(string(d.Reason)), hint)
}

func newID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// defaultConsoleLog is the per-user file the last run's console goes to.
func defaultConsoleLog() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	dir += "/airlock"
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return ""
	}
	p := dir + "/console.log"
	_ = os.Truncate(p, 0)
	return p
}
