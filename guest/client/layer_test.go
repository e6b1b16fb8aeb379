package client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/guest/api"
	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
	"github.com/airlock-sandbox/airlock/guest/api/execwire"
)

// layerGuest answers each layer stream with guest, after reading the
// host's request into req.
func layerGuest(t *testing.T, guest func(c net.Conn, req *agentv1.LayerRequest)) *Client {
	t.Helper()
	c, _ := New(func(ctx context.Context, port uint32) (net.Conn, error) {
		if port != api.PortLayer {
			return nil, errors.New("not the layer port")
		}
		host, g := net.Pipe()
		go func() {
			defer g.Close()
			r := execwire.NewReader(g)
			k, n, err := r.Next()
			req := new(agentv1.LayerRequest)
			if err != nil || k != execwire.KindRequest || r.Message(n, req) != nil {
				t.Errorf("layer request: kind %v, %v", k, err)
				return
			}
			guest(g, req)
		}()
		return host, nil
	})
	t.Cleanup(func() { c.Close() })
	return c
}

func frame(k execwire.Kind, payload []byte) []byte {
	b := make([]byte, execwire.HeaderSize, execwire.HeaderSize+len(payload))
	execwire.PutHeader(b, k, len(payload))
	return append(b, payload...)
}

func done(entries, n uint64) []byte {
	b, _ := execwire.AppendMessage(nil, execwire.KindEvent, &agentv1.LayerResponse{Result: &agentv1.LayerResponse_Done{Done: &agentv1.LayerDone{Entries: entries, Bytes: n}}})
	return b
}

func TestExportLayer(t *testing.T) {
	tarBytes := bytes.Repeat([]byte("0123456789"), 100_000)
	tests := []struct {
		name   string
		send   func(c net.Conn)
		want   []byte // what Read yields before the end
		errIs  error
		code   agentv1.Code
		errHas string
	}{
		{"whole", func(c net.Conn) {
			c.Write(frame(execwire.KindStdout, tarBytes[:600_000]))
			c.Write(frame(execwire.KindStdout, tarBytes[600_000:]))
			c.Write(done(3, uint64(len(tarBytes))))
		}, tarBytes, nil, agentv1.Code_OK, ""},
		{"empty layer", func(c net.Conn) { c.Write(done(0, 0)) }, nil, nil, agentv1.Code_OK, ""},
		{"guest says another length", func(c net.Conn) {
			c.Write(frame(execwire.KindStdout, tarBytes[:10]))
			c.Write(done(1, 11))
		}, tarBytes[:10], execwire.ErrFrame, agentv1.Code_OK, "said 11"},
		{"ends without an answer", func(c net.Conn) {
			c.Write(frame(execwire.KindStdout, tarBytes[:10]))
		}, tarBytes[:10], execwire.ErrFrame, agentv1.Code_OK, "before the export's end"},
		{"ends inside a frame", func(c net.Conn) {
			c.Write(frame(execwire.KindStdout, tarBytes[:10])[:9])
		}, tarBytes[:4], execwire.ErrFrame, agentv1.Code_OK, "inside a frame"},
		{"a frame over the bound", func(c net.Conn) {
			h := make([]byte, execwire.HeaderSize)
			execwire.PutHeader(h, execwire.KindStdout, execwire.MaxPayload+1)
			c.Write(h)
		}, nil, execwire.ErrFrame, agentv1.Code_OK, "larger than max"},
		{"a frame of another kind", func(c net.Conn) {
			c.Write(frame(execwire.KindStderr, []byte("x")))
		}, nil, execwire.ErrFrame, agentv1.Code_OK, "stderr frame"},
		{"garbage answer", func(c net.Conn) {
			c.Write(frame(execwire.KindEvent, []byte{0xff, 0xff}))
		}, nil, execwire.ErrFrame, agentv1.Code_OK, ""},
		{"guest error, escaped", func(c net.Conn) {
			b, _ := execwire.AppendMessage(nil, execwire.KindEvent, &agentv1.LayerResponse{Result: &agentv1.LayerResponse_Error{
				Error: &agentv1.Error{Code: agentv1.Code_RESOURCE_EXHAUSTED, Message: "full\x1b[2J" + strings.Repeat("x", 5000)}}})
			c.Write(b)
		}, nil, nil, agentv1.Code_RESOURCE_EXHAUSTED, "full"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := layerGuest(t, func(c net.Conn, req *agentv1.LayerRequest) {
				if req.GetExport() == nil {
					t.Errorf("request %v", req)
				}
				tt.send(c)
			})
			rc, err := c.ExportLayer(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			got, err := io.ReadAll(rc)
			if !bytes.Equal(got, tt.want) {
				t.Errorf("read %d bytes, want %d", len(got), len(tt.want))
			}
			switch {
			case tt.errIs == nil && tt.code == agentv1.Code_OK:
				if err != nil {
					t.Fatalf("err %v", err)
				}
			case tt.errIs != nil && !errors.Is(err, tt.errIs):
				t.Fatalf("err %v, want %v", err, tt.errIs)
			case tt.code != agentv1.Code_OK && agentv1.CodeOf(err) != tt.code:
				t.Fatalf("err %v, want code %v", err, tt.code)
			}
			if err != nil && !strings.Contains(err.Error(), tt.errHas) {
				t.Errorf("err %q lacks %q", err, tt.errHas)
			}
			if err != nil && (strings.Contains(err.Error(), "\x1b") || len(err.Error()) > 2*maxGuestMessage) {
				t.Errorf("guest's message passed on unescaped or unbounded: %q", err)
			}
		})
	}
}

