package vmservice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
	"unsafe"

	"github.com/Microsoft/go-winio"
	"github.com/Microsoft/hcsshim/osversion"
	"golang.org/x/sys/windows"
	"golang.org/x/sys/windows/svc"

	"github.com/airlock-sandbox/airlock/vm/hcs"
	"github.com/airlock-sandbox/airlock/vm/hcs/computecore"
)

// Config configures the Windows service.
type Config struct {
	// ImageDir is the installed guest image folder for this architecture.
	ImageDir string
	Log      *slog.Logger
}

// RunService runs Serve under the service control manager until it asks
// the service to stop.
func RunService(cfg Config) error {
	return svc.Run(hcs.ServiceName, &handler{cfg: cfg})
}

type handler struct{ cfg Config }

func (h *handler) Execute(_ []string, reqs <-chan svc.ChangeRequest, status chan<- svc.Status) (bool, uint32) {
	status <- svc.Status{State: svc.StartPending}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- Serve(ctx, h.cfg) }()
	status <- svc.Status{State: svc.Running, Accepts: svc.AcceptStop | svc.AcceptShutdown}
	for {
		select {
		case c := <-reqs:
			switch c.Cmd {
			case svc.Interrogate:
				status <- c.CurrentStatus
			case svc.Stop, svc.Shutdown:
				status <- svc.Status{State: svc.StopPending}
				cancel()
				<-errc
				return false, 0
			}
		case err := <-errc:
			if err != nil {
				h.cfg.Log.Error("service ended", "err", err)
				return true, 1
			}
			return false, 0
		}
	}
}

// Serve listens on the service pipe and answers every connection until
// ctx is done. It sweeps orphaned VMs first. When HCS is unusable it still
// serves, answering each create with the diagnosis.
func Serve(ctx context.Context, cfg Config) error {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	files := windowsFiles{}
	imageDir, err := files.Resolve(cfg.ImageDir)
	if err != nil {
		log.Error("image folder", "dir", cfg.ImageDir, "err", err)
		imageDir = "" // every boot file is then refused, with the reason
	}
	// The standard image, when installed, sits beside the minimal one:
	// images\standard\<arch> next to images\<arch>.
	standardDir := ""
	if imageDir != "" {
		if d, err := files.Resolve(filepath.Join(filepath.Dir(imageDir), "standard", runtime.GOARCH)); err == nil {
			standardDir = d
		}
	}
	srv := &Server{
		HCS:    windowsHCS{},
		Policy: Policy{ImageDir: imageDir, StandardDir: standardDir, Arch: runtime.GOARCH, MaxCPUs: min(runtime.NumCPU(), hcs.MaxCPUs), MaxMemoryMiB: hcs.MaxMemoryMiB},
		Files:  files,
		Log:    log,
	}
	if err := hcs.CheckBuild(uint32(osversion.Build())); err != nil {
		srv.Unavailable = err
	} else if err := computecore.Load(); err != nil {
		srv.Unavailable = err
	}
	if srv.Unavailable != nil {
		log.Error("cannot create VMs", "err", srv.Unavailable)
	} else if err := srv.Sweep(ctx); err != nil {
		log.Warn("orphan sweep", "err", err)
	}
	// go-winio creates the first instance with FILE_CREATE, so this fails
	// if anyone else already serves the name, and applies the SDDL:
	// owner SYSTEM, interactive users without FILE_CREATE_PIPE_INSTANCE.
	l, err := winio.ListenPipe(hcs.ServicePipe, &winio.PipeConfig{SecurityDescriptor: hcs.ServicePipeSDDL})
	if err != nil {
		return fmt.Errorf("vmservice: listen on %s: %w", hcs.ServicePipe, err)
	}
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	log.Info("serving", "pipe", hcs.ServicePipe, "image_dir", imageDir)
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, winio.ErrPipeListenerClosed) {
				return nil
			}
			log.Warn("accept", "err", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		go func() {
			caller, err := callerOf(c, files)
			if err != nil {
				log.Warn("caller identity", "err", err)
				c.Close()
				return
			}
			defer windows.Token(caller.Token).Close()
			srv.ServeConn(ctx, c, caller)
		}()
	}
}

var procImpersonateNamedPipeClient = windows.NewLazySystemDLL("advapi32.dll").NewProc("ImpersonateNamedPipeClient")

// callerOf reads the pipe client's token by impersonating it for a moment
// on a locked thread. The request never says who sent it.
func callerOf(c net.Conn, files windowsFiles) (Caller, error) {
	fd, ok := c.(interface{ Fd() uintptr })
	if !ok {
		return Caller{}, errors.New("not a named pipe connection")
	}
	h := windows.Handle(fd.Fd())
	var pid uint32
	_ = windows.GetNamedPipeClientProcessId(h, &pid)

	tok, err := impersonationToken(h)
	if err != nil {
		return Caller{}, fmt.Errorf("client process %d: %w", pid, err)
	}
	u, err := tok.GetTokenUser()
	if err != nil {
		tok.Close()
		return Caller{}, fmt.Errorf("client process %d: %w", pid, err)
	}
	caller := Caller{SID: u.User.Sid.String(), Token: uintptr(tok)}
	if p, err := tok.GetUserProfileDirectory(); err == nil {
		if cp, err := files.Resolve(p); err == nil {
			caller.Profile = cp
		}
	}
	return caller, nil
}

