// Package inwine holds the tests `make test-windows-wine` runs inside a
// fresh Wine prefix (inwine_test.go, build tags windows and wine): the
// installer, the VM service under Wine's service manager, the CLI, the
// desktop app and the uninstaller, in that order, on one prefix. The
// Linux side (../wine_test.go) makes the prefix and runs them.
package inwine
