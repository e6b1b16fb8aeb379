//go:build linux

package agent

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
)

// Limits on what a host may ask for. execwire already bounds a message to
// execwire.MaxPayload; these keep one task's argv and environment sane.
const (
	maxArgs     = 4096
	maxArgBytes = 1 << 20
	maxEnv      = 1024
	maxEnvBytes = 256 << 10
	maxIDLen    = 256
	maxTermDim  = 4096

	defaultPath = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
	defaultTerm = "xterm-256color"
)

// spec is a validated ExecStart.
type spec struct {
	id      string
	path    string // resolved executable
	argv    []string
	env     []string
	dir     string
	root    bool
	tty     bool
	rows    uint16
	cols    uint16
	stdin   bool
	timeout time.Duration
}

func invalid(format string, a ...any) error {
	return agentv1.Errorf(agentv1.Code_INVALID_ARGUMENT, "exec: "+format, a...)
}

// prepare validates start and resolves the executable as the task will see
// it. Every error is a *agentv1.Error.
func (s *Server) prepare(start *agentv1.ExecStart) (*spec, error) {
	sp := &spec{root: start.GetRoot(), tty: start.GetTty(), stdin: start.GetStdin()}
	if len(start.GetId()) > maxIDLen {
		return nil, invalid("id longer than %d bytes", maxIDLen)
	}
	sp.id = start.GetId()

	switch {
	case len(start.GetArgv()) > 0 && start.GetShell() != "":
		return nil, invalid("set argv or shell, not both")
	case start.GetShell() != "":
		sp.argv = []string{"/bin/sh", "-c", start.GetShell()}
	case len(start.GetArgv()) > 0:
		sp.argv = start.GetArgv()
	default:
		return nil, invalid("nothing to run: set argv or shell")
	}
	if len(sp.argv) > maxArgs {
		return nil, invalid("more than %d arguments", maxArgs)
	}
	n := 0
	for _, a := range sp.argv {
		n += len(a) + 1
		if strings.IndexByte(a, 0) >= 0 {
			return nil, invalid("an argument contains a NUL byte")
		}
	}
	if n > maxArgBytes {
		return nil, invalid("arguments longer than %d bytes", maxArgBytes)
	}
	if sp.argv[0] == "" {
		return nil, invalid("empty command name")
	}

	if t := start.GetTimeoutMs(); t < 0 {
		return nil, invalid("negative timeout_ms")
	} else if t > 0 {
		sp.timeout = time.Duration(min(t, int64(1<<62)/int64(time.Millisecond))) * time.Millisecond
	}
	if sp.tty {
		r, c := start.GetRows(), start.GetCols()
		if r == 0 {
			r = 24
		}
		if c == 0 {
			c = 80
		}
		sp.rows, sp.cols = uint16(min(r, maxTermDim)), uint16(min(c, maxTermDim))
	}

	home := s.cfg.UserHome
	user := s.cfg.UserName
	if sp.root {
		home, user = "/root", "root"
	}
	var err error
	if sp.dir, err = s.taskDir(start.GetCwd(), home); err != nil {
		return nil, err
	}
	if sp.env, err = taskEnv(start.GetEnv(), user, home, sp.dir, sp.tty); err != nil {
		return nil, err
	}
	if sp.path, err = lookPath(sp.argv[0], envValue(sp.env, "PATH"), sp.dir); err != nil {
		return nil, err
	}
	return sp, nil
}

// taskDir returns the task's working directory: cwd made absolute against
// the default (the workspace when it is mounted, else home). Whether it is
// an existing directory is left to the child's chdir, and only a start that
// failed looks (checkDir): on the workspace a stat is a round trip to the
// host's file server, which every task would pay.
func (s *Server) taskDir(cwd, home string) (string, error) {
	if strings.IndexByte(cwd, 0) >= 0 || len(cwd) > 4096 {
		return "", invalid("bad cwd")
	}
	def := home
	if s.workspaceMounted() {
		def = s.cfg.WorkspaceDir
	}
	dir := def
	if cwd != "" {
		dir = cwd
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(def, dir)
		}
	}
	return filepath.Clean(dir), nil
}

