package security

// This file has no build tag: the report's unit test (report_test.go)
// checks the committed report's known holes against this list.

// knownHoles are attacks that currently get through, by "family/name",
// with the issue and an explanation; their tests skip with KNOWN HOLE.
// A hole is a bug to fix: the list is only for the time between finding
// one and fixing it, and the report and the README name each one.
var knownHoles = map[string]string{
	"workspace escape/the task user makes what the host's tools run where there was none: a .git file naming a prepared repository": "issue 29 item 2, direct mode only (with changes held the host flags these paths and never applies them by itself): the agent refuses mkdir, symlink, rename and link of .git, .envrc, .vscode and .idea at the folder's top, but a regular file made by open(O_CREAT) is not handed to it (doing every creating open for tasks would cost each one and run it with the agent's capabilities and terminal); the guard makes it read-only from the next task on",
	"workspace escape/the task user makes what the host's tools run where there was none: an .envrc written in place":               "issue 29 item 2, direct mode only (with changes held the host flags these paths and never applies them by itself): the agent refuses mkdir, symlink, rename and link of .git, .envrc, .vscode and .idea at the folder's top, but a regular file made by open(O_CREAT) is not handed to it (doing every creating open for tasks would cost each one and run it with the agent's capabilities and terminal); the guard makes it read-only from the next task on; direnv itself runs no new .envrc before `direnv allow`",
	"workspace escape/guest root makes what the host's tools run where there was none: a .git file naming a prepared repository":    "issue 29 item 2: as for the task user",
	"workspace escape/guest root makes what the host's tools run where there was none: an .envrc written in place":                  "issue 29 item 2: as for the task user",
}
