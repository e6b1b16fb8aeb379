package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
)

// Kind is what a global name is to the linker or the Objective-C runtime.
type Kind string

// The kinds of names a cgo package defines.
const (
	// ObjCClass is an @implementation: the object file defines
	// _OBJC_CLASS_$_<name>, and two of them in one binary fail to link
	// ("duplicate symbol '_OBJC_CLASS_$_AppDelegate'").
	ObjCClass Kind = "objc class"
	// ObjCCategory is an @implementation Class (Category). Its symbols are
	// private, so a duplicate links, but which of the two methods the
	// runtime keeps is undefined: a duplicate is still a bug.
	ObjCCategory Kind = "objc category"
	// CSymbol is a function or variable with external linkage (not
	// static, not a declaration), or a Go function exported to C
	// (//export name).
	CSymbol Kind = "C symbol"
)

// Symbol is one global name a source file defines.
type Symbol struct {
	Kind Kind
	Name string
}

func (s Symbol) String() string { return string(s.Kind) + " " + s.Name }

// Scan returns the Objective-C classes and categories, and the C functions
// and variables with external linkage that C or Objective-C source
// defines. It is a scanner, not a compiler: it reads what the file says at
// file scope, outside any @interface, @protocol or @implementation block,
// and takes both branches of every #if. That is exact for the code cgo
// packages carry (vz, Wails, systray), and a conditional definition is
// counted rather than missed.
func Scan(src []byte) []Symbol {
	toks := tokenize(string(src))
	var out []Symbol
	var decl []string // the tokens of the file-scope declaration being read
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		switch t {
		case "@implementation":
			decl = nil
			if i+1 < len(toks) && isIdent(toks[i+1]) {
				name := toks[i+1]
				if i+4 < len(toks) && toks[i+2] == "(" && isIdent(toks[i+3]) && toks[i+4] == ")" {
					out = append(out, Symbol{ObjCCategory, name + "(" + toks[i+3] + ")"})
				} else {
					out = append(out, Symbol{ObjCClass, name})
				}
			}
			i = skipTo(toks, i, "@end")
		case "@interface", "@protocol":
			decl = nil
			// "@protocol P;" and "@protocol P, Q;" only declare.
			j := i + 1
			for j < len(toks) && (isIdent(toks[j]) || toks[j] == ",") {
				j++
			}
			if t == "@protocol" && j < len(toks) && toks[j] == ";" {
				i = j
				continue
			}
			i = skipTo(toks, i, "@end")
		case "@class", "@import", "@compatibility_alias":
			decl = nil
			i = skipTo(toks, i, ";")
		case "@end":
			decl = nil
		case ";":
			out = append(out, variables(decl)...)
			decl = nil
		case "{":
			if isFunction(decl) {
				if name, ok := function(decl); ok {
					out = append(out, Symbol{CSymbol, name})
				}
				decl = nil
				i = skipBlock(toks, i)
				continue
			}
			// A struct, union or enum body, or an initializer: the
			// declaration goes on after it.
			i = skipBlock(toks, i)
			decl = append(decl, "{}")
		case "}":
			// Unbalanced (a brace inside an #if branch): start afresh.
			decl = nil
		default:
			decl = append(decl, t)
		}
	}
	return out
}

// isFunction reports whether decl, followed by "{", starts a function
// body: "void f(void)", or "void f(void) API_AVAILABLE(macos(12))", and
// not an initializer.
func isFunction(decl []string) bool {
	return len(decl) > 0 && decl[len(decl)-1] == ")" && !contains(decl, "=") && !contains(decl, "typedef")
}

// function returns the name of the function decl defines (see
// isFunction), when it has external linkage.
func function(decl []string) (string, bool) {
	if internal(decl) {
		return "", false
	}
	return firstCallee(decl)
}

