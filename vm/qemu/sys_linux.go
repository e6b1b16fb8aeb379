package qemu

import (
	"os"
	"os/exec"
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
