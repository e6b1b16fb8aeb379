//go:build xvfb

package tray

import (
	"bufio"
	"bytes"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

// The desktop app (AIRLOCK_DESKTOP_BIN, default build/bin/airlock-desktop,
// run from the repository root so it finds images/out, or from
// AIRLOCK_IMAGE_DIR) in Xfce's panel under Xvfb, on a D-Bus session and a
// home of its own. The screenshots go to AIRLOCK_TRAY_SHOTS (default
// build/bin): tray-icon.png (the panel with the icon) and tray-menu.png
// (its menu, opened by a right click). Needs Xvfb (xvfb), dbus-daemon
// (dbus-daemon), xfce4-panel, xdotool, xwininfo (x11-utils) and
// ImageMagick's import.

// panelSize is the height of the panel the test configures, in pixels.
const panelSize = 32

// panelConfig is one panel at the top of the screen holding only the
// systray plugin (which hosts StatusNotifierItems), as xfconfd reads it.
// Without a configuration the panel asks on screen which one to use.
var panelConfig = `<?xml version="1.0" encoding="UTF-8"?>
<channel name="xfce4-panel" version="1.0">
  <property name="configver" type="int" value="2"/>
  <property name="panels" type="array">
    <value type="int" value="1"/>
    <property name="panel-1" type="empty">
      <property name="position" type="string" value="p=6;x=0;y=0"/>
      <property name="length" type="uint" value="100"/>
      <property name="position-locked" type="bool" value="true"/>
      <property name="size" type="uint" value="` + strconv.Itoa(panelSize) + `"/>
      <property name="icon-size" type="uint" value="24"/>
      <property name="plugin-ids" type="array">
        <value type="int" value="1"/>
      </property>
    </property>
  </property>
  <property name="plugins" type="empty">
    <property name="plugin-1" type="string" value="systray"/>
  </property>
</channel>
`

func TestTray(t *testing.T) {
	begin := time.Now()
	for tool, pkg := range map[string]string{
		"Xvfb": "xvfb", "dbus-daemon": "dbus-daemon", "xfce4-panel": "xfce4-panel",
		"xdotool": "xdotool", "xwininfo": "x11-utils", "import": "imagemagick",
	} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found (apt-get install %s)", tool, pkg)
		}
	}
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := os.Getenv("AIRLOCK_DESKTOP_BIN")
	if bin == "" {
		bin = filepath.Join(root, "build/bin/airlock-desktop")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("the desktop app: %v (make desktop builds it)", err)
	}
	shots := os.Getenv("AIRLOCK_TRAY_SHOTS")
	if shots == "" {
		shots = filepath.Join(root, "build/bin")
	}
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}

	tmp := t.TempDir()
	t.Cleanup(func() {
		if t.Failed() {
			for _, name := range []string{"Xvfb", "dbus", "panel", "app"} {
				t.Logf("%s's output:\n%s", name, readLog(tmp, name))
			}
		}
	})
	home, work := filepath.Join(tmp, "home"), filepath.Join(tmp, "home", "work")
	config, run := filepath.Join(tmp, "config"), filepath.Join(tmp, "run")
	mustMkdir(t, work, 0o755)
	mustMkdir(t, run, 0o700)
	mustWrite(t, filepath.Join(config, "xfce4/xfconf/xfce-perchannel-xml/xfce4-panel.xml"), panelConfig)
	mustWrite(t, filepath.Join(config, "airlock/settings.json"), fmt.Sprintf("{\"workspace\": %q}\n", work))
	mustWrite(t, filepath.Join(work, "hello.txt"), "hello from the tray test\n")
	if os.Getuid() == 0 {
		// Tasks in a folder root owns run as uid 1000.
		if err := os.Chown(work, 1000, 1000); err != nil {
			t.Fatal(err)
		}
	}

	display := strings.TrimSpace(readFD(t, tmp, "Xvfb", nil, "Xvfb", "-displayfd", "3", "-screen", "0", "1280x800x24", "-nolisten", "tcp"))
	env := environ(
		"DISPLAY=:"+display, "HOME="+home, "XDG_CONFIG_HOME="+config, "XDG_RUNTIME_DIR="+run,
		"XDG_STATE_HOME="+filepath.Join(tmp, "state"), "XDG_CACHE_HOME="+filepath.Join(tmp, "cache"),
		"NO_AT_BRIDGE=1", // no accessibility bus: nothing here reads it
	)
	// Services the bus starts (xfconfd, which serves the panel its
	// configuration) take the bus's environment.
	busAddr := strings.TrimSpace(readFD(t, tmp, "dbus", env, "dbus-daemon", "--session", "--nofork", "--print-address=3"))
	env = append(env, "DBUS_SESSION_BUS_ADDRESS="+busAddr)
	bus, err := dbus.Connect(busAddr)
	if err != nil {
		t.Fatalf("connect to the test's D-Bus session %s: %v", busAddr, err)
	}
	t.Cleanup(func() { bus.Close() })

	start(t, tmp, "panel", env, "", "xfce4-panel", "--disable-wm-check")
	waitFor(t, 30*time.Second, "the panel's StatusNotifierWatcher", func() (bool, error) {
		var has bool
		err := bus.BusObject().Call("org.freedesktop.DBus.NameHasOwner", 0, watcherName).Store(&has)
		return has, err
	})
	before := stableShot(t, display, tmp)

	t.Logf("panel up after %s; starting %s", time.Since(begin).Round(time.Millisecond), bin)
	app := start(t, tmp, "app", env, root, bin)
	appAlive := func() error {
		select {
		case err := <-app.exited:
			app.exited <- err
			return fmt.Errorf("the app exited (%v)", err)
		default:
			return nil
		}
	}

	// The item: registered with the panel's watcher by the app's process.
	var item dbus.BusObject
	waitFor(t, 60*time.Second, "the app's StatusNotifierItem registered with the panel", func() (bool, error) {
		if err := appAlive(); err != nil {
			return false, err
		}
		v, err := bus.Object(watcherName, "/StatusNotifierWatcher").GetProperty(watcherName + ".RegisteredStatusNotifierItems")
		if err != nil {
			return false, nil // the watcher may be between owners
		}
		names, _ := v.Value().([]string)
		for _, n := range names {
			dest, path := splitItem(n)
			var pid uint32
			if bus.BusObject().Call("org.freedesktop.DBus.GetConnectionUnixProcessID", 0, dest).Store(&pid) == nil && int(pid) == app.Process.Pid {
				item = bus.Object(dest, path)
				return true, nil
			}
		}
		return false, nil
	})
	mv, err := item.GetProperty("org.kde.StatusNotifierItem.Menu")
	if err != nil {
		t.Fatalf("the item's Menu: %v", err)
	}
	menuPath, ok := mv.Value().(dbus.ObjectPath)
	if !ok || !menuPath.IsValid() {
		t.Fatalf("the item's Menu is %v, not an object path", mv.Value())
	}
	menu := bus.Object(item.Destination(), menuPath)

	// The menu lists the workspace and its VM's state: starting, then
	// running once the VM is up.
	want := []sandbox{{Name: "work", State: "running"}}
	var items []menuItem
	waitFor(t, 150*time.Second, fmt.Sprintf("the menu to list %v", want), func() (bool, error) {
		if err := appAlive(); err != nil {
			return false, err
		}
		items, err = layout(menu)
		if err != nil {
			return false, err
		}
		return reflect.DeepEqual(listed(items), want), nil
	})
	t.Logf("menu after %s: %s", time.Since(begin).Round(time.Millisecond), labels(items))
	open, stop, quit := find(t, items, "Open Airlock"), find(t, items, "Stop sandbox"), find(t, items, "Quit Airlock")
	for _, it := range []menuItem{open, stop, quit} {
		if !it.Enabled {
			t.Errorf("%q is disabled", it.Label)
		}
	}
	qemus := vms(app.Process.Pid)
	if len(qemus) == 0 {
		t.Fatalf("the menu says running, but no QEMU runs among the app's processes")
	}

	// Hide the window as a window manager would (none runs here) and
	// screenshot the panel: what changed since the app started is the icon.
	win := strings.Fields(output(t, env, "xdotool", "search", "--onlyvisible", "--name", "^Airlock$"))
	if len(win) != 1 {
		t.Fatalf("want one visible window named Airlock, found %q", win)
	}
	output(t, env, "xdotool", "windowunmap", "--sync", win[0])
	after := stableShot(t, display, tmp)
	strip := image.Rect(0, 0, after.Bounds().Dx(), panelSize+1)
	icon := diff(before, after, strip)
	if icon.Dx() < 8 || icon.Dy() < 8 || icon.Dx() > 2*panelSize || icon.Dy() > panelSize+1 {
		t.Fatalf("the panel changed in %v when the app started: want an icon of 8 to %d pixels", icon, panelSize)
	}
	if n := colours(after, icon); n < 3 {
		t.Fatalf("the icon at %v has %d colours: blank", icon, n)
	}
	save(t, after, image.Rect(0, 0, max(240, icon.Max.X+40), panelSize+8), filepath.Join(shots, "tray-icon.png"))
	t.Logf("icon at %v, %d colours", icon, colours(after, icon))

	// Open the menu as a user does (right click) and screenshot it.
	cx, cy := (icon.Min.X+icon.Max.X)/2, (icon.Min.Y+icon.Max.Y)/2
	output(t, env, "xdotool", "mousemove", strconv.Itoa(cx), strconv.Itoa(cy), "click", "3")
	below := image.Rect(0, panelSize+1, after.Bounds().Dx(), after.Bounds().Dy())
	var shown image.Image
	var popup image.Rectangle
	waitFor(t, 15*time.Second, "the menu on screen", func() (bool, error) {
		shown = shot(t, display, tmp)
		popup = diff(after, shown, below)
		return popup.Dy() >= 20*countVisible(items)/2 && popup.Dx() >= 60, nil
	})
	save(t, shown, image.Rect(0, 0, max(popup.Max.X, icon.Max.X)+40, popup.Max.Y+20), filepath.Join(shots, "tray-menu.png"))
	t.Logf("menu on screen at %v, %d colours", popup, colours(shown, popup))
	if n := colours(shown, popup); n < 3 {
		t.Fatalf("the open menu at %v has %d colours: blank", popup, n)
	}
	output(t, env, "xdotool", "key", "Escape")
	waitFor(t, 15*time.Second, "the menu to close", func() (bool, error) {
		return diff(after, shot(t, display, tmp), below).Empty(), nil
	})

	// Open Airlock brings the window back.
	click(t, menu, open)
	waitFor(t, 15*time.Second, "Open Airlock to show the window", func() (bool, error) {
		return strings.Contains(output(t, env, "xwininfo", "-id", win[0]), "Map State: IsViewable"), appAlive()
	})

	// Stop sandbox stops the VM; the menu says so and offers to start it.
	click(t, menu, stop)
	waitFor(t, 60*time.Second, "Stop sandbox to stop the VM", func() (bool, error) {
		if err := appAlive(); err != nil {
			return false, err
		}
		items, err = layout(menu)
		if err != nil {
			return false, err
		}
		return reflect.DeepEqual(listed(items), []sandbox{{Name: "work", State: "stopped"}}), nil
	})
	find(t, items, "Start sandbox")
	for _, p := range qemus {
		if running(p) {
			t.Errorf("QEMU %d still runs after Stop sandbox", p)
		}
	}

	// Quit Airlock ends the app, cleanly, and the processes it started
	// (WebKit's) end with it.
	helpers := descendants(app.Process.Pid)
	click(t, menu, find(t, items, "Quit Airlock"))
	select {
	case err := <-app.exited:
		app.exited <- err
		if err != nil {
			t.Fatalf("the app quit with %v", err)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("Quit Airlock: the app still runs after 40 s")
	}
	quitAt := time.Now()
	waitFor(t, 30*time.Second, "the app's processes to end after Quit", func() (bool, error) {
		for p, comm := range helpers {
			if running(p) {
				if c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p)); strings.TrimSpace(string(c)) == comm {
					return false, nil
				}
			}
		}
		return true, nil
	})
	t.Logf("the tray's Quit ended the app and its %d processes (%s after it); whole test %s",
		len(helpers), time.Since(quitAt).Round(time.Millisecond), time.Since(begin).Round(time.Millisecond))
}

