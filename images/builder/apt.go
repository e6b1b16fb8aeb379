package builder

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/airlock-sandbox/airlock/images/manifest"
)

// debPackage is a Debian package as apt's index describes it, and where
// its .deb lies once downloaded.
type debPackage struct {
	Name, Version, Arch string
	// IndexSHA256 is the hash apt's index records for the .deb.
	IndexSHA256 string
	// File is the downloaded .deb in the cache.
	File string
}

func (p debPackage) spec() string { return p.Name + ":" + p.Arch }

func (p debPackage) manifestEntry() manifest.Package {
	return manifest.Package{Name: p.Name, Version: p.Version, Arch: p.Arch, SHA256: p.IndexSHA256}
}

// run runs a command and returns its standard output. A failure carries the
// command's standard error, which is where apt and dpkg explain themselves.
func run(ctx context.Context, dir string, env []string, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = env
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 2000 {
			msg = msg[len(msg)-2000:]
		}
		if msg != "" {
			return nil, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, msg)
		}
		return nil, fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return stdout.Bytes(), nil
}

// checkAptArch makes sure dpkg knows the guest architecture, so that apt
// can resolve and download its packages.
func checkAptArch(ctx context.Context, arch string) error {
	native, err := run(ctx, "", nil, "dpkg", "--print-architecture")
	if err != nil {
		return fmt.Errorf("images: dpkg architecture: %w", err)
	}
	if strings.TrimSpace(string(native)) == arch {
		return nil
	}
	foreign, err := run(ctx, "", nil, "dpkg", "--print-foreign-architectures")
	if err != nil {
		return fmt.Errorf("images: dpkg architecture: %w", err)
	}
	for _, a := range strings.Fields(string(foreign)) {
		if a == arch {
			return nil
		}
	}
	return fmt.Errorf("images: apt does not know the %s architecture; run `dpkg --add-architecture %s && apt-get update` and try again", arch, arch)
}

// resolvePackages turns the package names the image needs into concrete
// packages: the linux-image-<arch> meta package becomes the kernel package
// it depends on (linux-image-6.1.0-NN-<arch>), plus busybox-static.
func resolvePackages(ctx context.Context, arch string) (kernel, busybox debPackage, err error) {
	meta := "linux-image-" + arch
	out, err := run(ctx, "", nil, "apt-cache", "depends", meta+":"+arch)
	if err != nil {
		return kernel, busybox, fmt.Errorf("images: resolve %s: %w (run `apt-get update`?)", meta, err)
	}
	name := kernelDependency(out, meta)
	if name == "" {
		return kernel, busybox, fmt.Errorf("images: resolve %s: apt-cache depends names no linux-image-* package; run `apt-get update`", meta)
	}
	if kernel, err = showPackage(ctx, name, arch); err != nil {
		return kernel, busybox, err
	}
	busybox, err = showPackage(ctx, "busybox-static", arch)
	return kernel, busybox, err
}

// kernelDependency picks the concrete kernel package out of `apt-cache
// depends` output for the meta package meta.
func kernelDependency(out []byte, meta string) string {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimLeft(strings.TrimSpace(sc.Text()), "|")
		dep, ok := strings.CutPrefix(line, "Depends:")
		if !ok {
			continue
		}
		dep, _, _ = strings.Cut(strings.TrimSpace(dep), ":")
		dep = strings.Trim(dep, "<>")
		if strings.HasPrefix(dep, "linux-image-") && dep != meta {
			return dep
		}
	}
	return ""
}

// showPackage reads the candidate version of name:arch from apt's index.
func showPackage(ctx context.Context, name, arch string) (debPackage, error) {
	out, err := run(ctx, "", nil, "apt-cache", "show", "--no-all-versions", name+":"+arch)
	if err != nil {
		return debPackage{}, fmt.Errorf("images: resolve %s:%s: %w (run `apt-get update`?)", name, arch, err)
	}
	p, err := parseControl(out)
	if err != nil {
		return debPackage{}, fmt.Errorf("images: resolve %s:%s: %w", name, arch, err)
	}
	if p.Name != name || p.Arch != arch {
		return debPackage{}, fmt.Errorf("images: resolve %s:%s: apt offers %s:%s instead", name, arch, p.Name, p.Arch)
	}
	return p, nil
}

// parseControl reads the first stanza of apt-cache show output.
func parseControl(out []byte) (debPackage, error) {
	var p debPackage
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			break
		}
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		switch k {
		case "Package":
			p.Name = v
		case "Version":
			p.Version = v
		case "Architecture":
			p.Arch = v
		case "SHA256":
			p.IndexSHA256 = v
		}
	}
	if p.Name == "" || p.Version == "" || p.Arch == "" || p.IndexSHA256 == "" {
		return p, errors.New("apt-cache show gave no Package, Version, Architecture and SHA256")
	}
	return p, nil
}

// cacheName is the file name apt-get download gives a package.
func (p debPackage) cacheName() string {
	return fmt.Sprintf("%s_%s_%s.deb", p.Name, strings.ReplaceAll(p.Version, ":", "%3a"), p.Arch)
}

// download makes sure p's .deb is in cache with the hash apt's index
// records, fetching it with apt-get download only when it is not. It
// reports whether it downloaded.
func download(ctx context.Context, cache string, p *debPackage) (bool, error) {
	p.File = filepath.Join(cache, p.cacheName())
	if sum, err := manifest.FileSHA256(p.File); err == nil && sum == p.IndexSHA256 {
		return false, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return false, fmt.Errorf("images: download %s: %w", p.Name, err)
	}
	// A private folder keeps a half-downloaded file out of the cache.
	tmp, err := os.MkdirTemp(cache, ".download-")
	if err != nil {
		return false, fmt.Errorf("images: download %s: %w", p.Name, err)
	}
	defer os.RemoveAll(tmp)
	if _, err := run(ctx, tmp, nil, "apt-get", "download", "-q", p.spec()+"="+p.Version); err != nil {
		return false, fmt.Errorf("images: download %s: %w", p.Name, err)
	}
	got := filepath.Join(tmp, p.cacheName())
	sum, err := manifest.FileSHA256(got)
	if err != nil {
		return false, fmt.Errorf("images: download %s: %w", p.Name, err)
	}
	if sum != p.IndexSHA256 {
		return false, fmt.Errorf("images: download %s: sha256 %s, apt's index says %s", p.Name, sum, p.IndexSHA256)
	}
	if err := os.Rename(got, p.File); err != nil {
		return false, fmt.Errorf("images: download %s: %w", p.Name, err)
	}
	return true, nil
}
