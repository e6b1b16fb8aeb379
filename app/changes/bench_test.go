package changes

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// BenchmarkApply applies 1,000 small files, and one 100 MiB file, into an
// empty folder and times it against `cp -a` of the same files on the same
// file system in the same iteration (and against cp -a followed by a
// sync, since apply makes its writes durable and cp does not), then times
// the undo against the apply. It reports medians of the pairs' ratios,
// asserting nothing; -benchtime Nx runs N pairs:
//
//	go test -run '^$' -bench Apply -benchtime 5x ./app/changes/
func BenchmarkApply(b *testing.B) {
	if _, err := exec.LookPath("cp"); err != nil {
		b.Skip("no cp")
	}
	small := make([]benchFile, 1000)
	for i := range small {
		small[i] = benchFile{fmt.Sprintf("d%02d/f%04d.txt", i%20, i), 4 << 10}
	}
	big := []benchFile{{"big.bin", 100 << 20}}
	for _, c := range []struct {
		name          string
		files         []benchFile
		apart, modify bool
	}{
		{"1000x4KiB", small, false, false},
		{"1x100MiB", big, false, false},
		// The store on another file system (/dev/shm): content is
		// copied, not linked.
		{"1000x4KiB-copied", small, true, false},
		{"1x100MiB-copied", big, true, false},
		// Over files the folder holds: the checkpoint copies each
		// previous version (cp -a overwrites them in place).
		{"1000x4KiB-modify", small, false, true},
		{"1x100MiB-modify", big, false, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			storeRoot := ""
			if c.apart {
				if fi, err := os.Stat("/dev/shm"); err != nil || !fi.IsDir() {
					b.Skip("no /dev/shm for a store on another file system")
				}
				var err error
				if storeRoot, err = os.MkdirTemp("/dev/shm", "airlock-bench-"); err != nil {
					b.Skip(err)
				}
				defer os.RemoveAll(storeRoot)
			}
			benchApply(b, c.files, storeRoot, c.modify)
		})
	}
}

type benchFile struct {
	path string
	size int
}

// benchApply runs the bench with the store under storeRoot ("": beside
// the folder, on its file system); modify puts a previous version of each
// file in the folder (and cp -a's target) first.
func benchApply(b *testing.B, files []benchFile, storeRoot string, modify bool) {
	b.StopTimer()
	work := b.TempDir()
	src := filepath.Join(work, "src")
	var recs []record
	var contents, olds [][]byte
	for i, f := range files {
		// Every file's content differs, as in a source tree.
		data := make([]byte, f.size)
		for j := range data {
			data[j] = byte(j * 7)
		}
		copy(data, fmt.Sprintf("file %d\n", i))
		p := filepath.Join(src, filepath.FromSlash(f.path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			b.Fatal(err)
		}
		os.Chtimes(p, newTime, newTime)
		contents = append(contents, data)
		r := record{
			Entry: Entry{Path: f.path, Kind: Added, Type: File, Mode: 0o644, Size: int64(f.size), ModTime: newTime},
			Blob:  sha(data),
		}
		if modify {
			old := slices.Clone(data)
			old[len(old)-1] ^= 0xff
			olds = append(olds, old)
			r.Kind = Modified
			r.Base = Base{Exists: true, Type: File, Size: int64(len(old)), Mode: 0o644, ModTime: oldTime, Hash: sha(old)}
		}
		recs = append(recs, r)
	}
	var cpT, cpSyncT, applyT, undoT []float64
	for i := 0; i < b.N; i++ {
		dir := filepath.Join(work, fmt.Sprint("store", i))
		if storeRoot != "" {
			dir = filepath.Join(storeRoot, fmt.Sprint("store", i))
		}
		s, err := Open(dir, Options{})
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range contents {
			if err := os.WriteFile(s.blobPath(sha(c)), c, 0o600); err != nil {
				b.Fatal(err)
			}
		}
		cpDst, ws := filepath.Join(work, fmt.Sprint("cp", i)), filepath.Join(work, fmt.Sprint("ws", i))
		for _, d := range []string{cpDst, ws} {
			if err := os.Mkdir(d, 0o755); err != nil {
				b.Fatal(err)
			}
			for j, old := range olds {
				p := filepath.Join(d, filepath.FromSlash(files[j].path))
				os.MkdirAll(filepath.Dir(p), 0o755)
				if err := os.WriteFile(p, old, 0o644); err != nil {
					b.Fatal(err)
				}
				os.Chtimes(p, oldTime, oldTime)
			}
		}
		// The layer began after the folder was set up.
		if err := s.savePending(pendingManifest{Epoch: time.Now().Add(clockSlack + time.Second), Records: recs}); err != nil {
			b.Fatal(err)
		}
		// Alternate which goes first, so neither always meets a colder
		// cache or a busier disk.
		runCp := func() {
			t0 := time.Now()
			if out, err := exec.Command("cp", "-a", src+"/.", cpDst).CombinedOutput(); err != nil {
				b.Fatalf("cp -a: %v %s", err, out)
			}
			cpT = append(cpT, time.Since(t0).Seconds())
			// And made durable, as apply makes what it writes.
			if f, err := os.Open(cpDst); err == nil {
				syncFS(f)
				f.Close()
			}
			cpSyncT = append(cpSyncT, time.Since(t0).Seconds())
		}
		runApply := func() {
			t0 := time.Now()
			res, err := s.Apply(ws, nil, ApplyOptions{})
			if err != nil || len(res.Applied) != len(files) {
				b.Fatalf("Apply = %+v, %v", res, err)
			}
			applyT = append(applyT, time.Since(t0).Seconds())
		}
		// Nothing of the setup or of the other run is left to flush, so
		// that apply's file-system sync flushes only what apply wrote.
		settle := func() {
			if f, err := os.Open(work); err == nil {
				syncFS(f)
				f.Close()
			}
		}
		settle()
		if i%2 == 0 {
			runCp()
			settle()
			runApply()
		} else {
			runApply()
			settle()
			runCp()
		}
		settle()
		t0 := time.Now()
		if _, err := s.Undo(ws, ""); err != nil {
			b.Fatal(err)
		}
		undoT = append(undoT, time.Since(t0).Seconds())
		s.Close()
		os.RemoveAll(cpDst)
		os.RemoveAll(ws)
		os.RemoveAll(dir)
	}
	// Ratios pair each run with its baseline of the same iteration, which
	// ran back to back with it: on a busy machine that cancels more of
	// the noise than a ratio of medians.
	var ac, acs, ua []float64
	for i := range applyT {
		ac, ua = append(ac, applyT[i]/cpT[i]), append(ua, undoT[i]/applyT[i])
		acs = append(acs, applyT[i]/cpSyncT[i])
	}
	b.ReportMetric(benchMedian(cpT)*1e3, "cp-a-ms")
	b.ReportMetric(benchMedian(applyT)*1e3, "apply-ms")
	b.ReportMetric(benchMedian(undoT)*1e3, "undo-ms")
	b.ReportMetric(benchMedian(ac), "apply/cp-a")
	b.ReportMetric(benchMedian(acs), "apply/cp-a+sync")
	b.ReportMetric(benchMedian(ua), "undo/apply")
	b.ReportMetric(0, "ns/op")
}

func benchMedian(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
