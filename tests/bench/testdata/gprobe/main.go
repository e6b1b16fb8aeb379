// Command gprobe runs inside the guest for tests/bench and prints one JSON
// object on stdout with what it measured (times from the guest's clock).
//
//	gprobe write PATH MIB      write MIB MiB in 1 MiB chunks, fsync, close
//	gprobe read PATH           read PATH to the end
//	gprobe meta DIR N          create, stat and unlink N empty files in DIR
//	gprobe walk DIR REF        lstat every entry beneath DIR and count the files newer
//	                           than REF, as `find DIR -newer REF` does: the stat walk
//	                           that dominates `git status` in a large tree
//	gprobe spawn PROG N        N bare fork+exec+wait of PROG (no arguments), their
//	                           median in µs: the guest's own cost of a process
//	gprobe rss                 VmRSS of PID 1 (init, with the agent in it), in KiB
//	gprobe socks URL           GET URL through ALL_PROXY (SOCKS5), body to io.Discard;
//	                           the time is also printed as secs= for the shell
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/proxy"
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: gprobe write|read|meta|walk|spawn|rss|socks ...")
	}
	out := map[string]any{"op": os.Args[1]}
	switch os.Args[1] {
	case "write":
		mib, _ := strconv.Atoi(os.Args[3])
		buf := make([]byte, 1<<20)
		for i := range buf {
			buf[i] = byte(i)
		}
		start := time.Now()
		f, err := os.Create(os.Args[2])
		check(err)
		for range mib {
			_, err = f.Write(buf)
			check(err)
		}
		check(f.Sync())
		check(f.Close())
		out["secs"], out["bytes"] = time.Since(start).Seconds(), mib<<20
	case "read":
		// read PATH [BLOCK]: read(2) calls of BLOCK bytes (default 1 MiB).
		// An explicit loop: io.Copy into io.Discard would use Discard's own
		// 8 KiB buffer whatever buffer it is given.
		size := 1 << 20
		if len(os.Args) > 3 {
			size, _ = strconv.Atoi(os.Args[3])
		}
		buf := make([]byte, size)
		start := time.Now()
		f, err := os.Open(os.Args[2])
		check(err)
		var n int64
		for {
			m, err := f.Read(buf)
			n += int64(m)
			if err == io.EOF {
				break
			}
			check(err)
		}
		f.Close()
		out["secs"], out["bytes"] = time.Since(start).Seconds(), n
	case "meta":
		dir := os.Args[2]
		n, _ := strconv.Atoi(os.Args[3])
		check(os.MkdirAll(dir, 0o755))
		names := make([]string, n)
		for i := range names {
			names[i] = filepath.Join(dir, fmt.Sprintf("f%05d", i))
		}
		start := time.Now()
		for _, p := range names {
			f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			check(err)
			check(f.Close())
		}
		t1 := time.Now()
		for _, p := range names {
			_, err := os.Stat(p)
			check(err)
		}
		t2 := time.Now()
		for _, p := range names {
			check(os.Remove(p))
		}
		t3 := time.Now()
		os.Remove(dir)
		out["create_secs"], out["stat_secs"], out["unlink_secs"] = t1.Sub(start).Seconds(), t2.Sub(t1).Seconds(), t3.Sub(t2).Seconds()
		out["n"] = n
	case "walk":
		ref, err := os.Stat(os.Args[3])
		check(err)
		var n, newer int
		start := time.Now()
		check(filepath.WalkDir(os.Args[2], func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n++
			if fi.Mode().IsRegular() && fi.ModTime().After(ref.ModTime()) {
				newer++
			}
			return nil
		}))
		out["secs"], out["n"], out["newer"] = time.Since(start).Seconds(), n, newer
	case "spawn":
		// syscall.ForkExec and Wait4, as lean as Go starts a process (no
		// pipes, no os/exec bookkeeping): what any agent would pay.
		n, _ := strconv.Atoi(os.Args[3])
		ts := make([]float64, n)
		for i := range ts {
			start := time.Now()
			pid, err := syscall.ForkExec(os.Args[2], []string{os.Args[2]}, &syscall.ProcAttr{})
			check(err)
			var ws syscall.WaitStatus
			_, err = syscall.Wait4(pid, &ws, 0, nil)
			check(err)
			ts[i] = float64(time.Since(start).Nanoseconds()) / 1e3
		}
		slices.Sort(ts)
		out["us"], out["n"] = ts[n/2], n
	case "rss":
		out["init_kib"] = rss("1")
	case "socks":
		// Unlike tests/e2e's probe, nothing is hashed: under emulation
		// SHA-256 is slower than the transport and would be the figure.
		u, err := url.Parse(os.Getenv("ALL_PROXY"))
		if err != nil {
			fail("ALL_PROXY: %v", err)
		}
		pass, _ := u.User.Password()
		d, err := proxy.SOCKS5("tcp", u.Host, &proxy.Auth{User: u.User.Username(), Password: pass}, proxy.Direct)
		if err != nil {
			fail("socks: %v", err)
		}
		c := &http.Client{Transport: &http.Transport{DialContext: d.(proxy.ContextDialer).DialContext}, Timeout: 5 * time.Minute}
		start := time.Now()
		resp, err := c.Get(os.Args[2])
		if err != nil {
			fail("get: %v", err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			fail("body: status %d, %d bytes, %v", resp.StatusCode, n, err)
		}
		out["bytes"], out["secs"] = n, time.Since(start).Seconds()
		fmt.Printf("secs=%f ", out["secs"])
	default:
		fail("unknown op %q", os.Args[1])
	}
	json.NewEncoder(os.Stdout).Encode(out)
}

func rss(pid string) int {
	b, _ := os.ReadFile("/proc/" + pid + "/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return n
		}
	}
	return -1
}

func check(err error) {
	if err != nil {
		fail("%v", err)
	}
}

func fail(f string, a ...any) {
	fmt.Fprintf(os.Stderr, "gprobe: "+f+"\n", a...)
	os.Exit(1)
}
