// Command airlock runs commands in a disposable Linux VM that sees one folder.
package main

import (
	"os"

	"github.com/airlock-sandbox/airlock/app/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], cli.Stdio{In: os.Stdin, Out: os.Stdout, Err: os.Stderr}))
}
