package vmservice

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/vm"
	"github.com/airlock-sandbox/airlock/vm/hcs"
)

// HCS is the part of the Host Compute Service the server uses; the
// service adapts vm/hcs/computecore to it, tests fake it.
type HCS interface {
	// Create creates (does not start) a compute system.
	Create(ctx context.Context, id string, doc hcs.ComputeSystem) (System, error)
	// GrantVMAccess lets VM id open path. The VM need not exist yet:
	// the account granted is derived from the compute system id alone
	// (Microsoft's HcsGrantVmAccess reference: "an internal GUID that is
	// derived from the compute system ID").
	// RevokeVMAccess undoes it. A nonzero as is the caller's token: the
	// call is made while impersonating it.
	GrantVMAccess(id, path string, as uintptr) error
	RevokeVMAccess(id, path string, as uintptr) error
	// Orphans lists the ids of compute systems owned by hcs.Owner.
	Orphans(ctx context.Context) ([]string, error)
	// TerminateOrphan opens, terminates and closes compute system id.
	TerminateOrphan(ctx context.Context, id string) error
}

// System is one created compute system.
type System interface {
	// RuntimeID is the VM id Hyper-V sockets bind to.
	RuntimeID() string
	Start(ctx context.Context) error
	// Modify applies a request as the account of identity (a token).
	Modify(ctx context.Context, req hcs.ModifySettingRequest, identity uintptr) error
	Terminate(ctx context.Context) error
	// Exited is closed once the system exited; ExitStatus says how.
	Exited() <-chan struct{}
	ExitStatus() hcs.Exit
	Close() error
}

// Server answers the protocol of package hcs. Its methods are safe for
// concurrent use; ServeConn runs once per connection.
type Server struct {
	HCS    HCS
	Policy Policy
	Files  Files
	Log    *slog.Logger
	// Unavailable, when set, is returned for every create: the service
	// runs but cannot make VMs (Virtual Machine Platform missing, Windows
	// too old), and says so instead of looking absent.
	Unavailable error
	// MaxPerUser bounds the VMs one account may run at once; zero means 4.
	MaxPerUser int
	// NewID makes compute system ids; nil means hcs.NewID.
	NewID func() (string, error)
	// FirstRequest bounds the wait for a connection's first request; zero
	// means 30s.
	FirstRequest time.Duration
	// OpTimeout bounds each HCS call the service makes (create, start
	// with its share, stop, each orphan's terminate): the computecore
	// bindings cancel an operation whose context ends. Zero means 2
	// minutes.
	OpTimeout time.Duration

	mu  sync.Mutex
	vms map[string]*machine
}

// machine is a VM the server runs for one connection.
type machine struct {
	id    string
	owner string
	sys   System
	plan  Plan
	// caller made the VM; its token revokes what it granted.
	caller Caller

	mu      sync.Mutex
	started bool
}

// opContext bounds one HCS call. It is not cancelled with ctx alone (the
// service stopping), so a call that cleans up still runs; the deadline
// bounds it.
func (s *Server) opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	d := s.OpTimeout
	if d == 0 {
		d = 2 * time.Minute
	}
	return context.WithTimeout(context.WithoutCancel(ctx), d)
}

func (s *Server) log() *slog.Logger {
	if s.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Log
}

// Sweep terminates every Airlock VM HCS still has: at service start there
// is no session, so any is an orphan of a crash.
func (s *Server) Sweep(ctx context.Context) error {
	octx, cancel := s.opContext(ctx)
	ids, err := s.HCS.Orphans(octx)
	cancel()
	if err != nil {
		return fmt.Errorf("vmservice: sweep: %w", err)
	}
	var errs []error
	for _, id := range ids {
		s.mu.Lock()
		_, live := s.vms[id]
		s.mu.Unlock()
		if live {
			continue
		}
		octx, cancel := s.opContext(ctx)
		err := s.HCS.TerminateOrphan(octx, id)
		cancel()
		if err != nil && !hcs.TerminateSettled(err) {
			errs = append(errs, fmt.Errorf("%s: %w", id, err))
			continue
		}
		s.log().Info("terminated orphaned VM", "id", id)
	}
	if len(errs) > 0 {
		return fmt.Errorf("vmservice: sweep: %w", errors.Join(errs...))
	}
	return nil
}

