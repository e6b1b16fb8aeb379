package qemu

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/images/manifest"
)

// Templates. A guest booted to park (api.BootConfig.Park) stops at the
// point where every run of its image and command line is the same, and
// tells the host so. The first machine of such a shape saves its paused
// state there to a template (QEMU's migration stream, into a file), then
// goes on; every later machine of the same shape is started from the
// template instead of booting (QEMU's -incoming), and is woken with its
// own entropy and clock (api.Wake). Under TCG that is ready in a fraction
// of a boot's time (README, Performance).
//
// The guest's memory lives in a memory file the host shares with QEMU
// (ram_linux.go), and the migration skips it (x-ignore-shared): a save
// writes the machine state and copies the memory file's data, what the
// guest touched, and a start from a template copies that back into a
// fresh memory file before QEMU loads the state. QEMU's own migration of
// the memory reads every page of it, touched or not, and a load writes
// every page: on a host where a first touch is slow, a save takes seconds
// and every machine started from a template holds all of its guest memory
// resident (docs/performance.md, What changed: templates keep the guest's
// memory in a file of its own). The memory is copied, not mapped from
// the template by every machine (copy-on-write, as Kata Containers' VM
// templating does): machines never share a physical page, so none can
// watch another through one.
//
// A template is only valid for the exact machine that saved it: the same
// QEMU binary, kernel and initramfs, and the same command line but for the
// host-side paths that differ per run (the shared folder, the console
// log, a changes layer's disk, descriptor numbers). templateKey hashes all of that, so a changed
// image, QEMU, memory size, CPU count, kernel argument, share mode or
// accelerator simply finds no template and boots, saving a new one.

// templateFormat changes whenever what a template holds changes meaning
// (the park protocol, how the key is made, its files), so old ones are
// never used. 2: the guest's memory in a file of its own beside the
// machine state.
const templateFormat = "airlock-template-2"

// keepTemplates bounds the templates kept in the cache folder, the most
// recently used first: each holds the guest memory its boot touched
// (55-70 MB for the minimal image, in a sparse file as large as the
// guest's memory).
const keepTemplates = 4

// A template is two files: the machine's state (QEMU's migration stream,
// without the guest's memory: a few hundred KiB) and the guest's memory
// (ramExt), copied out of the memory file the parked guest ran in. The
// state is written last and read first: a template is there when its
// state is.
const (
	templateExt = ".vmstate"
	ramExt      = ".ram"
)

