// Command probe runs inside the guest during the end-to-end, security and
// benchmark suites and tries one thing, the way a task (or a prompt-injected
// agent) would. It prints what it got on stdout and exits 0 when the attempt
// SUCCEEDED, 1 when it failed or was refused. vmharness.BuildProbe builds it.
//
//	probe get URL [CAFILE]             GET through the proxy from the environment (CAFILE: trust it
//	                                   for https); prints status, size, sha256, decision, body start
//	probe socks URL                    GET through ALL_PROXY (SOCKS5, names resolved by the gate)
//	probe raw REQUEST|-                send REQUEST (\n = CRLF; "-": read it from stdin) to the HTTP
//	                                   proxy with the task's credential; print every response status
//	probe socks5 CMD ATYP HOST PORT    raw SOCKS5 (user/pass from ALL_PROXY): CMD connect|bind|udp,
//	                                   ATYP ipv4|ipv6|name; prints the reply code
//	probe slow http|connect|socks      send a request head one byte a second; report when cut off
//	probe dial HOST:PORT               connect directly, bypassing every proxy
//	probe drain HOST:PORT              connect and read until EOF (benchmarks)
//	probe udp53 HOST:PORT              send a DNS query over UDP and wait for an answer
//	probe resolve NAME                 look a name up in the guest
//	probe socket FAMILY TYPE PROTO     socket(2): packet|inet|inet6|netlink raw|dgram|stream NUMBER
//	probe vsock CID PORT               connect AF_VSOCK
//	probe ptrace PID | readmem PID | vmread PID | kill PID SIG
//	probe finit FILE | initmod FILE    load a kernel module
//	probe settime | clockset | adjtime | reboot-cad | setuid0 | userns | bpf | chroot
//	probe read FILE                    read a file, print its first line
//	probe openat DIR NAME              openat(open(DIR), NAME) and read it
//	probe write FILE TEXT              write TEXT to FILE (O_CREAT|O_TRUNC)
//	probe setxattr FILE                set user.airlock on FILE
//	probe euid                         print the effective uid (run setuid on the host)
//	probe rename OLD NEW | rmdir DIR    the syscalls alone (busybox mv falls back to copy and delete)
//	probe exchange A B                 renameat2(2) RENAME_EXCHANGE of A and B
//	probe shmput KEY TEXT | shmget KEY  put TEXT in a SysV shared memory segment of KEY (kept after
//	                                   exit) | print what that segment holds
//	probe rawread FILE                 read 512 bytes of FILE (a device node)
//	probe creat FILE MODE              open(2) FILE with O_CREAT and octal MODE (0o4755: setuid)
//	probe chmod FILE MODE              chmod(2) with octal MODE
//	probe mknod FILE fifo|sock|reg MODE  mknod(2) of that type with octal MODE
//	probe bindunix PATH                bind(2) a unix socket at PATH
//	probe iouring | openat2            io_uring_setup(2), openat2(2) (calls a filter cannot read)
//	probe lateupload connect|socks HOST:PORT TEXT  through the proxy: send a line, read the
//	                                   answer to its EOF, then send TEXT and half-close
//	probe hold N silent|URL            open N connections to the HTTP proxy and hold them: sending
//	                                   nothing, or a keep-alive GET of URL with the task's credential;
//	                                   prints how many opened, then holds them until killed
package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/net/proxy"
	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: probe MODE ARG...")
	}
	arg := func(i int) string {
		if len(os.Args) <= i {
			fail("missing argument %d", i)
		}
		return os.Args[i]
	}
	switch os.Args[1] {
	case "get":
		tr := &http.Transport{Proxy: http.ProxyFromEnvironment}
		if len(os.Args) > 3 {
			tr.TLSClientConfig = &tls.Config{RootCAs: pool(os.Args[3])}
		}
		get(&http.Client{Transport: tr, Timeout: 60 * time.Second}, arg(2))
	case "socks":
		u, err := url.Parse(os.Getenv("ALL_PROXY"))
		if err != nil {
			fail("ALL_PROXY: %v", err)
		}
		pass, _ := u.User.Password()
		d, err := proxy.SOCKS5("tcp", u.Host, &proxy.Auth{User: u.User.Username(), Password: pass}, proxy.Direct)
		check("socks", err)
		tr := &http.Transport{DialContext: d.(proxy.ContextDialer).DialContext}
		get(&http.Client{Transport: tr, Timeout: 60 * time.Second}, arg(2))
	case "raw":
		raw(arg(2))
	case "hold":
		hold(atoi(arg(2)), arg(3))
	case "lateupload":
		lateUpload(arg(2), arg(3), arg(4))
	case "socks5":
		socks5(arg(2), arg(3), arg(4), arg(5))
	case "slow":
		slow(arg(2))
	case "dial":
		c, err := net.DialTimeout("tcp", arg(2), 5*time.Second)
		if err != nil {
			fail("dial: %v", err)
		}
		c.Close()
		fmt.Println("connected")
	case "udp53":
		udp53(arg(2))
	case "drain":
		c, err := net.DialTimeout("tcp", arg(2), 10*time.Second)
		check("dial", err)
		began := time.Now()
		n, err := io.Copy(io.Discard, c)
		check("read", err)
		fmt.Printf("bytes=%d secs=%.6f\n", n, time.Since(began).Seconds())
	case "resolve":
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		addrs, err := net.DefaultResolver.LookupHost(ctx, arg(2))
		check("resolve", err)
		fmt.Println(strings.Join(addrs, " "))
	case "socket":
		fam := map[string]int{"packet": unix.AF_PACKET, "inet": unix.AF_INET, "inet6": unix.AF_INET6, "netlink": unix.AF_NETLINK}[arg(2)]
		typ := map[string]int{"raw": unix.SOCK_RAW, "dgram": unix.SOCK_DGRAM, "stream": unix.SOCK_STREAM}[arg(3)]
		proto, _ := strconv.ParseInt(arg(4), 0, 32)
		fd, err := unix.Socket(fam, typ, int(proto))
		check("socket", err)
		unix.Close(fd)
		fmt.Println("ok: socket created")
	case "vsock":
		cid, _ := strconv.Atoi(arg(2))
		port, _ := strconv.Atoi(arg(3))
		fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM, 0)
		check("socket", err)
		check("connect", unix.Connect(fd, &unix.SockaddrVM{CID: uint32(cid), Port: uint32(port)}))
		fmt.Println("ok: connected")
	case "ptrace":
		pid := atoi(arg(2))
		check("ptrace attach", unix.PtraceAttach(pid))
		unix.PtraceDetach(pid)
		fmt.Println("ok: attached")
	case "readmem":
		pid := atoi(arg(2))
		f, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
		check("open mem", err)
		buf := make([]byte, 16)
		_, err = f.ReadAt(buf, 0x400000)
		check("read mem", err)
		fmt.Printf("ok: read %x\n", buf)
	case "vmread":
		pid := atoi(arg(2))
		buf := make([]byte, 16)
		_, err := unix.ProcessVMReadv(pid, []unix.Iovec{{Base: &buf[0], Len: 16}}, []unix.RemoteIovec{{Base: 0x400000, Len: 16}}, 0)
		check("process_vm_readv", err)
		fmt.Printf("ok: read %x\n", buf)
	case "kill":
		check("kill", unix.Kill(atoi(arg(2)), unix.Signal(atoi(arg(3)))))
		fmt.Println("ok: signalled")
	case "finit":
		f, err := os.Open(arg(2))
		check("open", err)
		check("finit_module", unix.FinitModule(int(f.Fd()), "", 0))
		fmt.Println("ok: module loaded")
	case "initmod":
		b, err := os.ReadFile(arg(2))
		check("read", err)
		check("init_module", unix.InitModule(b, ""))
		fmt.Println("ok: module loaded")
	case "settime":
		tv := unix.NsecToTimeval(time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
		check("settimeofday", unix.Settimeofday(&tv))
		fmt.Println("ok: clock set")
	case "clockset":
		ts := unix.NsecToTimespec(time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
		_, _, e := unix.Syscall(unix.SYS_CLOCK_SETTIME, unix.CLOCK_REALTIME, uintptr(unsafe.Pointer(&ts)), 0)
		check("clock_settime", errno(e))
		fmt.Println("ok: clock set")
	case "adjtime":
		tx := unix.Timex{Modes: unix.ADJ_OFFSET | unix.ADJ_STATUS, Offset: 1000, Status: unix.STA_PLL}
		_, err := unix.Adjtimex(&tx)
		check("adjtimex", err)
		fmt.Println("ok: clock adjusted")
	case "reboot-cad":
		check("reboot", unix.Reboot(unix.LINUX_REBOOT_CMD_CAD_OFF))
		fmt.Println("ok: reboot(2) accepted")
	case "setuid0":
		_, _, e := unix.RawSyscall(unix.SYS_SETUID, 0, 0, 0)
		check("setuid", errno(e))
		fmt.Println("ok: uid 0")
	case "userns":
		_, _, e := unix.RawSyscall(unix.SYS_UNSHARE, unix.CLONE_NEWUSER, 0, 0)
		check("unshare(CLONE_NEWUSER)", errno(e))
		fmt.Println("ok: new user namespace")
	case "bpf":
		attr := [5]uint32{2 /* BPF_MAP_TYPE_ARRAY */, 4, 4, 1, 0}
		_, _, e := unix.Syscall(unix.SYS_BPF, 0 /* BPF_MAP_CREATE */, uintptr(unsafe.Pointer(&attr[0])), unsafe.Sizeof(attr))
		check("bpf(BPF_MAP_CREATE)", errno(e))
		fmt.Println("ok: bpf map created")
	case "euid":
		fmt.Printf("euid=%d uid=%d\n", os.Geteuid(), os.Getuid())
	case "rawread":
		f, err := os.Open(arg(2))
		check("open", err)
		b := make([]byte, 512)
		n, err := f.Read(b)
		check("read", err)
		fmt.Printf("ok: read %d bytes\n", n)
	case "rename":
		check("rename", unix.Rename(arg(2), arg(3)))
		fmt.Println("ok: renamed")
	case "exchange":
		check("renameat2", unix.Renameat2(unix.AT_FDCWD, arg(2), unix.AT_FDCWD, arg(3), unix.RENAME_EXCHANGE))
		fmt.Println("ok: exchanged")
	case "shmput", "shmget":
		key, err := strconv.ParseInt(arg(2), 0, 32)
		check("key", err)
		flags := 0
		if os.Args[1] == "shmput" {
			flags = unix.IPC_CREAT | 0o600
		}
		id, err := unix.SysvShmGet(int(key), 4096, flags)
		check("shmget", err)
		b, err := unix.SysvShmAttach(id, 0, 0)
		check("shmat", err)
		if os.Args[1] == "shmput" {
			copy(b, arg(3)+"\x00")
			fmt.Println("ok: put")
			return
		}
		n := 0
		for n < len(b) && b[n] != 0 {
			n++
		}
		fmt.Printf("ok: %q\n", b[:n])
	case "rmdir":
		check("rmdir", unix.Rmdir(arg(2)))
		fmt.Println("ok: removed")
	case "chroot":
		check("chroot", unix.Chroot("/tmp"))
		fmt.Println("ok: chrooted")
	case "read":
		b, err := os.ReadFile(arg(2))
		check("read", err)
		fmt.Printf("ok: %q\n", first(string(b)))
	case "openat":
		dfd, err := unix.Open(arg(2), unix.O_RDONLY|unix.O_DIRECTORY, 0)
		check("open dir", err)
		fd, err := unix.Openat(dfd, arg(3), unix.O_RDONLY, 0)
		check("openat", err)
		b := make([]byte, 256)
		n, _ := unix.Read(fd, b)
		fmt.Printf("ok: %q\n", first(string(b[:max(n, 0)])))
	case "write":
		check("write", os.WriteFile(arg(2), []byte(arg(3)), 0o644))
		fmt.Println("ok: written")
	case "setxattr":
		check("setxattr", unix.Setxattr(arg(2), "user.airlock", []byte("x"), 0))
		fmt.Println("ok: xattr set")
	case "creat":
		mode := octal(arg(3))
		fd, err := unix.Open(arg(2), unix.O_CREAT|unix.O_WRONLY|unix.O_TRUNC, mode)
		check("open O_CREAT", err)
		var st unix.Stat_t
		unix.Fstat(fd, &st)
		fmt.Printf("ok: created with mode %o\n", st.Mode&0o7777)
	case "chmod":
		check("chmod", unix.Chmod(arg(2), octal(arg(3))))
		fmt.Println("ok: mode changed")
	case "mknod":
		types := map[string]uint32{"fifo": unix.S_IFIFO, "sock": unix.S_IFSOCK, "reg": unix.S_IFREG}
		typ, found := types[arg(3)]
		if !found {
			fail("unknown file type %q", arg(3))
		}
		check("mknod", unix.Mknod(arg(2), typ|octal(arg(4)), 0))
		fmt.Println("ok: made")
	case "bindunix":
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
		check("socket", err)
		check("bind", unix.Bind(fd, &unix.SockaddrUnix{Name: arg(2)}))
		fmt.Println("ok: bound")
	case "iouring":
		var params [30]uint32 // struct io_uring_params
		_, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params)), 0)
		if e != 0 {
			check("io_uring_setup", e)
		}
		fmt.Println("ok: io_uring set up")
	case "openat2":
		fd, err := unix.Openat2(unix.AT_FDCWD, arg(2), &unix.OpenHow{Flags: unix.O_CREAT | unix.O_WRONLY, Mode: 0o4755})
		check("openat2", err)
		unix.Close(fd)
		fmt.Println("ok: opened")
	default:
		fail("unknown mode %q", os.Args[1])
	}
}

