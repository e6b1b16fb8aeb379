package service

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"

	"github.com/airlock-sandbox/airlock/app/sandbox"
	"github.com/airlock-sandbox/airlock/app/secrets"
	"github.com/airlock-sandbox/airlock/app/settings"
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

// CacheDir is the user's Airlock cache folder (templates, console log,
// image checksums: what a run rebuilds when it is gone), "" when the
// platform has none.
func CacheDir() string {
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "airlock")
}

// Version is Airlock's version, set at build time with
// -ldflags "-X github.com/airlock-sandbox/airlock/app/service.Version=...".
var Version = "dev"

// OpenUser opens the service for the user running this program: the state
// folder of StateDir, the settings at settings.DefaultPath, and the guest
// image found in imageDirs (nil: sandbox.ImageSearchPath). The CLI and the
// desktop app both start the service this way.
func OpenUser(imageDirs []string, log *slog.Logger) (*Service, error) {
	img, err := sandbox.FindImage(imageDirs)
	if err != nil {
		return nil, err
	}
	return openUser(img, imageDirs, log)
}

// OpenUserSettings opens the user's service without a guest image, for
// commands that only manage settings and secrets: its VM cannot boot.
func OpenUserSettings(log *slog.Logger) (*Service, error) { return openUser(sandbox.Image{}, nil, log) }

func openUser(img sandbox.Image, imageDirs []string, log *slog.Logger) (*Service, error) {
	home, _ := os.UserHomeDir()
	state, err := StateDir(runtime.GOOS, home, os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("state folder: %w", err)
	}
	settingsPath, err := settings.DefaultPath()
	if err != nil {
		return nil, err
	}
	find := func(name string) (sandbox.Image, error) {
		var dirs []string
		for _, d := range imageDirs {
			dirs = append(dirs, d, filepath.Join(d, name, runtime.GOARCH))
		}
		return sandbox.FindNamedImage(name, dirs)
	}
	return Open(Config{StateDir: state, SettingsPath: settingsPath, Image: img, FindImage: find, Logger: log, Version: Version, Keychain: secrets.OSKeychain{}})
}
