package agentv1

// The messages of agent.proto, written by hand (see doc.go): the fields,
// oneof members and getters are named as protoc-gen-go names them. Field
// comments live in agent.proto.

// Message is one of this package's messages.
type Message interface {
	encode(*encoder)
	merge([]byte) error
	reset()
}

// Marshal appends m's protobuf encoding to b. It fails only for a string
// field that is not valid UTF-8 (proto3's rule), and then returns b.
func Marshal(b []byte, m Message) ([]byte, error) {
	e := encoder{b: b}
	m.encode(&e)
	if e.err != nil {
		return b, e.err
	}
	return e.b, nil
}

// Unmarshal replaces m with the message encoded in b, as proto.Unmarshal
// does: unknown fields are skipped, a repeated field of a message merges,
// the last of a scalar or of a oneof's members wins. The result shares no
// memory with b. Errors wrap ErrWire.
func Unmarshal(b []byte, m Message) error {
	m.reset()
	return m.merge(b)
}

// AgentRequest: see agent.proto.
type AgentRequest struct {
	// Call is one of *AgentRequest_Info, *AgentRequest_SetTime,
	// *AgentRequest_Shutdown, *AgentRequest_TrustCa.
	Call isAgentRequest_Call
}

type isAgentRequest_Call interface{ isAgentRequest_Call() }

type AgentRequest_Info struct{ Info *InfoRequest }
type AgentRequest_SetTime struct{ SetTime *SetTimeRequest }
type AgentRequest_Shutdown struct{ Shutdown *ShutdownRequest }
type AgentRequest_TrustCa struct{ TrustCa *TrustCARequest }

func (*AgentRequest_Info) isAgentRequest_Call()     {}
func (*AgentRequest_SetTime) isAgentRequest_Call()  {}
func (*AgentRequest_Shutdown) isAgentRequest_Call() {}
func (*AgentRequest_TrustCa) isAgentRequest_Call()  {}

func (x *AgentRequest) GetCall() isAgentRequest_Call {
	if x == nil {
		return nil
	}
	return x.Call
}

func (x *AgentRequest) GetInfo() *InfoRequest {
	if c, ok := x.GetCall().(*AgentRequest_Info); ok {
		return c.Info
	}
	return nil
}

func (x *AgentRequest) GetSetTime() *SetTimeRequest {
	if c, ok := x.GetCall().(*AgentRequest_SetTime); ok {
		return c.SetTime
	}
	return nil
}

func (x *AgentRequest) GetShutdown() *ShutdownRequest {
	if c, ok := x.GetCall().(*AgentRequest_Shutdown); ok {
		return c.Shutdown
	}
	return nil
}

func (x *AgentRequest) GetTrustCa() *TrustCARequest {
	if c, ok := x.GetCall().(*AgentRequest_TrustCa); ok {
		return c.TrustCa
	}
	return nil
}

func (x *AgentRequest) reset() { *x = AgentRequest{} }

func (x *AgentRequest) encode(e *encoder) {
	if x == nil {
		return
	}
	switch c := x.Call.(type) {
	case *AgentRequest_Info:
		e.message(1, c.Info)
	case *AgentRequest_SetTime:
		e.message(2, c.SetTime)
	case *AgentRequest_Shutdown:
		e.message(3, c.Shutdown)
	case *AgentRequest_TrustCa:
		e.message(4, c.TrustCa)
	}
}

func (x *AgentRequest) merge(b []byte) error {
	return fields(b, func(d *decoder, num int, t wireType) error {
		if num < 1 || num > 4 {
			return d.skip(num, t)
		}
		v, ok, err := lengthDelimited(d, num, t)
		if !ok {
			return err
		}
		switch num {
		case 1:
			m := member(x.GetInfo())
			x.Call = &AgentRequest_Info{Info: m}
			return m.merge(v)
		case 2:
			m := member(x.GetSetTime())
			x.Call = &AgentRequest_SetTime{SetTime: m}
			return m.merge(v)
		case 3:
			m := member(x.GetShutdown())
			x.Call = &AgentRequest_Shutdown{Shutdown: m}
			return m.merge(v)
		default:
			m := member(x.GetTrustCa())
			x.Call = &AgentRequest_TrustCa{TrustCa: m}
			return m.merge(v)
		}
	})
}

