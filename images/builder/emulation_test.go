package builder

import (
	"bytes"
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// What qemu-user-static 1:7.2 on Debian 12 registers (the kernel's text).
const (
	binfmtAarch64 = "enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: PF\noffset 0\nmagic 7f454c460201010000000000000000000200b700\nmask ffffffffffffff00fffffffffffffffffeffffff\n"
	binfmtX8664   = "enabled\ninterpreter /usr/libexec/qemu-binfmt/x86_64-binfmt-P\nflags: PF\noffset 0\nmagic 7f454c4602010100000000000000000002003e00\nmask fffffffffffefe00fffffffffffffffffeffffff\n"
	binfmtArm     = "enabled\ninterpreter /usr/libexec/qemu-binfmt/arm-binfmt-P\nflags: PF\noffset 0\nmagic 7f454c4601010100000000000000000002002800\nmask ffffffffffffff00fffffffffffffffffeffffff\n"
)

func TestProbeELF(t *testing.T) {
	for arch, machine := range map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64} {
		f, err := elf.NewFile(bytes.NewReader(probeELF(arch)))
		if err != nil {
			t.Fatalf("%s: %v", arch, err)
		}
		if f.Machine != machine || f.Type != elf.ET_EXEC || f.Class != elf.ELFCLASS64 || len(f.Progs) != 1 || f.Entry != f.Progs[0].Vaddr+120 {
			t.Fatalf("%s: %+v", arch, f.FileHeader)
		}
	}
	if probeELF("riscv64") != nil {
		t.Fatal("probe for an unknown architecture")
	}
	// The host's own probe runs natively and exits 42.
	if _, ok := elfMachine[runtime.GOARCH]; ok && runtime.GOOS == "linux" {
		p := filepath.Join(t.TempDir(), "probe")
		os.WriteFile(p, probeELF(runtime.GOARCH), 0o755)
		err := exec.Command(p).Run()
		if e, ok := err.(*exec.ExitError); !ok || e.ExitCode() != 42 {
			t.Fatalf("native probe: %v", err)
		}
	}
}

func TestCheckBinfmt(t *testing.T) {
	tests := []struct {
		name    string
		arch    string
		status  string
		entries map[string]string
		want    string // "" for no error
	}{
		{"aarch64 registered", "arm64", "enabled\n", map[string]string{"qemu-aarch64": binfmtAarch64, "qemu-arm": binfmtArm}, ""},
		{"x86_64 registered", "amd64", "enabled\n", map[string]string{"qemu-x86_64": binfmtX8664}, ""},
		{"not mounted", "arm64", "", nil, "mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc"},
		{"binfmt_misc off", "arm64", "disabled\n", map[string]string{"qemu-aarch64": binfmtAarch64}, "echo 1 > /proc/sys/fs/binfmt_misc/status"},
		{"no entry", "arm64", "enabled\n", map[string]string{"qemu-arm": binfmtArm, "qemu-x86_64": binfmtX8664}, "apt-get install qemu-user-static binfmt-support && update-binfmts --enable qemu-aarch64"},
		{"entry disabled", "arm64", "enabled\n", map[string]string{"qemu-aarch64": strings.Replace(binfmtAarch64, "enabled", "disabled", 1)}, "update-binfmts --enable qemu-aarch64"},
		{"no F flag", "arm64", "enabled\n", map[string]string{"qemu-aarch64": strings.Replace(binfmtAarch64, "flags: PF", "flags: ", 1)}, "lacks the F flag"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkBinfmt(tt.arch, tt.status, tt.entries)
			switch {
			case tt.want == "" && err != nil:
				t.Fatal(err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("got %v, want %q", err, tt.want)
			case err != nil && strings.Contains(err.Error(), "\n"):
				t.Fatalf("not one line: %q", err)
			}
		})
	}
}

// TestCheckForeignExec runs the real check on this host: it passes when
// the other architecture's emulation is set up, and otherwise says how.
func TestCheckForeignExec(t *testing.T) {
	other := map[string]string{"amd64": "arm64", "arm64": "amd64"}[runtime.GOARCH]
	if other == "" || runtime.GOOS != "linux" {
		t.Skip("not a Linux amd64 or arm64 host")
	}
	err := checkForeignExec(context.Background(), t.TempDir(), other)
	if err != nil && !strings.Contains(err.Error(), "binfmt") {
		t.Fatalf("unhelpful error: %v", err)
	}
	t.Logf("%s programs on this host: %v", other, err)
}
