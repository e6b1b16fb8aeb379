package builder

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// cpioMember is what readCPIO reports about one member.
type cpioMember struct {
	Name           string
	Ino, Mode      uint32
	UID, GID       uint32
	Mtime          uint32
	RMajor, RMinor uint32
	Data           string
}

// readCPIO is an independent newc reader, strict about magic and padding.
func readCPIO(t *testing.T, b []byte) []cpioMember {
	t.Helper()
	var out []cpioMember
	off := 0
	align := func(n int) int { return (n + 3) &^ 3 }
	for {
		if off+110 > len(b) {
			t.Fatalf("truncated header at %d", off)
		}
		h := string(b[off : off+110])
		if h[:6] != "070701" {
			t.Fatalf("bad magic %q at %d", h[:6], off)
		}
		field := func(i int) uint32 {
			v, err := strconv.ParseUint(h[6+8*i:14+8*i], 16, 32)
			if err != nil {
				t.Fatalf("field %d at %d: %v", i, off, err)
			}
			return uint32(v)
		}
		size, namesize := int(field(6)), int(field(11))
		nameEnd := off + 110 + namesize
		name := string(b[off+110 : nameEnd-1])
		if b[nameEnd-1] != 0 {
			t.Fatalf("name %q not NUL-terminated", name)
		}
		dataStart := align(nameEnd)
		for _, z := range b[nameEnd:dataStart] {
			if z != 0 {
				t.Fatalf("non-zero name padding after %q", name)
			}
		}
		if name == "TRAILER!!!" {
			if dataStart != len(b) {
				t.Fatalf("%d bytes after the trailer", len(b)-dataStart)
			}
			return out
		}
		out = append(out, cpioMember{
			Name: name, Ino: field(0), Mode: field(1), UID: field(2), GID: field(3), Mtime: field(5),
			RMajor: field(9), RMinor: field(10), Data: string(b[dataStart : dataStart+size]),
		})
		off = align(dataStart + size)
	}
}

func testEntries(t *testing.T) []cpioEntry {
	t.Helper()
	src := filepath.Join(t.TempDir(), "agent")
	if err := os.WriteFile(src, []byte("#!agent binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	return []cpioEntry{
		fileEntry("/etc/hostname", 0o644, []byte("airlock\n")),
		{Name: "init", Mode: modeFile | 0o755, Source: src},
		dirEntry("tmp", 0o1777),
		{Name: "home/agent", Mode: modeDir | 0o755, UID: 1000, GID: 1000},
		{Name: "dev/console", Mode: modeChar | 0o600, RMajor: 5, RMinor: 1},
		fileEntry("lib/modules/6.1.0/kernel/fs/a.ko", 0o644, []byte("abc")),
		fileEntry("empty", 0o644, []byte{}),
		linkEntry("usr/bin/env", "/bin/busybox"),
	}
}

func TestCPIORoundTrip(t *testing.T) {
	var buf bytes.Buffer
	if err := writeCPIO(&buf, testEntries(t)); err != nil {
		t.Fatalf("writeCPIO: %v", err)
	}
	got := readCPIO(t, buf.Bytes())
	want := []cpioMember{
		{Name: "dev", Mode: modeDir | 0o755},
		{Name: "dev/console", Mode: modeChar | 0o600, RMajor: 5, RMinor: 1},
		{Name: "empty", Mode: modeFile | 0o644},
		{Name: "etc", Mode: modeDir | 0o755},
		{Name: "etc/hostname", Mode: modeFile | 0o644, Data: "airlock\n"},
		{Name: "home", Mode: modeDir | 0o755},
		{Name: "home/agent", Mode: modeDir | 0o755, UID: 1000, GID: 1000},
		{Name: "init", Mode: modeFile | 0o755, Data: "#!agent binary"},
		{Name: "lib", Mode: modeDir | 0o755},
		{Name: "lib/modules", Mode: modeDir | 0o755},
		{Name: "lib/modules/6.1.0", Mode: modeDir | 0o755},
		{Name: "lib/modules/6.1.0/kernel", Mode: modeDir | 0o755},
		{Name: "lib/modules/6.1.0/kernel/fs", Mode: modeDir | 0o755},
		{Name: "lib/modules/6.1.0/kernel/fs/a.ko", Mode: modeFile | 0o644, Data: "abc"},
		{Name: "tmp", Mode: modeDir | 0o1777},
		{Name: "usr", Mode: modeDir | 0o755},
		{Name: "usr/bin", Mode: modeDir | 0o755},
		{Name: "usr/bin/env", Mode: modeLink | 0o777, Data: "/bin/busybox"},
	}
	for i := range want {
		want[i].Ino = uint32(i + 1)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("members differ\n got: %+v\nwant: %+v", got, want)
	}
}

func TestCPIODeterministic(t *testing.T) {
	entries := testEntries(t)
	var a, b bytes.Buffer
	if err := writeCPIO(&a, entries); err != nil {
		t.Fatal(err)
	}
	reversed := make([]cpioEntry, len(entries))
	for i, e := range entries {
		reversed[len(entries)-1-i] = e
	}
	if err := writeCPIO(&b, reversed); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("the archive depends on the order entries were given in")
	}
}

func TestCPIOErrors(t *testing.T) {
	tests := []struct {
		name    string
		entries []cpioEntry
		want    string
	}{
		{"duplicate", []cpioEntry{fileEntry("a", 0o644, nil), fileEntry("/a", 0o644, nil)}, "duplicate member"},
		{"escapes", []cpioEntry{fileEntry("../a", 0o644, nil)}, "invalid member name"},
		{"root", []cpioEntry{dirEntry("/", 0o755)}, "invalid member name"},
		{"symlink without target", []cpioEntry{{Name: "l", Mode: modeLink | 0o777}}, "symbolic link without a target"},
		{"fifo", []cpioEntry{{Name: "p", Mode: 0o010644}}, "unsupported file type"},
		{"missing source", []cpioEntry{{Name: "f", Mode: modeFile | 0o644, Source: "/nonexistent/airlock"}}, "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := writeCPIO(io.Discard, tt.entries)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("writeCPIO error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestCPIOWithCpioTool checks the archive against GNU cpio when it exists.
func TestCPIOWithCpioTool(t *testing.T) {
	if _, err := exec.LookPath("cpio"); err != nil {
		t.Skip("cpio not installed")
	}
	var buf bytes.Buffer
	if err := writeCPIO(&buf, testEntries(t)); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("cpio", "-it", "--quiet")
	cmd.Stdin = bytes.NewReader(buf.Bytes())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cpio -it: %v\n%s", err, out)
	}
	members := readCPIO(t, buf.Bytes())
	var want strings.Builder
	for _, m := range members {
		fmt.Fprintln(&want, m.Name)
	}
	if string(out) != want.String() {
		t.Errorf("cpio -it listed\n%s\nwant\n%s", out, want.String())
	}
	dir := t.TempDir()
	cmd = exec.Command("cpio", "-id", "--quiet")
	cmd.Dir, cmd.Stdin = dir, bytes.NewReader(buf.Bytes())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cpio -id: %v\n%s", err, out)
	}
	if target, err := os.Readlink(filepath.Join(dir, "usr/bin/env")); err != nil || target != "/bin/busybox" {
		t.Errorf("extracted usr/bin/env links to %q (%v), want /bin/busybox", target, err)
	}
}
