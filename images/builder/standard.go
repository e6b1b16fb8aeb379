package builder

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/images/manifest"
)

// The standard image: the minimal image's kernel and initramfs plus a
// read-only Debian root disk the guest's init mounts under a writable
// layer. Its recipe:
const (
	// StandardVersion names the recipe (package list, customisation).
	// Change it whenever the root disk would differ for the same inputs.
	StandardVersion = "standard/2"
	// RootLabel is the ext4 label the guest finds the root disk by.
	RootLabel = api.RootLabel
	// RootDiskFile is the root disk's artifact name: raw ext4 with a
	// fixed-VHD footer (manifest.FormatRawVHD).
	RootDiskFile = "root.vhd"
	suite        = "bookworm"
	mirror       = "http://deb.debian.org/debian"
)

// StandardPackages are installed (with their dependencies, without
// recommends) on top of Debian's minbase: Python with pip and venv, the
// everyday tools, and the shared libraries that the wheels of common
// document and data packages (lxml, Pillow, numpy, pandas, openpyxl,
// cryptography) load.
var StandardPackages = []string{
	"python3", "python3-pip", "python3-venv",
	"git", "curl", "ca-certificates", "jq", "sqlite3", "unzip", "file",
	"less", "procps", "xz-utils", "bzip2",
	"libxml2", "libxslt1.1", "libjpeg62-turbo", "zlib1g", "libffi8", "libssl3",
	"libpng16-16", "libfreetype6", "libgomp1", "libsqlite3-0",
}

// standardDir is where the standard image built on the minimal image in
// minDir is written: <out>/standard/<arch> beside <out>/<arch>, and
// <out>/kernel-source/standard/amd64 beside <out>/kernel-source/amd64.
func standardDir(minDir string) string {
	return filepath.Join(filepath.Dir(minDir), manifest.ImageStandard, filepath.Base(minDir))
}

// standardTools are the host programs the standard image needs.
var standardTools = map[string]string{
	"debootstrap": "debootstrap",
	"dpkg-query":  "dpkg",
}

