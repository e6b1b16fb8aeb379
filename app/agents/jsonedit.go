package agents

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/tailscale/hujson"
)

// editJSON sets the object at path (container, name) in the JSON document
// src to hold fields, keeping the entry's other keys, or removes it. Every
// byte outside what changes is kept; what is added is indented like the
// file. strict refuses comments and trailing commas, which the agent's own
// JSON parser would refuse.
func editJSON(src []byte, strict bool, path []string, fields []field, remove bool) ([]byte, error) {
	if len(bytes.TrimSpace(src)) == 0 {
		if remove {
			return src, nil
		}
		src = nil
	}
	nl := "\n"
	if bytes.Contains(src, []byte("\r\n")) {
		nl = "\r\n"
	}
	var root hujson.Value
	if src == nil {
		root = hujson.Value{Value: &hujson.Object{}, AfterExtra: hujson.Extra(nl)}
	} else {
		if strict {
			if err := strictJSON(src); err != nil {
				return nil, err
			}
		}
		v, err := hujson.Parse(src)
		if err != nil {
			return nil, fmt.Errorf("not valid JSON (%s)", strings.TrimPrefix(err.Error(), "hujson: "))
		}
		root = v
	}
	top, ok := root.Value.(*hujson.Object)
	if !ok {
		return nil, errors.New("not a JSON object at the top")
	}
	ed := jsonEditor{unit: indentUnit(top), nl: nl}

	ci := member(top, path[0])
	if remove {
		if ci < 0 {
			return src, nil
		}
		servers, ok := top.Members[ci].Value.Value.(*hujson.Object)
		if !ok {
			return src, nil
		}
		i := member(servers, path[1])
		if i < 0 {
			return src, nil
		}
		removeMember(servers, i)
		return root.Pack(), nil
	}

	if ci < 0 {
		ed.appendMember(top, 1, path[0], []field{{key: path[1], value: fields}})
		return root.Pack(), nil
	}
	servers, ok := top.Members[ci].Value.Value.(*hujson.Object)
	if !ok {
		return nil, fmt.Errorf("%q is not a JSON object; fix it, then run again", path[0])
	}
	i := member(servers, path[1])
	if i < 0 {
		ed.appendMember(servers, 2, path[1], fields)
		return root.Pack(), nil
	}
	entry, ok := servers.Members[i].Value.Value.(*hujson.Object)
	if !ok {
		servers.Members[i].Value.Value = ed.object(3, fields)
		return root.Pack(), nil
	}
	for _, f := range fields {
		j := member(entry, f.key)
		switch {
		case j < 0:
			ed.appendMember(entry, 3, f.key, f.value)
		case f.keep:
		case !sameJSON(entry.Members[j].Value, f.value):
			entry.Members[j].Value.Value = ed.value(3, f.value)
		}
	}
	return root.Pack(), nil
}

// strictJSON checks src the way a plain JSON parser reads it, naming the
// line of the first error.
func strictJSON(src []byte) error {
	var v any
	err := json.Unmarshal(src, &v)
	if err == nil {
		return nil
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("not valid JSON (line %d: %v)", 1+bytes.Count(src[:se.Offset], []byte("\n")), se)
	}
	return fmt.Errorf("not valid JSON (%v)", err)
}

// member is the index of obj's first member called name, or -1.
func member(obj *hujson.Object, name string) int {
	for i, m := range obj.Members {
		if lit, ok := m.Name.Value.(hujson.Literal); ok && lit.String() == name {
			return i
		}
	}
	return -1
}

// sameJSON says whether v holds the value want.
func sameJSON(v hujson.Value, want any) bool {
	v = v.Clone()
	v.Standardize()
	var got any
	if json.Unmarshal(v.Pack(), &got) != nil {
		return false
	}
	b, _ := json.Marshal(want)
	var w any
	_ = json.Unmarshal(b, &w)
	return reflect.DeepEqual(got, w)
}

// indentUnit is the file's indentation: what stands before the top
// object's first member on its line; two spaces when it has none.
func indentUnit(top *hujson.Object) string {
	if len(top.Members) > 0 {
		ws := string(top.Members[0].Name.BeforeExtra)
		if i := strings.LastIndexByte(ws, '\n'); i >= 0 {
			if u := ws[i+1:]; u != "" && strings.Trim(u, " \t") == "" {
				return u
			}
		}
	}
	return "  "
}

type jsonEditor struct{ unit, nl string }

func (ed jsonEditor) indent(depth int) string { return ed.nl + strings.Repeat(ed.unit, depth) }

// value is v as a JSON value whose lines after the first are indented for
// depth: objects of fields on several lines, anything else on one.
func (ed jsonEditor) value(depth int, v any) hujson.ValueTrimmed {
	if fs, ok := v.([]field); ok {
		return ed.object(depth, fs)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err) // strings, lists and maps of strings always encode
	}
	p, err := hujson.Parse(bytes.TrimSpace(buf.Bytes()))
	if err != nil {
		panic(err)
	}
	return p.Value
}

