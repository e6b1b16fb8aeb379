package computecore

import (
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"strings"
	"testing"
)

// TestPointersReachTheCall reads the Windows bindings (which cannot run
// here) for the rule that keeps the UTF-16 arguments and out-parameters
// alive: a Go pointer becomes a uintptr only inside the argument list of
// a LazyProc.Call, whose //go:uintptrescapes keeps the memory alive and
// in place until the call returns (unsafe.Pointer rule 4). A helper that
// returns uintptr(unsafe.Pointer(p)), or any argument computed by a
// function call, leaves the pointer dead during the call, and the
// collector may free it while computecore.dll reads it.
func TestPointersReachTheCall(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "computecore_windows.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	src := func(n ast.Node) string {
		var b strings.Builder
		_ = printer.Fprint(&b, fset, n)
		return b.String()
	}
	inCall := map[ast.Expr]bool{}
	calls := 0
	ast.Inspect(f, func(n ast.Node) bool {
		c, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		if sel, ok := c.Fun.(*ast.SelectorExpr); !ok || sel.Sel.Name != "Call" {
			return true
		}
		calls++
		for _, a := range c.Args {
			inCall[a] = true
			if ac, ok := a.(*ast.CallExpr); ok && !isConversion(ac) {
				t.Errorf("%s: argument %s is computed by a call, which hides a pointer from the Call; convert it in place",
					fset.Position(a.Pos()), src(a))
			}
		}
		return true
	})
	if calls < 10 {
		t.Fatalf("found %d DLL calls: is this still the bindings file?", calls)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		if c, ok := n.(*ast.CallExpr); ok && isPointerToUintptr(c) && !inCall[c] {
			t.Errorf("%s: %s outside a Call's argument list: the pointer is not kept alive", fset.Position(c.Pos()), src(c))
		}
		return true
	})
}

// isConversion reports whether c converts to uintptr (a handle, a flag,
// a token or a pointer in place).
func isConversion(c *ast.CallExpr) bool {
	id, ok := c.Fun.(*ast.Ident)
	return ok && id.Name == "uintptr" && len(c.Args) == 1
}

// isPointerToUintptr reports whether c is uintptr(unsafe.Pointer(...)).
func isPointerToUintptr(c *ast.CallExpr) bool {
	if !isConversion(c) {
		return false
	}
	in, ok := c.Args[0].(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := in.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == "unsafe" && sel.Sel.Name == "Pointer"
}