// templateKey names the template for the machine whose parked command
// line is p (host-side paths and descriptors included: they are left out
// here), booted by the QEMU binary qemu. It fails when a file it names
// cannot be looked at, and then no template is used.
func templateKey(p plan, qemu string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00", templateFormat)
	for _, f := range []string{qemu, p.Kernel, p.Initrd} {
		if f == "" {
			continue
		}
		fi, err := os.Stat(f)
		if err != nil {
			return "", fmt.Errorf("template key: %w", err)
		}
		id, _ := manifest.FileIdentity(fi)
		fmt.Fprintf(h, "%s\x00%s\x00", f, id)
	}
	q := p
	q.SharePath = "-"
	if p.Share == "" {
		q.SharePath = ""
	}
	q.ConsoleLog, q.ConsoleFD, q.PIDFile = "-", 0, ""
	// A changes layer's disk is each machine's own (layerOnly); its
	// place in the command line, that it is writable, and its size stay:
	// a machine started from the template has its virtio-blk device's
	// configuration (the capacity) from the saved state, so a disk of
	// another size would be read and written past its end.
	q.Disks = nil
	for _, d := range p.Disks {
		fi, err := os.Stat(d.Path)
		if err != nil {
			return "", fmt.Errorf("template key: %w", err)
		}
		fmt.Fprintf(h, "disk of %d bytes\x00", fi.Size())
		d.Path = "-"
		q.Disks = append(q.Disks, d)
	}
	q.DiskFDs = nil
	q.QMPFD, q.IncomingFD, q.RAMFD = 0, 0, 0
	fmt.Fprintf(h, "%s", strings.Join(q.args(), "\x00"))
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

// templates is the folder templates are kept in.
type templates struct {
	dir string
	now func() time.Time
}

func (t templates) path(key string) string { return filepath.Join(t.dir, key+templateExt) }

func (t templates) ramPath(key string) string { return filepath.Join(t.dir, key+ramExt) }

// open returns key's template, its machine state and its guest memory, or
// nils when there is none; it marks the template used, for prune.
func (t templates) open(key string) (state, ram *os.File) {
	if t.dir == "" {
		return nil, nil
	}
	state, err := openRegular(t.path(key))
	if err != nil {
		return nil, nil
	}
	if ram, err = openRegular(t.ramPath(key)); err != nil {
		state.Close()
		return nil, nil
	}
	now := t.now()
	_ = os.Chtimes(t.path(key), now, now)
	return state, ram
}

// openRegular opens a regular file that is not empty.
func openRegular(path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 {
		f.Close()
		return nil, fmt.Errorf("%s: not a template file", path)
	}
	return f, nil
}

// create opens two new, not yet visible, files for key's template: its
// machine state and its guest memory. commit makes them the template
// (flushed, then renamed over any other, the state last); abort removes
// them. Exactly one of the two must be called.
func (t templates) create(key string) (state, ram *os.File, commit func() error, abort func(), err error) {
	if t.dir == "" {
		return nil, nil, nil, nil, errors.New("no cache folder for templates")
	}
	if err := os.MkdirAll(t.dir, 0o700); err != nil {
		return nil, nil, nil, nil, err
	}
	if state, err = os.CreateTemp(t.dir, key+templateExt+".*.tmp"); err != nil {
		return nil, nil, nil, nil, err
	}
	if ram, err = os.CreateTemp(t.dir, key+ramExt+".*.tmp"); err != nil {
		state.Close()
		os.Remove(state.Name())
		return nil, nil, nil, nil, err
	}
	// In the order of commit's renames: the state last, as it makes the
	// template (a memory file left alone by a crash between the two is an
	// orphan that prune removes).
	files := []struct {
		f    *os.File
		path string
	}{{ram, t.ramPath(key)}, {state, t.path(key)}}
	abort = func() {
		for _, x := range files {
			x.f.Close()
			os.Remove(x.f.Name())
		}
	}
	commit = func() error {
		for _, x := range files {
			if err := x.f.Sync(); err != nil {
				abort()
				return err
			}
		}
		for _, x := range files {
			if err := x.f.Close(); err != nil {
				abort()
				return err
			}
			if err := os.Rename(x.f.Name(), x.path); err != nil {
				abort()
				return err
			}
		}
		t.prune()
		return nil
	}
	return state, ram, commit, abort, nil
}

// discard removes key's template: one that would not load, or whose guest
// did not answer once started.
func (t templates) discard(key string) error {
	var errs []error
	for _, p := range []string{t.path(key), t.ramPath(key)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// prune keeps the keepTemplates templates used last, and removes
// temporary files of saves that were cut off (a crash mid-save) once they
// are an hour old.
func (t templates) prune() {
	ents, err := os.ReadDir(t.dir)
	if err != nil {
		return
	}
	type tmpl struct {
		path string
		used time.Time
	}
	var kept []tmpl
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		p := filepath.Join(t.dir, e.Name())
		switch {
		case strings.HasSuffix(e.Name(), templateExt):
			kept = append(kept, tmpl{p, fi.ModTime()})
		case strings.HasSuffix(e.Name(), ramExt):
			// Memory whose state is gone (pruned, discarded, or a
			// crash between the two renames of a commit).
			if _, err := os.Stat(strings.TrimSuffix(p, ramExt) + templateExt); errors.Is(err, fs.ErrNotExist) {
				os.Remove(p)
			}
		case strings.HasSuffix(e.Name(), ".tmp") && t.now().Sub(fi.ModTime()) > time.Hour:
			os.Remove(p)
		}
	}
	slices.SortFunc(kept, func(a, b tmpl) int { return b.used.Compare(a.used) })
	for _, old := range kept[min(len(kept), keepTemplates):] {
		os.Remove(old.path)
		os.Remove(strings.TrimSuffix(old.path, templateExt) + ramExt)
	}
}
