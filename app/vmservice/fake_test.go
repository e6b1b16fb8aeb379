package vmservice

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/vm/hcs"
)

const (
	alice   = "S-1-5-21-1004336348-1177238915-682003330-1001"
	bob     = "S-1-5-21-1004336348-1177238915-682003330-1002"
	imgDir  = `C:\Program Files\Airlock\images\amd64`
	kernel  = imgDir + `\vmlinuz`
	initrd  = imgDir + `\initramfs.cpio.gz`
	project = `C:\Users\alice\src\project`
	stdDir  = `C:\Program Files\Airlock\images\standard\amd64`
	rootVHD = stdDir + `\root.vhd`
	dataVHD = `C:\Users\alice\AppData\Local\Airlock\disks\0123456789abcdef\data.vhd`
)

// fakeFiles is a file system of canonical paths (lower-cased keys) with
// owners, and aliases that resolve to another path (links, short names).
type fakeFiles struct {
	entries map[string]fakeEntry
	aliases map[string]string
}

type fakeEntry struct {
	path  string // as stored
	dir   bool
	owner string
}

func newFakeFiles() *fakeFiles {
	f := &fakeFiles{entries: map[string]fakeEntry{}, aliases: map[string]string{}}
	for _, d := range []string{`C:\`, `C:\Users`, `C:\Users\alice`, `C:\Users\alice\src`, project, `C:\Users\bob`, `C:\Users\bob\code`,
		`C:\Program Files`, `C:\Program Files\Airlock`, `C:\Program Files\Airlock\images`, imgDir, `C:\Windows`, `D:\`, `D:\shared`} {
		owner := "S-1-5-18"
		switch {
		case strings.HasPrefix(d, `C:\Users\alice`):
			owner = alice
		case strings.HasPrefix(d, `C:\Users\bob`):
			owner = bob
		case d == `D:\shared`:
			owner = "S-1-5-32-544"
		}
		f.entries[strings.ToLower(d)] = fakeEntry{path: d, dir: true, owner: owner}
	}
	for _, p := range []string{kernel, initrd, `C:\Windows\evil.img`, project + `\notes.txt`, rootVHD, stdDir + `\vmlinuz`, `C:\Windows\system.vhd`} {
		f.entries[strings.ToLower(p)] = fakeEntry{path: p, owner: "S-1-5-18"}
	}
	f.entries[strings.ToLower(dataVHD)] = fakeEntry{path: dataVHD, owner: alice}
	f.entries[strings.ToLower(project+`\data.img`)] = fakeEntry{path: project + `\data.img`, owner: alice}
	f.entries[strings.ToLower(`C:\Users\bob\data.vhd`)] = fakeEntry{path: `C:\Users\bob\data.vhd`, owner: bob}
	f.entries[strings.ToLower(project+`\dir.vhd`)] = fakeEntry{path: project + `\dir.vhd`, dir: true, owner: alice}
	f.aliases[strings.ToLower(`C:\Users\alice\link`)] = `C:\Users\bob\code`
	f.aliases[strings.ToLower(`C:\PROGRA~1\Airlock\images\amd64\vmlinuz`)] = kernel
	f.aliases[strings.ToLower(imgDir+`\evil`)] = `C:\Windows\evil.img`
	return f
}

func (f *fakeFiles) Resolve(p string) (string, error) {
	if a, ok := f.aliases[strings.ToLower(p)]; ok {
		p = a
	}
	e, ok := f.entries[strings.ToLower(p)]
	if !ok {
		return "", fs.ErrNotExist
	}
	return e.path, nil
}

func (f *fakeFiles) Stat(p string) (fs.FileInfo, error) {
	e, ok := f.entries[strings.ToLower(p)]
	if !ok {
		return nil, fs.ErrNotExist
	}
	return fakeInfo(e), nil
}

func (f *fakeFiles) Owner(p string) (string, error) {
	e, ok := f.entries[strings.ToLower(p)]
	if !ok {
		return "", fs.ErrNotExist
	}
	return e.owner, nil
}

type fakeInfo fakeEntry

func (i fakeInfo) Name() string       { return i.path }
func (i fakeInfo) Size() int64        { return 1 }
func (i fakeInfo) ModTime() time.Time { return time.Time{} }
func (i fakeInfo) IsDir() bool        { return i.dir }
func (i fakeInfo) Sys() any           { return nil }
func (i fakeInfo) Mode() fs.FileMode {
	if i.dir {
		return fs.ModeDir | 0o755
	}
	return 0o644
}

// fakeHCS records what the service asks of HCS.
type fakeHCS struct {
	mu       sync.Mutex
	systems  map[string]*fakeSystem
	grants   map[string][]string // id -> paths
	orphans  []string
	killed   []string
	failWith map[string]error // op -> error
	// hangStart makes Start wait for its context (up to 3s).
	hangStart bool
	docs      []hcs.ComputeSystem
	// calls lists grants, revocations and creates in order, with the
	// identity of each grant ("as 0" is the service's own).
	calls []string
}

func newFakeHCS() *fakeHCS {
	return &fakeHCS{systems: map[string]*fakeSystem{}, grants: map[string][]string{}, failWith: map[string]error{}}
}

func (h *fakeHCS) fail(op string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.failWith[op]
}

func (h *fakeHCS) Create(ctx context.Context, id string, doc hcs.ComputeSystem) (System, error) {
	if err := h.fail("create"); err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, "create")
	h.docs = append(h.docs, doc)
	s := &fakeSystem{h: h, id: id, runtimeID: "5f6a7b8c-9d0e-4f1a-8b2c-" + fmt.Sprintf("%012d", len(h.docs)), done: make(chan struct{})}
	h.systems[id] = s
	return s, nil
}

func (h *fakeHCS) GrantVMAccess(id, path string, as uintptr) error {
	if err := h.fail("grant"); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, fmt.Sprintf("grant %s as %d", path, as))
	h.grants[id] = append(h.grants[id], path)
	return nil
}

func (h *fakeHCS) RevokeVMAccess(id, path string, as uintptr) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, fmt.Sprintf("revoke %s as %d", path, as))
	g := h.grants[id]
	for i, p := range g {
		if p == path {
			h.grants[id] = append(g[:i], g[i+1:]...)
			break
		}
	}
	if len(h.grants[id]) == 0 {
		delete(h.grants, id)
	}
	return nil
}

func (h *fakeHCS) Orphans(context.Context) ([]string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.orphans...), nil
}

func (h *fakeHCS) TerminateOrphan(_ context.Context, id string) error {
	if err := h.fail("terminate"); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.killed = append(h.killed, id)
	return nil
}

func (h *fakeHCS) system(id string) *fakeSystem {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.systems[id]
}

func (h *fakeHCS) openGrants() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.grants)
}

type fakeSystem struct {
	h         *fakeHCS
	id        string
	runtimeID string

	mu       sync.Mutex
	started  bool
	closed   bool
	modifies []hcs.ModifySettingRequest
	identity []uintptr
	exit     hcs.Exit
	done     chan struct{}
}

func (s *fakeSystem) RuntimeID() string { return s.runtimeID }

func (s *fakeSystem) Start(ctx context.Context) error {
	if err := s.h.fail("start"); err != nil {
		return err
	}
	if s.h.hangStart {
		// HCS never finishing the operation: only ctx ends the wait.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(3 * time.Second):
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.started = true
	return nil
}

func (s *fakeSystem) Modify(_ context.Context, req hcs.ModifySettingRequest, identity uintptr) error {
	if err := s.h.fail("modify"); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.modifies = append(s.modifies, req)
	s.identity = append(s.identity, identity)
	return nil
}

// powerOff is the guest ending (or HCS terminating the VM).
func (s *fakeSystem) powerOff(e hcs.Exit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.done:
	default:
		s.exit = e
		close(s.done)
	}
}

func (s *fakeSystem) Terminate(context.Context) error {
	if err := s.h.fail("terminate"); err != nil {
		return err
	}
	s.powerOff(hcs.Exit{Type: "ForcedExit"})
	return nil
}

func (s *fakeSystem) Exited() <-chan struct{} { return s.done }

func (s *fakeSystem) ExitStatus() hcs.Exit {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exit
}

func (s *fakeSystem) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

func (s *fakeSystem) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func testPolicy() Policy {
	return Policy{ImageDir: imgDir, StandardDir: stdDir, Arch: "amd64", MaxCPUs: 8, MaxMemoryMiB: 8192}
}

func aliceCaller() Caller { return Caller{SID: alice, Profile: `C:\Users\alice`, Token: 42} }

func goodRequest() hcs.CreateRequest {
	return hcs.CreateRequest{
		Kernel: kernel, Initrd: initrd, CPUs: 2, MemoryMiB: 1024,
		Cmdline:     []string{"airlock.uid=1000", "airlock.gid=1000"},
		Share:       &hcs.ShareRequest{Path: project},
		ConsolePipe: hcs.ConsolePipePrefix + alice + "-00112233445566778899aabbccddeeff",
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var errBoom = errors.New("boom")
