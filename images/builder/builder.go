// Package builder builds Airlock's guest images: for each architecture a
// kernel every backend boots directly (an ELF vmlinux with a PVH entry on
// amd64, a raw Image on arm64) and an uncompressed initramfs holding the
// guest agent as /init, a static busybox, the kernel modules the guest
// needs with their load order, and a minimal /etc. Inputs are Debian
// packages fetched with apt and the guest agent built from source; a
// manifest.json records them, and a build whose inputs are unchanged
// touches nothing.
package builder

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/airlock-sandbox/airlock/images/manifest"
)

// Options configure Build.
type Options struct {
	// Arches are the guest architectures to build ("amd64", "arm64").
	Arches []string
	// OutDir receives one folder per architecture (<OutDir>/<arch>/).
	OutDir string
	// CacheDir keeps downloaded .deb files between builds.
	CacheDir string
	// GuestSrc is the module root the guest agent is built from.
	GuestSrc string
	// Standard also builds the standard image (a Debian root disk) of
	// each architecture, into <OutDir>/standard/<arch>/.
	Standard bool
	// Kernel is KernelDebian (also when empty), KernelSource: a kernel
	// built from Debian's linux-source with the drivers built in (amd64
	// only), cached in <CacheDir>/kernels/, the image then going to
	// <OutDir>/kernel-source/<arch>/ (and a standard image on it to
	// <OutDir>/kernel-source/standard/<arch>/, sharing the root disk of
	// <OutDir>/standard/<arch>/ when that is built); or KernelAuto: both for
	// amd64 (the source-built one after the others, skipped with a warning
	// when the host cannot build it), Debian's for arm64.
	Kernel string
	// KernelJobs is make's -j for a kernel build; 0 means one per CPU.
	KernelJobs int
	// Logger receives progress; nil discards it.
	Logger *slog.Logger
}

// Result describes the image built (or found up to date) for one arch.
type Result struct {
	Arch string
	// Image is manifest.ImageMinimal or manifest.ImageStandard.
	Image string
	// Dir is the image folder; Manifest describes its content.
	Dir      string
	Manifest *manifest.Manifest
	// UpToDate is true when the inputs were unchanged and nothing was written.
	UpToDate bool
	// Downloaded names the packages fetched by this build (not from cache).
	Downloaded []string
	Took       time.Duration
}

// requiredTools are the host programs a build runs.
var requiredTools = map[string]string{
	"apt-get":   "apt",
	"apt-cache": "apt",
	"dpkg":      "dpkg",
	"dpkg-deb":  "dpkg",
	"depmod":    "kmod",
	"xz":        "xz-utils",
	"go":        "golang (Go 1.26)",
}

// Build builds the image of every architecture in opts, one after the
// other, and stops at the first failure.
func Build(ctx context.Context, opts Options) ([]Result, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for tool, pkg := range requiredTools {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("images: %s not found in PATH; install %s", tool, pkg)
		}
	}
	for _, arch := range opts.Arches {
		if _, ok := kernelFile[arch]; !ok {
			return nil, fmt.Errorf("images: unknown architecture %q (want amd64 or arm64)", arch)
		}
	}
	switch opts.Kernel {
	case "", KernelDebian, KernelAuto:
	case KernelSource:
		for _, arch := range opts.Arches {
			if arch != "amd64" {
				return nil, fmt.Errorf("images: -kernel %s is only for amd64, not %s", KernelSource, arch)
			}
		}
	default:
		return nil, fmt.Errorf("images: unknown kernel %q (want %s, %s or %s)", opts.Kernel, KernelAuto, KernelDebian, KernelSource)
	}
	start := time.Now()
	pkgs, err := resolvePackages(ctx, opts.Arches)
	if err != nil {
		return nil, err
	}
	log.Info("resolved packages", "took", time.Since(start).Round(time.Millisecond))
	var results []Result
	for _, arch := range opts.Arches {
		r, err := buildArch(ctx, opts, arch, pkgs[arch], log.With("arch", arch))
		if err != nil {
			return results, err
		}
		results = append(results, r)
		// The standard image with the source-built kernel shares the
		// root disk of the one with Debian's kernel, when that is built.
		debianStandard := filepath.Join(opts.OutDir, manifest.ImageStandard, arch)
		if opts.Standard {
			share := ""
			if opts.Kernel == KernelSource {
				share = debianStandard
			}
			s, err := buildStandard(ctx, opts, r, share, log.With("arch", arch, "image", manifest.ImageStandard))
			if err != nil {
				return results, err
			}
			results = append(results, s)
		}
		if opts.Kernel == KernelAuto && arch == "amd64" {
			src := opts
			src.Kernel = KernelSource
			slg := log.With("arch", arch, "kernel", KernelSource)
			s, err := buildArch(ctx, src, arch, pkgs[arch], slg)
			switch {
			case errors.Is(err, errNoKernelBuildTools):
				log.Warn("no kernel built from linux-source: QEMU boots Debian's kernel, in about twice the time", "err", err)
				continue
			case err != nil:
				return results, err
			}
			results = append(results, s)
			if opts.Standard {
				ss, err := buildStandard(ctx, src, s, debianStandard, slg.With("image", manifest.ImageStandard))
				if err != nil {
					return results, err
				}
				results = append(results, ss)
			}
		}
	}
	return results, nil
}