// AgentResponse: see agent.proto.
type AgentResponse struct {
	// Result is one of *AgentResponse_Info, *AgentResponse_SetTime,
	// *AgentResponse_Shutdown, *AgentResponse_Error,
	// *AgentResponse_TrustCa.
	Result isAgentResponse_Result
}

type isAgentResponse_Result interface{ isAgentResponse_Result() }

type AgentResponse_Info struct{ Info *InfoResponse }
type AgentResponse_SetTime struct{ SetTime *SetTimeResponse }
type AgentResponse_Shutdown struct{ Shutdown *ShutdownResponse }
type AgentResponse_Error struct{ Error *Error }
type AgentResponse_TrustCa struct{ TrustCa *TrustCAResponse }

func (*AgentResponse_Info) isAgentResponse_Result()     {}
func (*AgentResponse_SetTime) isAgentResponse_Result()  {}
func (*AgentResponse_Shutdown) isAgentResponse_Result() {}
func (*AgentResponse_Error) isAgentResponse_Result()    {}
func (*AgentResponse_TrustCa) isAgentResponse_Result()  {}

func (x *AgentResponse) GetResult() isAgentResponse_Result {
	if x == nil {
		return nil
	}
	return x.Result
}

func (x *AgentResponse) GetInfo() *InfoResponse {
	if r, ok := x.GetResult().(*AgentResponse_Info); ok {
		return r.Info
	}
	return nil
}

func (x *AgentResponse) GetSetTime() *SetTimeResponse {
	if r, ok := x.GetResult().(*AgentResponse_SetTime); ok {
		return r.SetTime
	}
	return nil
}

func (x *AgentResponse) GetShutdown() *ShutdownResponse {
	if r, ok := x.GetResult().(*AgentResponse_Shutdown); ok {
		return r.Shutdown
	}
	return nil
}

func (x *AgentResponse) GetError() *Error {
	if r, ok := x.GetResult().(*AgentResponse_Error); ok {
		return r.Error
	}
	return nil
}

func (x *AgentResponse) GetTrustCa() *TrustCAResponse {
	if r, ok := x.GetResult().(*AgentResponse_TrustCa); ok {
		return r.TrustCa
	}
	return nil
}

func (x *AgentResponse) reset() { *x = AgentResponse{} }

func (x *AgentResponse) encode(e *encoder) {
	if x == nil {
		return
	}
	switch r := x.Result.(type) {
	case *AgentResponse_Info:
		e.message(1, r.Info)
	case *AgentResponse_SetTime:
		e.message(2, r.SetTime)
	case *AgentResponse_Shutdown:
		e.message(3, r.Shutdown)
	case *AgentResponse_Error:
		e.message(4, r.Error)
	case *AgentResponse_TrustCa:
		e.message(5, r.TrustCa)
	}
}

func (x *AgentResponse) merge(b []byte) error {
	return fields(b, func(d *decoder, num int, t wireType) error {
		if num < 1 || num > 5 {
			return d.skip(num, t)
		}
		v, ok, err := lengthDelimited(d, num, t)
		if !ok {
			return err
		}
		switch num {
		case 1:
			m := member(x.GetInfo())
			x.Result = &AgentResponse_Info{Info: m}
			return m.merge(v)
		case 2:
			m := member(x.GetSetTime())
			x.Result = &AgentResponse_SetTime{SetTime: m}
			return m.merge(v)
		case 3:
			m := member(x.GetShutdown())
			x.Result = &AgentResponse_Shutdown{Shutdown: m}
			return m.merge(v)
		case 4:
			m := member(x.GetError())
			x.Result = &AgentResponse_Error{Error: m}
			return m.merge(v)
		default:
			m := member(x.GetTrustCa())
			x.Result = &AgentResponse_TrustCa{TrustCa: m}
			return m.merge(v)
		}
	})
}

// ExecStart: see agent.proto.
type ExecStart struct {
	Argv      []string
	Shell     string
	Env       []string
	Cwd       string
	Tty       bool
	Rows      uint32
	Cols      uint32
	Root      bool
	TimeoutMs int64
	Stdin     bool
	Id        string
}

