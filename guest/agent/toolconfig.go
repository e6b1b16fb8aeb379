//go:build linux

package agent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/guest/api"
)

// toolConfig is what the agent protects in the shared folder: the paths
// the user's own tools run on the host (api.HostRunPaths). A task that
// edits them has the host run its code the next time the user runs
// `git status` or opens the folder. Unless the user allows it for the
// workspace (api.BootConfig.ToolConfigWritable), the agent makes those that
// exist read-only to tasks before each task starts: each is a read-only
// bind mount of itself in the guest, and .git a bind mount of itself, so
// none of them can be removed, renamed away or replaced (EBUSY) and their
// contents cannot change (EROFS). A .git folder without hooks gets an
// empty hooks folder first, so that none can be made in it.
//
// What .git/config names in the workspace as more configuration or as
// hooks git runs by itself is made read-only the same way
// (gitReferences).
//
// Guest root can unmount them: it is root. Paths a task makes where none
// were (a `git init`, a new .vscode) are protected from the next task on,
// not from the one that made them; nor are repositories below the
// workspace's top, or submodules' hooks (.git/modules).
var toolConfig = toolTree(api.HostRunPaths)

// toolTree turns the shared list into the tree protectTools walks: a
// folder that holds listed paths is bound onto itself (self), so they
// cannot be renamed away with it, and a listed folder inside such a folder
// is created when missing, so that none can be made in it.
func toolTree(paths []api.HostRunPath) []toolPath {
	var tree []toolPath
	for _, p := range paths {
		tree = addTool(tree, strings.Split(p.Path, "/"), p.Dir, false)
	}
	return tree
}

func addTool(tree []toolPath, elems []string, dir, inSelf bool) []toolPath {
	i := slices.IndexFunc(tree, func(t toolPath) bool { return t.name == elems[0] })
	if i < 0 {
		tree = append(tree, toolPath{name: elems[0]})
		i = len(tree) - 1
	}
	if len(elems) == 1 {
		tree[i].dir, tree[i].create = dir, dir && inSelf
		return tree
	}
	tree[i].self = true
	tree[i].children = addTool(tree[i].children, elems[1:], dir, true)
	return tree
}

// toolPath is one protected path below its parent.
type toolPath struct {
	name string
	// dir: a folder (else a file). self: a folder bound onto itself
	// read-write, so it cannot be renamed away with what is protected in
	// it; a .git that is a file (a worktree's or a submodule's pointer to
	// its repository) is bound read-only instead.
	dir, self bool
	// create makes an empty folder when it is missing (in an existing
	// parent), owned by uid:gid.
	create   bool
	children []toolPath
}

// guardToolConfig protects the tool configuration that exists in the
// workspace and is not yet protected (toolConfig); serialised, as tasks
// start concurrently. Failures are logged: a task still runs.
func (s *Server) guardToolConfig() {
	if !s.cfg.GuardToolConfig {
		return
	}
	s.toolMu.Lock()
	defer s.toolMu.Unlock()
	dfd, err := unix.Open(s.cfg.WorkspaceDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		s.log.Warn("tool configuration not protected", "err", err)
		return
	}
	defer unix.Close(dfd)
	err = protectTools(dfd, toolConfig, s.cfg.UID, s.cfg.GID)
	// After .git/config is read-only: what it names cannot change after.
	err = errors.Join(err, protectGitReferences(dfd))
	// Logged when it changes, not for every task.
	if msg := fmt.Sprint(err); err != nil && msg != s.toolErr {
		s.log.Warn("tool configuration not fully protected", "err", err)
		s.toolErr = msg
	} else if err == nil {
		s.toolErr = ""
	}
}

// protectTools protects paths beneath the folder dfd.
func protectTools(dfd int, paths []toolPath, uid, gid uint32) error {
	var errs []error
	for _, p := range paths {
		if err := p.protect(dfd, uid, gid); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p.name, err))
		}
	}
	return errors.Join(errs...)
}

