package qemu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"time"
)

// virtiofsd is a running virtio-fs daemon, owned by one machine.
type virtiofsd struct {
	cmd    *exec.Cmd
	socket string
	done   chan struct{}
	stderr *tail
}

// virtiofsdArgs is the daemon's command line for a sandbox mode.
func virtiofsdArgs(socket, dir, sandbox string) []string {
	return []string{
		"--socket-path=" + socket,
		"-o", "source=" + dir,
		"-o", "cache=auto",
		"-o", "sandbox=" + sandbox,
	}
}

// startVirtiofsd starts virtiofsd and waits for its socket. The namespace
// sandbox is tried first; where namespaces are not allowed (containers),
// chroot.
func startVirtiofsd(ctx context.Context, bin, socket, dir string, log *slog.Logger) (*virtiofsd, error) {
	var errs []error
	for _, sandbox := range []string{"namespace", "chroot"} {
		d, err := runVirtiofsd(ctx, bin, virtiofsdArgs(socket, dir, sandbox))
		if err == nil {
			log.Info("virtiofsd running", "sandbox", sandbox, "pid", d.cmd.Process.Pid)
			return d, nil
		}
		errs = append(errs, fmt.Errorf("sandbox=%s: %w", sandbox, err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("qemu: virtiofsd: %w", errors.Join(errs...))
}

func runVirtiofsd(ctx context.Context, bin string, args []string) (*virtiofsd, error) {
	socket := args[0][len("--socket-path="):]
	os.Remove(socket)
	d := &virtiofsd{cmd: exec.Command(bin, args...), socket: socket, done: make(chan struct{}), stderr: newTail(4096)}
	d.cmd.Stdout, d.cmd.Stderr = d.stderr, d.stderr
	setProcAttr(d.cmd)
	if err := d.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		d.cmd.Wait()
		close(d.done)
	}()
	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		// The socket exists once virtiofsd listens on it; connecting would
		// take the one connection virtiofsd serves.
		if fi, err := os.Stat(socket); err == nil && fi.Mode()&os.ModeSocket != 0 {
			return d, nil
		}
		select {
		case <-d.done:
			return nil, fmt.Errorf("exited: %s", d.stderr.String())
		case <-ctx.Done():
			d.stop()
			return nil, ctx.Err()
		case <-deadline.C:
			d.stop()
			return nil, fmt.Errorf("no socket after 5s: %s", d.stderr.String())
		case <-tick.C:
		}
	}
}

// stop ends virtiofsd (it normally exits with QEMU's disconnect) and
// removes its socket.
func (d *virtiofsd) stop() {
	select {
	case <-d.done:
	case <-time.After(time.Second):
		terminate(d.cmd.Process)
		select {
		case <-d.done:
		case <-time.After(2 * time.Second):
			d.cmd.Process.Kill()
			<-d.done
		}
	}
	os.Remove(d.socket)
}
