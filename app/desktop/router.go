package desktop

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/app/api"
	"github.com/airlock-sandbox/airlock/app/service"
)

// PollWindow is how long a streaming request (/v1/events, ?follow=1) stays
// open in a window whose webview buffers responses: the stream ends after
// it, with what arrived, and the UI asks again (long polling).
const PollWindow = 2 * time.Second

// StreamHeader is set on streaming answers cut after PollWindow, so a UI
// that reads it knows to reconnect rather than report a closed stream.
const StreamHeader = "X-Airlock-Stream"

// StreamsSupported reports whether the webview on goos hands a streamed
// response to the page as it is written. Wails v2 on Windows collects the
// whole body before giving it to WebView2 (pkg/assetserver/webview
// responsewriter_windows.go); on macOS each write is passed on
// (didReceiveData), and on Linux the body goes through a pipe.
func StreamsSupported(goos string) bool { return goos != "windows" }

// Handler is what the window loads: the control API under /v1/ and the
// web UI (ui's index.html and assets) for everything else. With
// core == nil the API answers 503 with unavailable as the reason, so the
// window can still say what is wrong. Without streams, streaming requests
// end after PollWindow.
func Handler(core service.Core, unavailable error, ui fs.FS, streams bool, log *slog.Logger) http.Handler {
	var apiH http.Handler
	if core != nil {
		apiH = api.Handler(core, log)
		if !streams {
			apiH = cutStreams(apiH, PollWindow)
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
	m.Handle("/v1/", apiH)
	m.Handle("/", uiHandler(ui))
	return m
}

// isStream reports whether r asks for a stream that only ends when the
// client goes away.
func isStream(r *http.Request) bool {
	return r.URL.Path == "/v1/events" || r.URL.Query().Get("follow") != ""
}

func cutStreams(next http.Handler, after time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isStream(r) {
			next.ServeHTTP(w, r)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), after)
		defer cancel()
		w.Header().Set(StreamHeader, "poll")
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// uiHandler serves the files of ui, and index.html for any other path so
// the UI's own routes survive a reload. An empty ui (the UI not built)
// gets a page that says how to build it.
func uiHandler(ui fs.FS) http.Handler {
	files := http.FileServerFS(ui)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := strings.TrimPrefix(r.URL.Path, "/")
		if p != "" && p != "index.html" {
			if st, err := fs.Stat(ui, p); err == nil && !st.IsDir() {
				files.ServeHTTP(w, r)
				return
			}
		}
		index, err := fs.ReadFile(ui, "index.html")
		if err != nil {
			index = []byte(notBuiltPage)
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(index)
	})
}

const notBuiltPage = `<!doctype html>
<html><head><meta charset="utf-8"><title>Airlock</title></head>
<body style="font-family: sans-serif; margin: 3em; background: #f6f8fa; color: #1f2328">
<h1 style="color: #1f6feb">Airlock</h1>
<p>The web UI was not built into this binary. Build it with <code>make frontend</code>, then <code>make desktop</code>.</p>
</body></html>
`

// jsonError is an answer shaped like the API's own errors.
func jsonError(msg, code string) []byte {
	b, _ := json.Marshal(struct {
		Error string `json:"error"`
		Code  string `json:"code"`
	}{msg, code})
	return append(b, '\n')
}