// firstCallee is the identifier before the first parenthesis at depth 0
// that is not an attribute: the function's name.
func firstCallee(decl []string) (string, bool) {
	for i := 0; i < len(decl); i++ {
		if decl[i] != "(" || i == 0 {
			continue
		}
		prev := decl[i-1]
		if prev == "__attribute__" || prev == "__declspec" || prev == "__asm__" || prev == "asm" {
			i = skipParens(decl, i)
			continue
		}
		if i+1 < len(decl) && (decl[i+1] == "*" || decl[i+1] == "^") {
			// "T (*f)(void)": a pointer to a function, not a function.
			return "", false
		}
		if isIdent(prev) && !keyword[prev] {
			return prev, true
		}
		return "", false
	}
	return "", false
}

// variables are the names decl (followed by ";") defines with external
// linkage: none for a typedef, an extern or static declaration, or a
// function prototype.
func variables(decl []string) []Symbol {
	if len(decl) == 0 || internal(decl) || contains(decl, "typedef") || contains(decl, "extern") {
		return nil
	}
	var out []Symbol
	for _, d := range splitTop(decl) {
		// A prototype: "int f(void)"; a pointer to a function,
		// "void (*f)(void)", is a variable.
		if name, ok := firstCallee(d); ok && !contains(d, "=") && name != "" {
			continue
		}
		if name := declarator(d); name != "" {
			out = append(out, Symbol{CSymbol, name})
		}
	}
	return out
}

// declarator is the name one declarator defines: the last identifier
// before its initializer, array bounds or parameters, or for a pointer to
// a function ("void (*f)(int)") the one inside the first parentheses.
func declarator(d []string) string {
	name := ""
	for i := 0; i < len(d); i++ {
		switch t := d[i]; {
		case t == "(" && i+1 < len(d) && (d[i+1] == "*" || d[i+1] == "^"):
			for _, u := range d[i+1:] {
				if isIdent(u) && !keyword[u] {
					return u
				}
			}
			return ""
		case t == "=" || t == "[" || t == "(":
			return name
		case t == "__attribute__" && i+1 < len(d) && d[i+1] == "(":
			i = skipParens(d, i+1)
		case t == "{}":
			// "struct S {...} v": the name follows.
			name = ""
		case isIdent(t) && !keyword[t]:
			name = t
		}
	}
	return name
}

// splitTop splits decl at commas outside parentheses: "int a, b = f(1, 2)"
// is two declarators. The first carries the type.
func splitTop(decl []string) [][]string {
	var out [][]string
	depth, start := 0, 0
	for i, t := range decl {
		switch t {
		case "(", "[":
			depth++
		case ")", "]":
			depth--
		case ",":
			if depth == 0 {
				out = append(out, decl[start:i])
				start = i + 1
			}
		}
	}
	return append(out, decl[start:])
}

// internal reports whether decl has internal linkage, or emits no symbol:
// static, or C99 inline without extern (what clang compiles by default).
func internal(decl []string) bool {
	return contains(decl, "static") || (contains(decl, "inline") || contains(decl, "__inline__")) && !contains(decl, "extern")
}

func contains(toks []string, s string) bool {
	for _, t := range toks {
		if t == s {
			return true
		}
	}
	return false
}

// keyword are the C and Objective-C words that are never a defined name.
var keyword = map[string]bool{
	"const": true, "volatile": true, "restrict": true, "__restrict": true, "unsigned": true, "signed": true,
	"int": true, "char": true, "short": true, "long": true, "float": true, "double": true, "void": true,
	"struct": true, "union": true, "enum": true, "extern": true, "static": true, "inline": true,
	"_Nullable": true, "_Nonnull": true, "__nullable": true, "__nonnull": true, "__strong": true,
	"__weak": true, "__unsafe_unretained": true, "__block": true, "_Bool": true, "bool": true,
	"return": true, "if": true, "while": true, "for": true, "switch": true, "sizeof": true,
}

// skipTo returns the index of the first tok == end after i (or the last
// index).
func skipTo(toks []string, i int, end string) int {
	for j := i + 1; j < len(toks); j++ {
		if toks[j] == end {
			return j
		}
	}
	return len(toks) - 1
}