func (x *ExecStart) GetArgv() []string {
	if x == nil {
		return nil
	}
	return x.Argv
}

func (x *ExecStart) GetShell() string {
	if x == nil {
		return ""
	}
	return x.Shell
}

func (x *ExecStart) GetEnv() []string {
	if x == nil {
		return nil
	}
	return x.Env
}

func (x *ExecStart) GetCwd() string {
	if x == nil {
		return ""
	}
	return x.Cwd
}

func (x *ExecStart) GetTty() bool { return x != nil && x.Tty }

func (x *ExecStart) GetRows() uint32 {
	if x == nil {
		return 0
	}
	return x.Rows
}

func (x *ExecStart) GetCols() uint32 {
	if x == nil {
		return 0
	}
	return x.Cols
}

func (x *ExecStart) GetRoot() bool { return x != nil && x.Root }

func (x *ExecStart) GetTimeoutMs() int64 {
	if x == nil {
		return 0
	}
	return x.TimeoutMs
}

func (x *ExecStart) GetStdin() bool { return x != nil && x.Stdin }

func (x *ExecStart) GetId() string {
	if x == nil {
		return ""
	}
	return x.Id
}

func (x *ExecStart) reset() { *x = ExecStart{} }

func (x *ExecStart) encode(e *encoder) {
	if x == nil {
		return
	}
	for _, s := range x.Argv {
		e.repeatedString(1, s)
	}
	e.string(2, x.Shell)
	for _, s := range x.Env {
		e.repeatedString(3, s)
	}
	e.string(4, x.Cwd)
	e.bool(5, x.Tty, false)
	e.uint64(6, uint64(x.Rows), false)
	e.uint64(7, uint64(x.Cols), false)
	e.bool(8, x.Root, false)
	e.int64(9, x.TimeoutMs, false)
	e.bool(10, x.Stdin, false)
	e.string(11, x.Id)
}

func (x *ExecStart) merge(b []byte) error {
	return fields(b, func(d *decoder, num int, t wireType) error {
		switch num {
		case 1, 2, 3, 4, 11:
			if t != wireBytes {
				return d.skip(num, t)
			}
			s, err := d.string(num)
			switch num {
			case 1:
				x.Argv = append(x.Argv, s)
			case 2:
				x.Shell = s
			case 3:
				x.Env = append(x.Env, s)
			case 4:
				x.Cwd = s
			case 11:
				x.Id = s
			}
			return err
		case 5, 6, 7, 8, 9, 10:
			v, ok, err := scalar(d, num, t)
			if !ok {
				return err
			}
			switch num {
			case 5:
				x.Tty = v != 0
			case 6:
				x.Rows = uint32(v)
			case 7:
				x.Cols = uint32(v)
			case 8:
				x.Root = v != 0
			case 9:
				x.TimeoutMs = int64(v)
			case 10:
				x.Stdin = v != 0
			}
			return nil
		}
		return d.skip(num, t)
	})
}

// Resize: see agent.proto.
type Resize struct {
	Rows uint32
	Cols uint32
}

func (x *Resize) GetRows() uint32 {
	if x == nil {
		return 0
	}
	return x.Rows
}

func (x *Resize) GetCols() uint32 {
	if x == nil {
		return 0
	}
	return x.Cols
}

func (x *Resize) reset() { *x = Resize{} }

func (x *Resize) encode(e *encoder) {
	if x == nil {
		return
	}
	e.uint64(1, uint64(x.Rows), false)
	e.uint64(2, uint64(x.Cols), false)
}

func (x *Resize) merge(b []byte) error {
	return fields(b, func(d *decoder, num int, t wireType) error {
		if num != 1 && num != 2 {
			return d.skip(num, t)
		}
		v, ok, err := scalar(d, num, t)
		if ok && num == 1 {
			x.Rows = uint32(v)
		} else if ok {
			x.Cols = uint32(v)
		}
		return err
	})
}

// ExecRequest: see agent.proto.
type ExecRequest struct {
	// Msg is one of *ExecRequest_Start, *ExecRequest_Stdin,
	// *ExecRequest_CloseStdin, *ExecRequest_Signal, *ExecRequest_Resize.
	Msg isExecRequest_Msg
}

