//go:build e2e

package e2e

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/changes"
	"github.com/airlock-sandbox/airlock/app/sandbox"
	"github.com/airlock-sandbox/airlock/guest/client"
	"github.com/airlock-sandbox/airlock/tests/internal/vmharness"
	"github.com/airlock-sandbox/airlock/vm"
	"github.com/airlock-sandbox/airlock/vm/qemu"
)

// startChanges boots a sandbox on ws holding its changes on the layer disk
// layer (size bytes when new), its machines keeping templates in cache,
// and closes it when t ends.
func startChanges(t *testing.T, cache, ws, layer string, size int64) (*sandbox.Sandbox, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	console := filepath.Join(t.TempDir(), "console.log")
	sb, err := vmharness.Boot(ctx, image, sandbox.Options{
		Workspace: ws, Changes: true, LayerDisk: layer, LayerDiskSize: size, ConsoleLog: console,
		NewMachine: func(cfg vm.Config) (vm.Machine, error) {
			return qemu.New(cfg, qemu.Options{CacheDir: cache, Templates: qemu.TemplatesAuto})
		},
	})
	if err != nil {
		tail, _ := vmharness.ConsoleTail(console, 4096)
		t.Fatalf("boot with changes held: %v\nconsole:\n%s", err, tail)
	}
	t.Cleanup(func() { vmharness.Close(sb) })
	return sb, console
}

// snapshot is every path of a host folder with its type, mode, mtime and
// content hash.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		v := fmt.Sprintf("%v %d", fi.Mode(), fi.ModTime().UnixNano())
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			v += " " + hex.EncodeToString(sum[:])
		}
		m[rel] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// exportNames exports sb's layer and returns its entries as "name type",
// with the content of regular files that have some.
func exportNames(t *testing.T, sb *sandbox.Sandbox) (names []string, content map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rc, err := sb.Agent().ExportLayer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	content = map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("export: %v", err)
		}
		names = append(names, fmt.Sprintf("%s %c", h.Name, h.Typeflag))
		if b, _ := io.ReadAll(tr); len(b) > 0 {
			content[h.Name] = string(b)
		}
	}
	// The tar's end is not the stream's: the guest's count follows.
	if _, err := io.Copy(io.Discard, rc); err != nil {
		t.Fatalf("export's end: %v", err)
	}
	slices.Sort(names)
	return names, content
}

// formatted is the console's word on how long the guest took to format
// a blank layer disk.
var formatted = regexp.MustCompile(`formatted the changes layer disk.*took=(\S+)`)

func formatTime(console string) string {
	b, _ := os.ReadFile(console)
	if m := formatted.FindSubmatch(b); m != nil {
		return string(m[1])
	}
	return "not formatted"
}

