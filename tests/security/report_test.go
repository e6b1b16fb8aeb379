package security

// The report (issue 8, point 5): what the suite ran, per family, written
// as Markdown by the suite itself (AIRLOCK_SECURITY_REPORT=FILE) and
// committed as docs/security-report.md. This file has no build tag: its
// test runs with the unit tests and keeps the committed report in the
// format this code writes, and the README's count true.

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// families are the attack families of issue 8, in report order.
var families = []string{"network escape", "workspace escape", "guest privilege", "host control"}

// Outcomes of an attack.
const (
	outBlocked   = "blocked"
	outThrough   = "GOT THROUGH"
	outKnownHole = "known hole" // got through, listed in knownHoles with its issue
	outError     = "could not run"
)

// finding is one attack and how it ended.
type finding struct {
	Family, Name, Outcome string
}

// report is one run of the suite.
type report struct {
	Run      string // one line: when, how long, where; not checked for staleness
	Findings []finding
}

// reportPath is the committed report, from this package's folder.
const reportPath = "../../docs/security-report.md"

const reportHead = `# Airlock security report

<!-- Written by the security suite; do not edit. Regenerate: make security-report -->

Every attack below was run by ` + "`make test-security`" + ` (tests/security) from inside a real
guest VM booted from the real image, the way a prompt-injected agent would: as the task user, and as
guest root where root is one flag away (` + "`--root`" + `, the MCP tool's root flag). An attack is
*blocked* when its test found no effect on the host, the gate or the guest's agent; anything that
*got through* is a bug to fix, not a line to keep here, and a *known hole* is one that is listed
with the issue that keeps it open.

A white-box review (issue 29) added these attacks, each of which got through before its fix: a
` + "`" + `--map-host` + "`" + ` pin reaching every port of the host's loopback under its name (HTTP, CONNECT, SOCKS);
SIIT, Teredo and ` + "`" + `3fff::/20` + "`" + ` addresses; setuid/setgid files of the folder's owner, escaping links
and the folder's tool configuration (` + "`" + `.git/config` + "`" + `, hooks, ` + "`" + `.envrc` + "`" + `, ` + "`" + `.vscode` + "`" + `,
` + "`" + `.idea` + "`" + `) planted through the share; io_uring; one connection writing the decision log without
bound; a page on another loopback port driving the UI with its cookie; terminal escapes in names
the guest chose; a task reading another's environment, open files or shared memory, killing it,
or holding every proxy connection; in ` + "`" + `direct` + "`" + ` mode, a link that fits where it is made moved,
hard-linked or swapped (with its folder or alone) towards the top, where it climbs out, and a task
making the tool configuration where there was none (a new repository and hook, one moved, copied or
linked into place, a new ` + "`" + `.vscode` + "`" + `, a ` + "`" + `.git` + "`" + ` file naming a prepared repository or an
` + "`" + `.envrc` + "`" + ` written in place). A secret's host echoing the value back is an e2e test
(TestCredentialsStayOnTheHost).
FIFOs and sockets in the folder were refused by QEMU 7.2's 9p server already; the guest now
refuses them too, for the file servers of the other platforms.

What the suite covers and what is out of scope is in the README's Security section. In short, out
of scope: what a host program does with a file the agent wrote, once the user runs it on that file
(the folder's tool configuration, setuid bits, FIFOs, devices and escaping links are refused at the
source; an ordinary script or document is the user's to open); guest root unmounting the
read-only binds over the folder's tool configuration (root is asked for per task); side channels
between sandboxes on one CPU. Tasks of one sandbox share ` + "`" + `/tmp` + "`" + ` and the guest's loopback on
purpose: they are the commands of one session, and a server one task starts is what another
task's client talks to.
`

func (r report) count(family string) (attempts, blocked, through, holes, errs int) {
	for _, f := range r.Findings {
		if family != "" && f.Family != family {
			continue
		}
		attempts++
		switch f.Outcome {
		case outBlocked:
			blocked++
		case outThrough:
			through++
		case outKnownHole:
			holes++
		default:
			errs++
		}
	}
	return
}

