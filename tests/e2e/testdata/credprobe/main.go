// Command credprobe runs inside the guest during the credential end-to-end
// tests.
//
//	credprobe get URL [HEADER VALUE]    GET through HTTP_PROXY, trusting the system bundle
//	credprobe socks URL [HEADER VALUE]  the same through ALL_PROXY (SOCKS5)
//	credprobe post URL BODY             POST BODY through HTTP_PROXY
//	credprobe echo URL [HEADER VALUE]   GET through HTTP_PROXY without following
//	                                    redirects; print the status line, every
//	                                    header and the whole body
//	credprobe socksecho URL [HEADER VALUE]  the same through ALL_PROXY (SOCKS5)
//	credprobe scan LEN HASH SHA256      look for a string known only by its
//	                                    length, Rabin-Karp hash and SHA-256 in every
//	                                    process's environment and memory and every
//	                                    file under /; prints one line per place found
//
// scan never learns the string itself, so it can look for a secret that
// must not be in the guest without bringing it there.
package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"math/bits"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/proxy"
)

func main() {
	if len(os.Args) < 3 {
		fail("usage: credprobe get|socks|post|scan ...")
	}
	switch os.Args[1] {
	case "get", "socks", "echo", "socksecho":
		tr := &http.Transport{Proxy: http.ProxyFromEnvironment}
		if strings.HasPrefix(os.Args[1], "socks") {
			u, err := url.Parse(os.Getenv("ALL_PROXY"))
			if err != nil {
				fail("ALL_PROXY: %v", err)
			}
			pass, _ := u.User.Password()
			d, err := proxy.SOCKS5("tcp", u.Host, &proxy.Auth{User: u.User.Username(), Password: pass}, proxy.Direct)
			if err != nil {
				fail("socks: %v", err)
			}
			tr = &http.Transport{DialContext: d.(proxy.ContextDialer).DialContext}
		}
		req, err := http.NewRequest("GET", os.Args[2], nil)
		if err != nil {
			fail("%v", err)
		}
		if len(os.Args) > 4 {
			req.Header.Set(os.Args[3], os.Args[4])
		}
		if !strings.HasSuffix(os.Args[1], "echo") {
			do(&http.Client{Transport: tr, Timeout: 60 * time.Second}, req)
			return
		}
		c := &http.Client{Transport: tr, Timeout: 60 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := c.Do(req)
		if err != nil {
			fail("request: %v", err)
		}
		defer resp.Body.Close()
		fmt.Printf("status=%s\n", resp.Status)
		resp.Header.Write(os.Stdout)
		io.Copy(os.Stdout, io.LimitReader(resp.Body, 1<<20))
		fmt.Println()
	case "post":
		req, err := http.NewRequest("POST", os.Args[2], strings.NewReader(os.Args[3]))
		if err != nil {
			fail("%v", err)
		}
		do(&http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment}, Timeout: 60 * time.Second}, req)
	case "scan":
		n, _ := strconv.Atoi(os.Args[2])
		h, _ := strconv.ParseUint(os.Args[3], 10, 64)
		scan(n, h, os.Args[4])
	default:
		fail("unknown mode %q", os.Args[1])
	}
}

func do(c *http.Client, req *http.Request) {
	resp, err := c.Do(req)
	if err != nil {
		fail("request: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	fmt.Printf("status=%d decision=%q body=%q\n", resp.StatusCode, resp.Header.Get("X-Airlock-Decision"), b)
	if resp.StatusCode != 200 {
		os.Exit(1)
	}
}

// Rabin-Karp over bytes, modulo the Mersenne prime 2^61-1.
const (
	mod  = 1<<61 - 1
	base = 257
)

func mulmod(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	r := (hi<<3 | lo>>61) + lo&mod
	for r >= mod {
		r -= mod
	}
	return r
}

type finder struct {
	n     int
	want  uint64
	sum   string
	pow   uint64 // base^(n-1)
	found int
	where string
}

func (f *finder) search(r io.Reader, where string) {
	br := bufio.NewReaderSize(r, 1<<20)
	win := make([]byte, f.n)
	var h uint64
	i := 0
	for {
		c, err := br.ReadByte()
		if err != nil {
			return
		}
		if i >= f.n {
			old := win[i%f.n]
			h = (h + mod - mulmod(uint64(old), f.pow)) % mod
		}
		win[i%f.n] = c
		h = (mulmod(h, base) + uint64(c)) % mod
		i++
		if i >= f.n && h == f.want {
			s := make([]byte, f.n)
			for k := 0; k < f.n; k++ {
				s[k] = win[(i+k)%f.n]
			}
			sum := sha256.Sum256(s)
			if hex.EncodeToString(sum[:]) == f.sum {
				f.found++
				fmt.Printf("found in %s\n", where)
				return
			}
		}
	}
}

func scan(n int, h uint64, sum string) {
	if n <= 0 {
		fail("bad length")
	}
	f := &finder{n: n, want: h, sum: sum, pow: 1}
	for k := 1; k < n; k++ {
		f.pow = mulmod(f.pow, base)
	}
	self := strconv.Itoa(os.Getpid())
	pids, _ := os.ReadDir("/proc")
	procs, regions := 0, 0
	for _, p := range pids {
		if _, err := strconv.Atoi(p.Name()); err != nil || p.Name() == self {
			continue
		}
		procs++
		if b, err := os.ReadFile("/proc/" + p.Name() + "/environ"); err == nil {
			f.search(strings.NewReader(string(b)), "environ of pid "+p.Name())
		}
		if b, err := os.ReadFile("/proc/" + p.Name() + "/cmdline"); err == nil {
			f.search(strings.NewReader(string(b)), "cmdline of pid "+p.Name())
		}
		comm, _ := os.ReadFile("/proc/" + p.Name() + "/comm")
		regions += scanMem(f, p.Name(), strings.TrimSpace(string(comm)))
	}
	files := 0
	filepath.WalkDir("/", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && (path == "/proc" || path == "/sys" || path == "/dev") {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			if fh, err := os.Open(path); err == nil {
				f.search(fh, "file "+path)
				fh.Close()
				files++
			}
		}
		return nil
	})
	fmt.Printf("scanned procs=%d regions=%d files=%d found=%d\n", procs, regions, files, f.found)
}

// scanMem reads every readable mapping of a process through /proc/PID/mem.
func scanMem(f *finder, pid, comm string) int {
	maps, err := os.ReadFile("/proc/" + pid + "/maps")
	if err != nil {
		return 0
	}
	mem, err := os.Open("/proc/" + pid + "/mem")
	if err != nil {
		return 0
	}
	defer mem.Close()
	n := 0
	for _, line := range strings.Split(string(maps), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 || fields[1][0] != 'r' || strings.Contains(line, "[vvar]") || strings.Contains(line, "[vsyscall]") {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		a, _ := strconv.ParseUint(lo, 16, 64)
		b, _ := strconv.ParseUint(hi, 16, 64)
		if b <= a || b-a > 1<<30 {
			continue
		}
		n++
		f.search(io.NewSectionReader(mem, int64(a), int64(b-a)), "memory of pid "+pid+" ("+comm+")")
	}
	return n
}

func fail(format string, a ...any) {
	fmt.Printf("error: "+format+"\n", a...)
	os.Exit(1)
}
