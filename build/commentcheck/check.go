package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Finding is one broken rule at a place.
type Finding struct {
	Path    string // a file, or a folder for a package rule
	Line    int    // in the file; 0 for a folder
	Message string
}

func (f Finding) String() string {
	if f.Line == 0 {
		return f.Path + ": " + f.Message
	}
	return fmt.Sprintf("%s:%d: %s", f.Path, f.Line, f.Message)
}

// month is a month's name or its abbreviation.
const month = `(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)`

// year is a year a comment could date itself by. The range keeps numbers
// such as port 2049 or 2048 bytes out.
const year = `(?:199\d|20[0-3]\d)`

// datePatterns find a date: year-month(-day), a day, a month and a year,
// a month (and a day) and a year, or a year after a word that makes it one ("in",
// "since", "as of" ...).
var datePatterns = []*regexp.Regexp{
	regexp.MustCompile(`\b` + year + `[-/](?:0[1-9]|1[0-2])(?:[-/](?:0[1-9]|[12]\d|3[01]))?\b`),
	regexp.MustCompile(`\b\d{1,2}\s+` + month + `\.?,?\s+` + year + `\b`),
	regexp.MustCompile(`\b` + month + `\.?\s+(?:\d{1,2}(?:st|nd|rd|th)?,?\s+)?` + year + `\b`),
	regexp.MustCompile(`(?i)\b(?:in|since|as of|until|till|before|after|during|early|late|mid-?|Q[1-4])\s+` + year + `\b(?:[^\w.-]|\.(?:\s|$)|$)`),
}

// Check reads the Go files under root and returns what breaks the rules,
// sorted by place.
func Check(root string) ([]Finding, error) {
	type pkg struct {
		name string
		docs []string // files with a package doc
	}
	pkgs := map[string]*pkg{} // by folder
	var out []Finding
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			n := d.Name()
			if path != root && (n == "testdata" || n == "node_modules" || n == "vendor" || strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		out = append(out, dates(fset, f)...)
		if strings.HasSuffix(path, "_test.go") {
			return nil
		}
		dir := filepath.Dir(path)
		p := pkgs[dir]
		if p == nil {
			p = &pkg{name: f.Name.Name}
			pkgs[dir] = p
		}
		if f.Doc != nil {
			p.docs = append(p.docs, filepath.Base(path))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for dir, p := range pkgs {
		switch len(p.docs) {
		case 0:
			out = append(out, Finding{dir, 0, fmt.Sprintf("package %s has no package doc comment: start one of its files with // Package %s ... (// Command ... for a program)", p.name, p.name)})
		case 1:
		default:
			sort.Strings(p.docs)
			out = append(out, Finding{dir, 0, fmt.Sprintf("package %s has %d package doc comments (%s): keep the one in doc.go or the main file and make the others ordinary comments, with a blank line before package", p.name, len(p.docs), strings.Join(p.docs, ", "))})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Path != out[j].Path {
			return out[i].Path < out[j].Path
		}
		return out[i].Line < out[j].Line
	})
	return out, nil
}

// dates returns a finding for each comment line of f that holds a date.
func dates(fset *token.FileSet, f *ast.File) []Finding {
	var out []Finding
	for _, cg := range f.Comments {
		for _, c := range cg.List {
			for i, line := range strings.Split(c.Text, "\n") {
				for _, re := range datePatterns {
					m := re.FindString(line)
					if m == "" {
						continue
					}
					pos := fset.Position(c.Slash)
					m = strings.TrimRight(m, " \t.,;:)")
					out = append(out, Finding{pos.Filename, pos.Line + i,
						fmt.Sprintf("date %q in a comment: say what is true now; measurements and history go in docs/performance.md or the commit message, which the comment may cite", m)})
					break
				}
			}
		}
	}
	return out
}