// checkDir explains a failed start whose cause is the working directory,
// which must be an existing directory the task's user may enter; nil when
// it is one. The agent runs as root, so it reads the directory's owner and
// mode and decides for the task's uid itself: the child's chdir reports the
// same EACCES as its exec would, and "not executable" would blame the
// program for a folder the task user cannot enter (a root-owned 0700
// workspace shared by root).
func (s *Server) checkDir(sp *spec) error {
	dir := sp.dir
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return invalid("working directory %s does not exist", dir)
	case err != nil:
		return invalid("working directory %s: %v", dir, errors.Unwrap(err))
	case !fi.IsDir():
		return invalid("working directory %s is not a directory", dir)
	}
	if sp.root {
		return nil
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || searchable(st.Uid, st.Gid, uint32(fi.Mode().Perm()), s.cfg.UID, s.cfg.GID) {
		return nil
	}
	hint := ""
	if dir == s.cfg.WorkspaceDir || strings.HasPrefix(dir, s.cfg.WorkspaceDir+"/") {
		hint = "; the shared folder's owner and mode come from the host: give the folder to the user who runs Airlock, or run the task as root"
	}
	return agentv1.Errorf(agentv1.Code_PERMISSION_DENIED,
		"permission denied: the task user (uid %d) cannot enter the working directory %s (owner uid %d, gid %d, mode %04o)%s",
		s.cfg.UID, truncate(dir, 256), st.Uid, st.Gid, fi.Mode().Perm(), hint)
}

// searchable says whether uid (with primary group gid and no others: tasks
// have no supplementary groups) may search a directory of that owner, group
// and permission bits, by the kernel's rule: the owner's bits for the owner,
// else the group's for the group, else the others'.
func searchable(owner, group, perm, uid, gid uint32) bool {
	switch {
	case uid == 0:
		return true
	case uid == owner:
		return perm&0o100 != 0
	case gid == group:
		return perm&0o010 != 0
	default:
		return perm&0o001 != 0
	}
}

// taskEnv is a clean default environment overridden by the request's
// KEY=VALUE entries, in a stable order.
func taskEnv(extra []string, user, home, dir string, tty bool) ([]string, error) {
	if len(extra) > maxEnv {
		return nil, invalid("more than %d environment entries", maxEnv)
	}
	env := []string{
		// ~/.local/bin first, as Debian's ~/.profile does: where pip puts
		// the commands of packages a task installs for its user.
		"PATH=" + path.Join(home, ".local/bin") + ":" + defaultPath,
		"HOME=" + home,
		"USER=" + user,
		"LOGNAME=" + user,
		"SHELL=/bin/sh",
		"LANG=C.UTF-8",
		"PWD=" + dir,
	}
	if tty {
		env = append(env, "TERM="+defaultTerm)
	}
	n := 0
	for _, kv := range extra {
		n += len(kv) + 1
		if n > maxEnvBytes {
			return nil, invalid("environment longer than %d bytes", maxEnvBytes)
		}
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.IndexByte(kv, 0) >= 0 {
			return nil, invalid("environment entry %q is not KEY=VALUE", truncate(kv, 64))
		}
		env = setEnv(env, k, kv)
	}
	return env, nil
}

func setEnv(env []string, key, kv string) []string {
	for i, e := range env {
		if strings.HasPrefix(e, key+"=") {
			env[i] = kv
			return env
		}
	}
	return append(env, kv)
}

func envValue(env []string, key string) string {
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, key+"="); ok {
			return v
		}
	}
	return ""
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// lookPath finds name the way a shell would for the task: a name with a
// slash is taken as is (relative to dir), otherwise each absolute entry of
// pathEnv is tried. Relative PATH entries are ignored: they would resolve
// against the agent's directory, not the task's.
func lookPath(name, pathEnv, dir string) (string, error) {
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := checkExecutable(p); err != nil {
			return "", execError(name, err)
		}
		return p, nil
	}
	var denied error
	for _, d := range filepath.SplitList(pathEnv) {
		if !filepath.IsAbs(d) {
			continue
		}
		p := filepath.Join(d, name)
		err := checkExecutable(p)
		if err == nil {
			return p, nil
		}
		if errors.Is(err, syscall.EACCES) && denied == nil {
			denied = err
		}
	}
	if denied != nil {
		return "", execError(name, denied)
	}
	return "", execError(name, syscall.ENOENT)
}

func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return syscall.ENOENT
		}
		return err
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return syscall.EACCES
	}
	return nil
}

// execError maps why name could not be started to a *agentv1.Error.
func execError(name string, err error) error {
	switch {
	case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ENOTDIR):
		return agentv1.Errorf(agentv1.Code_NOT_FOUND, "command not found: %s", truncate(name, 256))
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return agentv1.Errorf(agentv1.Code_PERMISSION_DENIED, "permission denied: %s is not executable by the task user", truncate(name, 256))
	case errors.Is(err, syscall.ENOEXEC):
		return agentv1.Errorf(agentv1.Code_FAILED_PRECONDITION, "exec format error: %s is not a program this guest can run", truncate(name, 256))
	case errors.Is(err, syscall.E2BIG):
		return agentv1.Errorf(agentv1.Code_INVALID_ARGUMENT, "exec: argument list too long for %s (one argument is limited to 128 KiB)", truncate(name, 256))
	default:
		return agentv1.Errorf(agentv1.Code_INTERNAL, "exec %s: %v", truncate(name, 256), err)
	}
}
