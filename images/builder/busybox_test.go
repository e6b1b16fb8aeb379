package builder

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestAppletLinks(t *testing.T) {
	links, err := appletLinks("usr/bin/[\nusr/bin/[[\nbin/ls\nbin/sh\nsbin/acpid\nsbin/modprobe\nusr/sbin/chroot\nusr/bin/env\nlinuxrc\n")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range links {
		if l.Mode != modeLink|0o777 || string(l.Data) != "/bin/busybox" {
			t.Errorf("%s = mode %o target %q, want a link to /bin/busybox", l.Name, l.Mode, l.Data)
		}
		got = append(got, l.Name)
	}
	if want := "usr/bin/[ usr/bin/[[ bin/ls bin/sh sbin/acpid usr/sbin/chroot usr/bin/env linuxrc"; strings.Join(got, " ") != want {
		t.Errorf("links %q, want %q", strings.Join(got, " "), want)
	}
}

func TestAppletLinksRejects(t *testing.T) {
	base := "bin/sh\nbin/ls\nusr/bin/env\n"
	for name, list := range map[string]string{
		"outside the applet folders": base + "etc/passwd\n",
		"escape":                     base + "bin/../../x\n",
		"dot dot":                    base + "bin/..\n",
		"absolute":                   base + "/bin/cat\n",
		"space":                      base + "bin/a b\n",
		"folder only":                base + "usr/bin/\n",
		"twice":                      base + "bin/sh\n",
		"no sh":                      "bin/ls\nusr/bin/env\n",
		"usage text":                 "BusyBox v1.35.0 multi-call binary.\n",
		"empty":                      "",
	} {
		if _, err := appletLinks(list); err == nil {
			t.Errorf("%s: accepted %q", name, list)
		}
	}
}

// TestBusyboxLinksOfHostBusybox runs the real listing against a busybox
// of this host's architecture, when the machine has one.
func TestBusyboxLinksOfHostBusybox(t *testing.T) {
	bin := ""
	for _, p := range []string{"/bin/busybox", "/usr/bin/busybox"} {
		if _, err := os.Stat(p); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		t.Skipf("no busybox on this %s host", runtime.GOARCH)
	}
	links, err := busyboxLinks(t.Context(), bin)
	if err != nil {
		t.Fatal(err)
	}
	if len(links) < 50 {
		t.Errorf("%d applet links, want the usual hundreds", len(links))
	}
	if _, err := busyboxLinks(t.Context(), filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("a missing busybox gave no error")
	}
}

func TestWithoutNames(t *testing.T) {
	links := []cpioEntry{linkEntry("bin/sh", "/bin/busybox"), linkEntry("init", "/bin/busybox"), linkEntry("bin/busybox", "/bin/busybox")}
	entries := []cpioEntry{fileEntry("/init", 0o755, nil), fileEntry("bin/busybox", 0o755, nil)}
	got := withoutNames(links, entries)
	if len(got) != 1 || got[0].Name != "bin/sh" {
		t.Errorf("withoutNames = %+v, want only bin/sh", got)
	}
}
