package service

import "testing"

func TestStateDir(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	tests := []struct {
		goos, home string
		env        map[string]string
		want       string
	}{
		{"linux", "/home/ann", nil, "/home/ann/.local/state/airlock"},
		{"linux", "/home/ann", map[string]string{"XDG_STATE_HOME": "/s"}, "/s/airlock"},
		{"linux", "/home/ann", map[string]string{"XDG_STATE_HOME": "relative"}, "/home/ann/.local/state/airlock"},
		{"darwin", "/Users/ann", nil, "/Users/ann/Library/Application Support/Airlock"},
		{"windows", `C:\Users\ann`, map[string]string{"LocalAppData": `C:\Users\ann\AppData\Local`}, `C:\Users\ann\AppData\Local/Airlock`},
	}
	for _, tt := range tests {
		got, err := StateDir(tt.goos, tt.home, env(tt.env))
		if err != nil || got != tt.want {
			t.Errorf("StateDir(%s, %s, %v) = %q, %v; want %q", tt.goos, tt.home, tt.env, got, err, tt.want)
		}
	}
	if _, err := StateDir("windows", `C:\Users\ann`, env(nil)); err == nil {
		t.Error("windows without LocalAppData")
	}
}
