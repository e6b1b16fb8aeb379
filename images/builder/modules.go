package builder

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
)

// Module is a kernel module the guest needs.
type Module struct {
	// Name is the module name as modprobe knows it (underscores, no ".ko").
	Name string
	// Optional modules are skipped with a log line when the kernel lacks them.
	Optional bool
}

// GuestModules are the modules the guest loads at boot: the virtio
// transports and devices every backend uses, the shared-folder file
// systems, the vsock transports, and what an optional root disk needs.
// Dependencies are added automatically; built-in modules are skipped.
var GuestModules = []Module{
	{Name: "virtio_pci"},
	{Name: "virtio_mmio"},
	{Name: "virtio_console"},
	{Name: "virtio_rng", Optional: true},
	{Name: "virtio_balloon"},
	{Name: "virtiofs"},
	{Name: "9p"},
	{Name: "9pnet_virtio"},
	{Name: "9pnet_fd"},
	{Name: "vmw_vsock_virtio_transport"},
	{Name: "hv_sock", Optional: true},
	{Name: "virtio_blk"},
	{Name: "ext4"},
	// ext4 asks the crypto API for "crc32c" at mount time, which would need
	// modprobe; loading the generic implementation first answers it.
	{Name: "crc32c_generic"},
	{Name: "overlay"},
	// The root disk on Hyper-V is a SCSI disk (sd_mod over hv_storvsc).
	{Name: "hv_storvsc", Optional: true},
	{Name: "sd_mod", Optional: true},
}

// moduleIndex is what depmod knows about a kernel's loadable modules.
type moduleIndex struct {
	// path maps a module name to its file, relative to /lib/modules/<kver>.
	path map[string]string
	// deps maps a module name to the names of the modules it needs, as
	// listed in modules.dep (depmod lists the transitive closure).
	deps map[string][]string
}

// moduleName turns a module file path into its name: the base name
// without ".ko" and compression suffix, with '-' folded to '_'.
func moduleName(p string) string {
	base := path.Base(p)
	if i := strings.Index(base, ".ko"); i >= 0 {
		base = base[:i]
	}
	return strings.ReplaceAll(base, "-", "_")
}

// parseModulesDep reads a modules.dep file ("path: dep dep ...").
func parseModulesDep(r io.Reader) (*moduleIndex, error) {
	idx := &moduleIndex{path: map[string]string{}, deps: map[string][]string{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		file, rest, ok := strings.Cut(text, ":")
		if !ok || file == "" {
			return nil, fmt.Errorf("modules.dep line %d: no \"path:\" in %q", line, text)
		}
		name := moduleName(file)
		idx.path[name] = file
		var deps []string
		for _, d := range strings.Fields(rest) {
			deps = append(deps, moduleName(d))
		}
		idx.deps[name] = deps
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("modules.dep: %w", err)
	}
	return idx, nil
}

// parseBuiltin reads modules.builtin (one module path a line) into a set of
// module names.
func parseBuiltin(r io.Reader) (map[string]bool, error) {
	set := map[string]bool{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if p := strings.TrimSpace(sc.Text()); p != "" {
			set[moduleName(p)] = true
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("modules.builtin: %w", err)
	}
	return set, nil
}

// errModuleMissing is wrapped by loadOrder for a required module the kernel
// has neither as a loadable module nor built in.
var errModuleMissing = errors.New("kernel module not found")

// loadOrder returns the names of the wanted modules and everything they
// depend on, each once, dependencies before dependents. Built-in modules
// are skipped; missing optional ones are returned in skipped. The order is
// deterministic: wanted modules in the given order, each preceded by its
// dependencies in modules.dep order. A dependency cycle is an error rather
// than an endless walk.
func loadOrder(idx *moduleIndex, builtin map[string]bool, want []Module) (order, skipped []string, err error) {
	const (
		visiting = 1
		done     = 2
	)
	state := map[string]int{}
	var stack []string
	var visit func(name string) error
	visit = func(name string) error {
		switch state[name] {
		case done:
			return nil
		case visiting:
			i := len(stack) - 1
			for i > 0 && stack[i] != name {
				i--
			}
			return fmt.Errorf("kernel module dependency cycle: %s -> %s", strings.Join(stack[i:], " -> "), name)
		}
		if _, ok := idx.path[name]; !ok {
			return fmt.Errorf("%w: %s (needed by %s) is not in modules.dep", errModuleMissing, name, strings.Join(stack, " -> "))
		}
		state[name] = visiting
		stack = append(stack, name)
		for _, d := range idx.deps[name] {
			if builtin[d] {
				continue
			}
			if err := visit(d); err != nil {
				return err
			}
		}
		stack = stack[:len(stack)-1]
		state[name] = done
		order = append(order, name)
		return nil
	}
	for _, m := range want {
		name := moduleName(m.Name)
		if builtin[name] {
			continue
		}
		if _, ok := idx.path[name]; !ok {
			if m.Optional {
				skipped = append(skipped, name)
				continue
			}
			return nil, nil, fmt.Errorf("%w: %s is neither a loadable module (modules.dep) nor built in (modules.builtin)", errModuleMissing, name)
		}
		if err := visit(name); err != nil {
			return nil, nil, err
		}
	}
	return order, skipped, nil
}
