//go:build e2e

package bench

import (
	"archive/tar"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"time"

	"github.com/airlock-sandbox/airlock/app/changes"
)

// applyFile is one file of an apply set: its slash path and size.
type applyFile struct {
	path string
	size int
}

// changesApply measures app/changes carrying a guest's layer into the host
// folder: Apply of 1,000 small files, of one 100 MiB file, and of 1,000
// small files over older versions the folder holds, against `cp -a` of
// the same files (over the same older versions) followed by `sync -f`
// (Apply makes what it writes durable; cp alone does not), and Undo
// against the Apply. Each round ingests the set, as a layer's tar stream
// built here, into a fresh store (not timed), then runs Apply and cp -a in
// alternating order, then Undo; all on one file system, under h.work, as a
// store and the folder it applies to usually are: Apply links a file's
// content from the store rather than copying it.
func (h *harness) changesApply() {
	small := make([]applyFile, 1000)
	for i := range small {
		small[i] = applyFile{fmt.Sprintf("d%02d/f%04d.txt", i%20, i), 4 << 10}
	}
	for _, c := range []struct {
		key, name string
		files     []applyFile
		over      bool
	}{
		{"small", "1,000×4K", small, false},
		{"big", "1×100M", []applyFile{{"big.bin", 100 << 20}}, false},
		{"over", "1,000×4K over older versions", small, true},
	} {
		h.applySet(c.key, c.name, c.files, c.over)
	}
}

// applySet measures one set; over puts an older version of each file in
// the folder and in cp -a's target first, written before the rounds and
// left older than app/changes' clock slack (2 s) at the ingest, as a
// user's files are: a file changed just before a pull is read again at
// the apply.
func (h *harness) applySet(key, name string, files []applyFile, over bool) {
	ctx := context.Background()
	dir := filepath.Join(h.work, "apply-"+key)
	src := filepath.Join(dir, "src")
	layer := filepath.Join(dir, "layer.tar")
	if err := writeApplySet(src, layer, files); err != nil {
		h.b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	for i := range h.rounds {
		for _, d := range []string{filepath.Join(dir, fmt.Sprint("ws", i)), filepath.Join(dir, fmt.Sprint("cp", i))} {
			if err := os.Mkdir(d, 0o755); err != nil {
				h.b.Fatal(err)
			}
			if over {
				if err := writeOlder(d, files); err != nil {
					h.b.Fatal(err)
				}
			}
		}
	}
	if over {
		time.Sleep(2500 * time.Millisecond)
	}
	var applyMS, cpMS, cpOnlyMS, undoMS []float64
	for i := range h.rounds {
		ws, cpDst := filepath.Join(dir, fmt.Sprint("ws", i)), filepath.Join(dir, fmt.Sprint("cp", i))
		s, err := changes.Open(filepath.Join(dir, fmt.Sprint("store", i)), changes.Options{})
		if err != nil {
			h.b.Fatal(err)
		}
		f, err := os.Open(layer)
		if err != nil {
			h.b.Fatal(err)
		}
		sum, err := s.Ingest(ctx, f, ws, time.Now(), changes.DefaultLimits)
		f.Close()
		if err != nil || sum.Pending < len(files) {
			h.b.Fatalf("ingest %s: %+v %v", key, sum, err)
		}
		// Flush what setting up wrote (the source, the layer, the store),
		// so the first of Apply and cp -a to sync does not pay for it.
		if out, err := syncFS(dir); err != nil {
			h.b.Fatalf("sync -f: %v %s", err, out)
		}
		var checkpoint string
		runApply := func() {
			t0 := time.Now()
			res, err := s.Apply(ws, nil, changes.ApplyOptions{})
			took := time.Since(t0)
			if err != nil || len(res.Applied) < len(files) {
				h.b.Fatalf("apply %s: %+v %v", key, res, err)
			}
			applyMS, checkpoint = append(applyMS, ms(took)), res.Checkpoint
		}
		runCp := func() {
			t0 := time.Now()
			if out, err := exec.Command("cp", "-a", src+"/.", cpDst).CombinedOutput(); err != nil {
				h.b.Fatalf("cp -a: %v %s", err, out)
			}
			cpOnlyMS = append(cpOnlyMS, ms(time.Since(t0)))
			if out, err := syncFS(cpDst); err != nil {
				h.b.Fatalf("sync -f: %v %s", err, out)
			}
			cpMS = append(cpMS, ms(time.Since(t0)))
		}
		if i%2 == 0 {
			runApply()
			runCp()
		} else {
			runCp()
			runApply()
		}
		t0 := time.Now()
		if _, err := s.Undo(ws, checkpoint); err != nil {
			h.b.Fatalf("undo %s: %v", key, err)
		}
		undoMS = append(undoMS, ms(time.Since(t0)))
		// The undo took the applied files away again (or put the older
		// versions back): it was timed doing its work.
		left := 0
		filepath.WalkDir(ws, func(_ string, d os.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				left++
			}
			return nil
		})
		if want := map[bool]int{false: 0, true: len(files)}[over]; left != want {
			h.b.Fatalf("undo %s left %d files in the folder, want %d", key, left, want)
		}
		s.Close()
		for _, d := range []string{ws, cpDst, filepath.Join(dir, fmt.Sprint("store", i))} {
			os.RemoveAll(d)
		}
	}
	row := h.t.add("changes-apply-"+key, "changes Apply "+name+" (ingested layer)", "ms", applyMS, "cp -a + sync -f", cpMS, nil)
	row.Note = fmt.Sprintf("store and folder on one file system (content linked from the store); cp -a alone: %.0f ms", median(cpOnlyMS))
	if over {
		row.Note += "; the older versions last changed before the ingest"
	}
	h.t.add("changes-undo-"+key, "changes Undo of that Apply, "+name, "ms", undoMS, "its Apply", applyMS, nil)
}

// writeApplySet writes files beneath src, each with its own content, and
// the same files as a layer's tar stream at layer.
func writeApplySet(src, layer string, files []applyFile) error {
	if err := os.MkdirAll(src, 0o755); err != nil {
		return err
	}
	out, err := os.Create(layer)
	if err != nil {
		return err
	}
	defer out.Close()
	tw := tar.NewWriter(out)
	mtime := time.Now().Truncate(time.Second)
	dirs := map[string]bool{}
	for i, f := range files {
		data := make([]byte, f.size)
		for j := range data {
			data[j] = byte(j * 7)
		}
		copy(data, fmt.Sprintf("file %d\n", i))
		if d := path.Dir(f.path); d != "." && !dirs[d] {
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: mtime}); err != nil {
				return err
			}
		}
		p := filepath.Join(src, filepath.FromSlash(f.path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return err
		}
		os.Chtimes(p, mtime, mtime)
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.path, Mode: 0o644, Size: int64(len(data)), ModTime: mtime}); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return out.Close()
}

// writeOlder writes an older version of each of files beneath dir: the
// same size, its last byte different.
func writeOlder(dir string, files []applyFile) error {
	for i, f := range files {
		data := make([]byte, f.size)
		for j := range data {
			data[j] = byte(j * 7)
		}
		copy(data, fmt.Sprintf("file %d\n", i))
		data[len(data)-1] ^= 0xff
		p := filepath.Join(dir, filepath.FromSlash(f.path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// syncFS flushes the file system holding dir: sync -f where coreutils has
// it (Linux), else the whole system's sync.
func syncFS(dir string) ([]byte, error) {
	if runtime.GOOS != "linux" {
		return exec.Command("sync").CombinedOutput()
	}
	return exec.Command("sync", "-f", dir).CombinedOutput()
}
