// Package installer holds the NSIS script of the Windows installer; its
// test checks properties of project.nsi that a run needs Windows (or Wine)
// to show, and compiles the script with makensis when it is installed.
package installer

import (
	"bytes"
	"debug/pe"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"text/template"
)

// script is project.nsi without comments, one statement a line.
func script(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("project.nsi")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || l[0] == ';' || l[0] == '#' {
			continue
		}
		lines = append(lines, l)
	}
	return lines
}

// block is the lines from the one starting with start to the next line
// equal to end.
func block(t *testing.T, lines []string, start, end string) []string {
	t.Helper()
	for i, l := range lines {
		if strings.HasPrefix(l, start) {
			for j := i + 1; j < len(lines); j++ {
				if lines[j] == end {
					return lines[i : j+1]
				}
			}
		}
	}
	t.Fatalf("no %q ... %q in project.nsi", start, end)
	return nil
}

func index(lines []string, re string) int {
	r := regexp.MustCompile(re)
	for i, l := range lines {
		if r.MatchString(l) {
			return i
		}
	}
	return -1
}

// TestDism64: dism.exe is run from the real System32. The installer is a
// 32-bit program, so "dism.exe" or $SYSDIR\dism.exe is SysWOW64's, which
// cannot service 64-bit Windows.
func TestDism64(t *testing.T) {
	lines := script(t)
	for _, l := range lines {
		if strings.Contains(strings.ToLower(l), "dism") && strings.HasPrefix(l, "nsExec::") && !strings.Contains(l, `"$R9"`) {
			t.Errorf("dism run without the 64-bit path: %s", l)
		}
	}
	fn := block(t, lines, "Function Dism64", "FunctionEnd")
	if index(fn, `^StrCpy \$R9 "\$WINDIR\\Sysnative\\dism\.exe"$`) < 0 {
		t.Errorf("Dism64 does not pick $WINDIR\\Sysnative\\dism.exe:\n%s", strings.Join(fn, "\n"))
	}
	vmp := block(t, lines, "Function CheckVirtualMachinePlatform", "FunctionEnd")
	if c := index(vmp, `^Call Dism64$`); c < 0 || c > index(vmp, `^nsExec::`) {
		t.Error("CheckVirtualMachinePlatform runs dism before Call Dism64")
	}
	if index(vmp, `/English`) < 0 || index(vmp, `State : Enabled`) < 0 {
		t.Error("the feature state is not read from English output")
	}
}

// TestUpgradeInPlace: the install section stops the service with the new
// executable and updates it with install; it never removes it (remove
// then create races with ERROR_SERVICE_MARKED_FOR_DELETE, 1072).
func TestUpgradeInPlace(t *testing.T) {
	lines := script(t)
	sec := block(t, lines, `Section "Airlock"`, "SectionEnd")
	if i := index(sec, `remove`); i >= 0 {
		t.Errorf("the install section removes the service: %s", sec[i])
	}
	stop := index(sec, `^Call StopService$`)
	files := index(sec, `^File "\$\{AIRLOCK_STAGE\}\\\$\{SERVICE_EXE\}"$`)
	install := index(sec, `^nsExec::ExecTo(Log|Stack) '"\$INSTDIR\\\$\{SERVICE_EXE\}" install `)
	if stop < 0 || files < 0 || install < 0 || !(stop < files && files < install) {
		t.Errorf("want stop (%d) < the service's files (%d) < install (%d)", stop, files, install)
	}
	fn := block(t, lines, "Function StopService", "FunctionEnd")
	extract := index(fn, `^File "/oname=\$PLUGINSDIR\\\$\{SERVICE_EXE\}" "\$\{AIRLOCK_STAGE\}\\\$\{SERVICE_EXE\}"$`)
	run := index(fn, `^nsExec::ExecToLog '"\$PLUGINSDIR\\\$\{SERVICE_EXE\}" stop'$`)
	if extract < 0 || run < extract || index(fn, `^Abort$`) < run {
		t.Errorf("StopService must extract the new executable, run its stop and abort on failure:\n%s", strings.Join(fn, "\n"))
	}
	un := block(t, lines, `Section "uninstall"`, "SectionEnd")
	if index(un, `^nsExec::ExecToLog '"\$INSTDIR\\\$\{SERVICE_EXE\}" remove'$`) < 0 {
		t.Error("uninstall does not remove the service")
	}
}

