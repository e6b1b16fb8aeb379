package hcs

import (
	"errors"
	"strings"
	"testing"
)

// TestConsolePipe: a request can name only a console pipe in the
// caller's own name; another account's pipe is refused.
func TestConsolePipe(t *testing.T) {
	const bob = "S-1-5-21-1004336348-1177238915-682003330-1002"
	var r [16]byte
	copy(r[:], "\x00\x11\x22\x33\x44\x55\x66\x77\x88\x99\xaa\xbb\xcc\xdd\xee\xff")
	name := ConsolePipeName(testSID, r)
	if name != `\\.\pipe\airlock-console-`+testSID+"-00112233445566778899aabbccddeeff" {
		t.Errorf("ConsolePipeName = %s", name)
	}
	for _, tc := range []struct {
		pipe, sid string
		want      bool
	}{
		{name, testSID, true},
		{ConsolePipeName(bob, r), bob, true},
		// Another account's pipe, or the old name without an account.
		{ConsolePipeName(bob, r), testSID, false},
		{name, bob, false},
		{ConsolePipePrefix + "00112233445566778899aabbccddeeff", testSID, false},
		{strings.ToUpper(name[:len(name)-32]) + "00112233445566778899aabbccddeeff", testSID, false},
		{name[:len(name)-32] + "00112233445566778899AABBCCDDEEFF", testSID, false},
		{name + "0", testSID, false},
		{name[:len(name)-1], testSID, false},
		{`\\otherhost\pipe\airlock-console-` + testSID + "-00112233445566778899aabbccddeeff", testSID, false},
		{`\\.\pipe\airlock-vmservice`, testSID, false},
		// A SID that would break out of the prefix is no SID.
		{ConsolePipePrefix + "S-1-5-21-1-00112233445566778899aabbccddeeff", "S-1-5-21-1-00112233445566778899aabbccddeeff", false},
		{ConsolePipeName("x", r), "x", false},
		{ConsolePipeName("", r), "", false},
	} {
		if got := ValidConsolePipe(tc.pipe, tc.sid); got != tc.want {
			t.Errorf("ValidConsolePipe(%q, %q) = %v, want %v", tc.pipe, tc.sid, got, tc.want)
		}
	}
}

// TestServicePipeSDDL: interactive users may connect but not create an
// instance of the pipe (FILE_CREATE_PIPE_INSTANCE, 0x4, is in GA, GW and
// FILE_GENERIC_WRITE), the owner is SYSTEM, network logons are denied.
func TestServicePipeSDDL(t *testing.T) {
	sddl := ServicePipeSDDL
	if !strings.HasPrefix(sddl, "O:SYG:SYD:P(D;;GA;;;NU)") {
		t.Errorf("%q: want owner SYSTEM, protected DACL, network logons denied first", sddl)
	}
	aces := strings.Split(strings.TrimSuffix(sddl[strings.Index(sddl, "D:P(")+4:], ")"), ")(")
	for _, ace := range aces {
		f := strings.Split(ace, ";")
		if len(f) != 6 {
			t.Fatalf("ACE %q", ace)
		}
		typ, rights, who := f[0], f[2], f[5]
		if typ != "A" || who == "SY" {
			continue
		}
		if who != "IU" {
			t.Errorf("ACE %q admits %s", ace, who)
		}
		if createsInstance(t, rights) {
			t.Errorf("ACE %q lets %s create pipe instances", ace, who)
		}
		// What the client asks for must be within what it is granted.
		if m := mask(t, rights); fileGenericRead|0x2 != (fileGenericRead|0x2)&m {
			t.Errorf("ACE %q does not grant the client's access %#x", ace, PipeClientAccess)
		}
	}
	if PipeClientAccess&0x40000000 != 0 || PipeClientAccess&0x4 != 0 {
		t.Errorf("client asks for GENERIC_WRITE or FILE_APPEND_DATA: %#x", PipeClientAccess)
	}
}

const fileGenericRead = 0x120089

// mask reads an SDDL rights field: hex, or the generic/file letters used
// in this package.
func mask(t *testing.T, rights string) uint32 {
	t.Helper()
	if strings.HasPrefix(rights, "0x") {
		var m uint32
		for _, c := range rights[2:] {
			m <<= 4
			switch {
			case '0' <= c && c <= '9':
				m |= uint32(c - '0')
			case 'a' <= c && c <= 'f':
				m |= uint32(c-'a') + 10
			default:
				t.Fatalf("rights %q", rights)
			}
		}
		return m
	}
	var m uint32
	for i := 0; i+2 <= len(rights); i += 2 {
		switch rights[i : i+2] {
		case "GA", "GW", "FA", "FW":
			m |= 0x4 // each includes FILE_APPEND_DATA
		case "GR":
			m |= fileGenericRead
		case "FR":
			m |= fileGenericRead
		default:
			t.Fatalf("rights %q", rights)
		}
	}
	return m
}

func createsInstance(t *testing.T, rights string) bool { return mask(t, rights)&0x4 != 0 }

// TestServicePipeSDDLOld: the descriptor the service used before gave
// interactive users GRGW, which includes FILE_CREATE_PIPE_INSTANCE.
func TestServicePipeSDDLOld(t *testing.T) {
	if !createsInstance(t, "GRGW") || createsInstance(t, PipeClientRights) {
		t.Error("the rights reader is wrong")
	}
}

func TestCheckPipeOwner(t *testing.T) {
	if err := CheckPipeOwner(ServicePipe, SystemSID, SystemSID); err != nil {
		t.Error(err)
	}
	for _, owner := range []string{testSID, "S-1-5-32-544", ""} {
		err := CheckPipeOwner(ServicePipe, owner, SystemSID)
		if !errors.Is(err, ErrPipeImpostor) || !strings.Contains(err.Error(), ServicePipe) {
			t.Errorf("owner %q: %v", owner, err)
		}
	}
}

func TestControlPipe(t *testing.T) {
	name, err := ControlPipeName(testSID)
	if err != nil || name != `\\.\pipe\airlock-`+testSID {
		t.Errorf("ControlPipeName = %q, %v", name, err)
	}
	for _, bad := range []string{"", "alice", `S-1-5-21-1\..\airlock-vmservice`, "S-1-5-21)(A;;GA;;;WD"} {
		if n, err := ControlPipeName(bad); err == nil {
			t.Errorf("ControlPipeName(%q) = %q", bad, n)
		}
	}
	want := "O:" + testSID + "D:P(D;;GA;;;NU)(A;;GA;;;SY)(A;;GA;;;" + testSID + ")"
	if got := ControlPipeSDDL(testSID); got != want {
		t.Errorf("ControlPipeSDDL = %q, want %q", got, want)
	}
	// Nobody but the owner and SYSTEM may connect or add an instance.
	if got := ConsoleSDDL(testSID); !strings.HasPrefix(got, "O:"+testSID+"D:P(") {
		t.Errorf("ConsoleSDDL = %q: want the user as owner", got)
	}
}
