package tasks

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// BenchmarkAppend measures Store writes (ns/op, MB/s) and, in alternating
// blocks of the same run so that a busy machine affects both alike, plain
// os.File writes of the same sizes; x_raw is store time over raw time.
func BenchmarkAppend(b *testing.B) {
	for _, size := range []int{512, 32 << 10, 256 << 10} {
		b.Run(byteSize(size), func(b *testing.B) {
			p := pattern(size, 9)
			dir := b.TempDir()
			s, err := Open(filepath.Join(dir, "store"), Options{Logger: quietLogger()})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			b.SetBytes(int64(size))
			// A new file every 16 MiB keeps the disk from filling up.
			per := max(1, (16<<20)/size)
			var raw time.Duration
			b.ResetTimer()
			for i, block := 0, 0; i < b.N; block++ {
				n := min(per, b.N-i)
				b.StopTimer()
				raw += rawWrites(b, filepath.Join(dir, "raw"+strconv.Itoa(block)), p, n)
				task, err := s.Create(Command{Shell: "bench"})
				if err != nil {
					b.Fatal(err)
				}
				s.Start(task.ID)
				w := s.Stdout(task.ID)
				b.StartTimer()
				for range n {
					if _, err := w.Write(p); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				s.Finish(task.ID, Exited, Exit{}, "")
				os.Remove(s.logPath(task.ID))
				b.StartTimer()
				i += n
			}
			b.StopTimer()
			if raw > 0 {
				b.ReportMetric(float64(b.Elapsed())/float64(raw), "x_raw")
			}
		})
	}
}

func rawWrites(b *testing.B, path string, p []byte, n int) time.Duration {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer os.Remove(path)
	defer f.Close()
	start := time.Now()
	for range n {
		if _, err := f.Write(p); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start)
}

func byteSize(n int) string {
	if n >= 1<<10 && n%(1<<10) == 0 {
		return strconv.Itoa(n>>10) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}

// BenchmarkLifecycle is the store's share of a short task: Create, Start,
// one small write, Finish, Get.
func BenchmarkLifecycle(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "store"), Options{Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	p := []byte("hello\n")
	b.ResetTimer()
	for range b.N {
		t, err := s.Create(Command{Argv: []string{"true"}})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Start(t.ID); err != nil {
			b.Fatal(err)
		}
		s.Stdout(t.ID).Write(p)
		if _, err := s.Finish(t.ID, Exited, Exit{}, ""); err != nil {
			b.Fatal(err)
		}
		s.Get(t.ID)
	}
}
