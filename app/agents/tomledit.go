package agents

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/pelletier/go-toml/v2/unstable"
)

// tomlExpr is one top-level TOML expression: a table header or a key and
// its value, with the table it belongs to and the bytes it covers.
type tomlExpr struct {
	header bool     // a [table] or [[array table]] header
	array  bool     // an [[array table]] header
	key    []string // the header's key, or the key-value's key within table
	table  []string // the table a key-value belongs to
	// start and end are the offsets of the expression's line (end after
	// its newline); valStart and valEnd the key-value's own bytes.
	start, end     int
	valStart       int
	valEnd         int
	value          *unstable.Node
	line           int
	strings        []string // the value, when it is a string or a list of strings
	isString, list bool
}

// editTOML sets the table path (mcp_servers.airlock) of the TOML document
// src to hold fields, keeping the table's other keys, or removes the table
// with its sub-tables. Only the lines that change are touched. An entry
// written another way (dotted keys, an inline table) is refused rather
// than rewritten.
func editTOML(src []byte, path []string, fields []field, remove bool) ([]byte, error) {
	exprs, err := parseTOML(src)
	if err != nil {
		return nil, err
	}
	nl := "\n"
	if bytes.Contains(src, []byte("\r\n")) {
		nl = "\r\n"
	}
	name := strings.Join(path, ".")
	var header *tomlExpr
	var own []*tomlExpr // the key-values directly in the table
	var regions [][2]int
	for i := range exprs {
		x := &exprs[i]
		full := append(slices.Clip(x.table), x.key...)
		switch {
		case x.header && !x.array && slices.Equal(x.key, path):
			header = x
			regions = append(regions, [2]int{x.start, x.end})
		case x.header && hasPrefix(x.key, path) && !x.array && len(x.key) > len(path):
			regions = append(regions, [2]int{x.start, x.end}) // a sub-table, such as .env
		case x.header && (hasPrefix(x.key, path) || hasPrefix(path, x.key)) && x.array:
			return nil, fmt.Errorf("%s is an array of tables (line %d), which Codex does not read as servers; fix it, then run again", strings.Join(x.key, "."), x.line)
		case !x.header && hasPrefix(x.table, path):
			if slices.Equal(x.table, path) {
				own = append(own, x)
			}
			regions[len(regions)-1][1] = x.end
		case !x.header && hasPrefix(full, path):
			return nil, fmt.Errorf("%s is set with dotted keys or an inline table (line %d); write it as a [%s] table or remove it, then run again", name, x.line, name)
		case !x.header && hasPrefix(path, full) && !remove:
			// A [mcp_servers.airlock] table may not extend an inline table.
			return nil, fmt.Errorf("%s is an inline table (line %d), to which a [%s] table cannot be added; write its servers as [%s.NAME] tables, then run again", strings.Join(full, "."), x.line, name, path[0])
		}
	}

	if remove {
		if header == nil {
			return src, nil
		}
		out := slices.Clone(src)
		for i := len(regions) - 1; i >= 0; i-- {
			start, end := regions[i][0], regions[i][1]
			// Take one blank line before the table along when a blank line
			// or the end of the file follows, so that adding and removing
			// the entry gives back the file as it was.
			if before := blankLineBefore(out, start); before >= 0 && (end == len(out) || blankLineAt(out, end)) {
				start = before
			}
			// At the top of the file, the blank lines after it go too.
			for start == 0 && end < len(out) && blankLineAt(out, end) {
				end = lineEnd(out, end)
			}
			out = append(out[:start], out[end:]...)
		}
		return out, nil
	}

	if header == nil {
		out := slices.Clone(src)
		if len(bytes.TrimSpace(out)) == 0 {
			out = nil
		}
		if len(out) > 0 {
			if !bytes.HasSuffix(out, []byte("\n")) {
				out = append(out, nl...)
			}
			if !bytes.HasSuffix(out, []byte(nl+nl)) {
				out = append(out, nl...)
			}
		}
		out = append(out, "["+tomlKey(path)+"]"+nl...)
		for _, f := range fields {
			out = append(out, f.key+" = "+tomlValue(f.value)+nl...)
		}
		return out, nil
	}

	type edit struct {
		start, end int
		text       string
	}
	var edits []edit
	insertAt := header.end
	if len(own) > 0 {
		insertAt = own[len(own)-1].end
	}
	for _, f := range fields {
		i := slices.IndexFunc(own, func(x *tomlExpr) bool { return len(x.key) == 1 && x.key[0] == f.key })
		switch {
		case i < 0:
			edits = append(edits, edit{insertAt, insertAt, f.key + " = " + tomlValue(f.value) + nl})
		case !f.keep && !own[i].holds(f.value):
			edits = append(edits, edit{own[i].valStart, own[i].valEnd, f.key + " = " + tomlValue(f.value)})
		}
	}
	sort.SliceStable(edits, func(a, b int) bool { return edits[a].start < edits[b].start })
	var out []byte
	last := 0
	for _, e := range edits {
		out = append(out, src[last:e.start]...)
		out = append(out, e.text...)
		last = e.end
	}
	if edits == nil {
		return src, nil
	}
	return append(out, src[last:]...), nil
}