// get fetches u and prints the status, the body's size and sha256, the
// gate's decision header and the body's first line.
func get(c *http.Client, u string) {
	began := time.Now()
	resp, err := c.Get(u)
	check("get", err)
	defer resp.Body.Close()
	h := sha256.New()
	var head strings.Builder
	n, err := io.Copy(io.MultiWriter(h, &prefix{w: &head, n: 4096}), resp.Body)
	check("body", err)
	fmt.Printf("status=%d bytes=%d sha256=%x decision=%q body=%q secs=%.6f\n", resp.StatusCode, n, h.Sum(nil),
		resp.Header.Get("X-Airlock-Decision"), first(head.String()), time.Since(began).Seconds())
	if resp.StatusCode/100 != 2 {
		os.Exit(1)
	}
}

// prefix keeps the first n bytes written to it.
type prefix struct {
	w *strings.Builder
	n int
}

func (p *prefix) Write(b []byte) (int, error) {
	if k := min(len(b), p.n-p.w.Len()); k > 0 {
		p.w.Write(b[:k])
	}
	return len(b), nil
}

func pool(file string) *x509.CertPool {
	b, err := os.ReadFile(file)
	check("ca", err)
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		fail("ca: no certificate in %s", file)
	}
	return p
}

// raw sends a hand-written request to the HTTP proxy with the task's
// credential and prints the status of every response it gets back.
// hold opens n connections to the HTTP proxy and keeps them open: silent
// ones, or ones that sent a keep-alive GET of target with the credential.
func hold(n int, target string) {
	u, err := url.Parse(os.Getenv("HTTP_PROXY"))
	if err != nil || u.Host == "" {
		fail("HTTP_PROXY: %q %v", os.Getenv("HTTP_PROXY"), err)
	}
	pass, _ := u.User.Password()
	auth := base64.StdEncoding.EncodeToString([]byte(u.User.Username() + ":" + pass))
	var held []net.Conn
	for range n {
		c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
		if err != nil {
			continue
		}
		held = append(held, c)
		if target != "silent" {
			t, _ := url.Parse(target)
			fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\n", target, t.Host, auth)
		}
	}
	fmt.Printf("opened %d\n", len(held))
	time.Sleep(time.Hour)
}