// ServeConn answers the requests of one connection from caller until it
// closes; the VM it created is terminated then.
func (s *Server) ServeConn(ctx context.Context, conn net.Conn, c Caller) {
	defer conn.Close()
	log := s.log().With("user", c.SID)
	r := bufio.NewReader(conn)
	var own *machine
	defer func() {
		if own != nil {
			s.release(own)
		}
	}()
	first := s.FirstRequest
	if first == 0 {
		first = 30 * time.Second
	}
	for n := 0; ; n++ {
		if n == 0 {
			_ = conn.SetReadDeadline(time.Now().Add(first))
		} else {
			_ = conn.SetReadDeadline(time.Time{})
		}
		var req hcs.Request
		if err := hcs.ReadMessage(r, &req); err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				log.Warn("bad request", "err", err)
				_ = reply(conn, hcs.Response{Error: &hcs.WireError{Code: hcs.CodeInvalid, Message: err.Error()}})
			}
			return
		}
		if req.V != hcs.ProtocolVersion {
			_ = reply(conn, hcs.Response{Error: &hcs.WireError{Code: hcs.CodeVersion,
				Message: fmt.Sprintf("protocol version %d is not spoken here (this service speaks %d); reinstall Airlock", req.V, hcs.ProtocolVersion)}})
			return
		}
		var resp hcs.Response
		switch req.Op {
		case hcs.OpCreateVM:
			if own != nil || req.Create == nil {
				resp = refusal(hcs.CodeInvalid, "one create per connection, with a VM description")
				break
			}
			m, err := s.create(ctx, c, *req.Create)
			if err != nil {
				log.Info("create refused or failed", "err", err)
				resp = errorResponse(err)
				break
			}
			own = m
			resp.VM = m.info()
		case hcs.OpStartVM, hcs.OpStopVM:
			if own == nil || req.ID != own.id {
				resp = refusal(hcs.CodeNotFound, "start and stop apply to the VM this connection created")
				break
			}
			var err error
			if req.Op == hcs.OpStartVM {
				err = s.start(ctx, own, c)
			} else {
				err = s.stop(ctx, own)
			}
			if err != nil {
				log.Info(string(req.Op)+" failed", "id", own.id, "err", err)
				resp = errorResponse(err)
				break
			}
			resp.VM = own.info()
		case hcs.OpStatusVM:
			m, err := s.lookup(c, req.ID)
			if err != nil {
				resp = errorResponse(err)
				break
			}
			resp.VM = m.info()
		case hcs.OpWaitVM:
			m, err := s.lookup(c, req.ID)
			if err != nil {
				_ = reply(conn, errorResponse(err))
				return
			}
			s.wait(ctx, conn, r, m)
			return
		default:
			resp = refusal(hcs.CodeInvalid, fmt.Sprintf("unknown request %q", req.Op))
		}
		if err := reply(conn, resp); err != nil {
			return
		}
	}
}

func reply(conn net.Conn, resp hcs.Response) error {
	resp.V = hcs.ProtocolVersion
	_ = conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return hcs.WriteMessage(conn, resp)
}

func refusal(code hcs.Code, msg string) hcs.Response {
	return hcs.Response{Error: &hcs.WireError{Code: code, Message: msg}}
}

// errorResponse maps an error to its wire code.
func errorResponse(err error) hcs.Response {
	code := hcs.CodeOf(err)
	switch {
	case errors.Is(err, ErrDenied):
		code = hcs.CodeDenied
	case errors.Is(err, errNotFound):
		code = hcs.CodeNotFound
	case errors.Is(err, errLimit):
		code = hcs.CodeLimit
	}
	return refusal(code, err.Error())
}

var (
	errNotFound = errors.New("no such VM for this account")
	errLimit    = errors.New("too many VMs for this account")
)

func (s *Server) create(ctx context.Context, c Caller, req hcs.CreateRequest) (_ *machine, err error) {
	// Validation first: a request the service would never carry out is
	// refused as such whether or not this machine can run VMs.
	plan, err := s.Policy.Validate(req, c, s.Files)
	if err != nil {
		return nil, err
	}
	if s.Unavailable != nil {
		return nil, s.Unavailable
	}
	max := s.MaxPerUser
	if max == 0 {
		max = 4
	}
	newID := s.NewID
	if newID == nil {
		newID = hcs.NewID
	}
	id, err := newID()
	if err != nil {
		return nil, err
	}
	m := &machine{id: id, owner: c.SID, plan: plan}
	// Reserve the slot before the slow create, so the limit holds under
	// concurrent requests.
	s.mu.Lock()
	if s.vms == nil {
		s.vms = make(map[string]*machine)
	}
	n := 0
	for _, o := range s.vms {
		if o.owner == c.SID {
			n++
		}
	}
	if n >= max {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: %d running; stop one first", errLimit, n)
	}
	s.vms[id] = m
	s.mu.Unlock()
	defer func() {
		if err != nil {
			s.mu.Lock()
			delete(s.vms, id)
			s.mu.Unlock()
		}
	}()

	// Access first, then the VM: HCS opens the files at create, and a
	// VM never exists with files it was not meant to open.
	for i, g := range plan.Grants {
		if g.AsCaller && c.Token == 0 {
			s.revoke(id, plan.Grants[:i], c)
			return nil, fmt.Errorf("%w: no token of the caller to grant %s with", ErrDenied, g.Path)
		}
		if err := s.HCS.GrantVMAccess(id, g.Path, s.as(g, c)); err != nil {
			s.revoke(id, plan.Grants[:i], c)
			return nil, err
		}
	}
	m.caller = c
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	sys, err := s.HCS.Create(ctx, id, hcs.Document(plan.Spec))
	if err != nil {
		s.revoke(id, plan.Grants, c)
		return nil, err
	}
	if !hcs.ValidGUID(sys.RuntimeID()) {
		s.revoke(id, plan.Grants, c)
		_ = sys.Terminate(ctx)
		sys.Close()
		return nil, fmt.Errorf("vmservice: HCS gave VM %s no runtime id", id)
	}
	m.sys = sys
	s.log().Info("VM created", "id", id, "runtime_id", sys.RuntimeID(), "user", c.SID, "share", plan.SharePath, "read_only", plan.ShareReadOnly)
	go func() {
		<-sys.Exited()
		e := sys.ExitStatus()
		s.log().Info("VM exited", "id", id, "type", e.Type, "status", hcs.HRESULT(uint32(e.Status)), "message", e.Message)
	}()
	return m, nil
}

