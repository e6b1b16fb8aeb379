// Package console formats the guest's log lines for the serial console: one
// short line per record, "airlock-guest: msg key=value ...", the way kernel
// messages look, so a host reading the console log sees boot and agent
// events interleaved with the kernel's own.
package console

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// Prefix starts every line the guest writes to the console.
const Prefix = "airlock-guest: "

// NewLogger returns a logger writing short lines to w. Debug records are
// dropped unless debug is set; with debug every line also starts with the
// time since boot, "[    1.234567] ", as the kernel's own lines do, so the
// boot's steps can be timed from the console log. component, when not
// empty, follows the prefix.
func NewLogger(w io.Writer, component string, debug bool) *slog.Logger {
	h := &handler{out: &lockedWriter{w: w}, prefix: Prefix, level: slog.LevelInfo}
	if debug {
		h.level, h.clock = slog.LevelDebug, Uptime
	}
	if component != "" {
		h.prefix += component + ": "
	}
	return slog.New(h)
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) write(b []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.w.Write(b) // a console that cannot be written to has no better place to report it
}

type handler struct {
	out    *lockedWriter
	prefix string
	level  slog.Level
	clock  func() time.Duration // nil: no timestamps
	attrs  string               // preformatted " k=v" of WithAttrs
	group  string
}

func (h *handler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *handler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	if h.clock != nil {
		d := h.clock()
		fmt.Fprintf(&b, "[%5d.%06d] ", d/time.Second, d%time.Second/time.Microsecond)
	}
	b.WriteString(h.prefix)
	switch {
	case r.Level >= slog.LevelError:
		b.WriteString("error: ")
	case r.Level >= slog.LevelWarn:
		b.WriteString("warning: ")
	}
	b.WriteString(r.Message)
	b.WriteString(h.attrs)
	r.Attrs(func(a slog.Attr) bool {
		writeAttr(&b, h.group, a)
		return true
	})
	b.WriteByte('\n')
	h.out.write([]byte(b.String()))
	return nil
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	var b strings.Builder
	for _, a := range as {
		writeAttr(&b, h.group, a)
	}
	h2 := *h
	h2.attrs += b.String()
	return &h2
}

func (h *handler) WithGroup(name string) slog.Handler {
	h2 := *h
	h2.group += name + "."
	return &h2
}

func writeAttr(b *strings.Builder, group string, a slog.Attr) {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return
	}
	if a.Value.Kind() == slog.KindGroup {
		for _, g := range a.Value.Group() {
			writeAttr(b, group+a.Key+".", g)
		}
		return
	}
	v := a.Value.String()
	if v == "" || strings.ContainsAny(v, " \t\n\"=") {
		v = fmt.Sprintf("%q", v)
	}
	fmt.Fprintf(b, " %s%s=%s", group, a.Key, v)
}
