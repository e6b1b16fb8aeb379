//go:build linux

package api

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestOtherUserRefused: a process of another uid cannot use the socket,
// even if the file modes were loosened.
func TestOtherUserRefused(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to act as another user")
	}
	dir, _ := os.MkdirTemp("", "airlock-api-")
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "run", "airlock.sock")
	l, err := ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go Serve(ctx, l, Handler(&fakeCore{}, nil), nil)
	// Even with the folder and socket opened up, the peer check refuses.
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(sock), 0o755)
	os.Chmod(sock, 0o666)
	probe := "curl -s -i --max-time 5 --unix-socket " + sock + " http://airlock/v1/status"
	if out, err := runAs(0, "sh", "-c", probe); err != nil || !strings.Contains(out, "200 OK") {
		t.Skipf("the probe does not reach the socket even as its owner (%v): %s", err, out)
	}
	out, err := runAs(1000, "sh", "-c", probe+"; echo rc=$?")
	if err != nil {
		t.Skipf("cannot run as uid 1000 here: %v", err)
	}
	if strings.Contains(out, "200 OK") || strings.Contains(out, "running_tasks") {
		t.Fatalf("uid 1000 got an answer: %s", out)
	}
}

func runAs(uid uint32, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}
