package mcp

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports keeps the server an adapter over service.Core: it may use
// the core's types, but not the service's implementation, the control
// API, the VM or anything that changes settings.
func TestImports(t *testing.T) {
	allowed := map[string]bool{
		"github.com/airlock-sandbox/airlock/app/service":        true, // Core and its request types
		"github.com/airlock-sandbox/airlock/app/tasks":          true, // Task, Chunk
		"github.com/airlock-sandbox/airlock/app/egress":         true, // Decision
		"github.com/airlock-sandbox/airlock/app/changes":        true, // Entry, Mode (types only)
		"github.com/airlock-sandbox/airlock/internal/printable": true, // escapes what the guest wrote
		"github.com/airlock-sandbox/airlock/guest/api":          true, // /workspace, the task user
		"github.com/modelcontextprotocol/go-sdk/mcp":            true,
		"github.com/modelcontextprotocol/go-sdk/jsonrpc":        true, // request ids, for cancelFilter
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if strings.Contains(p, ".") && !allowed[p] {
				t.Errorf("%s imports %s", name, p)
			}
		}
	}
}
