package builder

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
)

func TestSourcePackageName(t *testing.T) {
	for in, want := range map[string]string{"6.1.192-3": "linux-source-6.1", "6.12.5-1~bpo12+1": "linux-source-6.12"} {
		if got, err := sourcePackageName(in); err != nil || got != want {
			t.Errorf("sourcePackageName(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "6", "6.", ".1.2"} {
		if got, err := sourcePackageName(bad); err == nil {
			t.Errorf("sourcePackageName(%q) = %q, want an error", bad, got)
		}
	}
}

func TestDroppedOptions(t *testing.T) {
	frag := []byte("# comment\nCONFIG_A=y\nCONFIG_B=y\n\nCONFIG_C=y\n")
	cfg := []byte("CONFIG_A=y\n# CONFIG_B is not set\nCONFIG_C=m\nCONFIG_D=y\n")
	if got, want := droppedOptions(frag, cfg), []string{"CONFIG_B=y", "CONFIG_C=y"}; !reflect.DeepEqual(got, want) {
		t.Errorf("droppedOptions = %q, want %q", got, want)
	}
	if got := droppedOptions(frag, []byte("CONFIG_A=y\nCONFIG_B=y\nCONFIG_C=y\n")); got != nil {
		t.Errorf("droppedOptions = %q, want none", got)
	}
}

// TestSourceKernelConfig checks the committed fragment: only built-in
// options (there is no module support to put a =m in), the drivers the
// guest cannot boot without, and none of the doors the security suite
// expects shut (it is applied on allnoconfig, so what it does not name
// is off).
func TestSourceKernelConfig(t *testing.T) {
	have := map[string]bool{}
	for _, l := range lines(sourceKernelConfig) {
		if strings.HasPrefix(l, "#") {
			continue
		}
		name, val, ok := strings.Cut(l, "=")
		if !ok || !strings.HasPrefix(name, "CONFIG_") || (val != "y" && !strings.HasPrefix(val, `"`)) {
			t.Errorf("fragment line %q: want CONFIG_X=y (or a string)", l)
		}
		have[name] = true
	}
	for _, need := range []string{"CONFIG_PVH", "CONFIG_KVM_GUEST", "CONFIG_VIRTIO_PCI", "CONFIG_VIRTIO_MMIO", "CONFIG_VIRTIO_CONSOLE",
		"CONFIG_HW_RANDOM_VIRTIO", "CONFIG_VIRTIO_BALLOON", "CONFIG_VIRTIO_BLK", "CONFIG_EXT4_FS", "CONFIG_OVERLAY_FS",
		"CONFIG_9P_FS", "CONFIG_NET_9P_VIRTIO", "CONFIG_NET_9P_FD", "CONFIG_VIRTIO_FS", "CONFIG_VSOCKETS",
		"CONFIG_VIRTIO_VSOCKETS", "CONFIG_DEVTMPFS", "CONFIG_TMPFS", "CONFIG_UNIX98_PTYS", "CONFIG_CGROUPS",
		"CONFIG_MEMCG", "CONFIG_CGROUP_PIDS", "CONFIG_SECURITY_YAMA", "CONFIG_UNIX", "CONFIG_INET", "CONFIG_IPV6",
		"CONFIG_SERIAL_8250_CONSOLE", "CONFIG_BLK_DEV_INITRD", "CONFIG_BPF_UNPRIV_DEFAULT_OFF", "CONFIG_SECURITY_LOCKDOWN_LSM"} {
		if !have[need] {
			t.Errorf("fragment lacks %s=y", need)
		}
	}
	for _, never := range []string{"CONFIG_MODULES", "CONFIG_KEXEC", "CONFIG_KEXEC_FILE", "CONFIG_DEVMEM", "CONFIG_DEVPORT",
		"CONFIG_USER_NS", "CONFIG_VSOCKETS_LOOPBACK", "CONFIG_MAGIC_SYSRQ", "CONFIG_PROC_KCORE", "CONFIG_HIBERNATION"} {
		if have[never] {
			t.Errorf("fragment turns on %s", never)
		}
	}
}

func TestSourceKernelKey(t *testing.T) {
	src := debPackage{Name: "linux-source-6.1", Version: "6.1.192-3", Arch: "all", IndexSHA256: "aa"}
	base := sourceKernelKey(src, "amd64", []byte("CONFIG_A=y\n"), "gcc 12")
	if base != sourceKernelKey(src, "amd64", []byte("CONFIG_A=y\n"), "gcc 12") {
		t.Fatal("sourceKernelKey is not a function of its inputs")
	}
	other := src
	other.Version = "6.1.192-4"
	for name, k := range map[string]string{
		"version":  sourceKernelKey(other, "amd64", []byte("CONFIG_A=y\n"), "gcc 12"),
		"config":   sourceKernelKey(src, "amd64", []byte("CONFIG_B=y\n"), "gcc 12"),
		"compiler": sourceKernelKey(src, "amd64", []byte("CONFIG_A=y\n"), "gcc 13"),
	} {
		if k == base {
			t.Errorf("changing the %s leaves the kernel's cache key unchanged", name)
		}
	}
}

// TestBuildRefusesKernelChoice: a kernel choice Build cannot make is
// refused before anything is downloaded or built, naming the choices.
func TestBuildRefusesKernelChoice(t *testing.T) {
	for _, tool := range []string{"apt-get", "apt-cache", "dpkg", "dpkg-deb", "depmod", "xz", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("Build checks for %s first: %v", tool, err)
		}
	}
	out := t.TempDir()
	for _, tt := range []struct {
		opts Options
		want string
	}{
		{Options{Arches: []string{"amd64"}, Kernel: "custom"}, `unknown kernel "custom" (want auto, debian or source)`},
		{Options{Arches: []string{"arm64"}, Kernel: KernelSource}, "only for amd64, not arm64"},
	} {
		tt.opts.OutDir, tt.opts.CacheDir = out, out
		if _, err := Build(context.Background(), tt.opts); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Build(kernel %q, arches %v, standard %v) = %v; want an error with %q", tt.opts.Kernel, tt.opts.Arches, tt.opts.Standard, err, tt.want)
		}
	}
	if entries, _ := os.ReadDir(out); len(entries) > 0 {
		t.Errorf("a refused build wrote %d entries in the output folder", len(entries))
	}
}

// TestMissingBuildToolsAreMarked: auto mode skips the source kernel only
// for missing packages, which it tells apart from a failed build.
func TestMissingBuildToolsAreMarked(t *testing.T) {
	saved := kernelBuildPackages
	defer func() { kernelBuildPackages = saved }()
	kernelBuildPackages = []string{"airlock-no-such-package"}
	err := checkKernelBuildTools(context.Background())
	if !errors.Is(err, errNoKernelBuildTools) || !strings.Contains(err.Error(), "apt-get install airlock-no-such-package") {
		t.Fatalf("checkKernelBuildTools = %v; want errNoKernelBuildTools naming the apt-get line", err)
	}
}
