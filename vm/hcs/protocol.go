package hcs

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/airlock-sandbox/airlock/vm"
)

// The protocol between the app and airlock-vmservice: one JSON object a
// line each way, a request then its response, over the service's named
// pipe. Every message carries the protocol version; the service refuses
// any other. A VM lives as long as the connection that created it (its
// session): when the app goes away, so does its VM.
//
//	create  (session)  CreateRequest -> VMInfo   validate, create, grant VM access to the boot files
//	start   (session)                -> VMInfo   start, then add the workspace share with the user's token
//	stop    (session)                -> VMInfo   terminate (the app already asked the guest to power off)
//	status  (id)                     -> VMInfo
//	wait    (id, own connection)     -> Exit     blocks until the VM has exited

// ProtocolVersion is the version this package speaks.
const ProtocolVersion = 1

// MaxMessage bounds one protocol message.
const MaxMessage = 64 << 10

// Op names a request.
type Op string

// Requests.
const (
	OpCreateVM Op = "create"
	OpStartVM  Op = "start"
	OpStopVM   Op = "stop"
	OpStatusVM Op = "status"
	OpWaitVM   Op = "wait"
)

// Request is one request to the service.
type Request struct {
	V  int    `json:"v"`
	Op Op     `json:"op"`
	ID string `json:"id,omitempty"`
	// Create is the VM to create (OpCreateVM only).
	Create *CreateRequest `json:"create,omitempty"`
}

// CreateRequest describes the VM the app wants. The service checks every
// field and builds the document itself: the app never sends HCS JSON.
type CreateRequest struct {
	Kernel    string   `json:"kernel"`
	Initrd    string   `json:"initrd"`
	Cmdline   []string `json:"cmdline,omitempty"`
	CPUs      int      `json:"cpus"`
	MemoryMiB int      `json:"memory_mib"`
	// Share is the workspace folder, or nil.
	Share *ShareRequest `json:"share,omitempty"`
	// ConsolePipe is the pipe the app listens on for COM1 (ValidConsolePipe).
	ConsolePipe string `json:"console_pipe,omitempty"`
	// Disks are VHD files attached as SCSI disks, in order: the standard
	// image's read-only root disk, the user's persistent disk.
	Disks []DiskRequest `json:"disks,omitempty"`
}

