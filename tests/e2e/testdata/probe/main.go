// Command probe runs inside the guest during end-to-end tests and reports,
// one line on stdout, what a network attempt got. It exits 0 on success.
//
//	probe get URL [CAFILE]     GET through the proxy from the environment
//	probe socks URL            GET through ALL_PROXY (SOCKS5, names resolved by the gate)
//	probe raw REQUEST          send REQUEST (line ends written as a literal \n) to the HTTP proxy
//	probe dial HOST:PORT       connect directly, bypassing every proxy
//	probe drain HOST:PORT      connect and read until EOF (benchmarks)
//	probe resolve NAME         look a name up in the guest
package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"golang.org/x/net/proxy"
)

func main() {
	if len(os.Args) < 3 {
		fail("usage: probe get|socks|raw|dial|resolve ARG")
	}
	arg := os.Args[2]
	switch os.Args[1] {
	case "get":
		tr := &http.Transport{Proxy: http.ProxyFromEnvironment}
		if len(os.Args) > 3 {
			tr.TLSClientConfig = &tls.Config{RootCAs: pool(os.Args[3])}
		}
		get(&http.Client{Transport: tr, Timeout: 60 * time.Second}, arg)
	case "socks":
		u, err := url.Parse(os.Getenv("ALL_PROXY"))
		if err != nil {
			fail("ALL_PROXY: %v", err)
		}
		pass, _ := u.User.Password()
		d, err := proxy.SOCKS5("tcp", u.Host, &proxy.Auth{User: u.User.Username(), Password: pass}, proxy.Direct)
		if err != nil {
			fail("socks: %v", err)
		}
		tr := &http.Transport{DialContext: d.(proxy.ContextDialer).DialContext}
		get(&http.Client{Transport: tr, Timeout: 60 * time.Second}, arg)
	case "raw":
		u, err := url.Parse(os.Getenv("HTTP_PROXY"))
		if err != nil {
			fail("HTTP_PROXY: %v", err)
		}
		c, err := net.DialTimeout("tcp", u.Host, 10*time.Second)
		if err != nil {
			fail("dial proxy: %v", err)
		}
		pass, _ := u.User.Password()
		auth := base64.StdEncoding.EncodeToString([]byte(u.User.Username() + ":" + pass))
		req := strings.ReplaceAll(arg, `\n`, "\r\n")
		req = strings.Replace(req, "\r\n", "\r\nProxy-Authorization: Basic "+auth+"\r\n", 1)
		c.SetDeadline(time.Now().Add(30 * time.Second))
		io.WriteString(c, req)
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			fail("read: %v", err)
		}
		fmt.Println(strings.TrimSpace(line))
		if !strings.Contains(line, " 200 ") {
			os.Exit(1)
		}
	case "dial":
		c, err := net.DialTimeout("tcp", arg, 5*time.Second)
		if err != nil {
			fail("dial: %v", err)
		}
		c.Close()
		fmt.Println("connected")
	case "drain":
		c, err := net.DialTimeout("tcp", arg, 10*time.Second)
		if err != nil {
			fail("dial: %v", err)
		}
		began := time.Now()
		n, err := io.Copy(io.Discard, c)
		if err != nil {
			fail("read: %v", err)
		}
		fmt.Printf("bytes=%d secs=%.6f\n", n, time.Since(began).Seconds())
	case "resolve":
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		addrs, err := net.DefaultResolver.LookupHost(ctx, arg)
		if err != nil {
			fail("resolve: %v", err)
		}
		fmt.Println(strings.Join(addrs, " "))
	default:
		fail("unknown mode %q", os.Args[1])
	}
}

func get(c *http.Client, u string) {
	began := time.Now()
	resp, err := c.Get(u)
	if err != nil {
		fail("get: %v", err)
	}
	defer resp.Body.Close()
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	if err != nil {
		fail("body: %v", err)
	}
	fmt.Printf("status=%d bytes=%d sha256=%x decision=%q secs=%.6f\n", resp.StatusCode, n, h.Sum(nil), resp.Header.Get("X-Airlock-Decision"), time.Since(began).Seconds())
	if resp.StatusCode != 200 {
		os.Exit(1)
	}
}

func pool(file string) *x509.CertPool {
	b, err := os.ReadFile(file)
	if err != nil {
		fail("ca: %v", err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		fail("ca: no certificate in %s", file)
	}
	return p
}

func fail(format string, a ...any) {
	fmt.Printf("error: "+format+"\n", a...)
	os.Exit(1)
}
