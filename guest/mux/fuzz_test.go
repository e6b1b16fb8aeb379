package mux

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"
)

// scripted is a peer that sends fixed bytes, then hangs up, and ignores
// what it is sent.
type scripted struct{ r io.Reader }

func (s *scripted) Read(p []byte) (int, error)  { return s.r.Read(p) }
func (s *scripted) Write(p []byte) (int, error) { return len(p), nil }
func (s *scripted) Close() error                { return nil }

// FuzzClientInput feeds arbitrary guest bytes to the host side, with
// listeners open so stream handshakes run too. It must never panic, and the
// session must end once the input does.
func FuzzClientInput(f *testing.F) {
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	f.Add([]byte{})
	f.Add(hello(nonce{}))
	f.Add(cat(hello(nonce{}), rawFrame(1, 1, 2, 0), rawFrame(0, 0, 2, 4), putPort(1024)))
	f.Add(cat(hello(nonce{}), rawFrame(0, 1, 2, 5), putPort(1023), []byte("x"), rawFrame(1, 4, 2, 0)))
	f.Add(cat(hello(nonce{}), rawFrame(0, 1, 2, 4), putPort(9), rawFrame(1, 8, 2, 0)))
	f.Add(cat(hello(nonce{}), rawFrame(1, 2, 1, 1000), rawFrame(3, 0, 0, 0)))
	f.Add(cat(hello(nonce{}), rawFrame(2, 1, 0, 1)))
	f.Add(cat(hello(nonce{}), rawFrame(1, 1, 2, 0), hello(nonce{}), rawFrame(1, 1, 2, 0), putPort(1024)))
	f.Fuzz(func(t *testing.T, in []byte) {
		s := Client(&scripted{bytes.NewReader(in)}, Config{MaxStreams: 4, AcceptBacklog: 2})
		for _, port := range []uint32{1023, 1024} {
			ln, err := s.Listen(port)
			if err != nil {
				continue
			}
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					go func() {
						io.Copy(io.Discard, c)
						c.Close()
					}()
				}
			}()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		if c, err := s.Dial(ctx, 1); err == nil {
			c.Close()
		}
		cancel()
		select {
		case <-s.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("session did not end after its input did")
		}
		if s.Err() == nil {
			t.Fatal("ended session without a reason")
		}
		s.Close()
	})
}

// FuzzServerInput feeds arbitrary host bytes to the guest side.
func FuzzServerInput(f *testing.F) {
	f.Add([]byte{})
	f.Add(bytes.Join([][]byte{rawFrame(1, 1, 1, 0), rawFrame(0, 0, 1, 4), putPort(1024)}, nil))
	f.Add(rawFrame(0, 1, 1, 8))
	f.Fuzz(func(t *testing.T, in []byte) {
		s := Server(&scripted{bytes.NewReader(in)}, Config{MaxStreams: 4, AcceptBacklog: 2})
		if ln, err := s.Listen(1024); err == nil {
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					c.Close()
				}
			}()
		}
		select {
		case <-s.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("session did not end after its input did")
		}
		s.Close()
	})
}
