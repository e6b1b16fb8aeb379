package computecore

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/windows"

	"github.com/airlock-sandbox/airlock/vm/hcs"
)

var (
	dll = windows.NewLazySystemDLL("computecore.dll")

	procCreateOperation            = dll.NewProc("HcsCreateOperation")
	procCloseOperation             = dll.NewProc("HcsCloseOperation")
	procCancelOperation            = dll.NewProc("HcsCancelOperation")
	procWaitForOperationResult     = dll.NewProc("HcsWaitForOperationResult")
	procCreateComputeSystem        = dll.NewProc("HcsCreateComputeSystem")
	procOpenComputeSystem          = dll.NewProc("HcsOpenComputeSystem")
	procCloseComputeSystem         = dll.NewProc("HcsCloseComputeSystem")
	procStartComputeSystem         = dll.NewProc("HcsStartComputeSystem")
	procTerminateComputeSystem     = dll.NewProc("HcsTerminateComputeSystem")
	procGetComputeSystemProperties = dll.NewProc("HcsGetComputeSystemProperties")
	procModifyComputeSystem        = dll.NewProc("HcsModifyComputeSystem")
	procSetComputeSystemCallback   = dll.NewProc("HcsSetComputeSystemCallback")
	procEnumerateComputeSystems    = dll.NewProc("HcsEnumerateComputeSystems")
	procGrantVMAccess              = dll.NewProc("HcsGrantVmAccess")
	procRevokeVMAccess             = dll.NewProc("HcsRevokeVmAccess")

	allProcs = []*windows.LazyProc{
		procCreateOperation, procCloseOperation, procCancelOperation, procWaitForOperationResult,
		procCreateComputeSystem, procOpenComputeSystem, procCloseComputeSystem,
		procStartComputeSystem, procTerminateComputeSystem, procGetComputeSystemProperties,
		procModifyComputeSystem, procSetComputeSystemCallback, procEnumerateComputeSystems,
		procGrantVMAccess, procRevokeVMAccess,
	}
)

// Win32 codes Load reports as HRESULTs.
const (
	hrModNotFound  hcs.HRESULT = 0x8007007E
	hrProcNotFound hcs.HRESULT = 0x8007007F
)

var (
	loadOnce sync.Once
	loadErr  error
)

// Load checks, once, that computecore.dll and every function Airlock
// calls exist; every entry point of this package calls it first (a
// missing proc would otherwise panic). The DLL ships with the Virtual
// Machine Platform feature; a missing export means a Windows too old for
// this API.
func Load() error {
	loadOnce.Do(func() {
		if err := dll.Load(); err != nil {
			loadErr = hcs.Diagnose(hcs.OpLoad, hrModNotFound, err.Error())
			return
		}
		for _, p := range allProcs {
			if err := p.Find(); err != nil {
				loadErr = hcs.Diagnose(hcs.OpLoad, hrProcNotFound, err.Error())
				return
			}
		}
	})
	return loadErr
}

// HCS_EVENT_TYPE values (computedefs.h).
const (
	eventSystemExited      = 0x00000001
	eventServiceDisconnect = 0x02000000
)

// event is HCS_EVENT.
type event struct {
	Type      uint32
	EventData *uint16
	Operation uintptr
}

// System is an open compute system.
type System struct {
	id     string
	handle uintptr
	key    uintptr // callback context

	mu     sync.Mutex
	closed bool
	done   chan struct{}
	exit   hcs.Exit
}

// One callback serves every system; its context is a key in registry,
// never a Go pointer.
var (
	callbackOnce sync.Once
	callbackPtr  uintptr
	registryMu   sync.Mutex
	registry     = map[uintptr]*System{}
	nextKey      uintptr
)

func onEvent(e *event, key uintptr) uintptr {
	if e == nil {
		return 0
	}
	registryMu.Lock()
	s := registry[key]
	registryMu.Unlock()
	if s == nil {
		return 0
	}
	switch e.Type {
	case eventSystemExited:
		var st hcs.SystemExitStatus
		if e.EventData != nil {
			_ = json.Unmarshal([]byte(windows.UTF16PtrToString(e.EventData)), &st)
		}
		s.exited(hcs.Exit{Status: st.Status, Type: st.ExitType})
	case eventServiceDisconnect:
		s.exited(hcs.Exit{Message: "the Host Compute Service disconnected"})
	}
	return 0
}

func (s *System) exited(e hcs.Exit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.done:
	default:
		s.exit = e
		close(s.done)
	}
}

// ID is the compute system id.
func (s *System) ID() string { return s.id }

// Exited is closed once the system has exited.
func (s *System) Exited() <-chan struct{} { return s.done }

