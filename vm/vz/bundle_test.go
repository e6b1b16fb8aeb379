package vz

import "testing"

func TestBundleImageDir(t *testing.T) {
	for _, tc := range []struct {
		exe, want string
	}{
		{"/Applications/Airlock.app/Contents/MacOS/Airlock", "/Applications/Airlock.app/Contents/Resources/images/arm64"},
		{"/Users/me/Applications/Airlock Beta.app/Contents/MacOS/airlock", "/Users/me/Applications/Airlock Beta.app/Contents/Resources/images/arm64"},
		{"/Applications/Airlock.app/Contents/MacOS/../MacOS/Airlock", "/Applications/Airlock.app/Contents/Resources/images/arm64"},
		{"/Volumes/X/airlock.APP/contents/macos/Airlock", "/Volumes/X/airlock.APP/contents/Resources/images/arm64"},
		{"/usr/local/bin/airlock", ""},
		{"/work/main/bin/airlock", ""},
		{"/Applications/Airlock/Contents/MacOS/Airlock", ""}, // no .app
		{"/Applications/.app/Contents/MacOS/Airlock", ""},    // no name
		{"/Applications/Airlock.app/Contents/Helpers/Airlock", ""},
		{"/Applications/Airlock.app/MacOS/Airlock", ""},
		{"Airlock.app/Contents/MacOS/Airlock", ""}, // relative
		{"", ""},
		{"/", ""},
	} {
		got, ok := BundleImageDir(tc.exe, "arm64")
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("BundleImageDir(%q) = %q, %t; want %q", tc.exe, got, ok, tc.want)
		}
	}
}
