package desktop

// Bindings are the methods the web UI may call in the window, as
// window.go.desktop.Bindings (frontend/wailsjs/go/desktop). A browser has
// none of them, so the UI treats each as optional. They carry no logic:
// everything else goes through the control API.
type Bindings struct{ app *App }

// ChooseFolder shows the native folder dialog, starting in dir, and
// returns the chosen folder, or "" when the user cancelled. The UI then
// sets it with PUT /v1/workspace.
func (b *Bindings) ChooseFolder(title, dir string) (string, error) {
	return b.app.ChooseFolder(title, dir)
}

// ShowWindow brings the window to the front.
func (b *Bindings) ShowWindow() { b.app.ShowWindow() }

// Quit ends the app and stops the VM (closing the window only hides it).
func (b *Bindings) Quit() { b.app.Quit() }

// Streams reports whether streaming answers (/v1/events, ?follow=1) arrive
// as they are written in this window, without holding up other requests.
// When false (Windows, Linux), each stream ends soon after its first news
// or after PollWindow without any (answer header X-Airlock-Stream: poll),
// and the UI asks again at once, without treating it as a lost connection:
// a log follow from the offset it reached, events without re-reading the
// state.
func (b *Bindings) Streams() bool { return StreamsSupported(b.app.cfg.GOOS) }
