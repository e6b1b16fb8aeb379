package desktop

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/service"
	"github.com/airlock-sandbox/airlock/app/session"
)

// waitingTerminals is a terminal with no new output: a read waits as long
// as its request lasts.
type waitingTerminals struct {
	*fakeCore
	service.Terminals
}

func (waitingTerminals) ReadTerminal(ctx context.Context, _ string, offset int64) (service.TerminalOutput, error) {
	<-ctx.Done()
	return service.TerminalOutput{Offset: offset, Next: offset}, nil
}

// TestTerminalOutputIsPolled: the window (a webview that cannot hold a
// WebSocket or a stream open) reads a terminal by request, and a read
// waiting for output ends within the poll window instead of holding up
// the page's other requests.
func TestTerminalOutputIsPolled(t *testing.T) {
	core := waitingTerminals{fakeCore: newFakeCore(session.StateRunning, "/ws")}
	h := Handler(core, nil, testUI, StreamsSupported("linux"), nil)
	start := time.Now()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/v1/terminals/t1/output?offset=7&follow=1", nil))
	if took := time.Since(start); took > PollWindow+time.Second {
		t.Fatalf("a quiet read took %s", took)
	}
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"next":7`) {
		t.Fatalf("answer %d %q", w.Code, w.Body.String())
	}
}
