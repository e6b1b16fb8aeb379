package vmservice

import (
	"runtime"
	"testing"
	"unsafe"

	"golang.org/x/sys/windows"
)

// tokenInfo reads one uint32-sized token information class.
func tokenInfo(t *testing.T, tok windows.Token, class uint32) uint32 {
	t.Helper()
	var v, n uint32
	if err := windows.GetTokenInformation(tok, class, (*byte)(unsafe.Pointer(&v)), 4, &n); err != nil {
		t.Fatalf("GetTokenInformation(%d): %v", class, err)
	}
	return v
}

// threadToken is what pipeClientToken holds while a pipe client is
// impersonated: the impersonation token of the current thread opened
// TOKEN_DUPLICATE|TOKEN_READ, here this process's own (ImpersonateSelf).
func threadToken(t *testing.T) windows.Token {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := windows.ImpersonateSelf(windows.SecurityImpersonation); err != nil {
		t.Fatal(err)
	}
	var tok windows.Token
	err := windows.OpenThreadToken(windows.CurrentThread(), windows.TOKEN_DUPLICATE|windows.TOKEN_READ, true, &tok)
	if rerr := windows.RevertToSelf(); rerr != nil {
		panic(rerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestCallerTokenAsWSL: the token the service keeps for a caller, and
// hands HCS with the Plan9 share, is a new impersonation token with the
// access WSL's GetUserToken asks for, which the thread's token it was
// read from lacks.
func TestCallerTokenAsWSL(t *testing.T) {
	thread := threadToken(t)
	defer thread.Close()
	tok, err := duplicateForVM(thread)
	if err != nil {
		t.Fatal(err)
	}
	defer tok.Close()
	if tok == thread {
		t.Fatal("the same handle")
	}
	if typ := tokenInfo(t, tok, windows.TokenType); typ != windows.TokenImpersonation {
		t.Errorf("token type %d, want an impersonation token", typ)
	}
	if lvl := tokenInfo(t, tok, windows.TokenImpersonationLevel); lvl != windows.SecurityImpersonation {
		t.Errorf("impersonation level %d, want SecurityImpersonation", lvl)
	}
	// TOKEN_ADJUST_PRIVILEGES, which the thread's token lacks.
	var none windows.Tokenprivileges
	if err := windows.AdjustTokenPrivileges(thread, false, &none, 0, nil, nil); err == nil {
		t.Log("this system lets a handle without TOKEN_ADJUST_PRIVILEGES adjust privileges: the access is not checked here")
	}
	if err := windows.AdjustTokenPrivileges(tok, false, &none, 0, nil, nil); err != nil {
		t.Errorf("adjust privileges: %v (no TOKEN_ADJUST_PRIVILEGES)", err)
	}
	// TOKEN_ADJUST_DEFAULT: setting the integrity level it has.
	rid, err := integrityRID(tok)
	if err != nil {
		t.Fatal(err)
	}
	if rid >= securityMandatorySystemRID {
		t.Errorf("integrity %#x: the service never hands on a System-integrity token", rid)
	}
}

// TestDuplicateLowersSystemIntegrity: a token at System integrity is
// handed on at High, as WSL does for the VM worker's sake.
func TestDuplicateLowersSystemIntegrity(t *testing.T) {
	var self windows.Token
	if err := windows.DuplicateTokenEx(windows.GetCurrentProcessToken(), windows.MAXIMUM_ALLOWED, nil, windows.SecurityImpersonation, windows.TokenImpersonation, &self); err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	if err := setIntegrity(self, windows.WinSystemLabelSid); err != nil {
		t.Skipf("cannot make a System-integrity token here: %v", err)
	}
	if rid, err := integrityRID(self); err != nil || rid != securityMandatorySystemRID {
		t.Skipf("the token's integrity is %#x (%v), not System", rid, err)
	}
	dup, err := duplicateForVM(self)
	if err != nil {
		t.Fatal(err)
	}
	defer dup.Close()
	if rid, err := integrityRID(dup); err != nil || rid != 0x3000 {
		t.Errorf("integrity %#x (%v), want High (0x3000)", rid, err)
	}
}
