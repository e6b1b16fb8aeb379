package qemu

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"syscall"
)

// setProcAttr makes the kernel kill QEMU (or virtiofsd) when this process
// dies, so no VM outlives Airlock. Pdeathsig follows the thread that
// started the child; Go keeps that thread alive unless a goroutine exits
// while locked to it, which this package never does.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}

// socketPair returns two connected unix stream sockets.
func socketPair() (*os.File, *os.File, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, os.NewSyscallError("socketpair", err)
	}
	return os.NewFile(uintptr(fds[0]), "mux-host"), os.NewFile(uintptr(fds[1]), "mux-qemu"), nil
}

func isRoot() bool { return os.Geteuid() == 0 }

// runAs makes cmd start as u, with only the groups given (QEMU needs the
// kvm group for /dev/kvm). Go drops the identity before it sets the parent
// death signal, so the signal survives; QEMU's own -runas would lose it
// (the kernel clears it when a process changes its uid) and a QEMU
// outliving Airlock would keep running.
func runAs(cmd *exec.Cmd, u hostUser, groups []uint32) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: groups}
}

// folderOwner is who owns dir: its uid, with that user's primary group
// (else the folder's group, else nogroup: never root's group for a user).
func folderOwner(dir string) (hostUser, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return hostUser{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return hostUser{}, fmt.Errorf("%s: no owner", dir)
	}
	u := hostUser{UID: st.Uid, GID: st.Gid}
	if u.UID == 0 {
		return u, nil
	}
	if pw, err := user.LookupId(strconv.Itoa(int(u.UID))); err == nil {
		if g, err := strconv.Atoi(pw.Gid); err == nil {
			u.GID = uint32(g)
		}
	}
	if u.GID == 0 {
		u.GID = 65534
	}
	return u, nil
}

// fileOwner is who owns the file fi describes.
func fileOwner(fi os.FileInfo) (uid, gid uint32, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return st.Uid, st.Gid, true
}

// groupID is the id of a host group, if it exists.
func groupID(name string) (uint32, bool) {
	g, err := user.LookupGroup(name)
	if err != nil {
		return 0, false
	}
	id, err := strconv.Atoi(g.Gid)
	return uint32(id), err == nil
}

// unixRights is the ancillary data that passes descriptor fd.
func unixRights(fd int) []byte { return syscall.UnixRights(fd) }

// terminate asks a process to exit.
func terminate(p *os.Process) error { return p.Signal(syscall.SIGTERM) }

// usable reports whether a device node opens read-write.
func usable(dev string) bool {
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		return false
	}
	f.Close()
	return true
}
