package hcs

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Named pipes: who may serve them and who may connect. The decisions live
// here, in plain Go, so they are tested on every OS; the Win32 calls that
// apply them are in *_windows.go.
//
// A named pipe's DACL governs its server end too: creating another
// instance of an existing pipe needs FILE_CREATE_PIPE_INSTANCE, which has
// the value of FILE_APPEND_DATA (0x4) and is therefore part of
// FILE_GENERIC_WRITE and GENERIC_WRITE (Microsoft, "Named Pipe Security
// and Access Rights"). A client that is granted GENERIC_WRITE on a pipe can
// thus start its own instance of it and answer the next client.

// SystemSID is LocalSystem, the account airlock-vmservice runs as.
const SystemSID = "S-1-5-18"

// PipeClientRights (SDDL) are a pipe client's rights without
// FILE_CREATE_PIPE_INSTANCE: FILE_GENERIC_READ (0x120089) and
// FILE_GENERIC_WRITE (0x120116) less FILE_APPEND_DATA (0x4).
const PipeClientRights = "0x12019b"

// PipeClientAccess is what a client asks for when it opens a pipe
// granted PipeClientRights: GENERIC_READ (0x80000000, mapped to
// FILE_GENERIC_READ) and FILE_WRITE_DATA (0x2). GENERIC_WRITE would be
// refused, since it maps to FILE_GENERIC_WRITE, which includes
// FILE_CREATE_PIPE_INSTANCE.
const PipeClientAccess uint32 = 0x80000000 | 0x2

// ServicePipeSDDL is the service pipe's security descriptor. Owner and
// group SYSTEM, which no unprivileged account can set, so a client tells
// the real service's pipe from one an ordinary user created under the
// same name while the service was not running (CheckPipeOwner). SYSTEM
// has full access; interactive users (IU: signed in at the console or over
// remote desktop) may connect, read and write, but not create instances
// of the pipe; network logons (NU) are denied outright, so no other
// machine and no service account can ask for a VM.
const ServicePipeSDDL = "O:SYG:SYD:P(D;;GA;;;NU)(A;;GA;;;SY)(A;;" + PipeClientRights + ";;;IU)"

// ErrPipeImpostor: the process serving a pipe is not the one that should.
var ErrPipeImpostor = errors.New("another program serves this pipe")

// CheckPipeOwner checks that the pipe a client connected to is owned by
// want: the owner of a pipe is its creator's (its first instance's) and
// only SeRestorePrivilege lets a creator name another account.
func CheckPipeOwner(pipe, owner, want string) error {
	if owner == want {
		return nil
	}
	return fmt.Errorf("%w: %s is owned by %s, not %s; end the program that holds it (or restart Windows) and try again", ErrPipeImpostor, pipe, owner, want)
}

// ConsolePipeName is the name of a console pipe the user userSID serves:
// the prefix, the SID, and 16 random bytes in hex. The service accepts a
// console pipe only in the caller's own name (ValidConsolePipe), so no
// request can point a VM's COM1 at a pipe another account serves.
func ConsolePipeName(userSID string, random [16]byte) string {
	return ConsolePipePrefix + userSID + "-" + hex.EncodeToString(random[:])
}

// ValidConsolePipe reports whether p is a console pipe name Airlock makes
// for the account userSID.
func ValidConsolePipe(p, userSID string) bool {
	if !ValidSID(userSID) {
		return false
	}
	rest, ok := strings.CutPrefix(p, ConsolePipePrefix+userSID+"-")
	if !ok || len(rest) != 32 {
		return false
	}
	for _, r := range rest {
		if !('0' <= r && r <= '9' || 'a' <= r && r <= 'f') {
			return false
		}
	}
	return true
}

// ControlPipeName is the control API's pipe (app/api) for the account
// userSID: named by the SID, which no other account has, rather than by
// %USERNAME%, which the environment sets, which two accounts (local and
// domain) can share, and which another user could claim first.
func ControlPipeName(userSID string) (string, error) {
	if !ValidSID(userSID) {
		return "", fmt.Errorf("hcs: %q is not a SID", userSID)
	}
	return `\\.\pipe\airlock-` + userSID, nil
}

// ControlPipeSDDL is the control pipe's security descriptor: owned by
// userSID (set explicitly: an elevated token's default owner would be
// Administrators), full access for it and SYSTEM only, network logons
// denied. Its clients check the owner (CheckPipeOwner) before they send a
// secret.
func ControlPipeSDDL(userSID string) string {
	return "O:" + userSID + "D:P(D;;GA;;;NU)(A;;GA;;;SY)(A;;GA;;;" + userSID + ")"
}
