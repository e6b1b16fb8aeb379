package security

// This file has no build tag: the report's unit test (report_test.go)
// checks the committed report's known holes against this list.

// knownHoles are attacks that currently get through, by "family/name",
// with the issue and an explanation; their tests skip with KNOWN HOLE.
// A hole is a bug to fix: the list is only for the time between finding
// one and fixing it, and the report and the README name each one.
var knownHoles = map[string]string{}