func raw(req string) {
	if req == "-" {
		b, err := io.ReadAll(os.Stdin)
		check("stdin", err)
		req = string(b)
	} else {
		req = strings.ReplaceAll(req, `\n`, "\r\n")
	}
	u, err := url.Parse(os.Getenv("HTTP_PROXY"))
	if err != nil {
		fail("HTTP_PROXY: %v", err)
	}
	c, err := net.DialTimeout("tcp", u.Host, 10*time.Second)
	check("dial proxy", err)
	pass, _ := u.User.Password()
	auth := base64.StdEncoding.EncodeToString([]byte(u.User.Username() + ":" + pass))
	// The credential goes right after each request line (pipelined and
	// smuggled requests too), so it is part of even an oversized head.
	if !strings.Contains(req, "Proxy-Authorization") {
		req = requestLine.ReplaceAllString(req, "${1}Proxy-Authorization: Basic "+auth+"\r\n")
	}
	go func() { io.WriteString(c, req) }()
	br := bufio.NewReader(c)
	ok := false
	n := 0
	for deadline := 30 * time.Second; ; deadline = 3 * time.Second {
		c.SetReadDeadline(time.Now().Add(deadline))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			if n == 0 {
				fail("read: %v", err)
			}
			break
		}
		n++
		connect := resp.StatusCode == 200 && strings.HasPrefix(req, "CONNECT")
		fmt.Printf("%s | %s\n", resp.Status, resp.Header.Get("X-Airlock-Decision"))
		if resp.StatusCode/100 == 2 {
			ok = true
		}
		if connect {
			break // a tunnel: bytes from here on are not HTTP from the gate
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
	}
	if !ok {
		os.Exit(1)
	}
}

