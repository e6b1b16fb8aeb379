package builder

import (
	"bufio"
	"bytes"
	"context"
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

// imagePackages are the packages one architecture's image is built from.
type imagePackages struct {
	Kernel, Busybox debPackage
	// CACerts is ca-certificates (arch all, the same for every image).
	CACerts debPackage
}

// resolvePackages turns the package names each image needs into concrete
// packages: the linux-image-<arch> meta package becomes the kernel package
// it depends on (linux-image-6.1.0-NN-<arch>), plus busybox-static and
// ca-certificates (arch all). It asks
// apt-cache twice for all arches together, because apt-cache rebuilds its
// cache on every call where the package cache is disabled (as in Debian's
// container images), which costs a second or two each time.
func resolvePackages(ctx context.Context, arches []string) (map[string]imagePackages, error) {
	first := []string{caPackage + ":all"}
	for _, arch := range arches {
		if err := checkAptArch(ctx, arch); err != nil {
			return nil, err
		}
		first = append(first, "linux-image-"+arch+":"+arch, "busybox-static:"+arch)
	}
	stanzas, err := showPackages(ctx, first)
	if err != nil {
		return nil, err
	}
	ca, ok := stanzas[caPackage+":all"]
	if !ok {
		return nil, fmt.Errorf("images: resolve %s:all: apt-cache knows no such package; run `apt-get update`", caPackage)
	}
	var kernels []string
	res := map[string]imagePackages{}
	for _, arch := range arches {
		meta := "linux-image-" + arch
		m, ok := stanzas[meta+":"+arch]
		if !ok {
			return nil, fmt.Errorf("images: resolve %s:%s: apt-cache knows no such package; run `apt-get update`", meta, arch)
		}
		name := kernelDependency(m.Depends, meta)
		if name == "" {
			return nil, fmt.Errorf("images: resolve %s:%s: it depends on no linux-image-* package (Depends: %s)", meta, arch, m.Depends)
		}
		kernels = append(kernels, name+":"+arch)
		bb, ok := stanzas["busybox-static:"+arch]
		if !ok {
			return nil, fmt.Errorf("images: resolve busybox-static:%s: apt-cache knows no such package; run `apt-get update`", arch)
		}
		res[arch] = imagePackages{Busybox: bb.debPackage, Kernel: debPackage{Name: name, Arch: arch}, CACerts: ca.debPackage}
	}
	if stanzas, err = showPackages(ctx, kernels); err != nil {
		return nil, err
	}
	for _, arch := range arches {
		p := res[arch]
		k, ok := stanzas[p.Kernel.spec()]
		if !ok {
			return nil, fmt.Errorf("images: resolve %s: apt-cache knows no such package; run `apt-get update`", p.Kernel.spec())
		}
		p.Kernel = k.debPackage
		res[arch] = p
	}
	return res, nil
}

// kernelDependency picks the concrete kernel package out of the meta
// package's Depends field ("linux-image-6.1.0-57-amd64 (= 6.1.192-3)").
func kernelDependency(depends, meta string) string {
	for _, alt := range strings.FieldsFunc(depends, func(r rune) bool { return r == ',' || r == '|' }) {
		dep, _, _ := strings.Cut(strings.TrimSpace(alt), " ")
		dep, _, _ = strings.Cut(dep, ":")
		if strings.HasPrefix(dep, "linux-image-") && dep != meta {
			return dep
		}
	}
	return ""
}

// stanza is one package from apt-cache show.
type stanza struct {
	debPackage
	Depends string
}

// showPackages reads the candidate versions of specs ("name:arch") from
// apt's index, keyed by spec.
func showPackages(ctx context.Context, specs []string) (map[string]stanza, error) {
	out, err := run(ctx, "", nil, "apt-cache", append([]string{"show", "--no-all-versions"}, specs...)...)
	if err != nil {
		return nil, fmt.Errorf("images: resolve %s: %w (run `apt-get update`?)", strings.Join(specs, " "), err)
	}
	stanzas, err := parseControl(out)
	if err != nil {
		return nil, fmt.Errorf("images: resolve %s: %w", strings.Join(specs, " "), err)
	}
	m := map[string]stanza{}
	for _, s := range stanzas {
		m[s.spec()] = s
	}
	return m, nil
}

// parseControl reads the stanzas of apt-cache show output.
func parseControl(out []byte) ([]stanza, error) {
	var all []stanza
	var p stanza
	flush := func() error {
		if p == (stanza{}) {
			return nil
		}
		if p.Name == "" || p.Version == "" || p.Arch == "" || p.IndexSHA256 == "" {
			return fmt.Errorf("apt-cache show gave a stanza without Package, Version, Architecture or SHA256 (Package: %q)", p.Name)
		}
		all = append(all, p)
		p = stanza{}
		return nil
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if err := flush(); err != nil {
				return nil, err
			}
			continue
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
		case "Depends":
			p.Depends = v
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return all, nil
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