type isExecRequest_Msg interface{ isExecRequest_Msg() }

type ExecRequest_Start struct{ Start *ExecStart }
type ExecRequest_Stdin struct{ Stdin []byte }
type ExecRequest_CloseStdin struct{ CloseStdin bool }
type ExecRequest_Signal struct{ Signal int32 }
type ExecRequest_Resize struct{ Resize *Resize }

func (*ExecRequest_Start) isExecRequest_Msg()      {}
func (*ExecRequest_Stdin) isExecRequest_Msg()      {}
func (*ExecRequest_CloseStdin) isExecRequest_Msg() {}
func (*ExecRequest_Signal) isExecRequest_Msg()     {}
func (*ExecRequest_Resize) isExecRequest_Msg()     {}

func (x *ExecRequest) GetMsg() isExecRequest_Msg {
	if x == nil {
		return nil
	}
	return x.Msg
}

func (x *ExecRequest) GetStart() *ExecStart {
	if m, ok := x.GetMsg().(*ExecRequest_Start); ok {
		return m.Start
	}
	return nil
}

func (x *ExecRequest) GetStdin() []byte {
	if m, ok := x.GetMsg().(*ExecRequest_Stdin); ok {
		return m.Stdin
	}
	return nil
}

func (x *ExecRequest) GetCloseStdin() bool {
	m, ok := x.GetMsg().(*ExecRequest_CloseStdin)
	return ok && m.CloseStdin
}

func (x *ExecRequest) GetSignal() int32 {
	if m, ok := x.GetMsg().(*ExecRequest_Signal); ok {
		return m.Signal
	}
	return 0
}

func (x *ExecRequest) GetResize() *Resize {
	if m, ok := x.GetMsg().(*ExecRequest_Resize); ok {
		return m.Resize
	}
	return nil
}

func (x *ExecRequest) reset() { *x = ExecRequest{} }

func (x *ExecRequest) encode(e *encoder) {
	if x == nil {
		return
	}
	switch m := x.Msg.(type) {
	case *ExecRequest_Start:
		e.message(1, m.Start)
	case *ExecRequest_Stdin:
		e.bytes(2, m.Stdin, true)
	case *ExecRequest_CloseStdin:
		e.bool(3, m.CloseStdin, true)
	case *ExecRequest_Signal:
		e.int64(4, int64(m.Signal), true)
	case *ExecRequest_Resize:
		e.message(5, m.Resize)
	}
}

func (x *ExecRequest) merge(b []byte) error {
	return fields(b, func(d *decoder, num int, t wireType) error {
		switch num {
		case 1, 2, 5:
			v, ok, err := lengthDelimited(d, num, t)
			if !ok {
				return err
			}
			switch num {
			case 1:
				m := member(x.GetStart())
				x.Msg = &ExecRequest_Start{Start: m}
				return m.merge(v)
			case 2:
				x.Msg = &ExecRequest_Stdin{Stdin: append([]byte{}, v...)}
				return nil
			default:
				m := member(x.GetResize())
				x.Msg = &ExecRequest_Resize{Resize: m}
				return m.merge(v)
			}
		case 3, 4:
			v, ok, err := scalar(d, num, t)
			if !ok {
				return err
			}
			if num == 3 {
				x.Msg = &ExecRequest_CloseStdin{CloseStdin: v != 0}
			} else {
				x.Msg = &ExecRequest_Signal{Signal: int32(v)}
			}
			return nil
		}
		return d.skip(num, t)
	})
}

// Started: see agent.proto.
type Started struct {
	Pid int32
}

func (x *Started) GetPid() int32 {
	if x == nil {
		return 0
	}
	return x.Pid
}

func (x *Started) reset() { *x = Started{} }

func (x *Started) encode(e *encoder) {
	if x != nil {
		e.int64(1, int64(x.Pid), false)
	}
}

func (x *Started) merge(b []byte) error {
	return fields(b, func(d *decoder, num int, t wireType) error {
		if num != 1 {
			return d.skip(num, t)
		}
		v, ok, err := scalar(d, num, t)
		if ok {
			x.Pid = int32(v)
		}
		return err
	})
}

