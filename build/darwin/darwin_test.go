// Package darwin holds the macOS packaging files (entitlements, Info.plist,
// the post-build signing step); its tests check them from any OS.
package darwin

import (
	"encoding/xml"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/vm/vz"
)

// plist reads a flat XML property list dict: key -> "true", "false" or the
// string value.
func plist(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := xml.NewDecoder(f)
	d.Strict = true
	out := map[string]string{}
	var key, text string
	depth := 0
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			depth++
			text = ""
			if tok.Name.Local == "true" || tok.Name.Local == "false" {
				out[key] = tok.Name.Local
			}
		case xml.CharData:
			text += string(tok)
		case xml.EndElement:
			depth--
			switch tok.Name.Local {
			case "key":
				key = text
			case "string":
				out[key] = text
			}
		}
	}
	if depth != 0 {
		t.Fatalf("%s: unbalanced", path)
	}
	return out
}

func TestEntitlements(t *testing.T) {
	e := plist(t, "entitlements.plist")
	if e["com.apple.security.virtualization"] != "true" {
		t.Errorf("entitlements: virtualization is %q, want true", e["com.apple.security.virtualization"])
	}
	if len(e) != 1 {
		t.Errorf("entitlements %v: want only the virtualization one (no app sandbox: the user picks any folder)", e)
	}
}

func TestInfoPlist(t *testing.T) {
	i := plist(t, "Info.plist")
	for k, want := range map[string]string{
		"LSMinimumSystemVersion": "13.0",
		"CFBundlePackageType":    "APPL",
		"CFBundleExecutable":     "Airlock",
	} {
		if i[k] != want {
			t.Errorf("Info.plist %s = %q, want %q", k, i[k], want)
		}
	}
}

// TestPostBuild runs post-build.sh against a fake app bundle, with a
// stand-in for macOS's codesign, and checks that the helper lands in
// Contents/Helpers and the image where the helper and vz.BundleImageDir
// look, and that the helper is signed with the entitlements before the
// bundle, which is signed without them.
func TestPostBuild(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	tmp := t.TempDir()
	app := filepath.Join(tmp, "Airlock.app")
	mustWrite(t, filepath.Join(app, "Contents", "Info.plist"), "plist")
	mustWrite(t, filepath.Join(app, "Contents", "MacOS", "Airlock"), "main")
	cli := filepath.Join(tmp, "bin", "airlock")
	mustWrite(t, cli, "cli")
	images := filepath.Join(tmp, "images")
	for _, f := range []string{"manifest.json", "Image", "initramfs.cpio"} {
		mustWrite(t, filepath.Join(images, "arm64", f), f)
	}
	tools := filepath.Join(tmp, "tools")
	log := filepath.Join(tmp, "codesign.log")
	signed := filepath.Join(tmp, "signed-with-entitlements")
	// The stand-in remembers what it signed with entitlements and shows
	// only those entitlements, as codesign -d does.
	mustWrite(t, filepath.Join(tools, "codesign"), `#!/bin/sh
echo "$*" >> `+log+`
case "$*" in
*"--entitlements "*"--sign"*) for last; do :; done; echo "$last" >> `+signed+` ;;
*"-d --entitlements -"*) for last; do :; done; grep -qx "$last" `+signed+` && cat `+filepath.Join(mustAbs(t, "."), "entitlements.plist")+` ;;
esac
exit 0
`)
	os.Chmod(filepath.Join(tools, "codesign"), 0o755)
	env := append(os.Environ(), "PATH="+tools+":"+os.Getenv("PATH"), "ARCH=arm64", "AIRLOCK_HELPER_BIN="+cli)

	cmd := exec.Command("sh", "post-build.sh", filepath.Join(app, "Contents", "MacOS", "Airlock"), images)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("post-build.sh: %v\n%s", err, out)
	}
	t.Logf("%s", out)

	helper := filepath.Join(app, "Contents", "Helpers", "airlock")
	if fi, err := os.Stat(helper); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("helper in the bundle: %v, %v", fi, err)
	}
	if b, _ := os.ReadFile(helper); string(b) != "cli" {
		t.Fatalf("helper = %q, want the airlock command", b)
	}
	dir, ok := vz.BundleImageDir(filepath.Join(app, "Contents", "MacOS", "Airlock"), "arm64")
	if !ok {
		t.Fatal("BundleImageDir: not a bundle")
	}
	// The helper looks in ../Resources/images from its own folder
	// (sandbox.ImageSearchPathFor): the same folder.
	if fromHelper := filepath.Join(filepath.Dir(helper), "..", "Resources", "images", "arm64"); filepath.Clean(fromHelper) != dir {
		t.Errorf("the helper looks in %s, the image is in %s", fromHelper, dir)
	}
	for _, f := range []string{"manifest.json", "Image", "initramfs.cpio"} {
		if b, err := os.ReadFile(filepath.Join(dir, f)); err != nil || string(b) != f {
			t.Errorf("%s in the bundle: %q, %v", f, b, err)
		}
	}
	b, _ := os.ReadFile(log)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 4 {
		t.Fatalf("codesign calls:\n%s", b)
	}
	for i, want := range []string{"/Contents/Helpers/airlock", "/Airlock.app", "--verify", "-d --entitlements - " + helper} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("codesign call %d = %q, want it to contain %q", i, lines[i], want)
		}
	}
	if l := lines[0]; !strings.Contains(l, "--entitlements "+mustAbs(t, "entitlements.plist")) || !strings.Contains(l, "--sign -") ||
		!strings.Contains(l, "--options runtime") || !strings.Contains(l, "--identifier com.airlock-sandbox.airlock.helper") {
		t.Errorf("helper signed without the entitlements, hardened runtime, its identifier or the ad hoc identity: %q", l)
	}
	if l := lines[1]; strings.Contains(l, "--entitlements") || !strings.Contains(l, "--options runtime") || strings.Contains(l, "--deep") {
		t.Errorf("the app is signed with entitlements or --deep, or without the hardened runtime: %q", l)
	}

	// Without the airlock command: refused, saying how to build it.
	cmd = exec.Command("sh", "post-build.sh", app, images)
	cmd.Env = append(env, "AIRLOCK_HELPER_BIN="+filepath.Join(tmp, "none"))
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "make airlock") {
		t.Errorf("no helper: %v\n%s", err, out)
	}

	// Not a bundle: refused before anything is touched.
	cmd = exec.Command("sh", "post-build.sh", filepath.Join(tmp, "airlock"), images)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "not an app bundle") {
		t.Errorf("non-bundle: %v\n%s", err, out)
	}
}

func TestScriptsParse(t *testing.T) {
	for _, f := range []string{"post-build.sh", "codesign-exec"} {
		if out, err := exec.Command("sh", "-n", f).CombinedOutput(); err != nil {
			t.Errorf("%s: %v\n%s", f, err, out)
		}
		if fi, err := os.Stat(f); err != nil || fi.Mode()&0o111 == 0 {
			t.Errorf("%s is not executable", f)
		}
	}
}

func mustWrite(t *testing.T, path, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
