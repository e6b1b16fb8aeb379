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
// own entropy and clock (api.Wake). Under TCG here that is ready in a few
// hundred milliseconds where a boot takes 1.2-1.5 s (README, Performance).
//
// A template is only valid for the exact machine that saved it: the same
// QEMU binary, kernel and initramfs, and the same command line but for the
// host-side paths that differ per run (the shared folder, the console
// log, descriptor numbers). templateKey hashes all of that, so a changed
// image, QEMU, memory size, CPU count, kernel argument, share mode or
// accelerator simply finds no template and boots, saving a new one.

// templateFormat changes whenever what a template holds changes meaning
// (the park protocol, how the key is made), so old ones are never used.
const templateFormat = "airlock-template-1"

// keepTemplates bounds the templates kept in the cache folder, the most
// recently used first: each holds the guest memory its boot touched
// (60-70 MB for the minimal image).
const keepTemplates = 4

const templateExt = ".vmstate"

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
	q.QMPFD, q.IncomingFD = 0, 0
	fmt.Fprintf(h, "%s", strings.Join(q.args(), "\x00"))
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

// templates is the folder templates are kept in.
type templates struct {
	dir string
	now func() time.Time
}

func (t templates) path(key string) string { return filepath.Join(t.dir, key+templateExt) }

// open returns the template for key, or nil when there is none; it marks
// the template used, for prune.
func (t templates) open(key string) *os.File {
	if t.dir == "" {
		return nil
	}
	f, err := os.Open(t.path(key))
	if err != nil {
		return nil
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 {
		f.Close()
		return nil
	}
	now := t.now()
	_ = os.Chtimes(t.path(key), now, now)
	return f
}

// create opens a new, not yet visible, file for key's template. commit
// makes it the template (flushed, then renamed over any other); abort
// removes it. Exactly one of them must be called.
func (t templates) create(key string) (f *os.File, commit func() error, abort func(), err error) {
	if t.dir == "" {
		return nil, nil, nil, errors.New("no cache folder for templates")
	}
	if err := os.MkdirAll(t.dir, 0o700); err != nil {
		return nil, nil, nil, err
	}
	f, err = os.CreateTemp(t.dir, key+".*.tmp")
	if err != nil {
		return nil, nil, nil, err
	}
	abort = func() {
		f.Close()
		os.Remove(f.Name())
	}
	commit = func() error {
		if err := f.Sync(); err != nil {
			abort()
			return err
		}
		if err := f.Close(); err != nil {
			os.Remove(f.Name())
			return err
		}
		if err := os.Rename(f.Name(), t.path(key)); err != nil {
			os.Remove(f.Name())
			return err
		}
		t.prune()
		return nil
	}
	return f, commit, abort, nil
}

// discard removes key's template: one that would not load, or whose guest
// did not answer once started.
func (t templates) discard(key string) error {
	err := os.Remove(t.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
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
		case strings.HasSuffix(e.Name(), ".tmp") && t.now().Sub(fi.ModTime()) > time.Hour:
			os.Remove(p)
		}
	}
	slices.SortFunc(kept, func(a, b tmpl) int { return b.used.Compare(a.used) })
	for _, old := range kept[min(len(kept), keepTemplates):] {
		os.Remove(old.path)
	}
}
