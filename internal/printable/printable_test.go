package printable

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestString(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"plain name", "files.pythonhosted.org", "files.pythonhosted.org"},
		{"empty", "", ""},
		{"spaces and punctuation", `echo "a b" | wc -l; C:\Users\ann`, `echo "a b" | wc -l; C:\Users\ann`},
		{"other scripts", "bücher.example 日本語 ёлка", "bücher.example 日本語 ёлка"},
		{"OSC 52 clipboard write", "x\x1b]52;c;cm0gLXJmIH4=\x07.test", `x\x1b]52;c;cm0gLXJmIH4=\a.test`},
		{"cursor up and erase line", "a\x1b[1A\x1b[2Kb", `a\x1b[1A\x1b[2Kb`},
		{"forged line", "evil.test\r\nairlock: egress: allowed", `evil.test\r\nairlock: egress: allowed`},
		{"tab", "a\tb", `a\tb`},
		{"NUL and DEL", "a\x00b\x7f", `a\x00b\x7f`},
		{"C1 CSI, UTF-8 encoded", "a\u009b31mb", `a\u009b31mb`},
		{"bidi override", "moc.\u202elive", `moc.\u202elive`},
		{"bidi isolate", "a\u2066b\u2069", `a\u2066b\u2069`},
		{"line separator", "a\u2028b", `a\u2028b`},
		{"no-break space", "a\u00a0b", `a\u00a0b`},
		{"zero width space", "pay\u200bpal.com", `pay\u200bpal.com`},
		{"invalid UTF-8", "a\xff\xc3b", `a\xff\xc3b`},
		{"lone C1 byte", "a\x9bb", `a\x9bb`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := String(tt.in)
			if got != tt.want {
				t.Fatalf("String(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if String(got) != got {
				t.Fatalf("not idempotent: %q", got)
			}
		})
	}
}

// TestStringEveryByte: nothing below the space, DEL, nor a C1 control
// survives, whatever surrounds it, and the result is valid UTF-8.
func TestStringEveryByte(t *testing.T) {
	for c := 0; c < 256; c++ {
		for _, in := range []string{string(rune(c)), string([]byte{byte(c)}), "é" + string([]byte{byte(c)}) + "x"} {
			out := String(in)
			if !utf8.ValidString(out) {
				t.Fatalf("%q -> %q: not UTF-8", in, out)
			}
			for _, r := range out {
				if r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 {
					t.Fatalf("%q -> %q keeps %U", in, out, r)
				}
			}
		}
	}
}

func TestStringNoAllocForPlainASCII(t *testing.T) {
	s := strings.Repeat("a", 100)
	if n := testing.AllocsPerRun(100, func() { _ = String(s) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}
