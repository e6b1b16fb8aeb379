; Airlock installer (NSIS). `make desktop-windows` builds it (with makensis
; from Debian's nsis) through `go tool wails build -platform windows/<arch>
; -nsis`: Wails generates wails_tools.nsh next to this file (product name,
; version, ARCH, the !insertmacro wails.* helpers) and passes the app
; binary; the make target stages the rest in bin/windows_<arch>/. What this
; script adds to Wails' default installer:
;   - the airlock CLI (bin\airlock.exe: beside Airlock.exe it would be
;     the same file), for scripts and `airlock mcp` against the app's
;     running service;
;   - airlock-vmservice.exe next to Airlock.exe, registered as the
;     LocalSystem service AirlockVMService (automatic start), removed on
;     uninstall after its VMs are gone;
;   - the guest image for the target architecture in $INSTDIR\images\<arch>
;     (kernel, initramfs, manifest.json from `make image-all`), the only
;     folder the service boots from;
;   - a check for the Virtual Machine Platform feature with the 64-bit
;     dism.exe, offering to enable it;
;   - upgrades in place: the new airlock-vmservice.exe, run from the
;     plug-ins folder, stops the old service and waits for its process to
;     exit, the files are replaced, and `install` updates the registered
;     service and starts it (never remove and create again: a service
;     marked for deletion cannot be created, error 1072);
;   - its own WebView2 check (per-machine and per-user, "0.0.0.0" means
;     absent), in place of wails.webview2runtime;
;   - on uninstall, the uninstalling user's WebView2 data (the app's own
;     state, the user's data, stays).
;
; build/windows/installer/installer_test.go checks these properties and,
; when makensis is installed, compiles the script.
;
; Remains (see vm/hcs/README.md): code signing, an install and uninstall
; test on a real machine, per-machine vs per-user decision (the service
; makes it per-machine).

Unicode true
RequestExecutionLevel admin

!include "wails_tools.nsh"
; An amd64 installer is itself a 64-bit program: no WOW64 redirection of
; System32, Program Files or the registry to undo, and it runs where only
; 64-bit Windows programs run (Debian's wine64, which CI installs:
; `make test-windows-wine`). NSIS has no arm64 stub; the arm64 installer
; stays x86, which arm64 Windows runs emulated.
!if "${ARCH}" == "amd64"
  Target amd64-unicode
!endif
!include "x64.nsh"
!include "LogicLib.nsh"
!include "StrFunc.nsh"
${StrStr}

!define SERVICE_NAME "AirlockVMService"
!define SERVICE_EXE  "airlock-vmservice.exe"
; Set by the build: the folder holding airlock-vmservice.exe, airlock.exe
; and images\<arch>.
!ifndef AIRLOCK_STAGE
  !define AIRLOCK_STAGE "..\..\bin\windows_${ARCH}"
!endif

VIProductVersion "${INFO_PRODUCTVERSION}.0"
VIFileVersion    "${INFO_PRODUCTVERSION}.0"
VIAddVersionKey "CompanyName"     "${INFO_COMPANYNAME}"
VIAddVersionKey "FileDescription" "${INFO_PRODUCTNAME} Installer"
VIAddVersionKey "ProductVersion"  "${INFO_PRODUCTVERSION}"
VIAddVersionKey "FileVersion"     "${INFO_PRODUCTVERSION}"
VIAddVersionKey "ProductName"     "${INFO_PRODUCTNAME}"
VIAddVersionKey "LegalCopyright"  "${INFO_COPYRIGHT}"

!include "MUI.nsh"
!define MUI_ICON "..\icon.ico"
!define MUI_UNICON "..\icon.ico"
!define MUI_ABORTWARNING
!insertmacro MUI_PAGE_WELCOME
!insertmacro MUI_PAGE_DIRECTORY
!insertmacro MUI_PAGE_INSTFILES
!insertmacro MUI_PAGE_FINISH
!insertmacro MUI_UNPAGE_INSTFILES
!insertmacro MUI_LANGUAGE "English"

Name "${INFO_PRODUCTNAME}"
OutFile "..\..\bin\${INFO_PROJECTNAME}-${ARCH}-installer.exe"
InstallDir "$PROGRAMFILES64\${INFO_COMPANYNAME}\${INFO_PRODUCTNAME}"
ShowInstDetails show

Function .onInit
  !insertmacro wails.checkArchitecture
FunctionEnd

; DISM must be the 64-bit one: this installer is a 32-bit program, so
; $SYSDIR and "dism.exe" resolve to SysWOW64, whose DISM refuses to service
; a 64-bit Windows. $WINDIR\Sysnative is the real System32 for a 32-bit
; process on 64-bit (x64 and ARM64) Windows; on a 64-bit stub, which has
; no Sysnative, $SYSDIR is already the real one.
Function Dism64
  ${If} ${FileExists} "$WINDIR\Sysnative\dism.exe"
    StrCpy $R9 "$WINDIR\Sysnative\dism.exe"
  ${Else}
    StrCpy $R9 "$SYSDIR\dism.exe"
  ${EndIf}
FunctionEnd

; The VM service creates the VMs; without the Virtual Machine Platform it
; answers every request with what to do, so installing still succeeds.
; /English keeps "State : Enabled" readable on every display language.
Function CheckVirtualMachinePlatform
  Call Dism64
  nsExec::ExecToStack '"$R9" /English /online /get-featureinfo /featurename:VirtualMachinePlatform'
  Pop $0
  Pop $1
  ${If} $0 != 0
  ${OrIf} $1 == ""
    DetailPrint "Virtual Machine Platform: dism.exe failed ($0): $1"
    Return
  ${EndIf}
  ${StrStr} $2 $1 "State : Enabled"
  ${If} $2 != ""
    DetailPrint "Virtual Machine Platform: enabled"
    Return
  ${EndIf}
  DetailPrint "Virtual Machine Platform: not enabled"
  ; A silent install does not change Windows features; Airlock says what
  ; to do when it starts.
  IfSilent 0 +2
    Return
  MessageBox MB_YESNO|MB_ICONQUESTION "Airlock needs the Windows feature Virtual Machine Platform, which is off. Turn it on now? (Windows restarts to finish.)" IDNO done
  nsExec::ExecToLog '"$R9" /online /enable-feature /featurename:VirtualMachinePlatform /all /norestart'
  Pop $0
  ; 3010: done, a restart completes it.
  ${If} $0 == 0
  ${OrIf} $0 == 3010
    SetRebootFlag true
  ${Else}
    MessageBox MB_ICONEXCLAMATION "Turning on Virtual Machine Platform failed (dism exit $0). Turn it on in Windows Features, then restart." /SD IDOK
  ${EndIf}
  done:
FunctionEnd

; WebView2 is installed when either documented registry value "pv" holds a
; version other than "0.0.0.0": the per-machine client key (on 64-bit
; Windows under WOW6432Node) or the per-user one. Microsoft Learn,
; "Distribute your app and the WebView2 Runtime", section "Detect if a
; WebView2 Runtime is already installed": a key that is missing, null,
; empty or "0.0.0.0" means not installed. {F3017226-...} is the WebView2
; Runtime's EdgeUpdate client id. Wails' wails.webview2runtime reads HKCU
; only for per-user installers and takes "0.0.0.0" for installed.
!define WEBVIEW2_CLIENT "Microsoft\EdgeUpdate\Clients\{F3017226-FE2A-4295-8BDF-00C3A9A7E4C5}"
Function WebView2Installed
  SetRegView 64
  StrCpy $1 "0"
  ReadRegStr $0 HKLM "SOFTWARE\WOW6432Node\${WEBVIEW2_CLIENT}" "pv"
  ${If} $0 != ""
  ${AndIf} $0 != "0.0.0.0"
    StrCpy $1 "1"
  ${EndIf}
  ReadRegStr $0 HKCU "Software\${WEBVIEW2_CLIENT}" "pv"
  ${If} $0 != ""
  ${AndIf} $0 != "0.0.0.0"
    StrCpy $1 "1"
  ${EndIf}
  StrCpy $0 $1
FunctionEnd

; The bootstrapper Wails puts in tmp\ (as for wails.webview2runtime),
; run elevated: a per-machine install.
!macro airlock.webview2runtime
  Call WebView2Installed
  ${If} $0 != "1"
    DetailPrint "Installing: WebView2 Runtime"
    InitPluginsDir
    CreateDirectory "$PLUGINSDIR\webview2bootstrapper"
    SetOutPath "$PLUGINSDIR\webview2bootstrapper"
    File "tmp\MicrosoftEdgeWebview2Setup.exe"
    ExecWait '"$PLUGINSDIR\webview2bootstrapper\MicrosoftEdgeWebview2Setup.exe" /silent /install'
  ${EndIf}
!macroend

; An upgrade: the new service executable, from the plug-ins folder, stops
; the installed service and waits until its process has exited (the old
; executable is then free to replace); nothing is deleted.
Function StopService
  InitPluginsDir
  SetOutPath $PLUGINSDIR
  File "/oname=$PLUGINSDIR\${SERVICE_EXE}" "${AIRLOCK_STAGE}\${SERVICE_EXE}"
  nsExec::ExecToLog '"$PLUGINSDIR\${SERVICE_EXE}" stop'
  Pop $0
  ${If} $0 != 0
    DetailPrint "airlock-vmservice stop failed ($0)"
    MessageBox MB_ICONSTOP "The running Airlock VM service could not be stopped (exit $0). Stop it (sc stop ${SERVICE_NAME}) and run the installer again." /SD IDOK
    Abort
  ${EndIf}
FunctionEnd

; WebView2 keeps each user's data in %APPDATA%\<exe name> (go-webview2's
; default, which Airlock keeps). wails.setShellContext selects the
; all-users folders, where $APPDATA is ProgramData, so this switches to the
; uninstalling user's own (AppData may be redirected). Other profiles are
; left alone: an elevated uninstaller deleting inside folders their owners
; control would follow whatever link they put there. Not a link here
; either, for the same reason.
Function un.RemoveWebView2Data
  SetShellVarContext current
  StrCpy $R0 "$APPDATA\${PRODUCT_EXECUTABLE}"
  !insertmacro wails.setShellContext
  ${GetFileAttributes} "$R0" "REPARSE_POINT" $R1
  ${If} $R1 == "1"
    DetailPrint "Not removed (a link): $R0"
    Return
  ${EndIf}
  RMDir /r "$R0"
FunctionEnd

Section "Airlock" SecMain
  !insertmacro wails.setShellContext
  !insertmacro airlock.webview2runtime

  ; An upgrade stops the service (a fresh install finds none to stop).
  Call StopService

  SetOutPath $INSTDIR
  !insertmacro wails.files
  File "${AIRLOCK_STAGE}\${SERVICE_EXE}"
  ; The CLI has a folder of its own: "airlock.exe" is the desktop app's
  ; "Airlock.exe" to Windows, whose file names ignore case; beside it one
  ; would overwrite the other. From bin\ it finds the image in ..\images.
  SetOutPath "$INSTDIR\bin"
  File "${AIRLOCK_STAGE}\airlock.exe"

  SetOutPath "$INSTDIR\images\${ARCH}"
  File /r "${AIRLOCK_STAGE}\images\${ARCH}\*.*"
  SetOutPath $INSTDIR

  Call CheckVirtualMachinePlatform

  ; Register the service (LocalSystem, automatic start), or on an upgrade
  ; update its registration in place, and start it.
  ; Its output says why it failed: shown in the message, and in the
  ; details of a silent install's log.
  nsExec::ExecToStack '"$INSTDIR\${SERVICE_EXE}" install -image-dir "$INSTDIR\images\${ARCH}"'
  Pop $0
  Pop $1
  ${If} $0 != 0
    DetailPrint "airlock-vmservice install failed ($0): $1"
    ; A silent install never waits on a message box; its exit code says
    ; the service is missing.
    SetErrorLevel 2
    MessageBox MB_ICONEXCLAMATION "The Airlock VM service could not be installed (exit $0): $1$\r$\nAirlock cannot start sandboxes until it is; see %ProgramData%\Airlock\vmservice.log." /SD IDOK
  ${EndIf}

  CreateShortcut "$SMPROGRAMS\${INFO_PRODUCTNAME}.lnk" "$INSTDIR\${PRODUCT_EXECUTABLE}"
  !insertmacro wails.associateFiles
  !insertmacro wails.associateCustomProtocols
  !insertmacro wails.writeUninstaller
SectionEnd

Section "uninstall"
  !insertmacro wails.setShellContext
  ; The service terminates its VMs when stopped (each VM's session ends).
  nsExec::ExecToLog '"$INSTDIR\${SERVICE_EXE}" remove'
  RMDir /r "$INSTDIR\images"
  Delete "$INSTDIR\${SERVICE_EXE}"
  Delete "$INSTDIR\bin\airlock.exe"
  RMDir "$INSTDIR\bin"
  Call un.RemoveWebView2Data
  RMDir /r $INSTDIR
  Delete "$SMPROGRAMS\${INFO_PRODUCTNAME}.lnk"
  Delete "$DESKTOP\${INFO_PRODUCTNAME}.lnk"
  !insertmacro wails.unassociateFiles
  !insertmacro wails.unassociateCustomProtocols
  !insertmacro wails.deleteUninstaller
SectionEnd
