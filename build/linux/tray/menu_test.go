package tray

import (
	"reflect"
	"testing"

	"github.com/godbus/dbus/v5"
)

// entry is a dbusmenu layout entry as godbus hands it over in a variant.
func entry(id int32, props map[string]any, kids ...dbus.Variant) dbus.Variant {
	p := map[string]dbus.Variant{}
	for k, v := range props {
		p[k] = dbus.MakeVariant(v)
	}
	if kids == nil {
		kids = []dbus.Variant{}
	}
	return dbus.MakeVariant([]any{id, p, kids})
}

func TestChildren(t *testing.T) {
	got, err := children([]dbus.Variant{
		entry(1, map[string]any{"label": "Sandbox: running", "enabled": false}),
		entry(2, map[string]any{"type": "separator"}),
		entry(3, map[string]any{"label": "More", "visible": false}, entry(4, map[string]any{"label": "Inner"})),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []menuItem{
		{ID: 1, Label: "Sandbox: running", Enabled: false, Visible: true},
		{ID: 2, Type: "separator", Enabled: true, Visible: true},
		{ID: 3, Label: "More", Enabled: true, Visible: false, Children: []menuItem{{ID: 4, Label: "Inner", Enabled: true, Visible: true}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	if _, err := children([]dbus.Variant{dbus.MakeVariant("not an entry")}); err == nil {
		t.Error("a string read as a menu entry")
	}
}

func TestListed(t *testing.T) {
	line := func(label string) menuItem { return menuItem{Label: label, Visible: true} }
	item := func(label string) menuItem { return menuItem{Label: label, Enabled: true, Visible: true} }
	for _, tc := range []struct {
		name  string
		items []menuItem
		want  []sandbox
	}{
		{"running", []menuItem{line("Sandbox: running"), line("Folder: work"), item("Stop sandbox")},
			[]sandbox{{Name: "work", State: "running"}}},
		{"tasks and read-only", []menuItem{line("Sandbox: running · 2 tasks"), line("Folder: my work (read-only)")},
			[]sandbox{{Name: "my work", State: "running"}}},
		{"starting", []menuItem{line("Sandbox: starting (booting)"), line("Folder: work")},
			[]sandbox{{Name: "work", State: "starting (booting)"}}},
		{"no folder", []menuItem{line("Sandbox: stopped"), line("No folder chosen")},
			[]sandbox{{State: "stopped"}}},
		{"unavailable", []menuItem{line("Airlock: unavailable"), line("the service is not available")}, nil},
		// An item a user can pick is not a line that lists a sandbox.
		{"enabled items", []menuItem{item("Sandbox: running"), item("Folder: work")}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := listed(tc.items); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("listed = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestSplitItem(t *testing.T) {
	for in, want := range map[string][2]string{
		":1.7/StatusNotifierItem":           {":1.7", "/StatusNotifierItem"},
		"org.kde.StatusNotifierItem-42-1":   {"org.kde.StatusNotifierItem-42-1", "/StatusNotifierItem"},
		":1.9/org/ayatana/NotificationItem": {":1.9", "/org/ayatana/NotificationItem"},
	} {
		dest, path := splitItem(in)
		if dest != want[0] || string(path) != want[1] {
			t.Errorf("splitItem(%q) = %q, %q; want %q, %q", in, dest, path, want[0], want[1])
		}
	}
}