// TestExportLayerIdle: a guest that stops sending fails the export after
// the idle bound, and the caller's context ends it at once.
func TestExportLayerIdle(t *testing.T) {
	hold := make(chan struct{})
	defer close(hold)
	c := layerGuest(t, func(c net.Conn, _ *agentv1.LayerRequest) {
		c.Write(frame(execwire.KindStdout, []byte("abc")))
		<-hold
	})
	ctx, cancel := context.WithCancel(context.Background())
	rc, err := c.ExportLayer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b := make([]byte, 3)
	if _, err := io.ReadFull(rc, b); err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, cancel)
	began := time.Now()
	_, err = rc.Read(b)
	if agentv1.CodeOf(err) != agentv1.Code_CANCELED || time.Since(began) > 5*time.Second {
		t.Fatalf("err %v after %s", err, time.Since(began))
	}
}

func TestForgetLayer(t *testing.T) {
	var got []string
	c := layerGuest(t, func(c net.Conn, req *agentv1.LayerRequest) {
		got = req.GetForget().GetPaths()
		c.Write(done(2, 0))
	})
	if err := c.ForgetLayer(context.Background(), []string{"a/b", "c"}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "a/b,c" {
		t.Errorf("guest got %q", got)
	}
	c = layerGuest(t, func(c net.Conn, req *agentv1.LayerRequest) {
		c.Write(frame(execwire.KindStdout, []byte("tar?")))
	})
	if err := c.ForgetLayer(context.Background(), nil); !errors.Is(err, execwire.ErrFrame) {
		t.Errorf("data answering a forget: %v", err)
	}
	c = layerGuest(t, func(c net.Conn, req *agentv1.LayerRequest) {
		b, _ := execwire.AppendMessage(nil, execwire.KindEvent, &agentv1.LayerResponse{Result: &agentv1.LayerResponse_Error{
			Error: &agentv1.Error{Code: agentv1.Code_FAILED_PRECONDITION, Message: "no layer"}}})
		c.Write(b)
	})
	if err := c.ForgetLayer(context.Background(), nil); agentv1.CodeOf(err) != agentv1.Code_FAILED_PRECONDITION {
		t.Errorf("guest's refusal: %v", err)
	}
}