// buildStandard builds the standard image of arch next to its minimal
// image (min), or finds it up to date. A root disk of the same recipe in
// the standard image in shareDisk ("" for none), the other kernel's, is
// linked instead of built again: only the kernels differ.
func buildStandard(ctx context.Context, opts Options, min Result, shareDisk string, log *slog.Logger) (Result, error) {
	start := time.Now()
	arch := min.Arch
	res := Result{Arch: arch, Image: manifest.ImageStandard, Dir: standardDir(min.Dir)}
	tools := map[string]string{}
	for tool, pkg := range standardTools {
		p, err := lookTool(tool)
		tools[tool] = p
		if err != nil {
			return res, fmt.Errorf("images: standard image: %s not found; install %s (apt-get install %s)", tool, pkg, pkg)
		}
	}
	release, err := fetchRelease(ctx, mirror, suite)
	if err != nil {
		return res, err
	}
	custom := rootCustomisation()
	diskKey := rootDiskKey(arch, release, custom)
	key := standardKey(diskKey, min.Manifest)
	var disk *manifest.RootDisk // an existing root disk that is still good
	if old, err := manifest.Load(res.Dir); err == nil {
		err := old.Verify(res.Dir)
		switch {
		case err == nil && old.InputKey == key:
			res.Manifest, res.UpToDate, res.Took = old, true, time.Since(start)
			log.Info("standard image up to date", "dir", res.Dir)
			return res, nil
		case err == nil && old.RootDisk != nil && old.RootDisk.InputKey == diskKey:
			disk = old.RootDisk
			log.Info("root disk up to date; new kernel or initramfs")
		case err != nil:
			log.Info("existing standard image fails verification; rebuilding", "err", err)
		}
	}
	if disk == nil && arch != runtime.GOARCH {
		// debootstrap's second stage runs the guest's own programs (dpkg,
		// maintainer scripts) in a chroot: say how to let them run here
		// before touching the old image or downloading anything.
		if err := checkForeignExec(ctx, opts.OutDir, arch); err != nil {
			return res, err
		}
		log.Info("building under emulation", "host", runtime.GOARCH)
	}
	if err := os.MkdirAll(res.Dir, 0o755); err != nil {
		return res, fmt.Errorf("images: %w", err)
	}
	if err := os.Remove(filepath.Join(res.Dir, manifest.FileName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return res, fmt.Errorf("images: %w", err)
	}
	if disk == nil && shareDisk != "" {
		disk = linkRootDisk(shareDisk, res.Dir, diskKey, log)
	}
	if disk == nil {
		var err error
		if disk, err = buildRootDisk(ctx, opts, arch, res.Dir, tools, custom, diskKey, log); err != nil {
			return res, err
		}
	}
	m := &manifest.Manifest{
		SchemaVersion: manifest.SchemaVersion, Arch: arch, Image: manifest.ImageStandard,
		KernelVersion: min.Manifest.KernelVersion, KernelHZ: min.Manifest.KernelHZ, Kernel: min.Manifest.Kernel, Initrd: min.Manifest.Initrd,
		Packages: min.Manifest.Packages, Modules: min.Manifest.Modules,
		InputKey: key, BuilderVersion: Version, RootDisk: disk,
	}
	// The kernel and initramfs are the minimal image's, linked (or copied).
	for _, name := range []string{m.Kernel, m.Initrd} {
		if err := linkOrCopy(filepath.Join(min.Dir, name), filepath.Join(res.Dir, name)); err != nil {
			return res, err
		}
	}
	for _, name := range []string{m.Kernel, m.Initrd, RootDiskFile} {
		a, err := artifact(filepath.Join(res.Dir, name), name)
		if err != nil {
			return res, err
		}
		m.Artifacts = append(m.Artifacts, a)
	}
	if err := m.Write(res.Dir); err != nil {
		return res, fmt.Errorf("images: %w", err)
	}
	res.Manifest, res.Took = m, time.Since(start)
	return res, nil
}

// linkRootDisk links the root disk of the standard image in from into dir
// when it was built from the same inputs (key) and verifies, and returns
// its description; nil when it cannot be used.
func linkRootDisk(from, dir, key string, log *slog.Logger) *manifest.RootDisk {
	m, err := manifest.Load(from)
	if err != nil || m.RootDisk == nil || m.RootDisk.InputKey != key || m.RootDisk.File != RootDiskFile {
		return nil
	}
	if err := m.Verify(from); err != nil {
		log.Info("the other standard image fails verification; building the root disk", "dir", from, "err", err)
		return nil
	}
	if err := linkOrCopy(filepath.Join(from, RootDiskFile), filepath.Join(dir, RootDiskFile)); err != nil {
		log.Info("could not link the other standard image's root disk; building it", "err", err)
		return nil
	}
	log.Info("root disk linked from the other standard image", "from", from)
	return m.RootDisk
}

// buildRootDisk debootstraps the root file system, customises it and
// writes it as dir/RootDiskFile.
func buildRootDisk(ctx context.Context, opts Options, arch, dir string, tools map[string]string, custom []rootFile, key string, log *slog.Logger) (*manifest.RootDisk, error) {
	// The root file system is hundreds of MiB: build it beside the output
	// (the same file system, often bigger than /tmp).
	work, err := os.MkdirTemp(opts.OutDir, ".standard-"+arch+"-")
	if err != nil {
		return nil, fmt.Errorf("images: %w", err)
	}
	root := filepath.Join(work, "root")
	defer func() {
		// debootstrap mounts these while it runs and may leave them
		// behind when it fails; never walk into them to delete.
		for _, m := range []string{"proc", "sys", "dev/pts"} {
			_ = exec.Command("umount", "-l", filepath.Join(root, m)).Run()
		}
		os.RemoveAll(work)
	}()
	cache := filepath.Join(opts.CacheDir, "debootstrap-"+arch)
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nil, fmt.Errorf("images: %w", err)
	}
	log.Info("debootstrap", "suite", suite, "mirror", mirror, "packages", len(StandardPackages))
	t := time.Now()
	if _, err := run(ctx, "", nil, tools["debootstrap"], "--variant=minbase", "--arch="+arch,
		"--cache-dir="+cache, "--include="+strings.Join(StandardPackages, ","),
		suite, root, mirror); err != nil {
		return nil, fmt.Errorf("images: standard image: %w", err)
	}
	log.Info("debootstrap done", "took", time.Since(t).Round(time.Second))
	pkgs, err := installedPackages(ctx, tools["dpkg-query"], root)
	if err != nil {
		return nil, err
	}
	if err := customiseRoot(root, custom); err != nil {
		return nil, err
	}
	disk := filepath.Join(dir, "."+RootDiskFile+".tmp")
	defer os.Remove(disk)
	t = time.Now()
	size, err := writeRootDisk(root, disk, key)
	if err != nil {
		return nil, err
	}
	log.Info("root disk written", "bytes", size, "took", time.Since(t).Round(time.Second))

	if err := os.Rename(disk, filepath.Join(dir, RootDiskFile)); err != nil {
		return nil, fmt.Errorf("images: %w", err)
	}
	return &manifest.RootDisk{
		File: RootDiskFile, Format: manifest.FormatRawVHD, Label: RootLabel, DiskSize: size,
		Version: StandardVersion, Suite: suite, Mirror: mirror, Packages: pkgs, InputKey: key,
	}, nil
}