// skipBlock returns the index of the "}" that closes the "{" at i.
func skipBlock(toks []string, i int) int {
	depth := 0
	for j := i; j < len(toks); j++ {
		switch toks[j] {
		case "{":
			depth++
		case "}":
			depth--
			if depth == 0 {
				return j
			}
		}
	}
	return len(toks) - 1
}

// skipParens returns the index of the ")" that closes the "(" at i.
func skipParens(toks []string, i int) int {
	depth := 0
	for j := i; j < len(toks); j++ {
		switch toks[j] {
		case "(":
			depth++
		case ")":
			depth--
			if depth == 0 {
				return j
			}
		}
	}
	return len(toks) - 1
}

func isIdent(t string) bool {
	if t == "" {
		return false
	}
	for i, r := range t {
		switch {
		case r == '_' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z':
		case i > 0 && '0' <= r && r <= '9':
		default:
			return false
		}
	}
	return true
}

// tokenize splits C or Objective-C source into identifiers, numbers,
// @keywords and single punctuation characters. Comments, string and
// character literals and preprocessor lines are dropped.
func tokenize(s string) []string {
	var toks []string
	lineStart := true
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\n':
			lineStart = true
			i++
			continue
		case c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v':
			i++
			continue
		case c == '#' && lineStart:
			// A directive, with its continuation lines.
			for i < len(s) && s[i] != '\n' {
				if s[i] == '\\' && i+1 < len(s) && s[i+1] == '\n' {
					i++
				} else if strings.HasPrefix(s[i:], "/*") {
					end := strings.Index(s[i+2:], "*/")
					if end < 0 {
						return toks
					}
					i += end + 3
					continue
				}
				i++
			}
			continue
		}
		lineStart = false
		switch {
		case strings.HasPrefix(s[i:], "//"):
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case strings.HasPrefix(s[i:], "/*"):
			end := strings.Index(s[i+2:], "*/")
			if end < 0 {
				return toks
			}
			i += end + 4
		case c == '"' || c == '\'':
			i++
			for i < len(s) && s[i] != c && s[i] != '\n' {
				if s[i] == '\\' {
					i++
				}
				i++
			}
			i++
		case c == '@' && i+1 < len(s) && isIdentByte(s[i+1]):
			j := i + 1
			for j < len(s) && isIdentByte(s[j]) {
				j++
			}
			toks = append(toks, s[i:j])
			i = j
		case isIdentByte(c):
			j := i
			for j < len(s) && isIdentByte(s[j]) {
				j++
			}
			toks = append(toks, s[i:j])
			i = j
		default:
			toks = append(toks, string(c))
			i++
		}
	}
	return toks
}

func isIdentByte(c byte) bool {
	return c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// ScanGo returns what a cgo Go file adds to the link: the definitions in
// its preamble (the comment above import "C"), and the functions it
// exports to C (//export name).
func ScanGo(filename string, src []byte) ([]Symbol, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filename, src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var out []Symbol
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.IMPORT {
			continue
		}
		for _, spec := range g.Specs {
			is := spec.(*ast.ImportSpec)
			if is.Path.Value != `"C"` {
				continue
			}
			doc := is.Doc
			if doc == nil {
				doc = g.Doc
			}
			if doc != nil {
				out = append(out, Scan([]byte(preamble(doc)))...)
			}
		}
	}
	for _, cg := range f.Comments {
		for _, c := range cg.List {
			if name, ok := strings.CutPrefix(c.Text, "//export "); ok {
				if name = strings.TrimSpace(name); isIdent(name) {
					out = append(out, Symbol{CSymbol, name})
				}
			}
		}
	}
	return out, nil
}

// preamble is the C text of a cgo preamble, without the comment markers
// and without #cgo lines (which the tokenizer drops as directives anyway).
func preamble(doc *ast.CommentGroup) string {
	var b strings.Builder
	for _, c := range doc.List {
		t := c.Text
		switch {
		case strings.HasPrefix(t, "//"):
			b.WriteString(t[2:])
		case strings.HasPrefix(t, "/*"):
			b.WriteString(strings.TrimSuffix(t[2:], "*/"))
		}
		b.WriteByte('\n')
	}
	return b.String()
}
