package builder

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// A standard image for another architecture than the host's needs the
// kernel to run that architecture's programs: debootstrap's second stage
// runs the guest's dpkg and maintainer scripts in a chroot. On Debian that
// is qemu-user-static registered in binfmt_misc with the F (fix-binary)
// flag, so the interpreter is opened when it is registered and works
// inside a chroot that does not hold it. The builder only checks this; the
// host is set up by make deps or .ci/run.

// binfmtDir is where the kernel lists binfmt_misc entries.
const binfmtDir = "/proc/sys/fs/binfmt_misc"

// elfMachine is each guest architecture's ELF e_machine.
var elfMachine = map[string]uint16{"amd64": 62, "arm64": 183}

// qemuName is each architecture's name in qemu-user-static's entries
// (update-binfmts --enable qemu-<name>).
var qemuName = map[string]string{"amd64": "x86_64", "arm64": "aarch64"}

// probeELF returns a tiny static ELF executable for arch that exits with
// status 42 and needs nothing but the kernel (or an emulator).
func probeELF(arch string) []byte {
	const base, hdr = 0x400000, 64 + 56
	var code []byte
	switch arch {
	case "arm64":
		for _, insn := range []uint32{
			0xD2800540, // mov x0, #42
			0xD2800BA8, // mov x8, #93 (exit)
			0xD4000001, // svc #0
		} {
			code = binary.LittleEndian.AppendUint32(code, insn)
		}
	case "amd64":
		code = []byte{
			0xBF, 42, 0, 0, 0, // mov edi, 42
			0xB8, 60, 0, 0, 0, // mov eax, 60 (exit)
			0x0F, 0x05, // syscall
		}
	default:
		return nil
	}
	le := binary.LittleEndian
	b := []byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	b = le.AppendUint16(b, 2) // ET_EXEC
	b = le.AppendUint16(b, elfMachine[arch])
	b = le.AppendUint32(b, 1)        // EV_CURRENT
	b = le.AppendUint64(b, base+hdr) // entry
	b = le.AppendUint64(b, 64)       // program headers
	b = le.AppendUint64(b, 0)        // no section headers
	b = le.AppendUint32(b, 0)        // flags
	b = le.AppendUint16(b, 64)       // ELF header size
	b = le.AppendUint16(b, 56)       // program header size
	b = le.AppendUint16(b, 1)        // one program header
	b = le.AppendUint16(b, 64)       // section header size
	b = le.AppendUint16(b, 0)        // no sections
	b = le.AppendUint16(b, 0)        // no section names
	b = le.AppendUint32(b, 1)        // PT_LOAD
	b = le.AppendUint32(b, 5)        // R+X
	b = le.AppendUint64(b, 0)        // file offset
	b = le.AppendUint64(b, base)     // vaddr
	b = le.AppendUint64(b, base)     // paddr
	size := uint64(hdr + len(code))  //
	b = le.AppendUint64(b, size)     // file size
	b = le.AppendUint64(b, size)     // memory size
	b = le.AppendUint64(b, 0x1000)   // alignment
	return append(b, code...)
}

// binfmtEntry is one binfmt_misc registration.
type binfmtEntry struct {
	name    string
	enabled bool
	interp  string
	flags   string
	offset  int
	magic   []byte
	mask    []byte
}

// parseBinfmt reads the text the kernel shows for an entry.
func parseBinfmt(name, text string) binfmtEntry {
	e := binfmtEntry{name: name}
	for _, line := range strings.Split(text, "\n") {
		k, v, _ := strings.Cut(line, " ")
		switch k {
		case "enabled":
			e.enabled = true
		case "interpreter":
			e.interp = v
		case "flags:":
			e.flags = v
		case "offset":
			fmt.Sscan(v, &e.offset)
		case "magic":
			e.magic, _ = hex.DecodeString(v)
		case "mask":
			e.mask, _ = hex.DecodeString(v)
		}
	}
	return e
}

// matches reports whether the entry claims the executable file.
func (e binfmtEntry) matches(file []byte) bool {
	if len(e.magic) == 0 || e.offset+len(e.magic) > len(file) {
		return false
	}
	for i, m := range e.magic {
		mask := byte(0xff)
		if i < len(e.mask) {
			mask = e.mask[i]
		}
		if file[e.offset+i]&mask != m&mask {
			return false
		}
	}
	return true
}