// object is fields as an object whose members are at depth.
func (ed jsonEditor) object(depth int, fields []field) *hujson.Object {
	obj := &hujson.Object{}
	for _, f := range fields {
		obj.Members = append(obj.Members, hujson.ObjectMember{
			Name:  hujson.Value{BeforeExtra: hujson.Extra(ed.indent(depth)), Value: hujson.String(f.key)},
			Value: hujson.Value{BeforeExtra: hujson.Extra(" "), Value: ed.value(depth+1, f.value)},
		})
	}
	obj.AfterExtra = hujson.Extra(ed.indent(depth - 1))
	return obj
}

// appendMember adds name: v as obj's last member at depth: on a line of
// its own, or, in an object written on one line, on that line in its
// style. A comment that followed the old last member on its line stays
// with it.
func (ed jsonEditor) appendMember(obj *hujson.Object, depth int, name string, v any) {
	if oneLine(obj) {
		first := obj.Members[0]
		m := hujson.ObjectMember{
			Name:  hujson.Value{BeforeExtra: first.Name.BeforeExtra, Value: hujson.String(name)},
			Value: hujson.Value{BeforeExtra: first.Value.BeforeExtra, Value: ed.compact(v)},
		}
		last := &obj.Members[len(obj.Members)-1].Value
		if last.AfterExtra != nil {
			m.Value.AfterExtra = hujson.Extra{}
		} else {
			last.AfterExtra = hujson.Extra{}
		}
		obj.Members = append(obj.Members, m)
		return
	}
	before := ed.indent(depth)
	trailingComma := false
	if n := len(obj.Members); n > 0 {
		last := &obj.Members[n-1].Value
		trailingComma = last.AfterExtra != nil
		if !trailingComma {
			last.AfterExtra = hujson.Extra{}
		}
		// Whatever follows the last member on its line (a comment) stays
		// there, after its comma.
		rest := string(obj.AfterExtra)
		if i := strings.IndexByte(rest, '\n'); i > 0 && strings.TrimSpace(rest[:i]) != "" && !strings.Contains(rest[:i], "/*") {
			before = strings.TrimSuffix(rest[:i], "\r") + before
			obj.AfterExtra = hujson.Extra(ed.nl + rest[i+1:])
		}
	}
	if !bytes.ContainsRune(obj.AfterExtra, '\n') {
		obj.AfterExtra = hujson.Extra(strings.TrimRight(string(obj.AfterExtra), " \t") + ed.indent(depth-1))
	}
	m := hujson.ObjectMember{
		Name:  hujson.Value{BeforeExtra: hujson.Extra(before), Value: hujson.String(name)},
		Value: hujson.Value{BeforeExtra: hujson.Extra(" "), Value: ed.value(depth+1, v)},
	}
	if trailingComma {
		m.Value.AfterExtra = hujson.Extra{}
	}
	obj.Members = append(obj.Members, m)
}

// oneLine says whether obj has members and is written on one line.
func oneLine(obj *hujson.Object) bool {
	if len(obj.Members) == 0 || bytes.ContainsAny(obj.AfterExtra, "\r\n") {
		return false
	}
	for _, m := range obj.Members {
		if bytes.ContainsAny(m.Name.BeforeExtra, "\r\n") {
			return false
		}
	}
	return true
}

// compact is v written on one line, without spaces.
func (ed jsonEditor) compact(v any) hujson.ValueTrimmed {
	fs, ok := v.([]field)
	if !ok {
		return ed.value(0, v)
	}
	obj := &hujson.Object{}
	for _, f := range fs {
		obj.Members = append(obj.Members, hujson.ObjectMember{
			Name:  hujson.Value{Value: hujson.String(f.key)},
			Value: hujson.Value{Value: ed.compact(f.value)},
		})
	}
	return obj
}

// removeMember removes obj's member i with the comments and line before
// it, keeping the file's choice of a trailing comma.
func removeMember(obj *hujson.Object, i int) {
	n := len(obj.Members)
	trailingComma := obj.Members[n-1].Value.AfterExtra != nil
	// A comment on the line before the member, after the previous one's
	// comma, is the previous member's: it stays.
	keep := ""
	lead := string(obj.Members[i].Name.BeforeExtra)
	if j := strings.IndexByte(lead, '\n'); i > 0 && j > 0 && strings.TrimSpace(lead[:j]) != "" && !strings.Contains(lead[:j], "/*") {
		keep = strings.TrimSuffix(lead[:j], "\r")
	}
	obj.Members = append(obj.Members[:i], obj.Members[i+1:]...)
	defer func() {
		if keep == "" {
			return
		}
		if i < len(obj.Members) {
			obj.Members[i].Name.BeforeExtra = append(hujson.Extra(keep), obj.Members[i].Name.BeforeExtra...)
		} else {
			obj.AfterExtra = append(hujson.Extra(keep), obj.AfterExtra...)
		}
	}()
	if len(obj.Members) == 0 {
		if strings.TrimSpace(string(obj.AfterExtra)) == "" {
			obj.AfterExtra = nil
		}
		return
	}
	last := &obj.Members[len(obj.Members)-1].Value
	switch {
	case !trailingComma && last.AfterExtra != nil:
		obj.AfterExtra = append(last.AfterExtra, obj.AfterExtra...)
		last.AfterExtra = nil
	case trailingComma && last.AfterExtra == nil:
		last.AfterExtra = hujson.Extra{}
	}
}