// markdown renders the report; findings are sorted so that runs compare.
func (r report) markdown() string {
	fs := append([]finding(nil), r.Findings...)
	sort.SliceStable(fs, func(i, j int) bool {
		if fs[i].Family != fs[j].Family {
			return familyIndex(fs[i].Family) < familyIndex(fs[j].Family)
		}
		return fs[i].Name < fs[j].Name
	})
	var b strings.Builder
	b.WriteString(reportHead)
	fmt.Fprintf(&b, "\nRun: %s\n", r.Run)
	b.WriteString("\n## Summary\n\n| family | attempts | blocked | got through | known holes | could not run |\n|---|---:|---:|---:|---:|---:|\n")
	for _, f := range families {
		a, bl, th, h, e := r.count(f)
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d |\n", f, a, bl, th, h, e)
	}
	a, bl, th, h, e := r.count("")
	fmt.Fprintf(&b, "| total | %d | %d | %d | %d | %d |\n", a, bl, th, h, e)
	b.WriteString("\nGot through: ")
	var through []string
	for _, f := range fs {
		if f.Outcome == outThrough {
			through = append(through, f.Family+": "+f.Name)
		}
	}
	if len(through) == 0 {
		b.WriteString("nothing.\n")
	} else {
		b.WriteString("\n\n")
		for _, s := range through {
			fmt.Fprintf(&b, "- %s\n", s)
		}
	}
	// Known holes get through too; each is listed with the issue that
	// keeps it open and why, so the report never reads cleaner than it is.
	first := true
	for _, f := range fs {
		if f.Outcome != outKnownHole {
			continue
		}
		if first {
			b.WriteString("\nKnown holes (open, and why):\n\n")
			first = false
		}
		fmt.Fprintf(&b, "- %s: %s: %s\n", f.Family, f.Name, holeNote(f))
	}
	for _, fam := range families {
		fmt.Fprintf(&b, "\n## %s\n\n| attack | outcome |\n|---|---|\n", fam)
		for _, f := range fs {
			if f.Family == fam {
				fmt.Fprintf(&b, "| %s | %s |\n", cell(f.Name), f.Outcome)
			}
		}
	}
	return b.String()
}

func familyIndex(f string) int {
	for i, g := range families {
		if g == f {
			return i
		}
	}
	return len(families)
}

// cell escapes a table cell; uncell undoes it.
func cell(s string) string   { return strings.ReplaceAll(s, "|", `\|`) }
func uncell(s string) string { return strings.ReplaceAll(s, `\|`, "|") }

var rowRE = regexp.MustCompile(`^\| (.*) \| (` + outBlocked + `|` + outThrough + `|` + outKnownHole + `|` + outError + `) \|$`)

// holeNote is what knownHoles says of a known hole.
func holeNote(f finding) string {
	if note, ok := knownHoles[f.Family+"/"+f.Name]; ok {
		return note
	}
	return "not in knownHoles"
}

// parseReport reads back what markdown wrote.
func parseReport(md string) (report, error) {
	var r report
	family := ""
	sc := bufio.NewScanner(strings.NewReader(md))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "Run: "):
			r.Run = strings.TrimPrefix(line, "Run: ")
		case strings.HasPrefix(line, "## "):
			family = strings.TrimPrefix(line, "## ")
			if family == "Summary" {
				family = ""
			} else if familyIndex(family) == len(families) {
				return r, fmt.Errorf("line %d: unknown family %q", n, family)
			}
		case family != "" && strings.HasPrefix(line, "| ") && line != "| attack | outcome |":
			m := rowRE.FindStringSubmatch(line)
			if m == nil {
				return r, fmt.Errorf("line %d: not an attack row: %q", n, line)
			}
			r.Findings = append(r.Findings, finding{family, uncell(m[1]), m[2]})
		}
	}
	return r, sc.Err()
}

// writeReport writes the report to path when AIRLOCK_SECURITY_REPORT asks
// for it.
func writeReport(r report) error {
	path := os.Getenv("AIRLOCK_SECURITY_REPORT")
	if path == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(r.markdown()), 0o644)
}

// compareReport says how this run's findings differ from the committed
// report ("" when they match), so that a suite run shows the report is
// stale in its content. Only a notice: some attacks depend on the host
// (a LAN address, running as root).
func compareReport(r report) string {
	b, err := os.ReadFile(reportPath)
	if err != nil {
		return err.Error()
	}
	old, err := parseReport(string(b))
	if err != nil {
		return err.Error()
	}
	key := func(f finding) string { return f.Family + "/" + f.Name + ": " + f.Outcome }
	was := map[string]bool{}
	for _, f := range old.Findings {
		was[key(f)] = true
	}
	var added, gone []string
	for _, f := range r.Findings {
		if !was[key(f)] {
			added = append(added, key(f))
		}
		delete(was, key(f))
	}
	for k := range was {
		gone = append(gone, k)
	}
	if len(added)+len(gone) == 0 {
		return ""
	}
	sort.Strings(added)
	sort.Strings(gone)
	return fmt.Sprintf("new in this run: %q; only in the report: %q", added, gone)
}

