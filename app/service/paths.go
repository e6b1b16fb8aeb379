package service

import (
	"errors"
	"path/filepath"
)

// StateDir returns where Airlock keeps task history and logs for a user on
// goos, from the user's home folder and environment (getenv): the XDG state
// folder on Linux, Application Support on macOS, LocalAppData on Windows.
func StateDir(goos, home string, getenv func(string) string) (string, error) {
	switch goos {
	case "darwin":
		if home == "" {
			return "", errors.New("no home folder")
		}
		return filepath.Join(home, "Library", "Application Support", "Airlock"), nil
	case "windows":
		if d := getenv("LocalAppData"); d != "" {
			return filepath.Join(d, "Airlock"), nil
		}
		return "", errors.New("%LocalAppData% is not set")
	default:
		if d := getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
			return filepath.Join(d, "airlock"), nil
		}
		if home == "" {
			return "", errors.New("no home folder")
		}
		return filepath.Join(home, ".local", "state", "airlock"), nil
	}
}
