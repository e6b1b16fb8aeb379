package api

import (
	"strings"
	"testing"
)

func TestBootConfigRoundTrip(t *testing.T) {
	for _, c := range []BootConfig{
		{Transport: TransportSerial, UID: 1000, GID: 1000},
		{Transport: TransportVsock, Share: ShareVirtiofs, UID: 501, GID: 20, Root: RootLabel},
		{Transport: TransportSerial, Share: Share9P, UID: 1000, GID: 1000, ToolConfigWritable: true},
		{Transport: TransportHVSock, Share: Share9PVsock, SharePort: 564, ShareReadOnly: true, UID: 1000, GID: 1000, Root: RootLabel, RootKeep: true, Debug: true},
		{Transport: TransportSerial, Share: Share9P, ShareReadOnly: true, Changes: true, UID: 1000, GID: 1000, Park: true},
	} {
		got, err := ParseCmdline("console=ttyS0 quiet " + strings.Join(c.Args(), " "))
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if got != c {
			t.Errorf("round trip %+v gave %+v", c, got)
		}
	}
	// RootKeep means nothing without a root disk, so it is not written.
	if a := (BootConfig{RootKeep: true}).Args(); len(a) != 0 {
		t.Errorf("args %v", a)
	}
}

func TestBootConfigBadRoot(t *testing.T) {
	for _, w := range []string{"airlock.root=", "airlock.root=Airlock", "airlock.root=a/b", "airlock.root=" + strings.Repeat("a", 17), "airlock.root_keep=maybe"} {
		if _, err := ParseCmdline(w); err == nil {
			t.Errorf("%q accepted", w)
		}
	}
	for _, ok := range []string{"airlock-root", "a", "x-1"} {
		if !ValidLabel(ok) {
			t.Errorf("ValidLabel(%q) = false", ok)
		}
	}
}

// TestBootConfigChangesNeedReadOnlyShare: a guest told to hold its changes
// refuses to boot on a share the host left writable (the layer would then
// not be what keeps the folder unchanged), or without a share.
func TestBootConfigChangesNeedReadOnlyShare(t *testing.T) {
	for _, line := range []string{
		"airlock.changes=1",
		"airlock.share=9p airlock.changes=1",
		"airlock.share=virtiofs airlock.share_ro=0 airlock.changes=1",
		"airlock.share=9p airlock.share_ro=1 airlock.changes=maybe",
	} {
		if _, err := ParseCmdline(line); err == nil {
			t.Errorf("%q accepted", line)
		}
	}
	c, err := ParseCmdline("airlock.share=9p airlock.share_ro=1 airlock.changes=1")
	if err != nil || !c.Changes {
		t.Errorf("got %+v, %v", c, err)
	}
}