func impersonationToken(h windows.Handle) (windows.Token, error) {
	thread, err := pipeClientToken(h)
	if err != nil {
		return 0, err
	}
	defer thread.Close()
	return duplicateForVM(thread)
}

// pipeClientToken opens the token of the pipe client that h serves, by
// impersonating it for a moment on a locked thread.
func pipeClientToken(h windows.Handle) (windows.Token, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if r, _, err := procImpersonateNamedPipeClient.Call(uintptr(h)); r == 0 {
		return 0, fmt.Errorf("impersonate: %w", err)
	}
	var tok windows.Token
	err := windows.OpenThreadToken(windows.CurrentThread(), windows.TOKEN_DUPLICATE|windows.TOKEN_READ, true, &tok)
	if rerr := windows.RevertToSelf(); rerr != nil {
		// Running on as the client would be a privilege confusion: stop.
		panic(fmt.Sprintf("vmservice: RevertToSelf: %v", rerr))
	}
	if err != nil {
		return 0, fmt.Errorf("open the client's token: %w", err)
	}
	return tok, nil
}

// callerTokenAccess is the access the caller's token is duplicated with:
// WSL's GetUserToken asks for the same (microsoft/WSL
// src/windows/common/WslSecurity.cpp), and HCS gets that token as the
// identity of the Plan9 share (WSL's hcs::AddPlan9Share passes it to
// HcsModifyComputeSystem, src/windows/common/hcs.cpp).
const callerTokenAccess = windows.TOKEN_DUPLICATE | windows.TOKEN_IMPERSONATE | windows.TOKEN_QUERY |
	windows.TOKEN_ADJUST_PRIVILEGES | windows.TOKEN_ADJUST_DEFAULT

// duplicateForVM returns a copy of the caller's token t as WSL makes the
// one it keeps for a VM (GetUserToken in microsoft/WSL
// src/windows/common/WslSecurity.cpp): DuplicateTokenEx with
// callerTokenAccess, SecurityImpersonation, TokenImpersonation, so the
// service holds its own token object, independent of the pipe thread's
// impersonation, for as long as the VM needs it; and, when the token is at
// System integrity, lowered to High, because "the VM worker process runs
// at high integrity level and objects created with a higher integrity
// level token may be inaccessible" (the same function's comment).
func duplicateForVM(t windows.Token) (windows.Token, error) {
	var dup windows.Token
	if err := windows.DuplicateTokenEx(t, callerTokenAccess, nil, windows.SecurityImpersonation, windows.TokenImpersonation, &dup); err != nil {
		return 0, fmt.Errorf("duplicate the client's token: %w", err)
	}
	rid, err := integrityRID(dup)
	if err != nil {
		dup.Close()
		return 0, err
	}
	if rid >= securityMandatorySystemRID {
		if err := setIntegrity(dup, windows.WinHighLabelSid); err != nil {
			dup.Close()
			return 0, err
		}
	}
	return dup, nil
}

// securityMandatorySystemRID is SECURITY_MANDATORY_SYSTEM_RID (winnt.h),
// the System integrity level; golang.org/x/sys/windows does not define it.
const securityMandatorySystemRID = 0x4000

// integrityRID is t's integrity level: the last sub-authority of its
// mandatory label.
func integrityRID(t windows.Token) (uint32, error) {
	var n uint32
	_ = windows.GetTokenInformation(t, windows.TokenIntegrityLevel, nil, 0, &n)
	if n == 0 {
		return 0, errors.New("read the token's integrity level: no size")
	}
	b := make([]byte, n)
	if err := windows.GetTokenInformation(t, windows.TokenIntegrityLevel, &b[0], n, &n); err != nil {
		return 0, fmt.Errorf("read the token's integrity level: %w", err)
	}
	sid := (*windows.Tokenmandatorylabel)(unsafe.Pointer(&b[0])).Label.Sid
	c := sid.SubAuthorityCount()
	if c == 0 {
		return 0, errors.New("read the token's integrity level: empty label")
	}
	return sid.SubAuthority(uint32(c - 1)), nil
}

// setIntegrity sets t's mandatory label to the well-known label sid.
func setIntegrity(t windows.Token, label windows.WELL_KNOWN_SID_TYPE) error {
	sid, err := windows.CreateWellKnownSid(label)
	if err != nil {
		return fmt.Errorf("integrity label: %w", err)
	}
	tml := windows.Tokenmandatorylabel{Label: windows.SIDAndAttributes{Sid: sid, Attributes: windows.SE_GROUP_INTEGRITY}}
	if err := windows.SetTokenInformation(t, windows.TokenIntegrityLevel, (*byte)(unsafe.Pointer(&tml)), tml.Size()); err != nil {
		return fmt.Errorf("lower the token's integrity level: %w", err)
	}
	return nil
}