// TestWebView2: the runtime counts as installed per machine or per user,
// never on a "pv" of "0.0.0.0"; Wails' macro, which checks HKCU only for
// per-user installers and accepts "0.0.0.0", is not used.
func TestWebView2(t *testing.T) {
	lines := script(t)
	if i := index(lines, `wails\.webview2runtime`); i >= 0 {
		t.Errorf("uses Wails' WebView2 check: %s", lines[i])
	}
	if index(lines, `^!insertmacro airlock\.webview2runtime$`) < 0 {
		t.Error("the install does not check WebView2")
	}
	const client = `Microsoft\EdgeUpdate\Clients\{F3017226-FE2A-4295-8BDF-00C3A9A7E4C5}`
	if index(lines, regexp.QuoteMeta(`!define WEBVIEW2_CLIENT "`+client+`"`)) < 0 {
		t.Errorf("no WEBVIEW2_CLIENT %s", client)
	}
	fn := block(t, lines, "Function WebView2Installed", "FunctionEnd")
	for _, key := range []string{`HKLM "SOFTWARE\WOW6432Node\${WEBVIEW2_CLIENT}" "pv"`, `HKCU "Software\${WEBVIEW2_CLIENT}" "pv"`} {
		i := index(fn, regexp.QuoteMeta(`ReadRegStr $0 `+key))
		if i < 0 || i+2 >= len(fn) || fn[i+1] != `${If} $0 != ""` || fn[i+2] != `${AndIf} $0 != "0.0.0.0"` {
			t.Errorf("%s is not read, or not checked for empty and 0.0.0.0:\n%s", key, strings.Join(fn, "\n"))
		}
	}
}

// TestWebView2DataRemoved: the uninstaller deletes the uninstalling
// user's %APPDATA%\<exe> (WebView2's data), not ProgramData's, which is
// what $APPDATA means under wails.setShellContext's all-users context.
func TestWebView2DataRemoved(t *testing.T) {
	lines := script(t)
	un := block(t, lines, `Section "uninstall"`, "SectionEnd")
	if index(un, `^Call un\.RemoveWebView2Data$`) < 0 {
		t.Error("uninstall does not remove the WebView2 data")
	}
	for _, l := range un {
		if strings.Contains(strings.ToLower(l), "$appdata") {
			t.Errorf("uninstall section uses $APPDATA in the all-users context: %s", l)
		}
	}
	fn := block(t, lines, "Function un.RemoveWebView2Data", "FunctionEnd")
	cur := index(fn, `^SetShellVarContext current$`)
	path := index(fn, regexp.QuoteMeta(`StrCpy $R0 "$APPDATA\${PRODUCT_EXECUTABLE}"`))
	rm := index(fn, regexp.QuoteMeta(`RMDir /r "$R0"`))
	link := index(fn, `REPARSE_POINT`)
	if cur < 0 || path < cur || link < path || rm < link {
		t.Errorf("want the current user's context, its $APPDATA path, a link check, then RMDir:\n%s", strings.Join(fn, "\n"))
	}
}

