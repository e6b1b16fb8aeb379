// Package tray tests the Linux desktop app's tray icon where a user sees
// it (tray_test.go, build tag xvfb; part of `make test-desktop`): under
// Xvfb, on a D-Bus session of its own, in Xfce's panel, whose systray
// plugin hosts StatusNotifierItems. It screenshots the icon and its open
// menu, reads the menu's items over D-Bus (com.canonical.dbusmenu; menu.go
// decodes them and reads the sandboxes they list), and clicks Open, Stop
// and Quit there.
package tray
