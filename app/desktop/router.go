package desktop

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
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
// web UI (frontend.Handler) for everything else. With
// core == nil the API answers 503 with unavailable as the reason, so the
// window can still say what is wrong. Without streams, streaming requests
// end after PollWindow.
func Handler(core service.Core, unavailable error, ui http.Handler, streams bool, log *slog.Logger) http.Handler {
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
	m.Handle("/", ui)
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

// jsonError is an answer shaped like the API's own errors.
func jsonError(msg, code string) []byte {
	b, _ := json.Marshal(struct {
		Error string `json:"error"`
		Code  string `json:"code"`
	}{msg, code})
	return append(b, '\n')
}
