// Package skipped is in testdata, which the check skips: 2026-12-06.
package skipped
