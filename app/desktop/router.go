package desktop

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/app/api"
	"github.com/airlock-sandbox/airlock/app/service"
)

// PollWindow is how long a streaming request (/v1/events, ?follow=1)
// stays open without news in a window that cannot stream: it then ends,
// and the UI asks again (long polling). A request with news ends
// pollLinger after its first line, so what arrives together comes
// together.
const (
	PollWindow = time.Second
	pollLinger = 50 * time.Millisecond
)

// StreamHeader is set on streaming answers cut short, so a UI that reads
// it knows to ask again rather than report a lost connection.
const StreamHeader = "X-Airlock-Stream"

// StreamsSupported reports whether a streamed answer reaches the page as
// it is written, without holding up the page's other requests, in the
// webview of goos. Wails v2 on Windows collects the whole body before
// handing it to WebView2 (pkg/assetserver/webview/responsewriter_windows.go).
// On Linux (WebKitGTK 4.1, 2.50) the body goes through a pipe, but while
// one answer is open the page receives no other: the UI sat at
// "Connecting" with its status, tasks and egress answers written (seen
// under Xvfb). On macOS each write is passed on (didReceiveData); not yet
// seen on a Mac.
func StreamsSupported(goos string) bool { return goos == "darwin" }

// Handler is what the window loads: the control API under /v1/ and the
// web UI (frontend.Handler) for everything else. With
// core == nil the API answers 503 with unavailable as the reason, so the
// window can still say what is wrong. Without streams, streaming requests
// end after PollWindow.
func Handler(core service.Core, unavailable error, ui http.Handler, streams bool, log *slog.Logger, opts ...api.Option) http.Handler {
	var apiH http.Handler
	if core != nil {
		apiH = api.Handler(core, log, opts...)
		if !streams {
			apiH = cutStreams(apiH, PollWindow, pollLinger)
		}
	} else {
		if unavailable == nil {
			unavailable = errors.New("the Airlock service is not available")
		}
		apiH = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write(jsonError(unavailable.Error(), "unavailable"))
		})
	}
	m := http.NewServeMux()
	m.Handle("/v1/", logRequests(apiH, log))
	m.Handle("/", ui)
	return m
}

// logRequests logs each API request when it ends, at debug level: the
// webview has no network panel in a production build.
func logRequests(next http.Handler, log *slog.Logger) http.Handler {
	if log == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		next.ServeHTTP(w, r)
		log.Debug("api", "method", r.Method, "path", r.URL.Path, "query", r.URL.RawQuery, "took", time.Since(start))
	})
}

// isStream reports whether r asks for a stream that only ends when the
// client goes away.
func isStream(r *http.Request) bool {
	return r.URL.Path == "/v1/events" || r.URL.Query().Get("follow") != ""
}

// cutStreams ends each streaming request after `after`, or `linger` after
// it first wrote a line.
func cutStreams(next http.Handler, after, linger time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isStream(r) {
			next.ServeHTTP(w, r)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), after)
		defer cancel()
		w.Header().Set(StreamHeader, "poll")
		next.ServeHTTP(&lingerWriter{ResponseWriter: w, linger: linger, cancel: cancel}, r.WithContext(ctx))
	})
}

// lingerWriter cancels its request linger after the first line with
// content (an empty line is a keepalive).
type lingerWriter struct {
	http.ResponseWriter
	linger  time.Duration
	cancel  context.CancelFunc
	started bool
}

func (w *lingerWriter) Write(b []byte) (int, error) {
	if !w.started && len(strings.TrimSpace(string(b))) > 0 {
		w.started = true
		time.AfterFunc(w.linger, w.cancel)
	}
	return w.ResponseWriter.Write(b)
}

func (w *lingerWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// jsonError is an answer shaped like the API's own errors.
func jsonError(msg, code string) []byte {
	b, _ := json.Marshal(struct {
		Error string `json:"error"`
		Code  string `json:"code"`
	}{msg, code})
	return append(b, '\n')
}
