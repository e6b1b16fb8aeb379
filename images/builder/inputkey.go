package builder

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/airlock-sandbox/airlock/images/manifest"
)

// Version identifies the builder's output format. Change it whenever the
// builder would produce different artifacts (or manifests: 5 records the
// kernel's timer rate) from the same inputs, so that existing images are
// rebuilt.
const Version = "airlock-image/5"

// keyInputs is everything a build's artifacts depend on.
type keyInputs struct {
	Arch      string
	Packages  []manifest.Package
	GuestSHA  string
	Modules   []Module
	BaseFiles []cpioEntry
	// SourceKernel is the key of a source-built kernel (builtKernel.Key);
	// empty for Debian's packaged kernel, whose keys stay as they were.
	SourceKernel string
}

// inputKey hashes the inputs into a key. Two builds with equal keys produce
// identical artifacts, which is what makes a rebuild a no-op.
func inputKey(in keyInputs) string {
	h := sha256.New()
	fmt.Fprintf(h, "builder %s\narch %s\n", Version, in.Arch)
	for _, p := range in.Packages {
		fmt.Fprintf(h, "deb %s %s %s %s\n", p.Name, p.Version, p.Arch, p.SHA256)
	}
	fmt.Fprintf(h, "guest %s\n", in.GuestSHA)
	for _, m := range in.Modules {
		fmt.Fprintf(h, "module %s optional=%t\n", m.Name, m.Optional)
	}
	for _, e := range in.BaseFiles {
		sum := sha256.Sum256(e.Data)
		fmt.Fprintf(h, "file %s %o %d %d %d,%d %s\n", e.Name, e.Mode, e.UID, e.GID, e.RMajor, e.RMinor, hex.EncodeToString(sum[:]))
	}
	if in.SourceKernel != "" {
		fmt.Fprintf(h, "source-kernel %s\n", in.SourceKernel)
	}
	return hex.EncodeToString(h.Sum(nil))
}
