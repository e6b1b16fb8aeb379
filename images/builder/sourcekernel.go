package builder

import (
	"bufio"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/images/manifest"
)

// Kernel choices (Options.Kernel, airlock-image -kernel).
const (
	// KernelDebian is Debian's packaged kernel (linux-image-<arch>) with
	// the guest's drivers loaded as modules: the default.
	KernelDebian = "debian"
	// KernelSource is a kernel built here from Debian's linux-source
	// package of the same version, with every driver the guest needs
	// built in and no module support (amd64, QEMU only: no Hyper-V
	// drivers).
	KernelSource = "source"
	// KernelAuto is what airlock-image builds by default: Debian's kernel
	// for every architecture and, for amd64, also the source-built one
	// (what QEMU on a Linux host boots: manifest.KernelSourceDir), unless
	// the host lacks the compiler and the kernel is not cached, which is
	// then a warning: the image with Debian's kernel works everywhere.
	KernelAuto = "auto"
)

// KernelSourceDir is the folder under the output folder that receives the
// images with a source-built kernel (<out>/kernel-source/<arch>/), beside
// the Debian-kernel ones (manifest.KernelSourceDir).
const KernelSourceDir = manifest.KernelSourceDir

// sourceKernelConfig is the config fragment of the source-built kernel:
// allnoconfig plus these lines.
//
//go:embed kernel/airlock-amd64.config
var sourceKernelConfig []byte

// sourceKernelRecipe names how a source kernel is configured and built;
// change it whenever the steps below change, so cached kernels are rebuilt.
const sourceKernelRecipe = "allnoconfig+fragment/1"

// sourceKernelLocalVersion is appended to the release ("6.1.192-airlock"),
// so the guest's uname tells the two kernels apart.
const sourceKernelLocalVersion = "-airlock"

// kernelBuildPackages are the Debian packages a kernel build needs on the
// host (objtool needs libelf; the kconfig and build scripts need flex,
// bison, bc; certs/ needs libssl's headers).
var kernelBuildPackages = []string{"gcc", "make", "bc", "flex", "bison", "libelf-dev", "libssl-dev"}

// errNoKernelBuildTools marks a kernel build refused for missing host
// packages (checkKernelBuildTools).
var errNoKernelBuildTools = errors.New("kernel build packages missing")

// checkKernelBuildTools reports the missing build packages with the exact
// command that installs them.
func checkKernelBuildTools(ctx context.Context) error {
	var missing []string
	for _, p := range kernelBuildPackages {
		out, err := run(ctx, "", nil, "dpkg-query", "-W", "-f", "${Status}", p)
		if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), " installed") {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("images: building the kernel from source needs %s; run `apt-get install %s` and try again (%w)",
			strings.Join(missing, ", "), strings.Join(missing, " "), errNoKernelBuildTools)
	}
	return nil
}

// sourcePackageName is the linux-source package matching a Debian kernel
// package's version: 6.1.192-3 -> linux-source-6.1.
func sourcePackageName(kernelVersion string) (string, error) {
	major, rest, ok := strings.Cut(kernelVersion, ".")
	minor, _, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 || major == "" || minor == "" {
		return "", fmt.Errorf("images: kernel version %q is not major.minor.patch-rev", kernelVersion)
	}
	return "linux-source-" + major + "." + minor, nil
}

// resolveSource finds in apt's index the linux-source package of exactly
// the Debian kernel's version, so both kernels come from the same source
// and move together when Debian ships a new one.
func resolveSource(ctx context.Context, kernel debPackage) (debPackage, error) {
	name, err := sourcePackageName(kernel.Version)
	if err != nil {
		return debPackage{}, err
	}
	spec := name + ":all=" + kernel.Version
	out, err := run(ctx, "", nil, "apt-cache", "show", spec)
	if err != nil {
		return debPackage{}, fmt.Errorf("images: resolve %s: %w (run `apt-get update`?)", spec, err)
	}
	stanzas, err := parseControl(out)
	if err != nil {
		return debPackage{}, fmt.Errorf("images: resolve %s: %w", spec, err)
	}
	for _, s := range stanzas {
		if s.Name == name && s.Version == kernel.Version {
			return s.debPackage, nil
		}
	}
	return debPackage{}, fmt.Errorf("images: resolve %s: apt-cache knows no such package; run `apt-get update`", spec)
}

// builtKernel is a source-built kernel in the cache.
type builtKernel struct {
	// Vmlinux is the ELF kernel (PVH entry); Release its uname -r.
	Vmlinux, Release string
	// Key identifies the build's inputs (source, config, recipe, compiler).
	Key string
	// ConfigSHA is the sha256 of the config fragment.
	ConfigSHA string
	// Config is the kernel's full .config, kept beside Vmlinux.
	Config string
	// Cached is true when the kernel came from the cache.
	Cached bool
}