// TestReportIsCurrent: the committed report is exactly what this code
// writes for the findings it lists (only its Run line is free), every
// family has several attacks, nothing in it got through, and the README
// states its count.
func TestReportIsCurrent(t *testing.T) {
	if os.Getenv("AIRLOCK_SECURITY_REPORT") != "" {
		t.Skip("this run rewrites the report")
	}
	b, err := os.ReadFile(reportPath)
	if err != nil {
		t.Fatalf("%v: regenerate it with make security-report", err)
	}
	r, err := parseReport(string(b))
	if err != nil {
		t.Fatalf("%s: %v: regenerate it with make security-report", reportPath, err)
	}
	if got := r.markdown(); got != string(b) {
		t.Errorf("%s is not in the format the suite writes now: regenerate it with make security-report\n%s", reportPath, firstDiff(got, string(b)))
	}
	if r.Run == "" {
		t.Errorf("%s has no Run line", reportPath)
	}
	for _, f := range families {
		if a, _, _, _, _ := r.count(f); a < 5 {
			t.Errorf("family %q has %d attacks in the report, want several", f, a)
		}
	}
	for _, f := range r.Findings {
		switch {
		case f.Outcome == outKnownHole && holeNote(f) != "not in knownHoles":
		case f.Outcome == outKnownHole:
			t.Errorf("the committed report calls %s/%s a known hole, but knownHoles does not list it", f.Family, f.Name)
		case f.Outcome != outBlocked:
			t.Errorf("the committed report says %s/%s: %s (fix it, then regenerate)", f.Family, f.Name, f.Outcome)
		}
	}
	if d := compareReport(r); d != "" {
		t.Errorf("the report differs from itself: %s", d)
	}
	more := r
	more.Findings = append(append([]finding(nil), r.Findings...), finding{"host control", "a new attack", outBlocked})
	if d := compareReport(more); !strings.Contains(d, "host control/a new attack: blocked") {
		t.Errorf("a run with a new attack is not told apart from the report: %q", d)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	total, _, _, holes, _ := r.count("")
	if want := "runs " + strconv.Itoa(total) + " attacks"; !strings.Contains(string(readme), want) {
		t.Errorf("README.md does not say %q (the report's count)", want)
	}
	if want := strconv.Itoa(holes) + " known holes"; holes > 0 && !strings.Contains(string(readme), want) {
		t.Errorf("README.md does not say %q (the report's open holes)", want)
	}
	if none := "no hole is known"; holes == 0 && !strings.Contains(string(readme), none) {
		t.Errorf("README.md does not say %q (the report lists none)", none)
	} else if holes > 0 && strings.Contains(string(readme), none) {
		t.Errorf("README.md says %q, the report lists %d", none, holes)
	}
	if !strings.Contains(string(readme), "docs/security-report.md") {
		t.Error("README.md does not link docs/security-report.md")
	}
}

func TestReportRoundTrip(t *testing.T) {
	r := report{Run: "now", Findings: []finding{
		{"host control", "a | pipe", outBlocked},
		{"network escape", "z", outThrough},
		{"network escape", "a", outError},
		{"workspace escape", "h", outKnownHole},
	}}
	md := r.markdown()
	back, err := parseReport(md)
	if err != nil {
		t.Fatal(err)
	}
	if back.markdown() != md {
		t.Errorf("round trip differs:\n%s", firstDiff(back.markdown(), md))
	}
	if a, bl, th, h, e := back.count(""); a != 4 || bl != 1 || th != 1 || h != 1 || e != 1 {
		t.Errorf("counts %d %d %d %d", a, bl, th, e)
	}
	if !strings.Contains(md, "Got through: \n\n- network escape: z\n") {
		t.Errorf("the breach is not listed up front:\n%s", md)
	}
	if !strings.Contains(md, "Known holes (open, and why):\n\n- workspace escape: h: not in knownHoles\n") {
		t.Errorf("the known hole is not listed up front:\n%s", md)
	}
}

// firstDiff shows where two texts part.
func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < max(len(al), len(bl)); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return fmt.Sprintf("line %d: want %q, have %q", i+1, x, y)
		}
	}
	return ""
}