// TestCompiles builds the installer with makensis (Debian: nsis) from
// dummy inputs and the wails_tools.nsh Wails generates from its template,
// as `make desktop-windows` does with the real ones.
func TestCompiles(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	makensis, err := exec.LookPath("makensis")
	if err != nil {
		t.Skip("makensis not installed (apt: nsis)")
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/wailsapp/wails/v2").Output()
	if err != nil {
		t.Skipf("cannot find the Wails module: %v", err)
	}
	wailsDir := strings.TrimSpace(string(out))
	tmpl, err := template.ParseFiles(filepath.Join(wailsDir, "pkg/buildassets/build/windows/installer/wails_tools.nsh"))
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	inst := filepath.Join(root, "build", "windows", "installer")
	stage := filepath.Join(root, "build", "bin", "windows_amd64")
	for _, d := range []string{filepath.Join(inst, "tmp"), filepath.Join(stage, "images", "amd64")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var tools bytes.Buffer
	data := map[string]any{"Name": "Airlock", "Info": map[string]any{
		"CompanyName": "Airlock", "ProductName": "Airlock", "ProductVersion": "1.0.0", "Copyright": "",
		"FileAssociations": nil, "Protocols": nil,
	}}
	if err := tmpl.Execute(&tools, data); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("project.nsi")
	if err != nil {
		t.Fatal(err)
	}
	icon, err := os.ReadFile("../icon.ico")
	if err != nil {
		t.Fatal(err)
	}
	app := filepath.Join(root, "Airlock.exe")
	for path, b := range map[string][]byte{
		filepath.Join(inst, "wails_tools.nsh"):                       tools.Bytes(),
		filepath.Join(inst, "project.nsi"):                           src,
		filepath.Join(inst, "tmp", "MicrosoftEdgeWebview2Setup.exe"): []byte("MZ"),
		filepath.Join(root, "build", "windows", "icon.ico"):          icon,
		filepath.Join(stage, "airlock-vmservice.exe"):                []byte("MZ"),
		filepath.Join(stage, "airlock.exe"):                          []byte("MZ"),
		filepath.Join(stage, "images", "amd64", "manifest.json"):     []byte("{}"),
		app: []byte("MZ"),
	} {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(makensis, "-V2", "-WX", "-DARG_WAILS_AMD64_BINARY="+app, "project.nsi")
	cmd.Dir = inst
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("makensis: %v\n%s", err, out)
	}
	f, err := pe.Open(filepath.Join(root, "build", "bin", "Airlock-amd64-installer.exe"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Machine != pe.IMAGE_FILE_MACHINE_AMD64 {
		t.Errorf("the amd64 installer's machine is %#x, want AMD64", f.Machine)
	}
}

// TestCLIApartFromApp: the CLI is not written into the folder of the
// desktop app's Airlock.exe: Windows file names ignore case, so
// airlock.exe there replaced the app (seen under Wine: the installed
// Airlock.exe was the CLI).
func TestCLIApartFromApp(t *testing.T) {
	lines := script(t)
	sec := block(t, lines, `Section "Airlock"`, "SectionEnd")
	cli := index(sec, `^File "\$\{AIRLOCK_STAGE\}\\airlock\.exe"$`)
	if cli < 0 {
		t.Fatal("the install section does not install airlock.exe")
	}
	out := ""
	for _, l := range sec[:cli] {
		if p, ok := strings.CutPrefix(l, "SetOutPath "); ok {
			out = strings.Trim(p, `"`)
		}
	}
	if out != `$INSTDIR\bin` {
		t.Errorf("airlock.exe is installed into %q, want $INSTDIR\\bin", out)
	}
}

// TestAmd64Target: the amd64 installer is a 64-bit program (no WOW64
// redirection; Debian's wine64 runs it).
func TestAmd64Target(t *testing.T) {
	lines := script(t)
	i := index(lines, `^!if "\$\{ARCH\}" == "amd64"$`)
	if i < 0 || i+1 >= len(lines) || lines[i+1] != "Target amd64-unicode" || i < index(lines, `^!include "wails_tools\.nsh"$`) {
		t.Error(`want "Target amd64-unicode" for ARCH amd64, after wails_tools.nsh defines ARCH`)
	}
}

// TestSilentNeverWaits: every message box has a silent default (/SD), so
// an unattended install cannot hang on one (seen under Wine: a failed
// service install waited on its message box for ever).
func TestSilentNeverWaits(t *testing.T) {
	for _, l := range script(t) {
		if strings.HasPrefix(l, "MessageBox ") && !strings.Contains(l, " /SD ") {
			// The Virtual Machine Platform question is only asked when not silent.
			if strings.Contains(l, "Virtual Machine Platform, which is off") {
				continue
			}
			t.Errorf("a message box without a silent default: %s", l)
		}
	}
}