func find(t *testing.T, items []menuItem, label string) menuItem {
	t.Helper()
	for _, it := range items {
		if it.Label == label && it.Visible && it.Type != "separator" {
			return it
		}
	}
	t.Fatalf("no %q in the menu: %s", label, labels(items))
	return menuItem{}
}

// click sends the event a host sends when the user picks it.
func click(t *testing.T, menu dbus.BusObject, it menuItem) {
	t.Helper()
	call := menu.Call("com.canonical.dbusmenu.Event", 0, it.ID, "clicked", dbus.MakeVariant(""), uint32(time.Now().Unix()))
	if call.Err != nil {
		t.Fatalf("click %q: %v", it.Label, call.Err)
	}
}

// environ is the test's environment without the display, bus and folders
// of the session it runs in, with kv added.
func environ(kv ...string) []string {
	var env []string
	for _, e := range os.Environ() {
		k, _, _ := strings.Cut(e, "=")
		switch {
		case k == "DISPLAY", k == "WAYLAND_DISPLAY", k == "DBUS_SESSION_BUS_ADDRESS", k == "HOME", k == "SESSION_MANAGER",
			strings.HasPrefix(k, "XDG_"):
			continue
		}
		env = append(env, e)
	}
	return append(env, kv...)
}

// proc is a program the test started; exited has its end (the error of
// Wait) once it ended.
type proc struct {
	*exec.Cmd
	exited chan error
}

