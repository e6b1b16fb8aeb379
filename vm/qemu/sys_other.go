//go:build !linux

package qemu

import (
	"errors"
	"os"
	"os/exec"
)

// The QEMU backend runs on Linux only; these keep the package building
// elsewhere.

func setProcAttr(*exec.Cmd) {}

func socketPair() (*os.File, *os.File, error) {
	return nil, nil, errors.New("qemu: the serial transport is only built for Linux")
}

func isRoot() bool { return os.Geteuid() == 0 }

func runAs(*exec.Cmd, hostUser, []uint32) {}

func folderOwner(string) (hostUser, error) {
	return hostUser{}, errors.New("qemu: only built for Linux")
}

func groupID(string) (uint32, bool) { return 0, false }

func fileOwner(os.FileInfo) (uid, gid uint32, ok bool) { return 0, 0, false }

func terminate(p *os.Process) error { return p.Kill() }

func usable(string) bool { return false }

func unixRights(int) []byte { return nil }
