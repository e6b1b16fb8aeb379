package transport

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// ErrNoSerialPort is returned when no virtio-serial port has the wanted name.
var ErrNoSerialPort = errors.New("transport: no virtio-serial port with that name")

// FindSerialPort returns the device name (for example "vport1p1") of the
// virtio-serial port called name, looking under sysRoot (normally "/sys")
// at class/virtio-ports/*/name. The device node is /dev/<returned name>.
func FindSerialPort(sysRoot, name string) (string, error) {
	dir := filepath.Join(sysRoot, "class", "virtio-ports")
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("%w %q (no %s: is the virtio_console driver loaded?)", ErrNoSerialPort, name, dir)
		}
		return "", fmt.Errorf("transport: %w", err)
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	for _, port := range names {
		// A port name is a short kernel string; bound the read anyway.
		b, err := readSmall(filepath.Join(dir, port, "name"), 256)
		if err != nil {
			continue // ports without a name (or racing removal) are not ours
		}
		if strings.TrimSpace(string(b)) == name {
			if strings.ContainsAny(port, "/\x00") || port == "." || port == ".." {
				return "", fmt.Errorf("transport: bad virtio port entry %q", port)
			}
			return port, nil
		}
	}
	return "", fmt.Errorf("%w %q in %s", ErrNoSerialPort, name, dir)
}

func readSmall(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, max)
	n, err := f.Read(b)
	if n == 0 && err != nil {
		return nil, err
	}
	return b[:n], nil
}
