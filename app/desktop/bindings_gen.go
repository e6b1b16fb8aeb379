//go:build bindings

package desktop

// generatingBindings is set in the build `wails generate module` makes to
// read the bound methods: the app then opens nothing and starts no tray.
const generatingBindings = true