// DiskRequest is one disk file.
type DiskRequest struct {
	Path     string `json:"path"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

// ShareRequest is the workspace folder.
type ShareRequest struct {
	Path     string `json:"path"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

// Response is the service's answer.
type Response struct {
	V     int        `json:"v"`
	Error *WireError `json:"error,omitempty"`
	VM    *VMInfo    `json:"vm,omitempty"`
	Exit  *Exit      `json:"exit,omitempty"`
}

// VMInfo describes a VM the service runs for the caller.
type VMInfo struct {
	ID string `json:"id"`
	// RuntimeID is the VM id Hyper-V sockets are bound to.
	RuntimeID string `json:"runtime_id"`
	State     string `json:"state"`
}

// VM states in VMInfo.
const (
	VMCreated = "created"
	VMRunning = "running"
	VMStopped = "stopped"
)

// Exit is how a VM ended.
type Exit struct {
	// Status is the exit HRESULT (0 for a clean power-off).
	Status int32 `json:"status,omitempty"`
	// Type is HCS's ExitType: "GracefulExit", "ForcedExit", "UnexpectedExit".
	Type string `json:"type,omitempty"`
	// Message explains an exit the service observed itself (e.g. HCS
	// disconnected).
	Message string `json:"message,omitempty"`
}

// Graceful reports whether the guest powered off by itself.
func (e Exit) Graceful() bool {
	return e.Status == 0 && (e.Type == "GracefulExit" || e.Type == "") && e.Message == ""
}

// Code classifies a service error; the client maps it back to a sentinel.
type Code string

// Error codes.
const (
	CodeInvalid      Code = "invalid"         // the request is malformed or refused by validation
	CodeVersion      Code = "version"         // unsupported protocol version
	CodeDenied       Code = "denied"          // the caller may not do this
	CodeNotFound     Code = "not_found"       // no such VM for this caller
	CodeLimit        Code = "limit"           // too many VMs for this caller
	CodePlatform     Code = "platform"        // ErrPlatformMissing
	CodeTooOld       Code = "windows_too_old" // ErrWindowsTooOld
	CodeBootFiles    Code = "boot_files"      // ErrBootFilesAccess
	CodeDisk         Code = "disk_refused"    // ErrDiskRefused
	CodeExit         Code = "unexpected_exit" // ErrUnexpectedExit
	CodeUnsupported  Code = "unsupported"     // ErrUnsupported
	CodeResources    Code = "resources"       // ErrOutOfResources
	CodeNotRunning   Code = "not_running"     // vm.ErrNotRunning
	CodeAlreadyStart Code = "already_started"
	CodeInternal     Code = "internal"
)

// WireError is an error sent over the protocol.
type WireError struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

// ErrRefused wraps the service's refusals of a request (CodeInvalid,
// CodeDenied, CodeNotFound, CodeLimit, CodeVersion).
var ErrRefused = errors.New("the Airlock VM service refused the request")

var codeErrors = []struct {
	code Code
	err  error
}{
	{CodePlatform, ErrPlatformMissing},
	{CodeTooOld, ErrWindowsTooOld},
	{CodeBootFiles, ErrBootFilesAccess},
	{CodeDisk, ErrDiskRefused},
	{CodeExit, ErrUnexpectedExit},
	{CodeUnsupported, ErrUnsupported},
	{CodeResources, ErrOutOfResources},
	{CodeNotRunning, vm.ErrNotRunning},
	{CodeAlreadyStart, vm.ErrAlreadyStarted},
	{CodeInvalid, vm.ErrInvalidConfig},
}

// CodeOf is the code the service sends for err.
func CodeOf(err error) Code {
	for _, c := range codeErrors {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return CodeInternal
}

// Err turns a received error into one the app can test with errors.Is.
func (e *WireError) Err() error {
	msg := e.Message
	if len(msg) > 2048 {
		msg = msg[:2048] + "..."
	}
	switch e.Code {
	case CodeDenied, CodeNotFound, CodeLimit, CodeVersion:
		return fmt.Errorf("hcs: %w (%s): %s", ErrRefused, e.Code, msg)
	}
	for _, c := range codeErrors {
		if c.code == e.Code {
			if c.code == CodeInvalid {
				msg = strings.TrimPrefix(strings.TrimPrefix(msg, c.err.Error()), ": ")
				return fmt.Errorf("hcs: %w: %w: %s", ErrRefused, c.err, msg)
			}
			// The service's message ends with the diagnosis's own text
			// (it sends err.Error()); %w adds it back once.
			msg = strings.TrimSuffix(strings.TrimSuffix(msg, c.err.Error()), ": ")
			return fmt.Errorf("hcs: service: %s: %w", msg, c.err)
		}
	}
	return fmt.Errorf("hcs: service: %s", msg)
}

// WriteMessage writes v as one line.
func WriteMessage(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) > MaxMessage {
		return fmt.Errorf("hcs: message of %d bytes exceeds %d", len(b), MaxMessage)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// ReadMessage reads one line into v, refusing lines over MaxMessage,
// unknown fields and trailing data: the other side is not trusted.
func ReadMessage(r *bufio.Reader, v any) error {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > MaxMessage+1 {
			return fmt.Errorf("hcs: message longer than %d bytes", MaxMessage)
		}
		if err == nil {
			break
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err == io.EOF && len(line) > 0 {
			return io.ErrUnexpectedEOF
		}
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("hcs: malformed message: %w", err)
	}
	if dec.More() {
		return errors.New("hcs: malformed message: trailing data")
	}
	return nil
}
