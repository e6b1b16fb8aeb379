// Package inproc holds the macOS backend a program links in: vm/platform
// reads it, vm/platform/withvz sets it. It lives apart so that only a
// program that imports withvz links Apple's Virtualization framework.
package inproc

import "github.com/airlock-sandbox/airlock/vm"

// Darwin makes a machine with Apple's Virtualization framework in this
// process; nil when the program does not link it.
var Darwin func(vm.Config) (vm.Machine, error)
