package main

// The airlock command runs its VMs itself on every system; on macOS that
// means linking Apple's Virtualization framework, which vm/platform leaves
// to the program (the desktop app must not link it, and runs this command
// as its helper instead).
import _ "github.com/airlock-sandbox/airlock/vm/platform/withvz"
