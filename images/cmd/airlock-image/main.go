// Command airlock-image builds Airlock's guest images (kernel, initramfs and
// manifest.json) for amd64 and arm64 from Debian packages and the guest
// agent's source. It runs on a Debian host with apt; see package builder.
//
//	go run ./images/cmd/airlock-image -arch all
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"time"

	"github.com/airlock-sandbox/airlock/images/builder"
)

func main() {
	arch := flag.String("arch", runtime.GOARCH, "guest architecture: amd64, arm64 or all")
	out := flag.String("out", filepath.Join("images", "out"), "output folder; artifacts go to <out>/<arch>/")
	cache := flag.String("cache", "", "folder for downloaded .deb files (default <out>/cache)")
	src := flag.String("guest-src", ".", "module root the guest agent is built from")
	quiet := flag.Bool("q", false, "print only the summary")
	image := flag.String("image", "minimal", "minimal, or standard (minimal plus a Debian root disk; needs debootstrap and e2fsprogs)")
	kernel := flag.String("kernel", builder.KernelAuto, "debian: Debian's packaged kernel, drivers as modules, in <out>/<arch>/; source: amd64 only, a kernel built from Debian's linux-source of the same version with every driver built in (cached in the cache folder; the first build takes minutes and needs gcc make bc flex bison libelf-dev libssl-dev), in <out>/"+builder.KernelSourceDir+"/<arch>/, which QEMU on a Linux host boots first; auto: both for amd64 (the source build skipped with a warning when those packages are missing), debian for arm64")
	jobs := flag.Int("kernel-jobs", 0, "make -j for a -kernel source build (default: one per CPU)")
	flag.Parse()

	if *image != "minimal" && *image != "standard" {
		fmt.Fprintf(os.Stderr, "airlock-image: -image %q: want minimal or standard\n", *image)
		os.Exit(2)
	}
	if err := run(*arch, *out, *cache, *src, *quiet, *image == "standard", *kernel, *jobs); err != nil {
		fmt.Fprintln(os.Stderr, "airlock-image:", err)
		os.Exit(1)
	}
}

func run(arch, out, cache, src string, quiet, standard bool, kernel string, jobs int) error {
	arches := []string{arch}
	if arch == "all" {
		arches = []string{"amd64", "arm64"}
	}
	if cache == "" {
		cache = filepath.Join(out, "cache")
	}
	var err error
	if out, err = filepath.Abs(out); err != nil {
		return err
	}
	if cache, err = filepath.Abs(cache); err != nil {
		return err
	}
	if src, err = filepath.Abs(src); err != nil {
		return err
	}
	level := slog.LevelInfo
	if quiet {
		level = slog.LevelWarn
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				return slog.Attr{}
			}
			return a
		},
	}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	start := time.Now()
	results, err := builder.Build(ctx, builder.Options{
		Arches: arches, OutDir: out, CacheDir: cache, GuestSrc: src, Standard: standard, Logger: log,
		Kernel: kernel, KernelJobs: jobs,
	})
	for _, r := range results {
		m := r.Manifest
		state := "built"
		if r.UpToDate {
			state = "up to date"
		}
		// The image's folder under out names it: amd64, standard/amd64,
		// kernel-source/amd64, kernel-source/standard/amd64.
		label := r.Arch
		if rel, err := filepath.Rel(out, r.Dir); err == nil {
			label = rel
		}
		if d := m.RootDisk; d != nil {
			fmt.Printf("%s: %s in %s (Debian %s, %d packages, root disk %.1f MiB, kernel %s)\n", label, state, r.Took.Round(10*time.Millisecond), d.Suite, len(d.Packages), float64(d.DiskSize)/(1<<20), m.KernelVersion)
		} else {
			fmt.Printf("%s: %s in %s (kernel %s, %d modules)\n", label, state, r.Took.Round(10*time.Millisecond), m.KernelVersion, len(m.Modules))
		}
		if len(r.Downloaded) > 0 {
			fmt.Printf("  downloaded %v into %s\n", r.Downloaded, cache)
		}
		for _, a := range m.Artifacts {
			fmt.Printf("  %-50s %6.1f MiB  sha256 %s\n", filepath.Join(r.Dir, a.Name), float64(a.Size)/(1<<20), a.SHA256[:16])
		}
	}
	if err != nil {
		return err
	}
	fmt.Printf("done in %s\n", time.Since(start).Round(10*time.Millisecond))
	return nil
}
