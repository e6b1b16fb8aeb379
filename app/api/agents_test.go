//go:build !windows

package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/app/agents"
)

func TestAgentEndpoints(t *testing.T) {
	home := t.TempDir()
	host := agents.Host{GOOS: "linux", Home: home, Getenv: func(string) string { return "" },
		LookPath: func(string) (string, error) { return "", errors.New("none") }}
	if err := os.Mkdir(filepath.Join(home, ".cursor"), 0o700); err != nil {
		t.Fatal(err)
	}
	h := Handler(&fakeCore{}, nil, WithAgents(Agents{Host: host, Entry: agents.MCPEntry("/bin/airlock")}))
	do := func(method, path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
		return rec.Code, rec.Body.String()
	}
	list := func() map[string]agents.Status {
		code, body := do("GET", "/v1/agents")
		var sts []agents.Status
		if code != 200 || json.Unmarshal([]byte(body), &sts) != nil {
			t.Fatalf("%d %s", code, body)
		}
		m := map[string]agents.Status{}
		for _, s := range sts {
			m[s.Name] = s
		}
		return m
	}
	if st := list()["cursor"]; !st.Found || st.Connected || st.Path != filepath.Join(home, ".cursor", "mcp.json") {
		t.Fatalf("%+v", st)
	}
	if code, body := do("POST", "/v1/agents/cursor/connect"); code != 200 || !strings.Contains(body, `"changed":true`) {
		t.Fatalf("%d %s", code, body)
	}
	if b, _ := os.ReadFile(filepath.Join(home, ".cursor", "mcp.json")); !strings.Contains(string(b), `"/bin/airlock"`) {
		t.Fatalf("%s", b)
	}
	if st := list()["cursor"]; !st.Connected {
		t.Fatalf("%+v", st)
	}
	if code, body := do("POST", "/v1/agents/codex/connect"); code != 400 || !strings.Contains(body, "not found on this machine") {
		t.Fatalf("an agent that is not here: %d %s", code, body)
	}
	if code, _ := do("POST", "/v1/agents/emacs/connect"); code != 400 {
		t.Fatalf("unknown agent: %d", code)
	}
	if code, body := do("POST", "/v1/agents/cursor/disconnect"); code != 200 || !strings.Contains(body, `"changed":true`) {
		t.Fatalf("%d %s", code, body)
	}

	rec := httptest.NewRecorder()
	Handler(&fakeCore{}, nil).ServeHTTP(rec, httptest.NewRequest("GET", "/v1/agents", nil))
	if rec.Code != http.StatusNotImplemented {
		t.Fatalf("without agents: %d %s", rec.Code, rec.Body)
	}
}
