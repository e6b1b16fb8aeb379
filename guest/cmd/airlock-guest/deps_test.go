package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps the guest binary free of host code: it must not import
// app/, vm/ or Wails, and must build without cgo. Nor gRPC, HTTP/2 or
// net/http: their package initialisation alone cost PID 1 ~160 ms under
// emulation, for three small agent calls that execwire frames carry. Nor
// the protobuf runtime (~40 ms more: agentv1 is protoc-gen-go-lite code,
// which needs none; docs/performance.md).
func TestDeps(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", ".")
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		for _, bad := range []string{"github.com/airlock-sandbox/airlock/app", "github.com/airlock-sandbox/airlock/vm", "github.com/wailsapp/", "runtime/cgo",
			"google.golang.org/grpc", "golang.org/x/net/http2", "golang.org/x/net/trace", "net/http",
			"google.golang.org/protobuf", "compress/gzip"} {
			if p == bad || strings.HasPrefix(p, bad+"/") {
				t.Errorf("airlock-guest depends on %s", p)
			}
		}
	}
}