// start runs a program for the rest of the test, its output in
// tmp/NAME.log; the test's end kills it.
func start(t *testing.T, tmp, name string, env []string, dir, prog string, args ...string) *proc {
	t.Helper()
	log, err := os.Create(filepath.Join(tmp, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(prog, args...)
	cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = env, dir, log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	p := &proc{Cmd: cmd, exited: make(chan error, 1)}
	go func() { p.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill() // fails harmlessly once it ended
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			t.Errorf("%s did not end within 10 s of SIGKILL", name)
		}
		log.Close()
	})
	return p
}

// readFD starts a program that writes one line on its fd 3 once it is
// ready (Xvfb's display number, dbus-daemon's address), and returns it.
func readFD(t *testing.T, tmp, name string, env []string, prog string, args ...string) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	log, err := os.Create(filepath.Join(tmp, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(prog, args...)
	cmd.Env, cmd.Stdout, cmd.Stderr, cmd.ExtraFiles = env, log, log, []*os.File{w}
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	w.Close()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		log.Close()
	})
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(r).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if strings.TrimSpace(s) == "" {
			t.Fatalf("%s did not start:\n%s", name, readLog(tmp, name))
		}
		return s
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not start within 20 s:\n%s", name, readLog(tmp, name))
		return ""
	}
}

