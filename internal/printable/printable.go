// Package printable makes text that Airlock did not write itself (a host
// name the guest asked the gate for, a task's command line) safe to print
// on a terminal or in a log line.
package printable

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// String returns s with every character a terminal might act on written
// as a Go escape: C0 controls and DEL (\x1b, \r, \n: escape sequences such
// as OSC 52 clipboard writes, cursor moves, a forged "airlock:" line),
// C1 controls (\u009b is a CSI on some terminals), bidirectional and other
// invisible format characters (\u202e), separators other than the ASCII
// space, and bytes that are not UTF-8 (\xff). Letters, marks, digits,
// punctuation and symbols pass unchanged (unicode.IsPrint), so names in
// any script stay readable. A backslash is left as it is (Windows paths):
// the result is for reading, not for parsing back.
func String(s string) string {
	i := 0
	for i < len(s) && s[i] >= 0x20 && s[i] < 0x7f {
		i++
	}
	if i == len(s) {
		return s
	}
	const hex = "0123456789abcdef"
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:i])
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteString(`\x`)
			b.WriteByte(hex[s[i]>>4])
			b.WriteByte(hex[s[i]&0xf])
		case unicode.IsPrint(r):
			b.WriteString(s[i : i+n])
		default:
			q := strconv.QuoteRuneToASCII(r) // '\x1b', '\u202e'
			b.WriteString(q[1 : len(q)-1])
		}
		i += n
	}
	return b.String()
}
