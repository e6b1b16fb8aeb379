package tray

import (
	"fmt"
	"strings"

	"github.com/godbus/dbus/v5"
)

// sandbox is one sandbox as the tray's menu lists it.
type sandbox struct{ Name, State string }

// listed reads the sandboxes off the menu; it is the only code here that
// knows how the menu shows them, so a menu that lists several sandboxes
// needs only listed and the test's want to change. The menu lists one
// sandbox, the service's workspace, in two disabled lines: "Sandbox:
// STATE" (then " · N tasks" while tasks run) and "Folder: NAME" (then "
// (read-only)").
func listed(items []menuItem) []sandbox {
	var s sandbox
	for _, it := range items {
		if st, ok := strings.CutPrefix(it.Label, "Sandbox: "); ok && !it.Enabled {
			st, _, _ = strings.Cut(st, " · ")
			s.State = st
		}
		if name, ok := strings.CutPrefix(it.Label, "Folder: "); ok && !it.Enabled {
			s.Name = strings.TrimSuffix(name, " (read-only)")
		}
	}
	if s == (sandbox{}) {
		return nil
	}
	return []sandbox{s}
}

const watcherName = "org.kde.StatusNotifierWatcher"

// splitItem splits an entry of RegisteredStatusNotifierItems: a bus name
// and an object path, or a bus name alone (the item's path is then the
// usual one).
func splitItem(s string) (dest string, path dbus.ObjectPath) {
	if i := strings.IndexByte(s, '/'); i >= 0 {
		return s[:i], dbus.ObjectPath(s[i:])
	}
	return s, "/StatusNotifierItem"
}

// menuItem is one entry of a com.canonical.dbusmenu layout.
type menuItem struct {
	ID       int32
	Label    string
	Type     string // "separator", or "" for a standard item
	Enabled  bool
	Visible  bool
	Children []menuItem
}

// layout reads the whole menu, as a host does before it shows it.
func layout(menu dbus.BusObject) ([]menuItem, error) {
	var needUpdate bool
	_ = menu.Call("com.canonical.dbusmenu.AboutToShow", 0, int32(0)).Store(&needUpdate)
	var rev uint32
	var root struct {
		ID       int32
		Props    map[string]dbus.Variant
		Children []dbus.Variant
	}
	if err := menu.Call("com.canonical.dbusmenu.GetLayout", 0, int32(0), int32(-1), []string{}).Store(&rev, &root); err != nil {
		return nil, fmt.Errorf("GetLayout: %w", err)
	}
	return children(root.Children)
}

func children(vs []dbus.Variant) ([]menuItem, error) {
	var items []menuItem
	for _, v := range vs {
		f, ok := v.Value().([]any)
		if !ok || len(f) != 3 {
			return nil, fmt.Errorf("a menu entry of type %s, want (ia{sv}av)", v.Signature())
		}
		id, _ := f[0].(int32)
		props, _ := f[1].(map[string]dbus.Variant)
		kids, _ := f[2].([]dbus.Variant)
		it := menuItem{ID: id, Enabled: true, Visible: true}
		// Absent properties take the defaults of the dbusmenu spec.
		if p, ok := props["label"]; ok {
			it.Label, _ = p.Value().(string)
		}
		if p, ok := props["type"]; ok {
			it.Type, _ = p.Value().(string)
		}
		if p, ok := props["enabled"]; ok {
			it.Enabled, _ = p.Value().(bool)
		}
		if p, ok := props["visible"]; ok {
			it.Visible, _ = p.Value().(bool)
		}
		var err error
		if it.Children, err = children(kids); err != nil {
			return nil, err
		}
		items = append(items, it)
	}
	return items, nil
}

func labels(items []menuItem) string {
	var b strings.Builder
	for _, it := range items {
		switch {
		case !it.Visible:
		case it.Type == "separator":
			b.WriteString(" | ")
		case it.Enabled:
			fmt.Fprintf(&b, "[%s] ", it.Label)
		default:
			fmt.Fprintf(&b, "(%s) ", it.Label)
		}
	}
	return strings.TrimSpace(b.String())
}

func countVisible(items []menuItem) int {
	n := 0
	for _, it := range items {
		if it.Visible && it.Type != "separator" {
			n++
		}
	}
	return n
}
