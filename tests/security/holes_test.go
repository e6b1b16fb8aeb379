package security

// This file has no build tag: the report's unit test (report_test.go)
// checks the committed report's known holes against this list.

// knownHoles are attacks that currently get through, by "family/name",
// with the issue and an explanation; their tests skip with KNOWN HOLE.
// A hole is a bug to fix: the list is only for the time between finding
// one and fixing it, and the report and the README name each one.
var knownHoles = map[string]string{
	"workspace escape/the task user plants a relative link moved towards the top": "issue 29 item 2, direct mode only (with changes held the link is checked again where it lies before it is applied): a link is checked where it is made; " +
		"rename(2) of it, or of its folder, is not (refusing reparenting in /workspace with Landlock would close it, at the cost of every cross-folder rename there)",
	"workspace escape/guest root plants a relative link moved towards the top": "issue 29 item 2: as for the task user",
}