// Exit: see agent.proto.
type Exit struct {
	Code       int32
	Signal     int32
	TimedOut   bool
	DurationMs int64
}

func (x *Exit) GetCode() int32 {
	if x == nil {
		return 0
	}
	return x.Code
}

func (x *Exit) GetSignal() int32 {
	if x == nil {
		return 0
	}
	return x.Signal
}

func (x *Exit) GetTimedOut() bool { return x != nil && x.TimedOut }

func (x *Exit) GetDurationMs() int64 {
	if x == nil {
		return 0
	}
	return x.DurationMs
}

func (x *Exit) reset() { *x = Exit{} }

func (x *Exit) encode(e *encoder) {
	if x == nil {
		return
	}
	e.int64(1, int64(x.Code), false)
	e.int64(2, int64(x.Signal), false)
	e.bool(3, x.TimedOut, false)
	e.int64(4, x.DurationMs, false)
}

func (x *Exit) merge(b []byte) error {
	return fields(b, func(d *decoder, num int, t wireType) error {
		if num < 1 || num > 4 {
			return d.skip(num, t)
		}
		v, ok, err := scalar(d, num, t)
		if !ok {
			return err
		}
		switch num {
		case 1:
			x.Code = int32(v)
		case 2:
			x.Signal = int32(v)
		case 3:
			x.TimedOut = v != 0
		case 4:
			x.DurationMs = int64(v)
		}
		return nil
	})
}

// Error: see agent.proto.
type Error struct {
	Code    uint32
	Message string
}

func (x *Error) GetCode() uint32 {
	if x == nil {
		return 0
	}
	return x.Code
}

func (x *Error) GetMessage() string {
	if x == nil {
		return ""
	}
	return x.Message
}

func (x *Error) reset() { *x = Error{} }

func (x *Error) encode(e *encoder) {
	if x == nil {
		return
	}
	e.uint64(1, uint64(x.Code), false)
	e.string(2, x.Message)
}

func (x *Error) merge(b []byte) error {
	return fields(b, func(d *decoder, num int, t wireType) error {
		switch {
		case num == 1:
			v, ok, err := scalar(d, num, t)
			if ok {
				x.Code = uint32(v)
			}
			return err
		case num == 2 && t == wireBytes:
			s, err := d.string(num)
			x.Message = s
			return err
		}
		return d.skip(num, t)
	})
}

// ExecEvent: see agent.proto.
type ExecEvent struct {
	// Event is one of *ExecEvent_Started, *ExecEvent_Exit,
	// *ExecEvent_Error.
	Event isExecEvent_Event
}

type isExecEvent_Event interface{ isExecEvent_Event() }

type ExecEvent_Started struct{ Started *Started }
type ExecEvent_Exit struct{ Exit *Exit }
type ExecEvent_Error struct{ Error *Error }

func (*ExecEvent_Started) isExecEvent_Event() {}
func (*ExecEvent_Exit) isExecEvent_Event()    {}
func (*ExecEvent_Error) isExecEvent_Event()   {}

func (x *ExecEvent) GetEvent() isExecEvent_Event {
	if x == nil {
		return nil
	}
	return x.Event
}

func (x *ExecEvent) GetStarted() *Started {
	if ev, ok := x.GetEvent().(*ExecEvent_Started); ok {
		return ev.Started
	}
	return nil
}

func (x *ExecEvent) GetExit() *Exit {
	if ev, ok := x.GetEvent().(*ExecEvent_Exit); ok {
		return ev.Exit
	}
	return nil
}

func (x *ExecEvent) GetError() *Error {
	if ev, ok := x.GetEvent().(*ExecEvent_Error); ok {
		return ev.Error
	}
	return nil
}

func (x *ExecEvent) reset() { *x = ExecEvent{} }

func (x *ExecEvent) encode(e *encoder) {
	if x == nil {
		return
	}
	switch ev := x.Event.(type) {
	case *ExecEvent_Started:
		e.message(1, ev.Started)
	case *ExecEvent_Exit:
		e.message(4, ev.Exit)
	case *ExecEvent_Error:
		e.message(5, ev.Error)
	}
}