func buildArch(ctx context.Context, opts Options, arch string, pkgs imagePackages, log *slog.Logger) (Result, error) {
	start := time.Now()
	res := Result{Arch: arch, Image: manifest.ImageMinimal, Dir: filepath.Join(opts.OutDir, arch)}
	kernel, busybox, cacerts := pkgs.Kernel, pkgs.Busybox, pkgs.CACerts
	var built *builtKernel
	if opts.Kernel == KernelSource {
		res.Dir = filepath.Join(opts.OutDir, KernelSourceDir, arch)
		src, err := resolveSource(ctx, kernel)
		if err != nil {
			return res, err
		}
		jobs := opts.KernelJobs
		if jobs <= 0 {
			jobs = defaultJobs()
		}
		if built, err = buildSourceKernel(ctx, opts.CacheDir, arch, src, jobs, log); err != nil {
			return res, err
		}
		if !built.Cached {
			res.Downloaded = append(res.Downloaded, "(kernel built from "+src.Name+")")
		}
		// The source package stands in for the kernel package: the
		// manifest names what the kernel was built from.
		kernel = src
	}
	pkgsToFetch := []*debPackage{&kernel, &busybox, &cacerts}
	if built != nil {
		pkgsToFetch = pkgsToFetch[1:]
	}
	for _, p := range pkgsToFetch {
		fetched, err := download(ctx, opts.CacheDir, p)
		if err != nil {
			return res, err
		}
		if fetched {
			res.Downloaded = append(res.Downloaded, p.Name)
		}
		log.Info("package", "name", p.Name, "version", p.Version, "downloaded", fetched)
	}

	tmp, err := os.MkdirTemp("", "airlock-image-"+arch+"-")
	if err != nil {
		return res, fmt.Errorf("images: %w", err)
	}
	defer os.RemoveAll(tmp)

	agent := filepath.Join(tmp, "airlock-guest")
	if err := buildAgent(ctx, opts.GuestSrc, arch, agent); err != nil {
		return res, err
	}
	agentSHA, err := manifest.FileSHA256(agent)
	if err != nil {
		return res, fmt.Errorf("images: guest agent: %w", err)
	}
	log.Info("guest agent built", "sha256", agentSHA[:12])

	packages := []manifest.Package{kernel.manifestEntry(), busybox.manifestEntry(), cacerts.manifestEntry()}
	in := keyInputs{Arch: arch, Packages: packages, GuestSHA: agentSHA, Modules: GuestModules, BaseFiles: baseEntries()}
	if built != nil {
		in.Modules, in.SourceKernel = nil, built.Key
	}
	key := inputKey(in)
	if old, err := manifest.Load(res.Dir); err == nil && old.InputKey == key {
		err := old.Verify(res.Dir)
		if err == nil {
			res.Manifest, res.UpToDate, res.Took = old, true, time.Since(start)
			log.Info("up to date", "dir", res.Dir)
			return res, nil
		}
		log.Info("existing image fails verification; rebuilding", "err", err)
	}

	if err := os.MkdirAll(res.Dir, 0o755); err != nil {
		return res, fmt.Errorf("images: %w", err)
	}
	// From here on the old manifest would describe files being replaced, so
	// it goes first: an interrupted build leaves no manifest, never a lying one.
	if err := os.Remove(filepath.Join(res.Dir, manifest.FileName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return res, fmt.Errorf("images: %w", err)
	}

	m, err := assemble(ctx, arch, res.Dir, tmp, agent, kernel, busybox, cacerts, built, log)
	if err != nil {
		return res, err
	}
	m.Packages, m.InputKey = packages, key
	if built != nil {
		m.KernelConfig = built.ConfigSHA
	}
	if err := m.Write(res.Dir); err != nil {
		return res, fmt.Errorf("images: %w", err)
	}
	res.Manifest, res.Took = m, time.Since(start)
	return res, nil
}

// assemble extracts the packages, writes the kernel and initramfs into dir
// under their final names (through temporary files), and returns the
// manifest describing them, without Packages and InputKey.
//
// built is a source-built kernel to use instead of kernel's: it has every
// driver built in, so the image gets no modules and an empty load list.
func assemble(ctx context.Context, arch, dir, tmp, agent string, kernel, busybox, cacerts debPackage, built *builtKernel, log *slog.Logger) (*manifest.Manifest, error) {
	root := filepath.Join(tmp, "root")
	caRoot := filepath.Join(tmp, "ca-root")
	extract := []struct {
		p    debPackage
		root string
	}{{kernel, root}, {busybox, root}, {cacerts, caRoot}}
	if built != nil {
		extract = extract[1:]
	}
	for _, x := range extract {
		if _, err := run(ctx, "", nil, "dpkg-deb", "-x", x.p.File, x.root); err != nil {
			return nil, fmt.Errorf("images: extract %s: %w", x.p.Name, err)
		}
	}
	cas, ncerts, err := caEntries(caRoot)
	if err != nil {
		return nil, err
	}
	kname := kernelFile[arch]
	ktmp := filepath.Join(dir, "."+kname+".tmp")
	defer os.Remove(ktmp)
	var kver, kconfig string
	var order []string
	var mods []cpioEntry
	if built != nil {
		kver, kconfig = built.Release, built.Config
		if err := copyFile(built.Vmlinux, ktmp); err != nil {
			return nil, fmt.Errorf("images: kernel: %w", err)
		}
		if err := manifest.CheckKernelFile(arch, ktmp); err != nil {
			return nil, fmt.Errorf("images: kernel %s: %w", built.Vmlinux, err)
		}
		order = []string{}
		mods = []cpioEntry{fileEntry(loadListPath, 0o644, []byte("# "+kver+": every driver is built in; nothing to load\n"))}
		log.Info("extracted", "kernel", kver+" (built from source)", "ca_certificates", ncerts)
	} else {
		if kver, order, mods, err = packagedKernel(ctx, arch, root, tmp, ktmp, log); err != nil {
			return nil, err
		}
		kconfig = filepath.Join(root, "boot", "config-"+kver)
		log.Info("extracted", "kernel", kver, "ca_certificates", ncerts)
	}

	entries := append(baseEntries(), mods...)
	entries = append(entries, cas...)
	bb := filepath.Join(root, "bin", "busybox")
	entries = append(entries,
		cpioEntry{Name: "init", Mode: modeFile | 0o755, Source: agent},
		cpioEntry{Name: busyboxFile, Mode: modeFile | 0o755, Source: bb},
	)
	// The applet links are made here rather than by `busybox --install -s`
	// at every boot, which costs guest CPU under TCG (docs/performance.md,
	// Figures behind the code). Without them (a
	// host that cannot run the guest's busybox) init makes them at boot.
	if links, err := busyboxLinks(ctx, bb); err != nil {
		log.Warn("no busybox applet links in the initramfs; the guest makes them at every boot", "err", err, "setup", emulationSetup(arch))
	} else {
		entries = append(entries, withoutNames(links, entries)...)
	}
	itmp := filepath.Join(dir, "."+initrdFile+".tmp")
	defer os.Remove(itmp)
	if err := writeFile(itmp, func(f *os.File) error { return writeCPIO(f, entries) }); err != nil {
		return nil, fmt.Errorf("images: initramfs: %w", err)
	}

	// Without the timer rate the guest only boots a little slower.
	hz, err := kernelHZ(kconfig)
	if err != nil {
		log.Warn("kernel timer rate unknown; the guest's CPUs calibrate their delay loop at boot", "err", err)
	}
	m := &manifest.Manifest{
		SchemaVersion:  manifest.SchemaVersion,
		Arch:           arch,
		KernelVersion:  kver,
		KernelHZ:       hz,
		Kernel:         kname,
		Initrd:         initrdFile,
		Modules:        order,
		BuilderVersion: Version,
	}
	for _, a := range []struct{ tmp, name string }{{ktmp, kname}, {itmp, initrdFile}} {
		art, err := artifact(a.tmp, a.name)
		if err != nil {
			return nil, err
		}
		if err := os.Rename(a.tmp, filepath.Join(dir, a.name)); err != nil {
			return nil, fmt.Errorf("images: %w", err)
		}
		m.Artifacts = append(m.Artifacts, art)
		log.Info("wrote", "file", filepath.Join(dir, a.name), "bytes", art.Size)
	}
	return m, nil
}

// packagedKernel writes the kernel of Debian's package, extracted under
// root, to ktmp and picks the modules the guest loads: it returns the
// kernel release, the module load order and the initramfs members for the
// modules and their load list.
func packagedKernel(ctx context.Context, arch, root, tmp, ktmp string, log *slog.Logger) (string, []string, []cpioEntry, error) {
	kver, err := kernelRelease(root)
	if err != nil {
		return "", nil, nil, err
	}
	if err := writeKernel(ctx, arch, filepath.Join(root, "boot", "vmlinuz-"+kver), ktmp); err != nil {
		return "", nil, nil, err
	}
	modDir := filepath.Join(root, "lib", "modules", kver)
	if _, err := run(ctx, "", nil, "depmod", "-b", root, kver); err != nil {
		return "", nil, nil, fmt.Errorf("images: depmod %s: %w", kver, err)
	}
	idx, builtin, err := readModuleIndex(modDir)
	if err != nil {
		return "", nil, nil, err
	}
	order, skipped, err := loadOrder(idx, builtin, GuestModules)
	if err != nil {
		return "", nil, nil, fmt.Errorf("images: kernel %s: %w", kver, err)
	}
	if len(skipped) > 0 {
		log.Info("optional modules not in this kernel", "skipped", skipped)
	}
	mods, err := moduleEntries(ctx, modDir, kver, tmp, idx, order)
	if err != nil {
		return "", nil, nil, err
	}
	return kver, order, mods, nil
}

// kernelRelease finds the one kernel release under root/lib/modules.
func kernelRelease(root string) (string, error) {
	ents, err := os.ReadDir(filepath.Join(root, "lib", "modules"))
	if err != nil {
		return "", fmt.Errorf("images: kernel package has no /lib/modules: %w", err)
	}
	if len(ents) != 1 || !ents[0].IsDir() {
		return "", fmt.Errorf("images: kernel package has %d entries in /lib/modules, want one release", len(ents))
	}
	kver := ents[0].Name()
	if _, err := os.Stat(filepath.Join(root, "boot", "vmlinuz-"+kver)); err != nil {
		return "", fmt.Errorf("images: kernel package has no /boot/vmlinuz-%s: %w", kver, err)
	}
	return kver, nil
}

func readModuleIndex(modDir string) (*moduleIndex, map[string]bool, error) {
	f, err := os.Open(filepath.Join(modDir, "modules.dep"))
	if err != nil {
		return nil, nil, fmt.Errorf("images: modules: %w", err)
	}
	defer f.Close()
	idx, err := parseModulesDep(f)
	if err != nil {
		return nil, nil, fmt.Errorf("images: modules: %w", err)
	}
	builtin := map[string]bool{}
	if b, err := os.Open(filepath.Join(modDir, "modules.builtin")); err == nil {
		defer b.Close()
		if builtin, err = parseBuiltin(b); err != nil {
			return nil, nil, fmt.Errorf("images: modules: %w", err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("images: modules: %w", err)
	}
	return idx, builtin, nil
}

// writeFile creates path, lets fill write it, and syncs it.
func writeFile(path string, fill func(*os.File) error) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if err := fill(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func artifact(path, name string) (manifest.Artifact, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return manifest.Artifact{}, fmt.Errorf("images: %w", err)
	}
	sum, err := manifest.FileSHA256(path)
	if err != nil {
		return manifest.Artifact{}, fmt.Errorf("images: %w", err)
	}
	return manifest.Artifact{Name: name, Size: fi.Size(), SHA256: sum}, nil
}
