package console

import (
	"bytes"
	"errors"
	"regexp"
	"testing"
)

func TestNewLogger(t *testing.T) {
	var buf bytes.Buffer
	log := NewLogger(&buf, "agent", false)
	log.Debug("hidden")
	log.With("task", "t1").Info("started", "pid", 42, "argv", "sh -c x")
	log.Error("failed", "err", errors.New("boom"))
	want := "airlock-guest: agent: started task=t1 pid=42 argv=\"sh -c x\"\n" +
		"airlock-guest: agent: error: failed err=boom\n"
	if got := buf.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestDebugTimestamps(t *testing.T) {
	var buf bytes.Buffer
	log := NewLogger(&buf, "", true)
	log.Debug("mounted")
	got := buf.String()
	if !regexp.MustCompile(`^\[ *[0-9]+\.[0-9]{6}\] airlock-guest: mounted\n$`).MatchString(got) {
		t.Errorf("got %q, want a kernel-style timestamp before the prefix", got)
	}
}