// requestLine matches the request lines of a (pipelined) request text.
var requestLine = regexp.MustCompile(`(?m)((?:^|\n)[A-Z]+ [^\r\n]* HTTP/1\.[01]\r\n)`)

// lateUpload opens a tunnel to target through the task's HTTP proxy
// (connect) or SOCKS5 proxy (socks), sends "request\n", reads the answer
// until the server half-closes, and only then sends text and half-closes
// itself: what a client that uploads after the response does.
func lateUpload(via, target, text string) {
	var c net.Conn
	var r io.Reader
	switch via {
	case "connect":
		u, err := url.Parse(os.Getenv("HTTP_PROXY"))
		if err != nil {
			fail("HTTP_PROXY: %v", err)
		}
		c, err = net.DialTimeout("tcp", u.Host, 10*time.Second)
		check("dial proxy", err)
		pass, _ := u.User.Password()
		auth := base64.StdEncoding.EncodeToString([]byte(u.User.Username() + ":" + pass))
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\n", target, target, auth)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		check("CONNECT", err)
		if resp.StatusCode != 200 {
			fail("CONNECT: %s", resp.Status)
		}
		r = br
	case "socks":
		u, err := url.Parse(os.Getenv("ALL_PROXY"))
		if err != nil {
			fail("ALL_PROXY: %v", err)
		}
		pass, _ := u.User.Password()
		d, err := proxy.SOCKS5("tcp", u.Host, &proxy.Auth{User: u.User.Username(), Password: pass}, proxy.Direct)
		check("socks", err)
		c, err = d.Dial("tcp", target)
		check("socks connect", err)
		r = c
	default:
		fail("lateupload: connect or socks, not %q", via)
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	_, err := io.WriteString(c, "request\n")
	check("write request", err)
	answer, err := io.ReadAll(r)
	check("read answer", err)
	n, err := io.WriteString(c, text)
	check("write after the answer", err)
	cw, ok := c.(interface{ CloseWrite() error })
	if !ok {
		fail("the proxy connection cannot half-close")
	}
	check("half-close", cw.CloseWrite())
	fmt.Printf("answer=%q sent=%d\n", answer, n)
}

// socks5 speaks SOCKS5 by hand to send what a library would not.
func socks5(cmd, atyp, host, port string) {
	u, err := url.Parse(os.Getenv("ALL_PROXY"))
	if err != nil {
		fail("ALL_PROXY: %v", err)
	}
	c, err := net.DialTimeout("tcp", u.Host, 10*time.Second)
	check("dial proxy", err)
	c.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	user := u.User.Username()
	pass, _ := u.User.Password()
	c.Write([]byte{5, 1, 2})
	var hello [2]byte
	_, err = io.ReadFull(br, hello[:])
	check("greeting", err)
	if hello[1] != 2 {
		fail("greeting reply %x", hello)
	}
	c.Write(append(append(append([]byte{1, byte(len(user))}, user...), byte(len(pass))), pass...))
	var auth [2]byte
	_, err = io.ReadFull(br, auth[:])
	check("auth", err)
	if auth[1] != 0 {
		fail("auth reply %x", auth)
	}
	code := map[string]byte{"connect": 1, "bind": 2, "udp": 3}[cmd]
	msg := []byte{5, code, 0}
	switch atyp {
	case "ipv4", "ipv6":
		a, err := netip.ParseAddr(host)
		check("address", err)
		if atyp == "ipv4" {
			b := a.As4()
			msg = append(append(msg, 1), b[:]...)
		} else {
			b := a.As16()
			msg = append(append(msg, 4), b[:]...)
		}
	default:
		msg = append(append(msg, 3, byte(len(host))), host...)
	}
	p, _ := strconv.Atoi(port)
	msg = binary.BigEndian.AppendUint16(msg, uint16(p))
	c.Write(msg)
	var rep [4]byte
	_, err = io.ReadFull(br, rep[:])
	check("reply", err)
	fmt.Printf("reply=%d\n", rep[1])
	if rep[1] != 0 {
		os.Exit(1)
	}
}

// slow sends a request head (or SOCKS handshake) one byte a second and
// reports how the gate ended it. Exit 0 means it was never cut off.
func slow(mode string) {
	addr, msg := "127.0.0.1:3128", "GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n"
	switch mode {
	case "connect":
		msg = "CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n"
	case "socks":
		addr, msg = "127.0.0.1:1080", "\x05\x01\x00\x05\x01\x00\x03\x0callowed.test\x01\xbb"
	}
	for len(msg) < 200 {
		msg += "X-Slow: aaaaaaaaaaaaaaaa\r\n"
	}
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	check("dial proxy", err)
	began := time.Now()
	// Cut off means the gate closed the connection (after a 408, say); a
	// SOCKS method reply is not.
	cut := make(chan string, 1)
	go func() {
		got, err := io.ReadAll(io.LimitReader(c, 4096))
		cut <- fmt.Sprintf("closed after reading %q (%v)", first(string(got)), err)
	}()
	for i := 0; i < 120; i++ {
		if _, err := c.Write([]byte{msg[i%len(msg)]}); err != nil {
			fmt.Printf("cut after %.1fs: write: %v\n", time.Since(began).Seconds(), err)
			os.Exit(1)
		}
		select {
		case how := <-cut:
			fmt.Printf("cut after %.1fs: %s\n", time.Since(began).Seconds(), how)
			os.Exit(1)
		case <-time.After(time.Second):
		}
	}
	fmt.Printf("still open after %.0fs\n", time.Since(began).Seconds())
}

func udp53(addr string) {
	c, err := net.Dial("udp", addr)
	check("dial", err)
	// A query for example.com A.
	q := []byte{0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 3, 'c', 'o', 'm', 0, 0, 1, 0, 1}
	_, err = c.Write(q)
	check("send", err)
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	b := make([]byte, 512)
	n, err := c.Read(b)
	check("receive", err)
	fmt.Printf("ok: answer of %d bytes\n", n)
}

func first(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 120 {
		s = s[:120]
	}
	return s
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		fail("not a number: %q", s)
	}
	return n
}

func errno(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

func check(what string, err error) {
	if err != nil {
		fail("%s: %v", what, err)
	}
}

func fail(format string, a ...any) {
	fmt.Printf("error: "+format+"\n", a...)
	os.Exit(1)
}

// octal parses an octal mode.
func octal(s string) uint32 {
	n, err := strconv.ParseUint(s, 8, 32)
	if err != nil {
		fail("mode %q: %v", s, err)
	}
	return uint32(n)
}