// ExitStatus is how the system exited (valid once Exited is closed).
func (s *System) ExitStatus() hcs.Exit {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exit
}

// utf16 converts an argument for a DLL call. Every pointer it returns is
// passed as uintptr(unsafe.Pointer(p)) directly in the LazyProc.Call
// expression: Call is //go:uintptrescapes, which keeps the memory alive
// until the call returns; converting it anywhere else (a helper, a
// variable) leaves it to the collector during the call
// (TestPointersReachTheCall checks this file for it).
func utf16(s string) (*uint16, error) {
	if s == "" {
		return nil, nil
	}
	return windows.UTF16PtrFromString(s)
}

// takeString converts and frees a string HCS allocated.
func takeString(p *uint16) string {
	if p == nil {
		return ""
	}
	s := windows.UTF16PtrToString(p)
	_, _ = windows.LocalFree(windows.Handle(unsafe.Pointer(p)))
	return s
}

// resultMessage extracts ErrorMessage from an HCS error document.
func resultMessage(doc string) string {
	var r hcs.ResultError
	if json.Unmarshal([]byte(doc), &r) == nil && r.ErrorMessage != "" {
		return r.ErrorMessage
	}
	if len(doc) > 500 {
		doc = doc[:500] + "..."
	}
	return strings.TrimSpace(doc)
}

// withOperation creates an operation, lets call use it, and waits for the
// result document until ctx ends (awaitOperation), cancelling the
// operation then. The operation is closed on return even if it goes on:
// HCS keeps running a closed operation and drops its result (hcsshim
// internal/hcs/v2/operation.go submitOperation); the arguments of call
// were copied by HCS when call returned.
func withOperation(ctx context.Context, op string, call func(operation uintptr) uintptr) (string, error) {
	operation, _, _ := procCreateOperation.Call(0, 0)
	if operation == 0 {
		return "", hcs.Diagnose(op, 0x8007000E, "HcsCreateOperation failed") // E_OUTOFMEMORY
	}
	defer procCloseOperation.Call(operation)
	if hr := hcs.HRESULT(call(operation)); hr.Failed() {
		return "", hcs.Diagnose(op, hr, "")
	}
	hr, res, err := awaitOperation(ctx, func(timeoutMs uint32) (hcs.HRESULT, string) {
		var doc *uint16
		r, _, _ := procWaitForOperationResult.Call(operation, uintptr(timeoutMs), uintptr(unsafe.Pointer(&doc)))
		return hcs.HRESULT(r), takeString(doc)
	}, func() {
		procCancelOperation.Call(operation)
	})
	if err != nil {
		return res, fmt.Errorf("hcs: %s: %w", op, err)
	}
	if hr.Failed() {
		return res, hcs.Diagnose(op, hr, resultMessage(res))
	}
	return res, nil
}

// Create creates (but does not start) a compute system from document and
// registers for its events.
func Create(ctx context.Context, id string, document []byte) (*System, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	pid, err := utf16(id)
	if err != nil {
		return nil, err
	}
	pdoc, err := utf16(string(document))
	if err != nil {
		return nil, err
	}
	var handle uintptr
	_, err = withOperation(ctx, hcs.OpCreate, func(op uintptr) uintptr {
		r, _, _ := procCreateComputeSystem.Call(uintptr(unsafe.Pointer(pid)), uintptr(unsafe.Pointer(pdoc)), op, 0, uintptr(unsafe.Pointer(&handle)))
		return r
	})
	if err != nil {
		if handle != 0 {
			procCloseComputeSystem.Call(handle)
		}
		return nil, err
	}
	return register(id, handle)
}

// Open opens an existing compute system (to terminate an orphan).
func Open(id string) (*System, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	pid, err := utf16(id)
	if err != nil {
		return nil, err
	}
	var handle uintptr
	r, _, _ := procOpenComputeSystem.Call(uintptr(unsafe.Pointer(pid)), uintptr(windows.GENERIC_ALL), uintptr(unsafe.Pointer(&handle)))
	if hr := hcs.HRESULT(r); hr.Failed() {
		return nil, hcs.Diagnose("open", hr, id)
	}
	return register(id, handle)
}

func register(id string, handle uintptr) (*System, error) {
	callbackOnce.Do(func() { callbackPtr = windows.NewCallback(onEvent) })
	registryMu.Lock()
	nextKey++
	s := &System{id: id, handle: handle, key: nextKey, done: make(chan struct{})}
	registry[s.key] = s
	registryMu.Unlock()
	r, _, _ := procSetComputeSystemCallback.Call(handle, 0, s.key, callbackPtr)
	if hr := hcs.HRESULT(r); hr.Failed() {
		s.Close()
		return nil, hcs.Diagnose("set callback", hr, "")
	}
	return s, nil
}