// windowsFiles is the real file system, seen as SYSTEM.
type windowsFiles struct{}

// Resolve returns the final path of p (links, junctions and short names
// resolved, the stored case), refusing anything not on a local drive.
func (windowsFiles) Resolve(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%q is not absolute", p)
	}
	name, err := windows.UTF16PtrFromString(p)
	if err != nil {
		return "", err
	}
	h, err := windows.CreateFile(name, windows.FILE_READ_ATTRIBUTES,
		windows.FILE_SHARE_READ|windows.FILE_SHARE_WRITE|windows.FILE_SHARE_DELETE,
		nil, windows.OPEN_EXISTING, windows.FILE_FLAG_BACKUP_SEMANTICS, 0)
	if err != nil {
		if errors.Is(err, windows.ERROR_FILE_NOT_FOUND) || errors.Is(err, windows.ERROR_PATH_NOT_FOUND) {
			return "", os.ErrNotExist
		}
		return "", err
	}
	defer windows.CloseHandle(h)
	buf := make([]uint16, windows.MAX_LONG_PATH)
	const volumeNameDOS = 0x0 // FILE_NAME_NORMALIZED | VOLUME_NAME_DOS
	n, err := windows.GetFinalPathNameByHandle(h, &buf[0], uint32(len(buf)), volumeNameDOS)
	if err != nil {
		return "", err
	}
	if int(n) >= len(buf) {
		return "", fmt.Errorf("%q: path too long", p)
	}
	final := windows.UTF16ToString(buf[:n])
	if strings.HasPrefix(final, `\\?\UNC\`) {
		return "", fmt.Errorf("%q is on a network share", p)
	}
	return strings.TrimPrefix(final, `\\?\`), nil
}

func (windowsFiles) Stat(p string) (os.FileInfo, error) { return os.Stat(p) }

func (windowsFiles) Owner(p string) (string, error) {
	sd, err := windows.GetNamedSecurityInfo(p, windows.SE_FILE_OBJECT, windows.OWNER_SECURITY_INFORMATION)
	if err != nil {
		return "", err
	}
	owner, _, err := sd.Owner()
	if err != nil {
		return "", err
	}
	return owner.String(), nil
}

// windowsHCS adapts computecore to the server's HCS.
type windowsHCS struct{}

func (windowsHCS) Create(ctx context.Context, id string, doc hcs.ComputeSystem) (System, error) {
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	s, err := computecore.Create(ctx, id, b)
	if err != nil {
		return nil, err
	}
	p, err := s.Properties(ctx)
	if err != nil {
		_ = s.Terminate(ctx)
		s.Close()
		return nil, err
	}
	return &winSystem{System: s, runtimeID: p.RuntimeID}, nil
}

func (windowsHCS) GrantVMAccess(id, path string, as uintptr) error {
	return impersonating(as, func() error { return computecore.GrantVMAccess(id, path) })
}

func (windowsHCS) RevokeVMAccess(id, path string, as uintptr) error {
	return impersonating(as, func() error { return computecore.RevokeVMAccess(id, path) })
}

// impersonating runs f on a locked thread that impersonates token (f
// runs as the service when token is 0). HcsGrantVmAccess then changes the
// file's ACL with the caller's rights, as WSL grants a user's VHD
// (microsoft/WSL src/windows/service/exe/WslCoreVm.cpp,
// wil::impersonate_token(UserToken) around hcs::GrantVmAccess; and
// src/windows/common/WslCoreFilesystem.cpp: "the operation is done while
// impersonating the user").
func impersonating(token uintptr, f func() error) error {
	if token == 0 {
		return f()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := windows.SetThreadToken(nil, windows.Token(token)); err != nil {
		return fmt.Errorf("vmservice: impersonate the caller: %w", err)
	}
	err := f()
	if rerr := windows.RevertToSelf(); rerr != nil {
		// Running on as the client would be a privilege confusion: stop.
		panic(fmt.Sprintf("vmservice: RevertToSelf: %v", rerr))
	}
	return err
}

func (windowsHCS) Orphans(ctx context.Context) ([]string, error) {
	ps, err := computecore.Enumerate(ctx, hcs.Owner)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(ps))
	for _, p := range ps {
		ids = append(ids, p.ID)
	}
	return ids, nil
}

func (windowsHCS) TerminateOrphan(ctx context.Context, id string) error {
	s, err := computecore.Open(id)
	if err != nil {
		return err
	}
	defer s.Close()
	return s.Terminate(ctx)
}

type winSystem struct {
	*computecore.System
	runtimeID string
}

func (s *winSystem) RuntimeID() string { return s.runtimeID }

func (s *winSystem) Modify(ctx context.Context, req hcs.ModifySettingRequest, identity uintptr) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	return s.System.Modify(ctx, b, windows.Token(identity))
}
