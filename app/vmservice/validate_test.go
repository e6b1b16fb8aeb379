package vmservice

import (
	"errors"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/vm"
	"github.com/airlock-sandbox/airlock/vm/hcs"
)

func TestValidate(t *testing.T) {
	f := newFakeFiles()
	p := testPolicy()
	for _, tc := range []struct {
		name string
		edit func(*hcs.CreateRequest, *Caller)
		want error // nil: accepted
	}{
		{"good", func(*hcs.CreateRequest, *Caller) {}, nil},
		{"no share", func(r *hcs.CreateRequest, _ *Caller) { r.Share = nil }, nil},
		{"no console", func(r *hcs.CreateRequest, _ *Caller) { r.ConsolePipe = "" }, nil},
		{"read-only share", func(r *hcs.CreateRequest, _ *Caller) { r.Share.ReadOnly = true }, nil},
		{"case differs", func(r *hcs.CreateRequest, _ *Caller) { r.Share.Path = `c:\users\ALICE\src\project` }, nil},

		{"no caller", func(_ *hcs.CreateRequest, c *Caller) { c.SID = "" }, ErrDenied},
		{"sddl injection in SID", func(_ *hcs.CreateRequest, c *Caller) { c.SID = "S-1-1-0)(A;;FA;;;WD" }, ErrDenied},
		{"zero cpus", func(r *hcs.CreateRequest, _ *Caller) { r.CPUs = 0 }, vm.ErrInvalidConfig},
		{"too many cpus", func(r *hcs.CreateRequest, _ *Caller) { r.CPUs = 9 }, vm.ErrInvalidConfig},
		{"too much memory", func(r *hcs.CreateRequest, _ *Caller) { r.MemoryMiB = 1 << 20 }, vm.ErrInvalidConfig},
		{"too little memory", func(r *hcs.CreateRequest, _ *Caller) { r.MemoryMiB = 64 }, vm.ErrInvalidConfig},
		{"foreign console pipe", func(r *hcs.CreateRequest, _ *Caller) { r.ConsolePipe = `\\.\pipe\airlock-vmservice` }, ErrDenied},
		// Bob's app serves this pipe: Alice's VM must not connect to it.
		{"another account's console pipe", func(r *hcs.CreateRequest, _ *Caller) {
			r.ConsolePipe = hcs.ConsolePipePrefix + bob + "-00112233445566778899aabbccddeeff"
		}, ErrDenied},
		{"console pipe without an account", func(r *hcs.CreateRequest, _ *Caller) {
			r.ConsolePipe = hcs.ConsolePipePrefix + "00112233445566778899aabbccddeeff"
		}, ErrDenied},
		{"reserved cmdline key", func(r *hcs.CreateRequest, _ *Caller) { r.Cmdline = append(r.Cmdline, "airlock.share=virtiofs") }, vm.ErrInvalidConfig},
		{"console key", func(r *hcs.CreateRequest, _ *Caller) { r.Cmdline = []string{"console=tty0"} }, vm.ErrInvalidConfig},
		{"space in word", func(r *hcs.CreateRequest, _ *Caller) { r.Cmdline = []string{"a b"} }, vm.ErrInvalidConfig},
		{"too many words", func(r *hcs.CreateRequest, _ *Caller) { r.Cmdline = make([]string, 33) }, vm.ErrInvalidConfig},

		{"kernel relative", func(r *hcs.CreateRequest, _ *Caller) { r.Kernel = `vmlinuz` }, vm.ErrInvalidConfig},
		{"kernel dotdot", func(r *hcs.CreateRequest, _ *Caller) { r.Kernel = imgDir + `\..\amd64\vmlinuz` }, vm.ErrInvalidConfig},
		{"kernel forward slashes", func(r *hcs.CreateRequest, _ *Caller) { r.Kernel = `C:/Program Files/Airlock/images/amd64/vmlinuz` }, vm.ErrInvalidConfig},
		{"kernel short name", func(r *hcs.CreateRequest, _ *Caller) { r.Kernel = `C:\PROGRA~1\Airlock\images\amd64\vmlinuz` }, vm.ErrInvalidConfig},
		{"kernel UNC", func(r *hcs.CreateRequest, _ *Caller) { r.Kernel = `\\server\share\vmlinuz` }, vm.ErrInvalidConfig},
		{"kernel device path", func(r *hcs.CreateRequest, _ *Caller) { r.Kernel = `\\?\C:\Program Files\Airlock\images\amd64\vmlinuz` }, vm.ErrInvalidConfig},
		{"kernel stream", func(r *hcs.CreateRequest, _ *Caller) { r.Kernel = kernel + `:evil` }, vm.ErrInvalidConfig},
		{"kernel outside image", func(r *hcs.CreateRequest, _ *Caller) { r.Kernel = `C:\Windows\evil.img` }, ErrDenied},
		{"kernel link out of image", func(r *hcs.CreateRequest, _ *Caller) { r.Kernel = imgDir + `\evil` }, vm.ErrInvalidConfig},
		{"kernel is the folder", func(r *hcs.CreateRequest, _ *Caller) { r.Initrd = imgDir }, ErrDenied},
		{"initrd missing", func(r *hcs.CreateRequest, _ *Caller) { r.Initrd = imgDir + `\nope` }, vm.ErrInvalidConfig},

		{"share of another user", func(r *hcs.CreateRequest, _ *Caller) { r.Share.Path = `C:\Users\bob\code` }, ErrDenied},
		{"share through a link", func(r *hcs.CreateRequest, _ *Caller) { r.Share.Path = `C:\Users\alice\link` }, vm.ErrInvalidConfig},
		{"share owned by administrators", func(r *hcs.CreateRequest, _ *Caller) { r.Share.Path = `D:\shared` }, ErrDenied},
		{"share is the profile", func(r *hcs.CreateRequest, _ *Caller) { r.Share.Path = `C:\Users\alice` }, vm.ErrInvalidConfig},
		{"share is a drive", func(r *hcs.CreateRequest, _ *Caller) { r.Share.Path = `D:\` }, vm.ErrInvalidConfig},
		{"share is Users", func(r *hcs.CreateRequest, _ *Caller) { r.Share.Path = `C:\Users` }, vm.ErrInvalidConfig},
		{"share is Windows", func(r *hcs.CreateRequest, _ *Caller) { r.Share.Path = `C:\Windows` }, vm.ErrInvalidConfig},
		{"share is a file", func(r *hcs.CreateRequest, _ *Caller) { r.Share.Path = project + `\notes.txt` }, vm.ErrInvalidConfig},
		{"share missing", func(r *hcs.CreateRequest, _ *Caller) { r.Share.Path = project + `\gone` }, vm.ErrInvalidConfig},
		{"share trailing dot", func(r *hcs.CreateRequest, _ *Caller) { r.Share.Path = project + `.` }, vm.ErrInvalidConfig},
		{"share trailing backslash", func(r *hcs.CreateRequest, _ *Caller) { r.Share.Path = project + `\` }, vm.ErrInvalidConfig},

		{"standard image", func(r *hcs.CreateRequest, _ *Caller) {
			r.Kernel = stdDir + `\vmlinuz`
			r.Disks = []hcs.DiskRequest{{Path: rootVHD, ReadOnly: true}, {Path: dataVHD}}
		}, nil},
		{"image disk writable", func(r *hcs.CreateRequest, _ *Caller) { r.Disks = []hcs.DiskRequest{{Path: rootVHD}} }, ErrDenied},
		{"disk of another user", func(r *hcs.CreateRequest, _ *Caller) { r.Disks = []hcs.DiskRequest{{Path: `C:\Users\bob\data.vhd`}} }, ErrDenied},
		{"system disk read-only", func(r *hcs.CreateRequest, _ *Caller) {
			r.Disks = []hcs.DiskRequest{{Path: `C:\Windows\system.vhd`, ReadOnly: true}}
		}, ErrDenied},
		{"disk not a vhd", func(r *hcs.CreateRequest, _ *Caller) { r.Disks = []hcs.DiskRequest{{Path: project + `\data.img`}} }, vm.ErrInvalidConfig},
		{"disk is a folder", func(r *hcs.CreateRequest, _ *Caller) { r.Disks = []hcs.DiskRequest{{Path: project + `\dir.vhd`}} }, vm.ErrInvalidConfig},
		{"disk missing", func(r *hcs.CreateRequest, _ *Caller) { r.Disks = []hcs.DiskRequest{{Path: project + `\gone.vhd`}} }, vm.ErrInvalidConfig},
		{"disk relative", func(r *hcs.CreateRequest, _ *Caller) { r.Disks = []hcs.DiskRequest{{Path: `data.vhd`}} }, vm.ErrInvalidConfig},
		{"too many disks", func(r *hcs.CreateRequest, _ *Caller) { r.Disks = make([]hcs.DiskRequest, 5) }, vm.ErrInvalidConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, c := goodRequest(), aliceCaller()
			tc.edit(&req, &c)
			plan, err := p.Validate(req, c, f)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				checkPlan(t, req, c, plan)
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Validate = %v, want %v", err, tc.want)
			}
		})
	}
}

// TestValidateArm64Boot: on arm64 the firmware boots the kernel and the
// initrd from one folder (hcs.Spec.CheckBoot), so a request mixing the
// standard image's kernel with the minimal image's initrd is refused
// there and accepted on amd64.
func TestValidateArm64Boot(t *testing.T) {
	f := newFakeFiles()
	for _, tc := range []struct {
		arch    string
		std, ok bool
	}{
		{"amd64", false, true}, {"amd64", true, true},
		{"arm64", false, true}, {"arm64", true, false},
	} {
		p := testPolicy()
		p.Arch = tc.arch
		req := goodRequest()
		if tc.std {
			req.Kernel = stdDir + `\vmlinuz`
		}
		_, err := p.Validate(req, aliceCaller(), f)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, vm.ErrInvalidConfig)) {
			t.Errorf("%s, kernel %s: %v, want ok=%v", tc.arch, req.Kernel, err, tc.ok)
		}
	}
}

func checkPlan(t *testing.T, req hcs.CreateRequest, c Caller, plan Plan) {
	t.Helper()
	if plan.Spec.UserSID != c.SID || plan.Spec.Kernel != req.Kernel || plan.Spec.Initrd != initrd {
		t.Errorf("spec %+v", plan.Spec)
	}
	// Every file the VM opens, the disks too, is granted to it: the
	// image's as the service, the caller's own as the caller.
	if len(plan.Grants) != 2+len(req.Disks) || plan.Grants[0] != (Grant{Path: req.Kernel}) || plan.Grants[1] != (Grant{Path: initrd}) {
		t.Errorf("grants %v", plan.Grants)
	}
	if len(plan.Spec.Disks) != len(req.Disks) {
		t.Errorf("disks %+v for %+v", plan.Spec.Disks, req.Disks)
	}
	for i, d := range plan.Spec.Disks {
		inImage := strings.HasPrefix(d.Path, `C:\Program Files\Airlock\images\`)
		if d.Path != req.Disks[i].Path || d.ReadOnly != req.Disks[i].ReadOnly || plan.Grants[2+i] != (Grant{Path: d.Path, AsCaller: !inImage}) {
			t.Errorf("disk %d: %+v for %+v (grants %v)", i, d, req.Disks[i], plan.Grants)
		}
	}
	if req.Share == nil {
		if plan.SharePath != "" || plan.Spec.Share {
			t.Errorf("share without a request: %+v", plan)
		}
		return
	}
	// The canonical spelling, as the file system stores it, is what HCS gets.
	if plan.SharePath != project || !plan.Spec.Share || plan.ShareReadOnly != req.Share.ReadOnly || plan.Spec.ShareReadOnly != req.Share.ReadOnly {
		t.Errorf("share %+v", plan)
	}
}

func TestCanonicalForm(t *testing.T) {
	for p, ok := range map[string]bool{
		`C:\`: true, `C:\a\b`: true, `d:\x y\z.txt`: true,
		`C:`: false, `C:a`: false, `\a`: false, `C:\a\\b`: false, `C:\a\.\b`: false, `C:\a\..\b`: false,
		`C:\a\`: false, `C:\a.`: false, `C:\a `: false, `C:\a:b`: false, `C:\a/b`: false, "C:\\a\x01": false,
		`\\?\C:\a`: false, `\\.\pipe\x`: false, `\\srv\share\a`: false, `C:\a*`: false,
	} {
		if err := CanonicalForm(p); (err == nil) != ok {
			t.Errorf("CanonicalForm(%q) = %v", p, err)
		}
	}
}