// Properties reads the system's basic properties (its RuntimeId).
func (s *System) Properties(ctx context.Context) (hcs.Properties, error) {
	var p hcs.Properties
	if err := ctx.Err(); err != nil {
		return p, err
	}
	doc, err := withOperation(ctx, hcs.OpProps, func(op uintptr) uintptr {
		r, _, _ := procGetComputeSystemProperties.Call(s.handle, op, 0)
		return r
	})
	if err != nil {
		return p, err
	}
	if err := json.Unmarshal([]byte(doc), &p); err != nil {
		return p, fmt.Errorf("hcs: properties: %w", err)
	}
	return p, nil
}

// Start boots the system.
func (s *System) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	_, err := withOperation(ctx, hcs.OpStart, func(op uintptr) uintptr {
		r, _, _ := procStartComputeSystem.Call(s.handle, op, 0)
		return r
	})
	return err
}

// Modify applies a ModifySettingRequest; identity (a user's token, or 0)
// is the account HCS acts as.
func (s *System) Modify(ctx context.Context, request []byte, identity windows.Token) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p, err := utf16(string(request))
	if err != nil {
		return err
	}
	_, err = withOperation(ctx, hcs.OpModify, func(op uintptr) uintptr {
		r, _, _ := procModifyComputeSystem.Call(s.handle, op, uintptr(unsafe.Pointer(p)), uintptr(identity))
		return r
	})
	return err
}

// Terminate ends the system at once. A system that is gone, had stopped
// already, or is being terminated already is not an error
// (hcs.TerminateSettled).
func (s *System) Terminate(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	_, err := withOperation(ctx, hcs.OpTerminate, func(op uintptr) uintptr {
		r, _, _ := procTerminateComputeSystem.Call(s.handle, op, 0)
		return r
	})
	if hcs.TerminateSettled(err) {
		return nil
	}
	return err
}

// Close unregisters the callback and closes the handle (which, with
// ShouldTerminateOnLastHandleClosed, ends a system still running).
func (s *System) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	procSetComputeSystemCallback.Call(s.handle, 0, 0, 0)
	registryMu.Lock()
	delete(registry, s.key)
	registryMu.Unlock()
	procCloseComputeSystem.Call(s.handle)
	return nil
}

// Enumerate lists the compute systems owned by owner.
func Enumerate(ctx context.Context, owner string) ([]hcs.Properties, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	q, err := json.Marshal(struct{ Owners []string }{[]string{owner}})
	if err != nil {
		return nil, err
	}
	pq, err := utf16(string(q))
	if err != nil {
		return nil, err
	}
	doc, err := withOperation(ctx, hcs.OpEnumerate, func(op uintptr) uintptr {
		r, _, _ := procEnumerateComputeSystems.Call(uintptr(unsafe.Pointer(pq)), op)
		return r
	})
	if err != nil {
		return nil, err
	}
	var all []hcs.Properties
	if err := json.Unmarshal([]byte(doc), &all); err != nil {
		return nil, fmt.Errorf("hcs: enumerate: %w", err)
	}
	var mine []hcs.Properties
	for _, p := range all {
		if p.Owner == owner { // the query filters; do not rely on it alone
			mine = append(mine, p)
		}
	}
	return mine, nil
}

// GrantVMAccess adds the VM's account (derived from the compute system
// id) to path's ACL, so the VM worker can read a boot file.
func GrantVMAccess(id, path string) error {
	if err := Load(); err != nil {
		return err
	}
	pid, err := utf16(id)
	if err != nil {
		return err
	}
	pp, err := utf16(path)
	if err != nil {
		return err
	}
	r, _, _ := procGrantVMAccess.Call(uintptr(unsafe.Pointer(pid)), uintptr(unsafe.Pointer(pp)))
	if hr := hcs.HRESULT(r); hr.Failed() {
		return hcs.Diagnose(hcs.OpGrant, hr, path)
	}
	return nil
}

// RevokeVMAccess removes what GrantVMAccess added, so the boot files' ACLs
// do not grow with every VM.
func RevokeVMAccess(id, path string) error {
	if err := Load(); err != nil {
		return err
	}
	pid, err := utf16(id)
	if err != nil {
		return err
	}
	pp, err := utf16(path)
	if err != nil {
		return err
	}
	r, _, _ := procRevokeVMAccess.Call(uintptr(unsafe.Pointer(pid)), uintptr(unsafe.Pointer(pp)))
	if hr := hcs.HRESULT(r); hr.Failed() {
		return hcs.Diagnose("revoke VM access", hr, path)
	}
	return nil
}
