package changes

import (
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/printable"
)

// choose picks the records of m to apply, reporting the rest in res. goos
// is the host's system; folds says its file system takes names that
// differ only in case or Unicode normalisation as one.
func (s *Store) choose(root *os.Root, m pendingManifest, paths []string, opt ApplyOptions, goos string, folds bool, res *ApplyResult) []record {
	recs := m.Records
	refuse := func(p, why string) {
		res.Refused = append(res.Refused, Refusal{Path: printable.String(p), Reason: why})
	}
	var sel []record
	for _, q := range paths {
		if !slices.ContainsFunc(recs, func(r record) bool { return under(r.Path, q) || (r.From != "" && under(r.From, q)) }) {
			refuse(q, "nothing is pending there")
		}
	}
	for _, r := range recs {
		if len(paths) == 0 || slices.ContainsFunc(paths, func(q string) bool { return under(r.Path, q) || (r.From != "" && under(r.From, q)) }) {
			sel = append(sel, r)
		}
	}
	slices.SortFunc(sel, func(a, b record) int { return strings.Compare(a.Path, b.Path) })

	becomesDir := map[string]bool{}
	for _, r := range sel {
		if r.Kind != Deleted && r.Kind != ModeOnly && r.Type == Dir {
			becomesDir[r.Path] = true
		}
	}
	parents := map[string]string{}
	count := map[string]int{}
	for _, r := range sel {
		count[r.Path]++
	}
	var cand []record
	for _, r := range sel {
		why := recordProblem(r, goos)
		if why == "" && count[r.Path] > 1 {
			why = "the store holds two changes to it"
		}
		for _, p := range []string{r.Path, r.From} {
			if why == "" && p != "" {
				why = parentProblem(root, p, becomesDir, parents)
			}
		}
		if why != "" {
			refuse(r.Path, why)
			continue
		}
		if opt.Auto && r.HostRuns {
			refuse(r.Path, "your tools run this path on the host, so Auto mode leaves it for you to review and apply")
			continue
		}
		conflict, err := mayOverwrite(root, r, m)
		if err != nil {
			refuse(r.Path, printable.String(err.Error()))
			continue
		}
		if conflict && (opt.Auto || !opt.Force) {
			res.Conflicts = append(res.Conflicts, r.Path)
			continue
		}
		if conflict {
			// Forced: the host's file may not be the Base the store saw,
			// so keepBefore reads its hash rather than trust the Base's.
			r.Base.Hash = ""
		}
		cand = append(cand, r)
	}

	bad := map[string]string{}
	if folds {
		byFold := map[string]string{}
		for _, r := range cand {
			for _, p := range []string{r.Path, r.From} {
				if p == "" {
					continue
				}
				k := foldKey(p)
				if o, ok := byFold[k]; ok && o != p {
					bad[p] = "differs from " + printable.String(o) + " only in case or Unicode normalisation, which this computer's folders treat as one name"
					bad[o] = "differs from " + printable.String(p) + " only in case or Unicode normalisation, which this computer's folders treat as one name"
				}
				byFold[k] = p
			}
		}
	}
	var take []record
	for _, r := range cand {
		why := bad[r.Path]
		if why == "" && r.From != "" {
			why = bad[r.From]
		}
		if why != "" {
			refuse(r.Path, why)
			continue
		}
		take = append(take, r)
	}
	return take
}

// recordProblem re-checks a record as if Ingest had not: says why it
// cannot reach the host, or "".
func recordProblem(r record, goos string) string {
	if why := nameProblem(r.Path, goos); why != "" {
		return why
	}
	switch r.Kind {
	case Deleted:
		return ""
	case Renamed:
		if why := nameProblem(r.From, goos); why != "" {
			return "renamed from a bad name: " + why
		}
		if under(r.Path, r.From) || under(r.From, r.Path) {
			return "renamed into or out of itself"
		}
	case ModeOnly:
		if r.Type != File && r.Type != Dir {
			return "only a file's or a folder's mode can change"
		}
		return ""
	case Added, Modified:
	default:
		return "unknown kind of change"
	}
	switch r.Type {
	case File:
		if !isHash(r.Blob) || r.Size < 0 {
			return "the store holds no content for it"
		}
	case Symlink:
		return badLink(r.Path, r.Link)
	case Dir:
	default:
		return "not a file, folder or symlink (devices, fifos and sockets are never created)"
	}
	return ""
}

// parentProblem says why p's parent folders on the host make it unsafe to
// write p: a symlink (which os.Root would follow while it stays inside),
// or a file no change turns into a folder. seen keeps what it found of
// each folder for the next path (folderOK: a folder; "": nothing below
// it needs looking at; else the problem).
func parentProblem(root *os.Root, p string, becomesDir map[string]bool, seen map[string]string) string {
	for _, a := range ancestors(p) {
		why, ok := seen[a]
		if !ok {
			why = folderProblem(root, a, becomesDir)
			seen[a] = why
		}
		if why != folderOK {
			return why
		}
	}
	return ""
}

// folderOK is folderProblem's word for a folder on the host.
const folderOK = "\x00folder"

// folderProblem is parentProblem's verdict on the folder a alone.
func folderProblem(root *os.Root, a string, becomesDir map[string]bool) string {
	fi, err := root.Lstat(a)
	switch {
	case notExist(err):
		return ""
	case err != nil:
		return printable.String(err.Error())
	case fi.Mode()&fs.ModeSymlink != 0:
		return "its parent folder " + printable.String(a) + " is a symlink on the host"
	case fi.IsDir():
		return folderOK
	case becomesDir[a]:
		return ""
	}
	return "its parent " + printable.String(a) + " is not a folder on the host"
}

// mayOverwrite says whether applying r could overwrite what the user
// changed: the store marked it, or the host's path (or a rename's old
// path) is no longer what the store first saw or changed after the
// guest's layer began, by Ingest's own reading (conflicts). A deletion of
// what the user deleted too is none. A device, fifo or socket at the path
// is an error: Airlock never replaces one.
func mayOverwrite(root *os.Root, r record, m pendingManifest) (bool, error) {
	if r.Conflict {
		for _, p := range []string{r.Path, r.From} {
			if p == "" {
				continue
			}
			if _, err := lstate(root, p); err != nil {
				return false, err
			}
		}
		return true, nil
	}
	now, err := knownBase(root, r.Path, r.Base)
	if err != nil {
		return false, err
	}
	var from hostState
	if r.From != "" {
		var fb Base
		if r.FromBase != nil {
			fb = *r.FromBase
		}
		if from, err = knownBase(root, r.From, fb); err != nil {
			return false, err
		}
	}
	if r.Kind != Deleted || now.Exists {
		c, err := conflicts(root, r.Path, r.Base, now, m.Epoch, r.Kind == Deleted || r.Type != Dir, m.Written)
		if err != nil || c {
			return c, err
		}
	}
	if r.Kind != Renamed || r.FromBase == nil || !from.Exists {
		return false, nil
	}
	return conflicts(root, r.From, *r.FromBase, from, m.Epoch, true, m.Written)
}
