package cli

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// stdinTrap fails the test when the value is read: a mistake in the
// arguments must be reported before the user is asked for the value.
type stdinTrap struct{ t *testing.T }

func (s stdinTrap) Read([]byte) (int, error) {
	s.t.Error("stdin was read before the arguments were checked")
	return 0, io.EOF
}

func TestSecretSetChecksArgumentsBeforeStdin(t *testing.T) {
	// A home of its own: no service to find, no settings to touch.
	for _, v := range []string{"HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR", "XDG_CACHE_HOME"} {
		t.Setenv(v, t.TempDir())
	}
	for name, args := range map[string][]string{
		"no host":  {"secret", "set", "API_TOKEN"},
		"bad name": {"secret", "set", "my.key", "--host", "api.example.com"},
	} {
		var o, e bytes.Buffer
		if code := Main(args, Stdio{In: stdinTrap{t}, Out: &o, Err: &e}); code != ExitAirlockError {
			t.Errorf("%s: exit %d", name, code)
		}
		if strings.Contains(e.String(), "placeholder") || !strings.Contains(e.String(), "secret") {
			t.Errorf("%s: %q", name, e.String())
		}
	}
}
