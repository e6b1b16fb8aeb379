package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/airlock-sandbox/airlock/build/internal/golist"
)

// Options say which binaries to check, for which target.
type Options struct {
	golist.Target
	// Patterns are go list package patterns; every main package among them
	// is a binary to check.
	Patterns []string
}

// Binary is one main package and what the cgo packages it links define.
type Binary struct {
	// ImportPath is the main package's.
	ImportPath string
	// CgoPackages are the linked packages with C, Objective-C or cgo
	// files, sorted.
	CgoPackages []string
	// Defs are the symbols each linked package defines, sorted.
	Defs map[string][]Symbol
	// Duplicates are the symbols more than one linked package defines.
	Duplicates []Duplicate
}

// Duplicate is one symbol defined by more than one package of a binary.
type Duplicate struct {
	Binary string
	Symbol Symbol
	// Where are "package (file)" for each definition, sorted by package.
	Where []string
	// Packages are the defining packages, sorted.
	Packages []string
}

func (d Duplicate) String() string {
	return fmt.Sprintf("%s in %s, defined by %s", d.Symbol, d.Binary, strings.Join(d.Where, " and "))
}

// listed is the part of go list -json output the check uses.
type listed struct {
	ImportPath string
	Name       string
	Dir        string
	DepOnly    bool
	Deps       []string
	CgoFiles   []string
	CFiles     []string
	MFiles     []string
	HFiles     []string
	Module     *struct{ Main bool }
	Error      *struct{ Err string }
}

// Check lists the target's packages and returns every main package of the
// module among the patterns, with the symbols its cgo packages define.
func Check(ctx context.Context, o Options) ([]Binary, error) {
	pkgs, err := goList(ctx, o)
	if err != nil {
		return nil, err
	}
	byPath := map[string]*listed{}
	for _, p := range pkgs {
		byPath[p.ImportPath] = p
	}
	defs := map[string]map[Symbol]string{} // package → symbol → file
	scan := func(p *listed) (map[Symbol]string, error) {
		if d, ok := defs[p.ImportPath]; ok {
			return d, nil
		}
		d, err := packageDefs(p)
		if err != nil {
			return nil, err
		}
		defs[p.ImportPath] = d
		return d, nil
	}
	var bins []Binary
	for _, main := range pkgs {
		if main.Name != "main" || main.DepOnly || main.Module == nil || !main.Module.Main {
			continue
		}
		if main.Error != nil {
			return nil, fmt.Errorf("%s: %s", main.ImportPath, main.Error.Err)
		}
		b := Binary{ImportPath: main.ImportPath, Defs: map[string][]Symbol{}}
		who := map[Symbol][]string{} // symbol → "package (file)"
		whoPkg := map[Symbol][]string{}
		for _, path := range append(slices.Clone(main.Deps), main.ImportPath) {
			p := byPath[path]
			if p == nil || len(p.CgoFiles)+len(p.CFiles)+len(p.MFiles) == 0 {
				continue
			}
			d, err := scan(p)
			if err != nil {
				return nil, err
			}
			b.CgoPackages = append(b.CgoPackages, path)
			for s, file := range d {
				b.Defs[path] = append(b.Defs[path], s)
				who[s] = append(who[s], path+" ("+file+")")
				whoPkg[s] = append(whoPkg[s], path)
			}
			sortSymbols(b.Defs[path])
		}
		sort.Strings(b.CgoPackages)
		for s, where := range who {
			if len(where) < 2 {
				continue
			}
			sort.Strings(where)
			pk := whoPkg[s]
			sort.Strings(pk)
			b.Duplicates = append(b.Duplicates, Duplicate{Binary: b.ImportPath, Symbol: s, Where: where, Packages: pk})
		}
		sort.Slice(b.Duplicates, func(i, j int) bool {
			return b.Duplicates[i].Symbol.String() < b.Duplicates[j].Symbol.String()
		})
		bins = append(bins, b)
	}
	sort.Slice(bins, func(i, j int) bool { return bins[i].ImportPath < bins[j].ImportPath })
	return bins, nil
}

func sortSymbols(s []Symbol) {
	sort.Slice(s, func(i, j int) bool { return s[i].String() < s[j].String() })
}

// packageDefs reads one package's C, Objective-C and header files and its
// cgo files, and returns each symbol defined with the first file that
// defines it. A symbol defined twice within one package is one symbol: a
// package that builds on its own links on its own.
func packageDefs(p *listed) (map[Symbol]string, error) {
	out := map[Symbol]string{}
	add := func(file string, syms []Symbol) {
		for _, s := range syms {
			if _, ok := out[s]; !ok {
				out[s] = file
			}
		}
	}
	for _, name := range slices.Concat(p.CFiles, p.MFiles, p.HFiles) {
		src, err := os.ReadFile(filepath.Join(p.Dir, name))
		if err != nil {
			return nil, err
		}
		add(name, Scan(src))
	}
	for _, name := range p.CgoFiles {
		src, err := os.ReadFile(filepath.Join(p.Dir, name))
		if err != nil {
			return nil, err
		}
		syms, err := ScanGo(name, src)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.ImportPath, err)
		}
		add(name, syms)
	}
	return out, nil
}

// goList runs go list -deps for the target; it downloads modules it needs
// (their C sources are read from the module cache).
func goList(ctx context.Context, o Options) ([]*listed, error) {
	return golist.Deps[listed](ctx, o.Target, o.Patterns)
}