func hasPrefix(key, prefix []string) bool {
	return len(key) >= len(prefix) && slices.Equal(key[:len(prefix)], prefix)
}

// holds says whether the key-value's value is v.
func (x *tomlExpr) holds(v any) bool {
	switch v := v.(type) {
	case string:
		return x.isString && len(x.strings) == 1 && x.strings[0] == v
	case []string:
		return x.list && slices.Equal(x.strings, v)
	}
	return false
}

// parseTOML lists src's top-level expressions, or says where it does not
// parse.
func parseTOML(src []byte) ([]tomlExpr, error) {
	p := unstable.Parser{}
	p.Reset(src)
	var out []tomlExpr
	var table []string
	for p.NextExpression() {
		n := p.Expression()
		x := tomlExpr{table: table}
		it := n.Key()
		for it.Next() {
			x.key = append(x.key, string(it.Node().Data))
		}
		first := n.Key()
		first.Next()
		keyOff := int(first.Node().Raw.Offset)
		switch n.Kind {
		case unstable.Table, unstable.ArrayTable:
			x.header, x.array = true, n.Kind == unstable.ArrayTable
			x.table = nil
			table = x.key
			x.start = lineStart(src, keyOff)
			x.end = lineEnd(src, keyOff)
		case unstable.KeyValue:
			x.valStart = int(n.Raw.Offset)
			x.valEnd = int(n.Raw.Offset + n.Raw.Length)
			x.start = lineStart(src, x.valStart)
			x.end = lineEnd(src, max(x.valEnd-1, x.valStart))
			v := n.Value()
			x.value = v
			switch v.Kind {
			case unstable.String:
				x.isString, x.strings = true, []string{string(v.Data)}
			case unstable.Array:
				x.list = true
				x.strings = []string{}
				ch := v.Children()
				for ch.Next() {
					if ch.Node().Kind != unstable.String {
						x.list = false
						break
					}
					x.strings = append(x.strings, string(ch.Node().Data))
				}
			}
		default:
			continue
		}
		x.line = 1 + bytes.Count(src[:x.start], []byte("\n"))
		out = append(out, x)
	}
	if err := p.Error(); err != nil {
		var perr *unstable.ParserError
		if errors.As(err, &perr) && perr.Highlight != nil {
			return nil, fmt.Errorf("not valid TOML (line %d: %s)", p.Shape(p.Range(perr.Highlight)).Start.Line, perr.Message)
		}
		return nil, fmt.Errorf("not valid TOML (%v)", err)
	}
	return out, nil
}

func lineStart(b []byte, off int) int { return bytes.LastIndexByte(b[:off], '\n') + 1 }

func lineEnd(b []byte, off int) int {
	if i := bytes.IndexByte(b[off:], '\n'); i >= 0 {
		return off + i + 1
	}
	return len(b)
}

// blankLineBefore is the start of the blank line that ends just before
// off, or -1.
func blankLineBefore(b []byte, off int) int {
	if off == 0 || b[off-1] != '\n' {
		return -1
	}
	s := lineStart(b, off-1)
	if strings.TrimSpace(string(b[s:off])) != "" {
		return -1
	}
	return s
}

// blankLineAt says whether the line at off is blank.
func blankLineAt(b []byte, off int) bool {
	return strings.TrimSpace(string(b[off:lineEnd(b, off)])) == ""
}

// tomlKey writes a dotted key, quoting the parts that need it.
func tomlKey(path []string) string {
	parts := make([]string, len(path))
	for i, p := range path {
		bare := p != ""
		for _, r := range p {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				bare = false
			}
		}
		if bare {
			parts[i] = p
		} else {
			parts[i] = tomlString(p)
		}
	}
	return strings.Join(parts, ".")
}

func tomlValue(v any) string {
	switch v := v.(type) {
	case string:
		return tomlString(v)
	case []string:
		q := make([]string, len(v))
		for i, s := range v {
			q[i] = tomlString(s)
		}
		return "[" + strings.Join(q, ", ") + "]"
	case map[string]string:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		q := make([]string, len(keys))
		for i, k := range keys {
			q[i] = tomlKey([]string{k}) + " = " + tomlString(v[k])
		}
		if len(q) == 0 {
			return "{}"
		}
		return "{ " + strings.Join(q, ", ") + " }"
	}
	panic(fmt.Sprintf("agents: no TOML for %T", v))
}

// tomlString is s as a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			b.WriteString(`\u` + fmt.Sprintf("%04X", r))
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