func (p toolPath) protect(dfd int, uid, gid uint32) error {
	fd, err := unix.Openat(dfd, p.name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) && p.create {
		if err := unix.Mkdirat(dfd, p.name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			return err
		}
		_ = unix.Fchownat(dfd, p.name, int(uid), int(gid), unix.AT_SYMLINK_NOFOLLOW)
		fd, err = unix.Openat(dfd, p.name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_TYPE, &st); err != nil {
		return err
	}
	isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return nil // nothing is bound over a link; see the README
	case p.self && !isDir:
		return bindSelf(fd, &st, true) // a .git file
	case p.self:
		if err := bindSelf(fd, &st, false); err != nil {
			return err
		}
		// Open it again: the children are protected in the new mount.
		sub, err := unix.Openat(dfd, p.name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(sub)
		return protectTools(sub, p.children, uid, gid)
	case isDir != p.dir:
		return nil // not what the tool reads
	default:
		return bindSelf(fd, &st, true)
	}
}

// bindSelf mounts fd's file or folder onto itself, read-only when ro,
// unless it is a mount's root already (protected by an earlier call).
func bindSelf(fd int, st *unix.Statx_t, ro bool) error {
	if st.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 && st.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0 {
		return nil
	}
	tree, err := unix.OpenTree(fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return os.NewSyscallError("open_tree", err)
	}
	defer unix.Close(tree)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if ro {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return os.NewSyscallError("mount_setattr", err)
	}
	if err := unix.MoveMount(tree, "", fd, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return os.NewSyscallError("move_mount", err)
	}
	return nil
}

// maxGitConfig bounds how much of .git/config is read: a task may have
// grown it before it was protected.
const maxGitConfig = 256 << 10

// gitReferences are the paths in the workspace that .git/config makes git
// run or read as configuration on the host, relative to the workspace:
// files it includes (include.path, includeIf.*.path: configuration that
// may set core.fsmonitor or aliases, relative to .git), core.hooksPath's
// folder (relative to the top: husky's .husky/_, whose hooks call the
// scripts beside it, so the top folder it is in) and a core.fsmonitor
// that names a program in the workspace (git runs it on every status).
// Paths outside the workspace (absolute, ~, climbing out) are left out.
func gitReferences(config []byte) []string {
	var out []string
	add := func(p string) {
		p = filepath.Clean(p)
		if p == "." || filepath.IsAbs(p) || p == ".." || strings.HasPrefix(p, "../") {
			return
		}
		out = append(out, p)
	}
	section := ""
	for _, line := range strings.Split(string(config), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "[") {
			end := strings.IndexByte(line, ']')
			if end < 0 {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimSpace(line[1:end]), " ")
			section = strings.ToLower(name)
			line = strings.TrimSpace(line[end+1:]) // a key may follow on the same line
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		key, value = strings.ToLower(strings.TrimSpace(key)), gitValue(value)
		if value == "" || strings.HasPrefix(value, "~") || filepath.IsAbs(value) {
			continue
		}
		switch {
		case (section == "include" || section == "includeif") && key == "path":
			add(filepath.Join(".git", value))
		case section == "core" && key == "hookspath":
			p := filepath.Clean(value)
			if top, _, _ := strings.Cut(p, "/"); top != ".git" {
				p = top
			}
			add(p)
		case section == "core" && key == "fsmonitor" && !strings.ContainsAny(value, " \t") && strings.Contains(value, "/"):
			add(value)
		}
	}
	return out
}

// gitValue is a config value without its comment and quotes; escapes are
// not undone (a path with them is left as it is, and then not found).
func gitValue(v string) string {
	v = strings.TrimSpace(v)
	if strings.HasPrefix(v, `"`) {
		if end := strings.IndexByte(v[1:], '"'); end >= 0 {
			return v[1 : end+1]
		}
		return ""
	}
	if i := strings.IndexAny(v, "#;"); i >= 0 {
		v = v[:i]
	}
	return strings.TrimSpace(v)
}

// protectGitReferences makes what .git/config refers to in the workspace
// read-only (gitReferences).
func protectGitReferences(dfd int) error {
	how := unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS}
	fd, err := unix.Openat2(dfd, ".git/config", &how)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
		return nil
	}
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), ".git/config")
	b, err := io.ReadAll(io.LimitReader(f, maxGitConfig))
	f.Close()
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range gitReferences(b) {
		if err := protectBeneath(dfd, p); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// protectBeneath makes path beneath the folder dfd read-only, if it is
// there and reached without links.
func protectBeneath(dfd int, path string) error {
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS}
	fd, err := unix.Openat2(dfd, path, &how)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_TYPE, &st); err != nil {
		return err
	}
	if t := st.Mode & unix.S_IFMT; t != unix.S_IFDIR && t != unix.S_IFREG {
		return nil
	}
	return bindSelf(fd, &st, true)
}
