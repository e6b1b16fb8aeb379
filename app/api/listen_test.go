package api

import "testing"

func TestListenLoopback(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "localhost:0", "[::1]:0"} {
		l, err := ListenLoopback(addr)
		if err != nil {
			if addr == "[::1]:0" {
				continue // a host without IPv6
			}
			t.Fatalf("%s: %v", addr, err)
		}
		l.Close()
	}
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.168.1.1:0", "example.com:0", "127.0.0.1"} {
		if l, err := ListenLoopback(addr); err == nil {
			l.Close()
			t.Errorf("%s: listened", addr)
		}
	}
}

func TestOwnHosts(t *testing.T) {
	for addr, want := range map[string][]string{
		"127.0.0.1:8080": {"127.0.0.1:8080", "localhost:8080"},
		"[::1]:8080":     {"[::1]:8080", "localhost:8080"},
	} {
		got := ownHosts(addr)
		if len(got) != len(want) {
			t.Errorf("%s: %v, want %v", addr, got, want)
		}
		for _, h := range want {
			if !got[h] {
				t.Errorf("%s: %v lacks %s", addr, got, h)
			}
		}
	}
}