// sourceKernelKey hashes what a source kernel build depends on.
func sourceKernelKey(src debPackage, arch string, fragment []byte, compiler string) string {
	h := sha256.New()
	fmt.Fprintf(h, "recipe %s\nlocalversion %s\narch %s\n", sourceKernelRecipe, sourceKernelLocalVersion, arch)
	fmt.Fprintf(h, "deb %s %s %s %s\n", src.Name, src.Version, src.Arch, src.IndexSHA256)
	fmt.Fprintf(h, "compiler %s\n", compiler)
	fmt.Fprintf(h, "config %s\n", sha256Hex(fragment))
	return hex.EncodeToString(h.Sum(nil))
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// buildSourceKernel returns the kernel built from src's source with the
// config fragment, from <cache>/kernels/ when a build with the same key
// is there, else building it (several minutes) and caching it.
func buildSourceKernel(ctx context.Context, cache, arch string, src debPackage, jobs int, log *slog.Logger) (*builtKernel, error) {
	if arch != "amd64" {
		return nil, fmt.Errorf("images: -kernel %s is only for amd64 (its config is x86's; arm64 keeps Debian's kernel)", KernelSource)
	}
	cc, err := run(ctx, "", nil, "gcc", "--version")
	if err != nil {
		// The cache key needs the compiler's version, so even a cached
		// kernel needs gcc: name what to install.
		if terr := checkKernelBuildTools(ctx); terr != nil {
			return nil, terr
		}
		return nil, fmt.Errorf("images: kernel build: %w", err)
	}
	compiler, _, _ := strings.Cut(string(cc), "\n")
	key := sourceKernelKey(src, arch, sourceKernelConfig, compiler)
	bk := &builtKernel{Key: key, ConfigSHA: sha256Hex(sourceKernelConfig)}
	dir := filepath.Join(cache, "kernels", fmt.Sprintf("%s_%s_%s-%s", src.Name, src.Version, arch, key[:16]))
	bk.Vmlinux, bk.Config = filepath.Join(dir, "vmlinux"), filepath.Join(dir, "config")
	if rel, err := os.ReadFile(filepath.Join(dir, "kernel.release")); err == nil {
		if err := manifest.CheckKernelFile(arch, bk.Vmlinux); err == nil {
			bk.Release, bk.Cached = strings.TrimSpace(string(rel)), true
			log.Info("source kernel from cache", "dir", dir, "release", bk.Release)
			return bk, nil
		}
	}
	if err := checkKernelBuildTools(ctx); err != nil {
		return nil, err
	}
	if _, err := download(ctx, cache, &src); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, fmt.Errorf("images: kernel build: %w", err)
	}
	// The tree is built inside the cache folder (on the same file system
	// as the result), at a path of the key: a build that fails or is
	// interrupted leaves it there (about 1.5 GiB) and the next run resumes
	// it; a finished build removes it.
	work := filepath.Join(filepath.Dir(dir), ".build-"+key[:16])
	tree, err := unpackSource(ctx, src, work, log)
	if err != nil {
		return nil, err
	}

	fragment := filepath.Join(work, "airlock.config")
	if err := os.WriteFile(fragment, sourceKernelConfig, 0o644); err != nil {
		return nil, fmt.Errorf("images: kernel build: %w", err)
	}
	// Reproducible-ish: the version string carries no user, host or time
	// of this machine.
	env := append(os.Environ(), "KBUILD_BUILD_USER=airlock", "KBUILD_BUILD_HOST=airlock",
		"KBUILD_BUILD_TIMESTAMP=Debian "+src.Version, "LOCALVERSION="+sourceKernelLocalVersion)
	if _, err := run(ctx, tree, env, "make", "-s", "KCONFIG_ALLCONFIG="+fragment, "allnoconfig"); err != nil {
		return nil, fmt.Errorf("images: kernel config: %w", err)
	}
	cfg, err := os.ReadFile(filepath.Join(tree, ".config"))
	if err != nil {
		return nil, fmt.Errorf("images: kernel config: %w", err)
	}
	if dropped := droppedOptions(sourceKernelConfig, cfg); len(dropped) > 0 {
		return nil, fmt.Errorf("images: kernel config: kconfig dropped %s (a dependency is not set; add it to images/builder/kernel/airlock-amd64.config)", strings.Join(dropped, ", "))
	}
	log.Info("building the kernel (several minutes)", "jobs", jobs)
	bstart := time.Now()
	if _, err := run(ctx, tree, env, "make", fmt.Sprintf("-j%d", jobs), "vmlinux"); err != nil {
		return nil, fmt.Errorf("images: kernel build (the tree stays in %s and the next run resumes it; remove it to start over): %w", work, err)
	}
	rel, err := os.ReadFile(filepath.Join(tree, "include", "config", "kernel.release"))
	if err != nil {
		return nil, fmt.Errorf("images: kernel build: %w", err)
	}
	log.Info("kernel built", "release", strings.TrimSpace(string(rel)), "took", time.Since(bstart).Round(time.Second))

	// Publish the cache entry in one rename: vmlinux, .config and
	// kernel.release (written last, it is what marks the entry complete).
	stage := filepath.Join(work, "out")
	if err := os.Mkdir(stage, 0o755); err != nil {
		return nil, fmt.Errorf("images: kernel build: %w", err)
	}
	for _, f := range []struct{ from, to string }{{"vmlinux", "vmlinux"}, {".config", "config"}} {
		if err := os.Rename(filepath.Join(tree, f.from), filepath.Join(stage, f.to)); err != nil {
			return nil, fmt.Errorf("images: kernel build: %w", err)
		}
	}
	if err := manifest.CheckKernelFile(arch, filepath.Join(stage, "vmlinux")); err != nil {
		return nil, fmt.Errorf("images: kernel build: %w", err)
	}
	if err := os.WriteFile(filepath.Join(stage, "kernel.release"), rel, 0o644); err != nil {
		return nil, fmt.Errorf("images: kernel build: %w", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("images: kernel build: %w", err)
	}
	if err := os.Rename(stage, dir); err != nil {
		return nil, fmt.Errorf("images: kernel build: %w", err)
	}
	if err := os.RemoveAll(work); err != nil {
		log.Warn("kernel build tree left behind", "dir", work, "err", err)
	}
	bk.Release = strings.TrimSpace(string(rel))
	return bk, nil
}

// unpackedStamp marks a build folder whose source tree is complete.
const unpackedStamp = ".unpacked"

// unpackSource unpacks the linux-source .deb's tarball into work and
// returns the source tree's folder. A tree a previous run unpacked
// completely is kept (its build resumes); a partial one is replaced.
func unpackSource(ctx context.Context, src debPackage, work string, log *slog.Logger) (string, error) {
	ver := strings.TrimPrefix(src.Name, "linux-source-")
	tree := filepath.Join(work, "linux-source-"+ver)
	if _, err := os.Stat(filepath.Join(work, unpackedStamp)); err == nil {
		log.Info("resuming the kernel build left by a previous run", "dir", tree)
		return tree, nil
	}
	start := time.Now()
	if err := os.RemoveAll(work); err != nil {
		return "", fmt.Errorf("images: unpack %s: %w", src.Name, err)
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		return "", fmt.Errorf("images: unpack %s: %w", src.Name, err)
	}
	tarball := "./usr/src/linux-source-" + ver + ".tar.xz"
	// dpkg-deb --fsys-tarfile | tar -xO <tarball> | xz -dc | tar -x
	script := `set -o pipefail; dpkg-deb --fsys-tarfile "$1" | tar -xO "$2" | xz -dc -T0 | tar -x -C "$3"`
	if _, err := run(ctx, "", nil, "bash", "-c", script, "unpack", src.File, tarball, work); err != nil {
		return "", fmt.Errorf("images: unpack %s: %w", src.Name, err)
	}
	if _, err := os.Stat(filepath.Join(tree, "Makefile")); err != nil {
		return "", fmt.Errorf("images: unpack %s: no kernel tree: %w", src.Name, err)
	}
	if err := os.WriteFile(filepath.Join(work, unpackedStamp), nil, 0o644); err != nil {
		return "", fmt.Errorf("images: unpack %s: %w", src.Name, err)
	}
	log.Info("kernel source unpacked", "dir", tree, "took", time.Since(start).Round(time.Millisecond))
	return tree, nil
}

// droppedOptions lists the "CONFIG_X=y" lines of fragment that the final
// .config does not have: kconfig silently drops an option whose
// dependencies are unmet, and a driver missing that way would only show
// as a guest that does not boot.
func droppedOptions(fragment, config []byte) []string {
	have := map[string]bool{}
	for _, l := range lines(config) {
		have[l] = true
	}
	var dropped []string
	for _, l := range lines(fragment) {
		if strings.HasPrefix(l, "CONFIG_") && !have[l] {
			dropped = append(dropped, l)
		}
	}
	return dropped
}

func lines(b []byte) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// copyFile copies src to dst.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// defaultJobs is make's -j for a kernel build: one job per CPU.
func defaultJobs() int { return runtime.NumCPU() }