// emulationSetup is the one line a user needs to make arch's programs run
// on this host.
func emulationSetup(arch string) string {
	return fmt.Sprintf("apt-get install qemu-user-static binfmt-support && update-binfmts --enable qemu-%s (or make deps)", qemuName[arch])
}

// checkBinfmt says what keeps the kernel from running arch's programs in a
// chroot, given binfmt_misc's listing (entry name to text; nil when
// binfmt_misc is not mounted) and its status file. nil means nothing does.
func checkBinfmt(arch string, status string, entries map[string]string) error {
	prefix := fmt.Sprintf("images: standard image for %s on this host: debootstrap runs %s programs in a chroot, and", arch, arch)
	if entries == nil {
		return fmt.Errorf("%s binfmt_misc is not mounted: mount -t binfmt_misc binfmt_misc %s, then %s", prefix, binfmtDir, emulationSetup(arch))
	}
	if strings.TrimSpace(status) != "enabled" {
		return fmt.Errorf("%s binfmt_misc is disabled: echo 1 > %s/status", prefix, binfmtDir)
	}
	probe := probeELF(arch)
	var disabled, unfixed []string
	for name, text := range entries {
		e := parseBinfmt(name, text)
		if !e.matches(probe) {
			continue
		}
		switch {
		case !e.enabled:
			disabled = append(disabled, name)
		case !strings.Contains(e.flags, "F"):
			unfixed = append(unfixed, name)
		default:
			return nil
		}
	}
	switch {
	case len(disabled) > 0:
		return fmt.Errorf("%s its binfmt_misc entry %s is disabled: update-binfmts --enable %s", prefix, disabled[0], disabled[0])
	case len(unfixed) > 0:
		return fmt.Errorf("%s its binfmt_misc entry %s lacks the F flag, so the chroot cannot reach the emulator: install qemu-user-static (its entries have it) and update-binfmts --enable qemu-%s", prefix, unfixed[0], qemuName[arch])
	}
	return fmt.Errorf("%s no binfmt_misc entry runs them: %s", prefix, emulationSetup(arch))
}

// readBinfmt lists binfmt_misc's entries; nil entries when it is not
// mounted.
func readBinfmt(dir string) (status string, entries map[string]string, err error) {
	b, err := os.ReadFile(filepath.Join(dir, "status"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, fmt.Errorf("images: binfmt_misc: %w", err)
	}
	des, err := os.ReadDir(dir)
	if err != nil {
		return "", nil, fmt.Errorf("images: binfmt_misc: %w", err)
	}
	entries = map[string]string{}
	for _, d := range des {
		if d.Name() == "status" || d.Name() == "register" {
			continue
		}
		if t, err := os.ReadFile(filepath.Join(dir, d.Name())); err == nil {
			entries[d.Name()] = string(t)
		}
	}
	return string(b), entries, nil
}

// checkForeignExec makes sure this host can run arch's programs inside a
// chroot, as debootstrap's second stage will: binfmt_misc must hand them
// to an emulator registered with the F flag, and a probe program run in an
// empty chroot must exit as it should. Its error is one actionable line.
func checkForeignExec(ctx context.Context, workDir, arch string) error {
	if _, ok := qemuName[arch]; !ok {
		return fmt.Errorf("images: standard image: unknown architecture %q", arch)
	}
	status, entries, err := readBinfmt(binfmtDir)
	if err != nil {
		return err
	}
	if err := checkBinfmt(arch, status, entries); err != nil {
		return err
	}
	dir, err := os.MkdirTemp(workDir, ".probe-"+arch+"-")
	if err != nil {
		return fmt.Errorf("images: %w", err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "probe"), probeELF(arch), 0o755); err != nil {
		return fmt.Errorf("images: %w", err)
	}
	chroot, err := lookTool("chroot")
	if err != nil {
		return fmt.Errorf("images: standard image: chroot not found; install coreutils")
	}
	// Only root may chroot (as only root may debootstrap); others run the
	// probe in place, which the F flag check above makes equivalent.
	cmd := exec.CommandContext(ctx, chroot, dir, "/probe")
	if os.Geteuid() != 0 {
		cmd = exec.CommandContext(ctx, filepath.Join(dir, "probe"))
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 42 {
		return nil
	}
	return fmt.Errorf("images: standard image for %s on this host: an %s probe program run in a chroot failed (%v: %s) although binfmt_misc has an entry for it; check %s/qemu-%s",
		arch, arch, err, strings.TrimSpace(out.String()), binfmtDir, qemuName[arch])
}
