//go:build linux

package qemu

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/vm"
)

// TestTemplateKey: the key changes with what the saved machine depends on,
// and not with a run's own paths and descriptors.
func TestTemplateKey(t *testing.T) {
	setup := func(t *testing.T) (p plan, qemu string) {
		dir := t.TempDir()
		qemu = filepath.Join(dir, "qemu-system-x86_64")
		p = basePlan("amd64", "tcg")
		p.Kernel, p.Initrd = filepath.Join(dir, "vmlinux"), filepath.Join(dir, "initramfs.cpio")
		for _, f := range []string{qemu, p.Kernel, p.Initrd} {
			writeFile(t, f, "contents of "+filepath.Base(f))
		}
		p.Transport, p.MuxFD = api.TransportSerial, 3
		p.Share, p.SharePath, p.SecurityModel = api.Share9P, "/home/u/proj", modelNone
		p.GuestTSCkHz, p.Park = 2600000, true
		return p, qemu
	}
	touch := func(t *testing.T, path string) {
		then := time.Now().Add(-time.Hour)
		if err := os.Chtimes(path, then, then); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, p *plan, qemu *string)
		same   bool
	}{
		{"nothing", func(*testing.T, *plan, *string) {}, true},
		{"share path", func(_ *testing.T, p *plan, _ *string) { p.SharePath = "/home/v/other,dir" }, true},
		{"console log", func(_ *testing.T, p *plan, _ *string) { p.ConsoleLog = "/run/other/console.log" }, true},
		{"console fd", func(_ *testing.T, p *plan, _ *string) { p.ConsoleFD = 9 }, true},
		{"pid file", func(_ *testing.T, p *plan, _ *string) { p.PIDFile = "" }, true},
		{"qmp fd", func(_ *testing.T, p *plan, _ *string) { p.QMPFD = 4 }, true},
		{"incoming fd", func(_ *testing.T, p *plan, _ *string) { p.QMPFD, p.IncomingFD = 4, 5 }, true},
		{"memory", func(_ *testing.T, p *plan, _ *string) { p.MemoryMiB *= 2 }, false},
		{"cpus", func(_ *testing.T, p *plan, _ *string) { p.CPUs++ }, false},
		{"cmdline", func(_ *testing.T, p *plan, _ *string) { p.Cmdline = append(p.Cmdline, "quiet") }, false},
		{"share read-only", func(_ *testing.T, p *plan, _ *string) { p.ShareReadOnly = true }, false},
		{"no share", func(_ *testing.T, p *plan, _ *string) { p.Share, p.SharePath, p.SecurityModel = api.ShareNone, "", "" }, false},
		{"security model", func(_ *testing.T, p *plan, _ *string) { p.SecurityModel = modelMappedXattr }, false},
		{"accel", func(_ *testing.T, p *plan, _ *string) { p.Accel = "kvm" }, false},
		{"tsc rate", func(_ *testing.T, p *plan, _ *string) { p.GuestTSCkHz++ }, false},
		{"not parked", func(_ *testing.T, p *plan, _ *string) { p.Park = false }, false},
		{"kernel path", func(t *testing.T, p *plan, _ *string) {
			k := p.Kernel + ".copy"
			b, _ := os.ReadFile(p.Kernel)
			writeFile(t, k, string(b))
			p.Kernel = k
		}, false},
		{"kernel contents", func(t *testing.T, p *plan, _ *string) { writeFile(t, p.Kernel, "another kernel") }, false},
		{"kernel mtime", func(t *testing.T, p *plan, _ *string) { touch(t, p.Kernel) }, false},
		{"initrd contents", func(t *testing.T, p *plan, _ *string) { writeFile(t, p.Initrd, "another initrd") }, false},
		{"qemu binary", func(t *testing.T, _ *plan, qemu *string) { touch(t, *qemu) }, false},
		{"layer disk path", func(t *testing.T, p *plan, _ *string) {
			p.Disks[0].Path = filepath.Join(filepath.Dir(p.Kernel), "other-layer.vhd")
			writeFile(t, p.Disks[0].Path, "")
			if err := os.Truncate(p.Disks[0].Path, 8<<30); err != nil {
				t.Fatal(err)
			}
			p.DiskFDs = [][]int{{7, 8}}
		}, true},
		{"layer disk read-only", func(_ *testing.T, p *plan, _ *string) { p.Disks[0].ReadOnly = true }, false},
		{"layer disk size", func(t *testing.T, p *plan, _ *string) {
			if err := os.Truncate(p.Disks[0].Path, 64<<20); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"a second disk", func(_ *testing.T, p *plan, _ *string) { p.Disks = append(p.Disks, p.Disks[0]) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, qemu := setup(t)
			if strings.HasPrefix(tc.name, "layer") || strings.HasPrefix(tc.name, "a second") {
				p.ShareReadOnly = true
				p.Cmdline = api.BootConfig{Changes: true}.Args()
				p.Disks = []vm.Disk{{Path: filepath.Join(filepath.Dir(p.Kernel), "layer.vhd"), Format: vm.DiskRawVHD}}
				writeFile(t, p.Disks[0].Path, "")
				if err := os.Truncate(p.Disks[0].Path, 8<<30); err != nil {
					t.Fatal(err)
				}
			}
			before, err := templateKey(p, qemu)
			if err != nil {
				t.Fatal(err)
			}
			if len(before) != 32 || strings.Trim(before, "0123456789abcdef") != "" {
				t.Errorf("key %q: want 32 hex digits", before)
			}
			tc.change(t, &p, &qemu)
			after, err := templateKey(p, qemu)
			if err != nil {
				t.Fatal(err)
			}
			if same := before == after; same != tc.same {
				t.Errorf("key %s → %s: same %v, want %v", before, after, same, tc.same)
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		p, qemu := setup(t)
		os.Remove(p.Initrd)
		if k, err := templateKey(p, qemu); err == nil {
			t.Errorf("key %q for a missing initrd", k)
		}
	})
}

// TestTemplatesPrune: the templates used last are kept, and temporary
// files of saves cut off an hour ago or more are removed.
func TestTemplatesPrune(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		used int // the template opened (used) just before the prune; -1: none
		want []string
	}{
		{"newest kept", -1, []string{"t0", "t1", "t2", "t3"}},
		{"opened counts as used", 5, []string{"t0", "t1", "t2", "t5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tm := templates{dir: dir, now: func() time.Time { return now }}
			at := func(name string, age time.Duration) {
				p := filepath.Join(dir, name)
				writeFile(t, p, "state")
				if err := os.Chtimes(p, now.Add(-age), now.Add(-age)); err != nil {
					t.Fatal(err)
				}
			}
			for i := range keepTemplates + 2 {
				at(fmt.Sprintf("t%d%s", i, templateExt), time.Duration(i+1)*time.Minute)
				at(fmt.Sprintf("t%d%s", i, ramExt), time.Duration(i+1)*time.Minute)
			}
			at("orphan"+ramExt, time.Minute) // its state discarded
			at("t9.1234.tmp", 2*time.Hour)
			at("t9.5678.tmp", 10*time.Minute) // a save going on
			at("notes.txt", 48*time.Hour)
			if err := os.Mkdir(filepath.Join(dir, "d"+templateExt), 0o700); err != nil {
				t.Fatal(err)
			}
			if tc.used >= 0 {
				state, ram := tm.open(fmt.Sprintf("t%d", tc.used))
				if state == nil {
					t.Fatal("open found no template")
				}
				state.Close()
				ram.Close()
			}
			tm.prune()
			var want []string
			for _, k := range tc.want {
				want = append(want, k+templateExt, k+ramExt)
			}
			want = append(want, "d"+templateExt, "notes.txt", "t9.5678.tmp")
			slices.Sort(want)
			ents, _ := os.ReadDir(dir)
			var got []string
			for _, e := range ents {
				got = append(got, e.Name())
			}
			if !slices.Equal(got, want) {
				t.Errorf("after prune: %q, want %q", got, want)
			}
		})
	}
}

// TestTemplatesCreate: a template, its machine state and its memory,
// appears whole on commit or not at all.
func TestTemplatesCreate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "templates")
	tm := templates{dir: dir, now: time.Now}
	if state, _ := tm.open("k"); state != nil {
		t.Error("open found a template in a folder that does not exist")
	}
	save := func(content string, keep bool) {
		t.Helper()
		state, ram, commit, abort, err := tm.create("k")
		if err != nil {
			t.Fatal(err)
		}
		state.WriteString("state " + content)
		ram.WriteString("memory " + content)
		if !keep {
			abort()
			return
		}
		if err := commit(); err != nil {
			t.Fatal(err)
		}
	}
	read := func() string {
		t.Helper()
		state, ram := tm.open("k")
		if state == nil {
			return ""
		}
		defer state.Close()
		defer ram.Close()
		s, err := io.ReadAll(state)
		if err != nil {
			t.Fatal(err)
		}
		r, err := io.ReadAll(ram)
		if err != nil {
			t.Fatal(err)
		}
		return string(s) + ", " + string(r)
	}
	save("one", true)
	save("two", false)
	if got := read(); got != "state one, memory one" {
		t.Errorf("after a commit and an abort: %q", got)
	}
	save("three", true)
	if got := read(); got != "state three, memory three" {
		t.Errorf("after a second commit: %q", got)
	}
	if tmp, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(tmp) > 0 {
		t.Errorf("temporary files left: %q", tmp)
	}
	if err := tm.discard("k"); err != nil {
		t.Fatal(err)
	}
	if err := tm.discard("k"); err != nil {
		t.Errorf("discard of no template: %v", err)
	}
	if got := read(); got != "" {
		t.Errorf("after discard: %q", got)
	}
	if left, _ := os.ReadDir(dir); len(left) > 0 {
		t.Errorf("discard left %v", left)
	}
	writeFile(t, tm.path("k"), "") // a save cut off by a crash after the rename
	writeFile(t, tm.ramPath("k"), "memory")
	if state, _ := tm.open("k"); state != nil {
		t.Error("open took an empty template")
	}
	writeFile(t, tm.path("k"), "state") // a state whose memory is missing
	os.Remove(tm.ramPath("k"))
	if state, _ := tm.open("k"); state != nil {
		t.Error("open took a template without its memory")
	}
	// templates{} is what New leaves without a cache folder.
	if _, _, _, _, err := (templates{}).create("k"); err == nil {
		t.Error("create without a folder")
	}
	if state, _ := (templates{}).open("k"); state != nil {
		t.Error("open without a folder")
	}
}