// lookTool finds a program in PATH or in the sbin folders a non-root
// PATH may lack.
func lookTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found", name)
}

// fetchRelease returns the sha256 of the suite's InRelease file on the
// mirror: it changes whenever a package in the suite does, so it keys the
// cache without resolving every package.
func fetchRelease(ctx context.Context, mirror, suite string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	url := mirror + "/dists/" + suite + "/InRelease"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", fmt.Errorf("images: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("images: standard image: fetch %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("images: standard image: fetch %s: %s", url, resp.Status)
	}
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return "", fmt.Errorf("images: standard image: fetch %s: %w", url, err)
	}
	if n == 0 {
		return "", fmt.Errorf("images: standard image: fetch %s: empty", url)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// standardKey hashes every input of the standard image: its root disk's
// and its minimal image's.
func standardKey(diskKey string, min *manifest.Manifest) string {
	h := sha256.New()
	fmt.Fprintf(h, "standard %s builder %s disk %s\n", StandardVersion, Version, diskKey)
	for _, a := range min.Artifacts {
		fmt.Fprintf(h, "minimal %s %s\n", a.Name, a.SHA256)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// rootDiskKey hashes every input of the root disk.
func rootDiskKey(arch, release string, custom []rootFile) string {
	h := sha256.New()
	fmt.Fprintf(h, "standard %s arch %s suite %s mirror %s release %s\n", StandardVersion, arch, suite, mirror, release)
	fmt.Fprintf(h, "packages %s\nlabel %s\n", strings.Join(StandardPackages, ","), RootLabel)
	for _, f := range custom {
		sum := sha256.Sum256(f.data)
		fmt.Fprintf(h, "file %s %o %d %t %s\n", f.path, f.mode, f.uid, f.appendTo, hex.EncodeToString(sum[:]))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// installedPackages lists the packages dpkg installed in root.
func installedPackages(ctx context.Context, dpkgQuery, root string) ([]manifest.Package, error) {
	out, err := run(ctx, "", nil, dpkgQuery, "--admindir="+filepath.Join(root, "var", "lib", "dpkg"),
		"-W", "-f", "${Package}\t${Version}\t${Architecture}\n")
	if err != nil {
		return nil, fmt.Errorf("images: standard image: %w", err)
	}
	var pkgs []manifest.Package
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) == 3 {
			pkgs = append(pkgs, manifest.Package{Name: f[0], Version: f[1], Arch: f[2]})
		}
	}
	return pkgs, nil
}

// rootFile is a file the builder writes into (or appends to) the root.
type rootFile struct {
	path     string
	mode     os.FileMode
	uid      int // owner (and group) id
	data     []byte
	appendTo bool
}

// rootCustomisation is what the builder changes in Debian's root: the task
// user, the guest's name and name service (no resolver: names are resolved
// by the host's gate, see images/README.md), and pip allowed to install
// into the system Python (the guest is disposable; PEP 668's protection is
// for machines whose packages matter).
func rootCustomisation() []rootFile {
	uid := int(api.DefaultUID)
	return []rootFile{
		{path: "etc/passwd", mode: 0o644, appendTo: true, data: fmt.Appendf(nil, "%s:x:%d:%d:%s:%s:/bin/bash\n", api.UserName, api.DefaultUID, api.DefaultGID, api.UserName, api.UserHome)},
		{path: "etc/group", mode: 0o644, appendTo: true, data: fmt.Appendf(nil, "%s:x:%d:\n", api.UserName, api.DefaultGID)},
		{path: "etc/shadow", mode: 0o640, appendTo: true, data: fmt.Appendf(nil, "%s:!:19000:0:99999:7:::\n", api.UserName)},
		{path: "etc/hostname", mode: 0o644, data: []byte("airlock\n")},
		{path: "etc/hosts", mode: 0o644, data: []byte("127.0.0.1 localhost airlock\n")},
		{path: "etc/nsswitch.conf", mode: 0o644, data: []byte("passwd: files\ngroup: files\nshadow: files\ngshadow: files\nhosts: files\nnetworks: files\nprotocols: files\nservices: files\nethers: files\nrpc: files\n")},
		{path: "etc/pip.conf", mode: 0o644, data: []byte("[global]\nbreak-system-packages = true\n")},
		{path: strings.TrimPrefix(api.UserHome, "/") + "/.profile", mode: 0o644, uid: uid, data: []byte("# Airlock: the agent passes PATH, HOME and the proxy variables.\n[ -n \"$BASH_VERSION\" ] && [ -f ~/.bashrc ] && . ~/.bashrc\n")},
	}
}

// customiseRoot applies files to the debootstrapped root and removes what
// a read-only, network-less image should not carry (the build host's
// resolver, apt's downloaded packages and indexes, logs, documentation
// apart from copyright notices).
func customiseRoot(root string, files []rootFile) error {
	for _, d := range []struct {
		path string
		mode os.FileMode
		uid  int
	}{{strings.TrimPrefix(api.UserHome, "/"), 0o755, int(api.DefaultUID)}, {strings.TrimPrefix(api.WorkspaceDir, "/"), 0o755, 0}} {
		p := filepath.Join(root, d.path)
		if err := os.MkdirAll(p, d.mode); err != nil {
			return fmt.Errorf("images: standard image: %w", err)
		}
		if err := os.Chown(p, d.uid, d.uid); err != nil {
			return fmt.Errorf("images: standard image: %w", err)
		}
	}
	for _, f := range files {
		p := filepath.Join(root, f.path)
		flag := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
		if f.appendTo {
			flag = os.O_CREATE | os.O_WRONLY | os.O_APPEND
		}
		w, err := os.OpenFile(p, flag, f.mode)
		if err != nil {
			return fmt.Errorf("images: standard image: %w", err)
		}
		_, err = w.Write(f.data)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err == nil && f.uid != 0 {
			err = os.Chown(p, f.uid, f.uid)
		}
		if err != nil {
			return fmt.Errorf("images: standard image: %s: %w", f.path, err)
		}
	}
	for _, p := range []string{"etc/resolv.conf", "etc/machine-id", "var/lib/dbus/machine-id"} {
		if err := os.Remove(filepath.Join(root, p)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("images: standard image: %w", err)
		}
	}
	// An empty machine-id file (not a missing one) is Debian's "first boot".
	if err := os.WriteFile(filepath.Join(root, "etc", "machine-id"), nil, 0o444); err != nil {
		return fmt.Errorf("images: standard image: %w", err)
	}
	for _, dir := range []string{"var/cache/apt", "var/lib/apt/lists", "var/log", "usr/share/man", "usr/share/info", "var/cache/debconf"} {
		if err := emptyDir(filepath.Join(root, dir), func(rel string, d fs.DirEntry) bool {
			return !d.IsDir() && !strings.HasPrefix(filepath.Base(rel), "config.dat") && !strings.HasPrefix(filepath.Base(rel), "templates.dat")
		}); err != nil {
			return err
		}
	}
	return emptyDir(filepath.Join(root, "usr", "share", "doc"), func(rel string, d fs.DirEntry) bool {
		return !d.IsDir() && filepath.Base(rel) != "copyright"
	})
}

// emptyDir removes the files under dir that drop selects, keeping folders.
func emptyDir(dir string, drop func(rel string, d fs.DirEntry) bool) error {
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if p != dir && drop(rel, d) {
			return os.Remove(p)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("images: standard image: tidy %s: %w", dir, err)
	}
	return nil
}

// linkOrCopy makes dst the same file as src: a hard link when both are on
// one file system, a copy otherwise.
func linkOrCopy(src, dst string) error {
	tmp := dst + ".tmp"
	os.Remove(tmp)
	if err := os.Link(src, tmp); err != nil {
		in, err := os.Open(src)
		if err != nil {
			return fmt.Errorf("images: %w", err)
		}
		defer in.Close()
		if err := writeFile(tmp, func(f *os.File) error { _, err := io.Copy(f, in); return err }); err != nil {
			return fmt.Errorf("images: copy %s: %w", src, err)
		}
	}
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("images: %w", err)
	}
	return nil
}