// TestChangesLayer: with changes held, what a task writes, changes,
// deletes and renames stays in the guest's layer: the host folder is
// unchanged byte for byte (guest root cannot write it either), the export
// lists exactly the changes in the OCI layer format, a forget shows the
// host's version again, a second VM on the same layer disk (started from
// the first one's template) sees the pending changes, and a full layer
// gives its writer ENOSPC without losing what it already held.
func TestChangesLayer(t *testing.T) {
	ws := newWorkspace(t)
	files := map[string]string{
		"keep.txt": "keep\n", "mod.txt": "old\n", "del.txt": "delete me\n", "ren.txt": "rename me\n",
		"folder/x.txt": "in a folder\n", "gone/y.txt": "deleted folder\n", "again/z.txt": "old folder\n",
		"forget.txt": "host version\n", ".git/config": "[core]\n", ".git/hooks/README": "hooks\n",
		"held/h.txt": "host held\n",
	}
	for p, c := range files {
		full := filepath.Join(ws, p)
		os.MkdirAll(filepath.Dir(full), 0o755)
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	filepath.WalkDir(ws, func(p string, _ fs.DirEntry, _ error) error { ownedByTaskUser(p); return nil })
	before := snapshot(t, ws)
	cache, state := t.TempDir(), t.TempDir()
	layer := sandbox.LayerDiskPath(state, ws)

	began := time.Now()
	sb, console := startChanges(t, cache, ws, layer, sandbox.DefaultLayerDiskSize)
	t.Logf("first VM (8 GiB layer disk, blank) ready in %s; format %s; restored %v",
		time.Since(began).Round(time.Millisecond), formatTime(console), vm.Restored(sb.Machine()))
	run := func(sb *sandbox.Sandbox, spec client.Spec) result {
		t.Helper()
		return vmharness.Exec(t, sb, spec, nil)
	}
	r := run(sb, shell(`set -e; cd /workspace
echo new > new.txt
echo more >> mod.txt
rm del.txt
mv ren.txt renamed.txt
mv folder moved
rm -r gone
rm -r again; mkdir again; echo fresh > again/new.txt
echo guest version > forget.txt
rm -r held; mkdir held; echo guest > held/g.txt
if echo evil >> .git/config 2>/dev/null; then echo "tool config writable"; exit 1; fi
if chmod u+s new.txt mod.txt 2>/dev/null; then echo "setuid bit set in the workspace"; exit 1; fi
id -u`))
	if r.Exit.Code != 0 || strings.TrimSpace(r.Stdout) != fmt.Sprint(vmharness.UserUID()) {
		tail, _ := vmharness.ConsoleTail(console, 4096)
		dbg := run(sb, client.Spec{Root: true, Argv: []string{"sh", "-c", "grep -E 'workspace|airlock' /proc/self/mountinfo; ls -la /workspace /workspace/.git"}})
		t.Fatalf("task: %s\nconsole:\n%s\n%s", r, tail, dbg)
	}
	// Guest root reaches for the share beneath the overlay.
	r = run(sb, client.Spec{Root: true, Argv: []string{"sh", "-c", `cd /run/airlock/lower || exit 9
echo root > root.txt 2>&1 && echo wrote
mount -o remount,rw /run/airlock/lower 2>&1 && echo remounted
echo root > root.txt 2>&1 && echo wrote
echo root >> keep.txt 2>&1 && echo wrote
exit 0`}})
	if strings.Contains(r.Stdout, "wrote") || r.Exit.Code != 0 {
		t.Errorf("guest root wrote the shared folder: %s", r)
	}
	if after := snapshot(t, ws); !mapsEqual(before, after) {
		t.Fatalf("the host folder changed:\nbefore %v\nafter  %v", before, after)
	}

	names, content := exportNames(t, sb)
	want := []string{
		".wh.del.txt 0", ".wh.folder 0", ".wh.gone 0", ".wh.ren.txt 0",
		"again/ 5", "again/.wh..wh..opq 0", "again/new.txt 0",
		"forget.txt 0", "held/ 5", "held/.wh..wh..opq 0", "held/g.txt 0",
		"mod.txt 0", "moved/ 5", "moved/x.txt 0", "new.txt 0", "renamed.txt 0",
	}
	if !slices.Equal(names, want) {
		t.Fatalf("export:\n%v\nwant\n%v", names, want)
	}
	if content["mod.txt"] != "old\nmore\n" || content["moved/x.txt"] != "in a folder\n" || content["again/new.txt"] != "fresh\n" {
		t.Errorf("export's contents: %q", content)
	}

	// The host's store reads the same export (app/changes).
	ingest(t, sb, ws, began)

	// A forget shows the host's version at once, to the next task; a
	// folder a running task holds (its working folder) once the last
	// task has ended.
	holder := make(chan result, 1)
	go func() { holder <- run(sb, shell(`cd /workspace/held && sleep 4 && ls`)) }()
	time.Sleep(time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := sb.Agent().ForgetLayer(ctx, []string{"forget.txt", "gone", "again", "held"}); err != nil {
		t.Fatal(err)
	}
	r = run(sb, shell(`cd /workspace && cat forget.txt gone/y.txt again/z.txt && ls again`))
	if r.Stdout != "host version\ndeleted folder\nold folder\nz.txt\n" {
		t.Fatalf("after forget: %s", r)
	}
	t.Logf("the holder saw, in its folder forgotten under it: %s", <-holder)
	if r = run(sb, shell(`cat /workspace/held/h.txt`)); r.Stdout != "host held\n" {
		t.Fatalf("a held folder after its holder ended: %s", r)
	}
	names, _ = exportNames(t, sb)
	wantAfter := []string{".wh.del.txt 0", ".wh.folder 0", ".wh.ren.txt 0", "mod.txt 0", "moved/ 5", "moved/x.txt 0", "new.txt 0", "renamed.txt 0"}
	if !slices.Equal(names, wantAfter) {
		t.Fatalf("export after forget:\n%v\nwant\n%v", names, wantAfter)
	}
	if err := vmharness.Close(sb); err != nil {
		t.Fatal(err)
	}

	// A second VM on the same layer disk, from the first one's template:
	// its guest read nothing of the disk before its wake, so it finds the
	// layer as the first VM left it.
	began = time.Now()
	second, console := startChanges(t, cache, ws, layer, sandbox.DefaultLayerDiskSize)
	t.Logf("second VM (same layer) ready in %s; restored %v", time.Since(began).Round(time.Millisecond), vm.Restored(second.Machine()))
	if !vm.Restored(second.Machine()) {
		t.Error("the second VM did not start from the first one's template")
	}
	r = run(second, shell(`cd /workspace && cat new.txt mod.txt && ls`))
	if r.Stdout != "new\nold\nmore\nagain\nforget.txt\ngone\nheld\nkeep.txt\nmod.txt\nmoved\nnew.txt\nrenamed.txt\n" {
		tail, _ := vmharness.ConsoleTail(console, 4096)
		t.Fatalf("second VM sees: %s\nconsole:\n%s", r, tail)
	}
	if names, _ := exportNames(t, second); !slices.Equal(names, wantAfter) {
		t.Fatalf("second VM's export:\n%v\nwant\n%v", names, wantAfter)
	}
	vmharness.Close(second)
	if after := snapshot(t, ws); !mapsEqual(before, after) {
		t.Fatalf("the host folder changed:\nbefore %v\nafter  %v", before, after)
	}

	// A small layer: the writer that fills it gets ENOSPC; what the layer
	// held stays whole.
	small := filepath.Join(state, "small", "layer.vhd")
	third, console := startChanges(t, cache, ws, small, 64<<20)
	t.Logf("64 MiB layer formatted in %s; restored %v (a template is kept per disk size)", formatTime(console), vm.Restored(third.Machine()))
	if vm.Restored(third.Machine()) {
		t.Error("a machine with a disk of another size started from the template")
	}
	r = run(third, shell(`cd /workspace && head -c 1000000 /dev/urandom > kept.bin && sha256sum kept.bin > /tmp/sum
dd if=/dev/zero of=big.bin bs=1M count=100 2>&1; echo "dd exit $?"
sync; sha256sum -c /tmp/sum`))
	if !strings.Contains(r.Stdout, "No space left on device") || strings.Contains(r.Stdout, "dd exit 0") || !strings.Contains(r.Stdout, "kept.bin: OK") {
		t.Fatalf("filling the layer: %s", r)
	}
	names, content = exportNames(t, third)
	if !slices.Contains(names, "kept.bin 0") || len(content["kept.bin"]) != 1000000 {
		t.Fatalf("export of a full layer: %v (kept.bin %d bytes)", names, len(content["kept.bin"]))
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// ingest hands sb's export to a store of pending changes, as the host does
// after a task, and checks what it made of the plain cases.
func ingest(t *testing.T, sb *sandbox.Sandbox, ws string, epoch time.Time) {
	t.Helper()
	st, err := changes.Open(t.TempDir(), changes.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rc, err := sb.Agent().ExportLayer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	sum, err := st.Ingest(ctx, rc, ws, epoch, changes.DefaultLimits)
	if err != nil {
		t.Fatalf("ingest the export: %v", err)
	}
	entries, err := st.List()
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]changes.Kind{}
	var all []string
	for _, e := range entries {
		kinds[e.Path] = e.Kind
		all = append(all, fmt.Sprintf("%s %s%s", e.Kind, e.Path, map[bool]string{true: " from " + e.From}[e.From != ""]))
	}
	t.Logf("the store's pending changes: %v (refused %v)", all, sum.Refused)
	if len(sum.Refused) != 0 || kinds["new.txt"] != changes.Added || kinds["mod.txt"] != changes.Modified || kinds["del.txt"] != changes.Deleted {
		t.Errorf("the store read the export as %v, refusing %v", all, sum.Refused)
	}

	// Apply it all to the host folder, then undo: the caller's snapshot
	// then finds the folder exactly as it was (bytes, modes, times).
	// Forced: the test wrote the host's files within clockSlack of the
	// layer's epoch, so the store rightly calls each one a conflict.
	res, err := st.Apply(ws, nil, changes.ApplyOptions{Force: true})
	if err != nil || len(res.Conflicts) != 0 || res.Checkpoint == "" {
		t.Fatalf("apply the export: %+v, %v", res, err)
	}
	t.Logf("applied %d changes (refused %v)", len(res.Applied), res.Refused)
	for p, want := range map[string]string{"new.txt": "new\n", "mod.txt": "old\nmore\n", "renamed.txt": "rename me\n",
		"moved/x.txt": "in a folder\n", "again/new.txt": "fresh\n"} {
		if b, err := os.ReadFile(filepath.Join(ws, p)); err != nil || string(b) != want {
			t.Errorf("after apply, %s = %q, %v; want %q", p, b, err, want)
		}
	}
	for _, p := range []string{"del.txt", "ren.txt", "gone", "folder", "again/z.txt"} {
		if _, err := os.Lstat(filepath.Join(ws, p)); !os.IsNotExist(err) {
			t.Errorf("after apply, %s: %v; want it gone", p, err)
		}
	}
	if _, err := st.Undo(ws, res.Checkpoint); err != nil {
		t.Fatalf("undo the apply: %v", err)
	}
}
