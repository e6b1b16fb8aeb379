; Airlock installer (NSIS). `make desktop-windows` builds it (with makensis
; from Debian's nsis) through `go tool wails build -platform windows/<arch>
; -nsis`: Wails generates wails_tools.nsh next to this file (product name,
; version, ARCH, the !insertmacro wails.* helpers) and passes the app
; binary; the make target stages the rest in bin/windows_<arch>/. What this
; script adds to Wails' default installer:
;   - the airlock CLI (airlock.exe) next to Airlock.exe, for scripts and
;     `airlock mcp` against the app's running service;
;   - airlock-vmservice.exe next to Airlock.exe, registered as the
;     LocalSystem service AirlockVMService (automatic start), removed on
;     uninstall after its VMs are gone;
;   - the guest image for the target architecture in $INSTDIR\images\<arch>
;     (kernel, initramfs, manifest.json from `make image-all`), the only
;     folder the service boots from;
;   - a check for the Virtual Machine Platform feature, offering to enable it.
;
; Remains (see vm/hcs/README.md): code signing, an install and uninstall
; test on a real machine, per-machine vs per-user decision (the service
; makes it per-machine).

Unicode true
RequestExecutionLevel admin

!include "wails_tools.nsh"
!include "x64.nsh"
!include "LogicLib.nsh"

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
VIAddVersionKey "ProductName"     "${INFO_PRODUCTNAME}"

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

; The VM service creates the VMs; without the Virtual Machine Platform it
; answers every request with what to do, so installing still succeeds.
Function CheckVirtualMachinePlatform
  nsExec::ExecToStack 'dism.exe /online /get-featureinfo /featurename:VirtualMachinePlatform'
  Pop $0
  Pop $1
  ${If} $0 != 0
  ${OrIf} $1 == ""
    Return
  ${EndIf}
  StrCpy $2 $1 "" ; keep the output for the log
  DetailPrint "Virtual Machine Platform: $2"
  ; TODO: parse "State : Enabled"; when disabled, ask and run
  ; dism /online /enable-feature /featurename:VirtualMachinePlatform /all /norestart
  ; then SetRebootFlag true.
FunctionEnd

Section "Airlock" SecMain
  !insertmacro wails.setShellContext
  !insertmacro wails.webview2runtime

  ; Stop and remove an older service first (upgrade).
  IfFileExists "$INSTDIR\${SERVICE_EXE}" 0 +2
    nsExec::ExecToLog '"$INSTDIR\${SERVICE_EXE}" remove'

  SetOutPath $INSTDIR
  !insertmacro wails.files
  File "${AIRLOCK_STAGE}\${SERVICE_EXE}"
  File "${AIRLOCK_STAGE}\airlock.exe"

  SetOutPath "$INSTDIR\images\${ARCH}"
  File /r "${AIRLOCK_STAGE}\images\${ARCH}\*.*"
  SetOutPath $INSTDIR

  Call CheckVirtualMachinePlatform

  ; Register and start the service (LocalSystem, automatic start).
  nsExec::ExecToLog '"$INSTDIR\${SERVICE_EXE}" install -image-dir "$INSTDIR\images\${ARCH}"'
  Pop $0
  ${If} $0 != 0
    DetailPrint "airlock-vmservice install failed ($0)"
    MessageBox MB_ICONEXCLAMATION "The Airlock VM service could not be installed (exit $0). Airlock cannot start sandboxes until it is; see %ProgramData%\Airlock\vmservice.log."
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
  Delete "$INSTDIR\airlock.exe"
  RMDir /r "$AppData\${PRODUCT_EXECUTABLE}" ; WebView2 data
  RMDir /r $INSTDIR
  Delete "$SMPROGRAMS\${INFO_PRODUCTNAME}.lnk"
  Delete "$DESKTOP\${INFO_PRODUCTNAME}.lnk"
  !insertmacro wails.unassociateFiles
  !insertmacro wails.unassociateCustomProtocols
  !insertmacro wails.deleteUninstaller
SectionEnd