func (x *ExecEvent) merge(b []byte) error {
	return fields(b, func(d *decoder, num int, t wireType) error {
		if num != 1 && num != 4 && num != 5 {
			return d.skip(num, t)
		}
		v, ok, err := lengthDelimited(d, num, t)
		if !ok {
			return err
		}
		switch num {
		case 1:
			m := member(x.GetStarted())
			x.Event = &ExecEvent_Started{Started: m}
			return m.merge(v)
		case 4:
			m := member(x.GetExit())
			x.Event = &ExecEvent_Exit{Exit: m}
			return m.merge(v)
		default:
			m := member(x.GetError())
			x.Event = &ExecEvent_Error{Error: m}
			return m.merge(v)
		}
	})
}

// InfoRequest: see agent.proto.
type InfoRequest struct{}

func (x *InfoRequest) reset()               {}
func (x *InfoRequest) encode(*encoder)      {}
func (x *InfoRequest) merge(b []byte) error { return skipAll(b) }

// InfoResponse: see agent.proto.
type InfoResponse struct {
	AgentVersion         string
	Kernel               string
	UptimeMs             int64
	MemoryTotalBytes     uint64
	MemoryAvailableBytes uint64
	Cpus                 uint32
	Transport            string
	WorkspaceFs          string
	WorkspaceReadOnly    bool
	UserUid              uint32
	BootMs               int64
	AgentInstance        uint64
}

func (x *InfoResponse) GetAgentVersion() string {
	if x == nil {
		return ""
	}
	return x.AgentVersion
}

func (x *InfoResponse) GetKernel() string {
	if x == nil {
		return ""
	}
	return x.Kernel
}

func (x *InfoResponse) GetUptimeMs() int64 {
	if x == nil {
		return 0
	}
	return x.UptimeMs
}

func (x *InfoResponse) GetMemoryTotalBytes() uint64 {
	if x == nil {
		return 0
	}
	return x.MemoryTotalBytes
}

func (x *InfoResponse) GetMemoryAvailableBytes() uint64 {
	if x == nil {
		return 0
	}
	return x.MemoryAvailableBytes
}

func (x *InfoResponse) GetCpus() uint32 {
	if x == nil {
		return 0
	}
	return x.Cpus
}

func (x *InfoResponse) GetTransport() string {
	if x == nil {
		return ""
	}
	return x.Transport
}

func (x *InfoResponse) GetWorkspaceFs() string {
	if x == nil {
		return ""
	}
	return x.WorkspaceFs
}

func (x *InfoResponse) GetWorkspaceReadOnly() bool { return x != nil && x.WorkspaceReadOnly }

func (x *InfoResponse) GetUserUid() uint32 {
	if x == nil {
		return 0
	}
	return x.UserUid
}

func (x *InfoResponse) GetBootMs() int64 {
	if x == nil {
		return 0
	}
	return x.BootMs
}

func (x *InfoResponse) GetAgentInstance() uint64 {
	if x == nil {
		return 0
	}
	return x.AgentInstance
}

func (x *InfoResponse) reset() { *x = InfoResponse{} }

func (x *InfoResponse) encode(e *encoder) {
	if x == nil {
		return
	}
	e.string(1, x.AgentVersion)
	e.string(2, x.Kernel)
	e.int64(3, x.UptimeMs, false)
	e.uint64(4, x.MemoryTotalBytes, false)
	e.uint64(5, x.MemoryAvailableBytes, false)
	e.uint64(6, uint64(x.Cpus), false)
	e.string(7, x.Transport)
	e.string(8, x.WorkspaceFs)
	e.bool(9, x.WorkspaceReadOnly, false)
	e.uint64(10, uint64(x.UserUid), false)
	e.int64(11, x.BootMs, false)
	e.uint64(12, x.AgentInstance, false)
}

