package builder

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// AgentPackage is the guest agent's main package, relative to the module
// root given as the guest source.
const AgentPackage = "./guest/cmd/airlock-guest"

// buildAgent cross-compiles the guest agent for arch into dst. The flags
// make the binary a function of the source alone, so that the input key
// (which hashes it) is stable from one build to the next.
func buildAgent(ctx context.Context, src, arch, dst string) error {
	pkg := filepath.Join(src, filepath.FromSlash(AgentPackage))
	if goFiles, _ := filepath.Glob(filepath.Join(pkg, "*.go")); len(goFiles) == 0 {
		state := "has no Go files"
		if _, err := os.Stat(pkg); errors.Is(err, fs.ErrNotExist) {
			state = "does not exist"
		}
		return fmt.Errorf("images: build guest agent: %s %s; the guest agent (package %s) must be written before an image can be built, or -guest-src must name a module root that has it", pkg, state, AgentPackage)
	}
	env := append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if arch == "amd64" {
		env = append(env, "GOAMD64=v1") // any x86-64 the hypervisor exposes
	}
	_, err := run(ctx, src, env, "go", "build", "-trimpath", "-ldflags", "-s -w -buildid=", "-o", dst, AgentPackage)
	if err != nil {
		return fmt.Errorf("images: build guest agent for %s: %w", arch, err)
	}
	return nil
}