func readLog(tmp, name string) string {
	b, _ := os.ReadFile(filepath.Join(tmp, name+".log"))
	return string(b)
}

func output(t *testing.T, env []string, prog string, args ...string) string {
	t.Helper()
	cmd := exec.Command(prog, args...)
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", prog, strings.Join(args, " "), err, stderr.Bytes())
	}
	return string(out)
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		done, err := ok()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", d, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// shot is a screenshot of the whole screen.
func shot(t *testing.T, display, tmp string) image.Image {
	t.Helper()
	f := filepath.Join(tmp, "shot.png")
	if out, err := exec.Command("import", "-display", ":"+display, "-window", "root", f).CombinedOutput(); err != nil {
		t.Fatalf("import: %v: %s", err, out)
	}
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("the screenshot: %v", err)
	}
	return img
}

// stableShot is a screenshot once two taken in a row agree: what is on
// screen has been painted.
func stableShot(t *testing.T, display, tmp string) image.Image {
	t.Helper()
	prev := shot(t, display, tmp)
	var img image.Image
	waitFor(t, 20*time.Second, "the screen to settle", func() (bool, error) {
		time.Sleep(300 * time.Millisecond)
		img = shot(t, display, tmp)
		same := diff(prev, img, img.Bounds()).Empty()
		prev = img
		return same, nil
	})
	return img
}

// diff is the smallest rectangle within r holding every pixel that a and b
// do not share.
func diff(a, b image.Image, r image.Rectangle) image.Rectangle {
	var box image.Rectangle
	r = r.Intersect(a.Bounds()).Intersect(b.Bounds())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			if a.At(x, y) != b.At(x, y) {
				box = box.Union(image.Rect(x, y, x+1, y+1))
			}
		}
	}
	return box
}

func colours(img image.Image, r image.Rectangle) int {
	seen := map[[4]uint32]bool{}
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			cr, cg, cb, ca := img.At(x, y).RGBA()
			seen[[4]uint32{cr, cg, cb, ca}] = true
		}
	}
	return len(seen)
}

func save(t *testing.T, img image.Image, r image.Rectangle, file string) {
	t.Helper()
	sub, ok := img.(interface {
		SubImage(image.Rectangle) image.Image
	})
	if !ok {
		t.Fatalf("a screenshot of type %T cannot be cropped", img)
	}
	var b bytes.Buffer
	if err := png.Encode(&b, sub.SubImage(r.Intersect(img.Bounds()))); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", file)
}

// descendants are pid's descendants, each with its command name.
func descendants(pid int) map[int]string {
	parent := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) < 2 {
			continue
		}
		pp, _ := strconv.Atoi(f[1])
		parent[pp] = append(parent[pp], p)
	}
	out := map[int]string{}
	var walk func(int)
	walk = func(p int) {
		for _, c := range parent[p] {
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", c))
			out[c] = strings.TrimSpace(string(comm))
			walk(c)
		}
	}
	walk(pid)
	return out
}

// vms are the QEMU processes among pid's descendants.
func vms(pid int) []int {
	var out []int
	for p, comm := range descendants(pid) {
		if strings.HasPrefix(comm, "qemu-system-") {
			out = append(out, p)
		}
	}
	return out
}

// running reports whether pid is a process that has not ended (a zombie
// has ended).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

func mustMkdir(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t *testing.T, file, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