// start boots the VM and adds the workspace as the caller.
func (s *Server) start(ctx context.Context, m *machine, c Caller) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started {
		return vm.ErrAlreadyStarted
	}
	m.started = true
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	if err := m.sys.Start(ctx); err != nil {
		return err
	}
	if m.plan.SharePath != "" {
		req := hcs.AddPlan9Share(m.plan.SharePath, m.plan.ShareReadOnly, c.Token != 0)
		if err := m.sys.Modify(ctx, req, c.Token); err != nil {
			tctx, cancel := s.opContext(ctx)
			defer cancel()
			_ = m.sys.Terminate(tctx)
			return fmt.Errorf("vmservice: share %s: %w", m.plan.SharePath, err)
		}
	}
	return nil
}

func (s *Server) stop(ctx context.Context, m *machine) error {
	select {
	case <-m.sys.Exited():
		return nil
	default:
	}
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	if err := m.sys.Terminate(ctx); err != nil && !hcs.TerminateSettled(err) {
		return err
	}
	return nil
}

// wait answers once m has exited; a client that hangs up stops the wait.
func (s *Server) wait(ctx context.Context, conn net.Conn, r *bufio.Reader, m *machine) {
	gone := make(chan struct{})
	go func() {
		_, _ = r.ReadByte() // nothing more is expected: EOF or garbage ends the wait
		close(gone)
	}()
	select {
	case <-m.sys.Exited():
		e := m.sys.ExitStatus()
		_ = reply(conn, hcs.Response{Exit: &e})
	case <-gone:
	case <-ctx.Done():
		_ = reply(conn, refusal(hcs.CodeInternal, "the service is stopping"))
	}
}

// release ends a VM whose connection closed.
func (s *Server) release(m *machine) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.stop(ctx, m); err != nil {
		s.log().Warn("terminate on disconnect", "id", m.id, "err", err)
	}
	select {
	case <-m.sys.Exited():
	case <-ctx.Done():
		s.log().Warn("VM did not report its exit; closing its handle", "id", m.id)
	}
	s.revoke(m.id, m.plan.Grants, m.caller)
	m.sys.Close()
	s.mu.Lock()
	delete(s.vms, m.id)
	s.mu.Unlock()
}

func (s *Server) revoke(id string, grants []Grant, c Caller) {
	for _, g := range grants {
		if err := s.HCS.RevokeVMAccess(id, g.Path, s.as(g, c)); err != nil {
			s.log().Warn("revoke VM access", "id", id, "file", g.Path, "err", err)
		}
	}
}

// as is the identity a grant is made with: the caller's token for files
// the caller can swap, the service's own (0) for the installed image.
func (s *Server) as(g Grant, c Caller) uintptr {
	if g.AsCaller {
		return c.Token
	}
	return 0
}

// lookup finds VM id for caller: another account's VM is "not found".
func (s *Server) lookup(c Caller, id string) (*machine, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.vms[id]
	if !ok || m.owner != c.SID || m.sys == nil {
		return nil, fmt.Errorf("%w: %q", errNotFound, id)
	}
	return m, nil
}

func (m *machine) info() *hcs.VMInfo {
	state := hcs.VMCreated
	m.mu.Lock()
	if m.started {
		state = hcs.VMRunning
	}
	m.mu.Unlock()
	select {
	case <-m.sys.Exited():
		state = hcs.VMStopped
	default:
	}
	return &hcs.VMInfo{ID: m.id, RuntimeID: m.sys.RuntimeID(), State: state}
}