func (x *InfoResponse) merge(b []byte) error {
	return fields(b, func(d *decoder, num int, t wireType) error {
		switch num {
		case 1, 2, 7, 8:
			if t != wireBytes {
				return d.skip(num, t)
			}
			s, err := d.string(num)
			switch num {
			case 1:
				x.AgentVersion = s
			case 2:
				x.Kernel = s
			case 7:
				x.Transport = s
			case 8:
				x.WorkspaceFs = s
			}
			return err
		case 3, 4, 5, 6, 9, 10, 11, 12:
			v, ok, err := scalar(d, num, t)
			if !ok {
				return err
			}
			switch num {
			case 3:
				x.UptimeMs = int64(v)
			case 4:
				x.MemoryTotalBytes = v
			case 5:
				x.MemoryAvailableBytes = v
			case 6:
				x.Cpus = uint32(v)
			case 9:
				x.WorkspaceReadOnly = v != 0
			case 10:
				x.UserUid = uint32(v)
			case 11:
				x.BootMs = int64(v)
			case 12:
				x.AgentInstance = v
			}
			return nil
		}
		return d.skip(num, t)
	})
}

// SetTimeRequest: see agent.proto.
type SetTimeRequest struct {
	UnixNanos int64
}

func (x *SetTimeRequest) GetUnixNanos() int64 {
	if x == nil {
		return 0
	}
	return x.UnixNanos
}

func (x *SetTimeRequest) reset() { *x = SetTimeRequest{} }

func (x *SetTimeRequest) encode(e *encoder) {
	if x != nil {
		e.int64(1, x.UnixNanos, false)
	}
}

func (x *SetTimeRequest) merge(b []byte) error {
	return fields(b, func(d *decoder, num int, t wireType) error {
		if num != 1 {
			return d.skip(num, t)
		}
		v, ok, err := scalar(d, num, t)
		if ok {
			x.UnixNanos = int64(v)
		}
		return err
	})
}

// SetTimeResponse: see agent.proto.
type SetTimeResponse struct{}

func (x *SetTimeResponse) reset()               {}
func (x *SetTimeResponse) encode(*encoder)      {}
func (x *SetTimeResponse) merge(b []byte) error { return skipAll(b) }

// TrustCARequest: see agent.proto.
type TrustCARequest struct {
	Pem []byte
}

func (x *TrustCARequest) GetPem() []byte {
	if x == nil {
		return nil
	}
	return x.Pem
}

func (x *TrustCARequest) reset() { *x = TrustCARequest{} }

func (x *TrustCARequest) encode(e *encoder) {
	if x != nil {
		e.bytes(1, x.Pem, false)
	}
}

func (x *TrustCARequest) merge(b []byte) error {
	return fields(b, func(d *decoder, num int, t wireType) error {
		if num != 1 {
			return d.skip(num, t)
		}
		v, ok, err := lengthDelimited(d, num, t)
		if ok {
			x.Pem = append([]byte{}, v...)
		}
		return err
	})
}

// TrustCAResponse: see agent.proto.
type TrustCAResponse struct{}

func (x *TrustCAResponse) reset()               {}
func (x *TrustCAResponse) encode(*encoder)      {}
func (x *TrustCAResponse) merge(b []byte) error { return skipAll(b) }

// ShutdownRequest: see agent.proto.
type ShutdownRequest struct {
	Reboot bool
}

func (x *ShutdownRequest) GetReboot() bool { return x != nil && x.Reboot }

func (x *ShutdownRequest) reset() { *x = ShutdownRequest{} }

func (x *ShutdownRequest) encode(e *encoder) {
	if x != nil {
		e.bool(1, x.Reboot, false)
	}
}

func (x *ShutdownRequest) merge(b []byte) error {
	return fields(b, func(d *decoder, num int, t wireType) error {
		if num != 1 {
			return d.skip(num, t)
		}
		v, ok, err := scalar(d, num, t)
		if ok {
			x.Reboot = v != 0
		}
		return err
	})
}

// ShutdownResponse: see agent.proto.
type ShutdownResponse struct{}

func (x *ShutdownResponse) reset()               {}
func (x *ShutdownResponse) encode(*encoder)      {}
func (x *ShutdownResponse) merge(b []byte) error { return skipAll(b) }

// member is the message a oneof member's bytes merge into: the one the
// oneof holds (m, from its getter) when it holds that member, else a new
// one.
func member[M any, PM interface {
	*M
	Message
}](m PM) PM {
	if m == nil {
		return new(M)
	}
	return m
}

// skipAll checks the fields of a message that has none.
func skipAll(b []byte) error {
	return fields(b, func(d *decoder, num int, t wireType) error { return d.skip(num, t) })
}
