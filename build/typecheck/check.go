package main

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/build/internal/golist"
)

// Options say what to check.
type Options struct {
	golist.Target
	// Patterns are go list package patterns, such as ./... .
	Patterns []string
	Verbose  bool
}

// Result is what one Check found.
type Result struct {
	// Errors are this module's type and syntax errors, "file:line:col: msg",
	// in the order found, without duplicates.
	Errors []string
	// Checked counts this module's packages, WithTests those also checked
	// with their test files, Deps the other packages checked.
	Checked, WithTests, Deps int
	// DepErrors names the dependencies that had (ignored) errors.
	DepErrors []string
}

// listed is the part of go list -json output the checker uses.
type listed struct {
	ImportPath   string
	Name         string
	Dir          string
	Standard     bool
	DepOnly      bool
	GoFiles      []string
	CgoFiles     []string
	TestGoFiles  []string
	XTestGoFiles []string
	TestImports  []string
	XTestImports []string
	ImportMap    map[string]string
	Module       *struct {
		Path      string
		Main      bool
		GoVersion string
	}
	Error *struct{ Err string }
}

// ours reports whether p belongs to the main module.
func (p *listed) ours() bool { return p.Module != nil && p.Module.Main }

// Check lists the packages for the target and type-checks them.
func Check(ctx context.Context, o Options) (*Result, error) {
	pkgs, err := goList(ctx, o, o.Patterns)
	if err != nil {
		return nil, err
	}
	// Test files may import packages the code itself does not.
	seen := map[string]bool{}
	for _, p := range pkgs {
		seen[p.ImportPath] = true
	}
	var extra []string
	for _, p := range pkgs {
		if !p.ours() || p.DepOnly {
			continue
		}
		for _, imp := range slices.Concat(p.TestImports, p.XTestImports) {
			if imp != "C" && imp != "unsafe" && !seen[imp] && imp != p.ImportPath {
				seen[imp] = true
				extra = append(extra, imp)
			}
		}
	}
	if len(extra) > 0 {
		more, err := goList(ctx, o, extra)
		if err != nil {
			return nil, err
		}
		have := map[string]bool{}
		for _, p := range pkgs {
			have[p.ImportPath] = true
		}
		for _, p := range more {
			if !have[p.ImportPath] {
				p.DepOnly = true
				pkgs = append(pkgs, p)
				have[p.ImportPath] = true
			}
		}
	}

	c := &checker{
		fset:  token.NewFileSet(),
		sizes: types.SizesFor("gc", o.GOARCH),
		done:  map[string]*types.Package{},
		res:   &Result{},
		dup:   map[string]bool{},
		root:  o.Dir,
	}
	if c.root == "" {
		c.root, _ = os.Getwd()
	}
	if c.sizes == nil {
		return nil, fmt.Errorf("unknown architecture %q", o.GOARCH)
	}
	for _, p := range pkgs {
		c.check(p)
	}
	// Tests last: they may import any package of the module, and packages
	// only tests need.
	for _, p := range pkgs {
		if p.ours() && !p.DepOnly && c.done[p.ImportPath] != nil {
			c.checkTests(p)
		}
	}
	return c.res, nil
}

// goList runs go list -deps for the target; packages come dependencies
// first.
func goList(ctx context.Context, o Options, patterns []string) ([]*listed, error) {
	return golist.Deps[listed](ctx, o.Target, patterns)
}

type checker struct {
	fset  *token.FileSet
	sizes types.Sizes
	done  map[string]*types.Package
	res   *Result
	dup   map[string]bool
	root  string
}

// check type-checks p (and, for this module's packages, p with its tests)
// and records the package for its importers.
func (c *checker) check(p *listed) {
	if p.ImportPath == "unsafe" {
		c.done["unsafe"] = types.Unsafe
		return
	}
	ours := p.ours()
	if p.Error != nil {
		switch {
		case strings.Contains(p.Error.Err, "build constraints exclude all Go files"):
			return // nothing of it is built for this target
		case ours:
			c.report(p.Error.Err)
		default:
			c.res.DepErrors = append(c.res.DepErrors, p.ImportPath)
		}
	}
	files := slices.Concat(p.GoFiles, p.CgoFiles)
	if len(files) == 0 {
		return
	}
	pkg, nerr := c.checkFiles(p, p.ImportPath, files, nil, ours)
	c.done[p.ImportPath] = pkg
	if !ours {
		c.res.Deps++
		if nerr > 0 {
			c.res.DepErrors = append(c.res.DepErrors, p.ImportPath)
		}
		return
	}
	c.res.Checked++
}

// checkTests checks p with its in-package tests, then its external tests
// (package x_test), which import that test variant instead of the plain
// package.
func (c *checker) checkTests(p *listed) {
	if len(p.TestGoFiles)+len(p.XTestGoFiles) == 0 {
		return
	}
	c.res.WithTests++
	variant := c.done[p.ImportPath]
	if len(p.TestGoFiles) > 0 {
		variant, _ = c.checkFiles(p, p.ImportPath, slices.Concat(p.GoFiles, p.CgoFiles, p.TestGoFiles), nil, true)
	}
	if len(p.XTestGoFiles) > 0 {
		c.checkFiles(p, p.ImportPath+"_test", p.XTestGoFiles, map[string]*types.Package{p.ImportPath: variant}, true)
	}
}

// checkFiles parses and checks one package's files; it reports this
// module's errors and returns the package (never nil) and its error count.
// override resolves imports before the packages already checked.
func (c *checker) checkFiles(p *listed, path string, names []string, override map[string]*types.Package, ours bool) (*types.Package, int) {
	nerr := 0
	fail := func(err error) {
		nerr++
		if ours {
			c.report(err.Error())
		}
	}
	var files []*ast.File
	for _, name := range names {
		f, err := parser.ParseFile(c.fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			fail(err)
		}
		if f != nil {
			files = append(files, f)
		}
	}
	conf := types.Config{
		Importer:    &importer{done: c.done, importMap: p.ImportMap, override: override},
		FakeImportC: true,
		// Dependencies matter only for their declarations.
		IgnoreFuncBodies: !ours,
		Sizes:            c.sizes,
		Error:            fail,
	}
	if p.Module != nil && p.Module.GoVersion != "" {
		conf.GoVersion = "go" + p.Module.GoVersion
	}
	// Check returns a package, complete or not, even after errors.
	pkg, _ := conf.Check(path, c.fset, files, nil)
	return pkg, nerr
}

// report records one of this module's errors, once, with paths relative to
// the folder go list ran in.
func (c *checker) report(msg string) {
	if c.root != "" {
		if abs, err := filepath.Abs(c.root); err == nil {
			msg = strings.ReplaceAll(msg, abs+string(filepath.Separator), "")
		}
	}
	if c.dup[msg] {
		return
	}
	c.dup[msg] = true
	c.res.Errors = append(c.res.Errors, msg)
}

// importer hands out packages already checked; go list orders them so
// that every import is checked before its importers.
type importer struct {
	done      map[string]*types.Package
	importMap map[string]string
	override  map[string]*types.Package
}

func (im *importer) Import(path string) (*types.Package, error) {
	if p := im.override[path]; p != nil {
		return p, nil
	}
	if m, ok := im.importMap[path]; ok {
		path = m
	}
	if p := im.done[path]; p != nil {
		return p, nil
	}
	return nil, fmt.Errorf("package %s was not checked (missing from go list's output, or excluded for this target)", path)
}
