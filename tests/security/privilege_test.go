//go:build e2e

package security

import (
	"bufio"
	"context"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/guest/client"
)

const privFamily = "guest privilege"

// TestGuestPrivilege: a task as uid 1000 cannot reach the transport,
// read or control the agent or PID 1, change the kernel, the clock, the
// mounts or other tasks' cgroups.
func TestGuestPrivilege(t *testing.T) {
	t.Parallel()
	p := probe(t)
	agent := "1" // the agent runs in init (guest/boot)
	ictx, icancel := context.WithTimeout(context.Background(), 30*time.Second)
	before, err := shared.Agent().Info(ictx)
	icancel()
	if err != nil {
		t.Fatal(err)
	}
	instance := before.GetAgentInstance()

	// A victim task, running as the same user, whose cgroup the attacker
	// must not control.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	go func() {
		shared.Agent().Exec(ctx, client.Spec{Argv: []string{"sh", "-c", "cat /proc/self/cgroup; echo $$; exec sleep 600"}}, client.Stdio{Stdout: pw})
		pw.Close()
	}()
	br := bufio.NewReader(pr)
	line, _ := br.ReadString('\n')
	victimPID, _ := br.ReadString('\n')
	victimPID = strings.TrimSpace(victimPID)
	go io.Copy(io.Discard, br)
	victimCg := "/sys/fs/cgroup" + strings.TrimPrefix(strings.TrimSpace(line), "0::")
	if !strings.HasPrefix(victimCg, "/sys/fs/cgroup/airlock/tasks/") {
		t.Fatalf("victim task's cgroup: %q", line)
	}
	if _, err := strconv.Atoi(victimPID); err != nil {
		t.Fatalf("victim task's pid: %q", victimPID)
	}
	// $$ is the victim's pid in its own PID namespace; the attacks name
	// it by its pid in the guest's, where a task that could see it would.
	victimPID = strings.TrimSpace(root(t, "for p in $(cat "+victimCg+"/cgroup.procs); do grep -q '^sleep' /proc/$p/cmdline && echo $p; done").Stdout)
	if _, err := strconv.Atoi(victimPID); err != nil {
		t.Fatalf("victim task's pid in the guest: %q", victimPID)
	}

	// perm: the refusal must be EPERM or EACCES (for the others any
	// failure will do: the thing is not there, or not reachable).
	cases := []struct {
		name, cmd string
		perm      bool
	}{
		{"open the transport device /dev/vport*", "for d in /dev/vport* /dev/hvc* /dev/vsock /dev/virtio-ports/*; do [ -e $d ] && { cat $d; echo x > $d; }; done; exit 1", false},
		{"vsock loopback to the agent's RPC port (CID 1:1024)", p + " vsock 1 1024", false},
		{"vsock to the agent's RPC port on the host side (CID 2:1024)", p + " vsock 2 1024", false},
		{"vsock to the guest's own CID on the agent's port (CID 3:1024)", p + " vsock 3 1024", false},
		{"read /dev/mem, /dev/port, /dev/console", "cat /dev/mem | head -c1; cat /dev/port | head -c1; echo x > /dev/console", false},
		{"read PID 1's environment", "cat /proc/1/environ", true},
		{"read the agent's environment", "cat /proc/" + agent + "/environ", true},
		{"read the agent's memory via /proc/PID/mem", p + " readmem " + agent, true},
		{"read the agent's memory via process_vm_readv", p + " vmread " + agent, true},
		{"list the agent's open files (the transport)", "ls /proc/" + agent + "/fd", true},
		{"enter the agent's root and cwd", "ls /proc/" + agent + "/root/ && ls /proc/1/cwd/", true},
		{"ptrace the agent", p + " ptrace " + agent, true},
		{"ptrace PID 1", p + " ptrace 1", true},
		// Another task's processes are outside a task's PID namespace:
		// these fail with ESRCH or ENOENT rather than EPERM.
		{"ptrace another task's process (same uid)", p + " ptrace " + victimPID, false},
		{"read another task's memory via /proc/PID/mem", p + " readmem " + victimPID, false},
		{"kill the agent (SIGKILL)", p + " kill " + agent + " 9", true},
		{"stop the agent (SIGSTOP)", p + " kill " + agent + " 19", true},
		{"kill PID 1", p + " kill 1 9", true},
		{"remount / read-only", "mount -o remount,ro /", true},
		{"remount the workspace", "mount -o remount,ro /workspace", true},
		{"mount a tmpfs over /etc", "mount -t tmpfs none /etc", true},
		{"unmount the workspace", "umount /workspace", true},
		{"load a module with insmod", "insmod $(find /lib/modules -name overlay.ko | head -1)", true},
		{"load a module with finit_module", p + " finit $(find /lib/modules -name overlay.ko | head -1)", true},
		{"load a module with init_module", p + " initmod $(find /lib/modules -name overlay.ko | head -1)", true},
		{"unload a module with rmmod", "rmmod overlay", true},
		{"unload a module with modprobe -r", "modprobe -r overlay; grep -q '^overlay ' /proc/modules && exit 1", false},
		{"change the modprobe helper", "echo /workspace/evil > /proc/sys/kernel/modprobe", true},
		{"set the clock with settimeofday", p + " settime", true},
		{"set the clock with clock_settime", p + " clockset", true},
		{"adjust the clock with adjtimex", p + " adjtime", true},
		{"set the clock with date -s", "date -s '2001-01-01 00:00:00'", true},
		{"write the hardware clock", "hwclock -w -f /dev/rtc0", true},
		{"move itself out of its cgroup (root)", "echo $$ > /sys/fs/cgroup/cgroup.procs", true},
		{"move itself to the agent's cgroup", "echo $$ > /sys/fs/cgroup/airlock/cgroup.procs", true},
		{"move itself into another task's cgroup", "echo $$ > " + victimCg + "/cgroup.procs", true},
		{"kill another task through its cgroup", "echo 1 > " + victimCg + "/cgroup.kill", true},
		{"freeze another task through its cgroup", "echo 1 > " + victimCg + "/cgroup.freeze", true},
		{"raise its own cgroup's limits", "echo max > $(sed 's|^0::|/sys/fs/cgroup|' /proc/self/cgroup)/memory.max && echo max > $(sed 's|^0::|/sys/fs/cgroup|' /proc/self/cgroup)/pids.max", true},
		{"make a cgroup", "mkdir /sys/fs/cgroup/airlock/tasks/evil || mkdir /sys/fs/cgroup/evil", true},
		{"read another task's cgroup files", "cat " + victimCg + "/cgroup.procs " + victimCg + "/memory.current " + victimCg + "/cgroup.events", false},
		{"reboot(2) (Ctrl-Alt-Del off)", p + " reboot-cad", true},
		{"sysrq trigger", "echo h > /proc/sysrq-trigger", true},
		{"setuid(0)", p + " setuid0", true},
		{"su to root", "su -c id root </dev/null", false},
		{"a setuid binary in the image", "find / -xdev -perm -4000 -type f 2>/dev/null | grep . && exit 0; exit 1", false},
		{"chroot", p + " chroot", true},
		{"enter PID 1's namespaces", "nsenter -t 1 -m -u -n -p true", true},
		{"create a user namespace", p + " userns", false},
		{"create a BPF map", p + " bpf", true},
		{"read kernel memory /proc/kcore", "head -c 16 /proc/kcore", false},
		{"read the kernel log", "dmesg | head -3 | grep .", false},
		{"write the root file system", "touch /evil-$$ && rm /evil-$$", false},
		{"write a system folder", "for f in /etc/evil /sbin/evil /lib/evil /home/evil /init; do touch $f && exit 0; done; exit 1", true},
		{"find a control socket inside the guest", "netstat -ltnx 2>/dev/null | grep -v '127.0.0.1:3128\\|127.0.0.1:1080' | grep -i listen", false},
	}
	// A kernel without module support or magic SysRq (the one built from
	// linux-source, every driver built in) has no modules to load, no
	// module syscalls, no modprobe helper and no /proc/sysrq-trigger:
	// those attacks must still fail, but cannot fail with EPERM.
	lacks := strings.Fields(root(t, "[ -e /proc/modules ] || echo modules; [ -e /proc/sysrq-trigger ] || echo sysrq").Stdout)
	noModules, noSysrq := slices.Contains(lacks, "modules"), slices.Contains(lacks, "sysrq")
	missingFeature := func(name string) bool {
		return (noModules && (strings.Contains(name, "module") || strings.Contains(name, "modprobe"))) ||
			(noSysrq && strings.Contains(name, "sysrq"))
	}
	t.Run("attacks", func(t *testing.T) {
		for _, c := range cases {
			attack(t, privFamily, c.name, func(a *Attack) {
				a.Parallel()
				r := user(a, c.cmd)
				if r.Exit.Code == 0 && !refused(r.Out()) {
					a.breach("%s: %s", c.cmd, r)
				}
				if c.perm && !refused(r.Out()) && !missingFeature(c.name) {
					a.Errorf("refused, but not with EPERM or EACCES: %s", r)
				}
			})
		}
	})
	attack(t, privFamily, "the agent, the clock and the victim survive the attacks", func(a *Attack) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		info, err := shared.Agent().Info(ctx)
		cancel()
		if err != nil || info.GetAgentInstance() != instance {
			a.breach("the agent was restarted (instance %d, then %d: %v)", instance, info.GetAgentInstance(), err)
		}
		r := user(a, "echo alive")
		if r.Stdout != "alive\n" {
			a.breach("the agent no longer runs tasks: %s", r)
		}
		if r := user(a, "date +%Y"); strings.TrimSpace(r.Stdout) < "2020" {
			a.breach("the guest clock was set back: %s", r)
		}
		if r := root(a, "cat "+victimCg+"/cgroup.procs | wc -l"); strings.TrimSpace(r.Stdout) == "0" {
			a.breach("the victim task was killed by another task: %s", r)
		}
	})
}
