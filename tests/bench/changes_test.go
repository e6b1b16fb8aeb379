//go:build e2e

package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/airlock-sandbox/airlock/app/sandbox"
	"github.com/airlock-sandbox/airlock/app/workspace"
)

// changes measures a workspace with its changes held in the guest's layer
// (issue 32's review and auto modes: the share read-only beneath an
// overlay whose upper layer is on the layer disk) against the same folder
// shared directly, in the same run: writing 32 MiB and creating 1,000
// small files in /workspace, a stat walk of a 5,000-file tree in it, and
// the boot to ready with the layer disk attached against without; then,
// on the host, app/changes applying a layer into the folder against cp -a
// (changesApply).
func (h *harness) changes() {
	h.changesApply()
	ctx := context.Background()
	ws := filepath.Join(h.work, "changes-ws")
	os.Mkdir(ws, 0o755)
	if err := writeTree(filepath.Join(ws, "tree"), treeFiles); err != nil {
		h.b.Fatal(err)
	}
	ws = ownedByTaskUser(ws)
	uid, gid := workspace.Owner(ws)
	if err := buildGuest("./testdata/gprobe", filepath.Join(ws, "gprobe")); err != nil {
		h.b.Fatal(err)
	}
	img, err := sandbox.LoadImage(h.imageDir)
	if err != nil {
		h.b.Fatal(err)
	}
	layer := sandbox.LayerDiskPath(filepath.Join(h.work, "state"), ws)
	start := func(held bool) (*sandbox.Sandbox, time.Duration) {
		o := sandbox.Options{Workspace: ws, Image: img, UID: uid, GID: gid, NewMachine: bootOnly}
		if held {
			o.Changes, o.LayerDisk = true, layer
		}
		began := time.Now()
		sb, err := sandbox.Start(ctx, o)
		if err != nil {
			h.b.Fatalf("start (changes held %v): %v", held, err)
		}
		return sb, time.Since(began)
	}

	// The first boot on a blank layer disk formats it (busybox mke2fs,
	// 8 GiB): paid once per blank layer.
	sb, first := start(true)
	sb.Close(ctx)
	var heldMS, directMS []float64
	for i := range h.rounds {
		for _, held := range []bool{i%2 == 0, i%2 != 0} {
			sb, took := start(held)
			sb.Close(ctx)
			if held {
				heldMS = append(heldMS, ms(took))
			} else {
				directMS = append(directMS, ms(took))
			}
		}
	}
	h.t.add("changes-boot", "sandbox.Start with changes held (layer disk)", "ms", heldMS, "shared directly", directMS, nil).Note =
		fmt.Sprintf("templates off, the layer formatted already; its first boot, formatting the blank 8 GiB layer: %.0f ms", ms(first))

	held, _ := start(true)
	defer held.Close(ctx)
	direct, _ := start(false)
	defer direct.Close(ctx)
	gh, gd := &guest{h: h, sb: held}, &guest{h: h, sb: direct}
	var wH, wD []float64
	var cH, cD []float64
	for i := range h.rounds {
		for _, g := range []*guest{gh, gd} {
			w := g.probe("write", fmt.Sprintf("/workspace/c%d.bin", i), strconv.Itoa(fileMiB))
			rate := w["bytes"] / (1 << 20) / w["secs"]
			if g == gh {
				wH = append(wH, rate)
			} else {
				wD = append(wD, rate)
			}
			g.run(nil, "rm", "-f", fmt.Sprintf("/workspace/c%d.bin", i))
		}
		if i == 0 { // one round: 9p takes about a minute for these
			for _, g := range []*guest{gh, gd} {
				m := g.probe("meta", "/workspace/cmeta", strconv.Itoa(metaFiles))
				if g == gh {
					cH = append(cH, float64(metaFiles)/m["create_secs"])
				} else {
					cD = append(cD, float64(metaFiles)/m["create_secs"])
				}
			}
		}
	}
	// The guest image has no git (the standard image has, but boots a
	// 450 MiB root disk): what `git status` spends its time on in a large
	// tree, an lstat of every file, stands in for it. A walk of the
	// direct share takes seconds under emulation: two rounds, whatever
	// the rounds, the first cold, the second warm, as a repeated git
	// status is.
	var sH, sD, cold []float64
	for i := range 2 {
		for _, g := range []*guest{gh, gd} {
			w := g.probe("walk", "/workspace/tree", "/workspace/tree/.ref")
			if int(w["newer"]) != treeNewer {
				h.b.Fatalf("walk found %v files newer than the reference, not %d", w["newer"], treeNewer)
			}
			switch {
			case i == 0:
				cold = append(cold, w["secs"]*1e3)
			case g == gh:
				sH = append(sH, w["secs"]*1e3)
			default:
				sD = append(sD, w["secs"]*1e3)
			}
		}
	}
	h.t.add("changes-walk", fmt.Sprintf("lstat walk ×%d (git status stand-in), held", treeFiles), "ms", sH, "shared directly", sD, nil).Note =
		fmt.Sprintf("find -newer over the tree, the warm walk; the first (cold) walk: held %.0f ms, direct %.0f ms", cold[0], cold[1])
	h.t.add("changes-write", "workspace write 32M+fsync, changes held", "MiB/s", wH, "shared directly", wD, atLeast(1.0))
	h.t.add("changes-create", fmt.Sprintf("workspace create ×%d, changes held", metaFiles), "op/s", cH, "shared directly", cD, atLeast(1.0))
}

// treeFiles is the size of the tree the walk lists, treeNewer how many of
// its files are newer than its .ref.
const treeFiles, treeNewer = 5000, 10

// writeTree writes n files of 1 KiB in folders of 100 beneath dir, as a
// source tree, with dir/.ref older than all but treeNewer of them.
func writeTree(dir string, n int) error {
	old, ref := time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)
	data := make([]byte, 1<<10)
	for i := range n {
		p := filepath.Join(dir, fmt.Sprintf("pkg%02d", i/100), fmt.Sprintf("f%04d.go", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		copy(data, fmt.Sprintf("package p%d\n", i))
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return err
		}
		if i >= treeNewer {
			if err := os.Chtimes(p, old, old); err != nil {
				return err
			}
		}
	}
	p := filepath.Join(dir, ".ref")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		return err
	}
	return os.Chtimes(p, ref, ref)
}
