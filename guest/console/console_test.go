package console

import (
	"bytes"
	"errors"
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
