package agentv1

// LayerRequest: see agent.proto.
type LayerRequest struct {
	// Call is one of *LayerRequest_Export, *LayerRequest_Forget.
	Call isLayerRequest_Call
}

type isLayerRequest_Call interface{ isLayerRequest_Call() }

type LayerRequest_Export struct{ Export *LayerExportRequest }
type LayerRequest_Forget struct{ Forget *LayerForgetRequest }

func (*LayerRequest_Export) isLayerRequest_Call() {}
func (*LayerRequest_Forget) isLayerRequest_Call() {}

func (x *LayerRequest) GetCall() isLayerRequest_Call {
	if x == nil {
		return nil
	}
	return x.Call
}

func (x *LayerRequest) GetExport() *LayerExportRequest {
	if c, ok := x.GetCall().(*LayerRequest_Export); ok {
		return c.Export
	}
	return nil
}

func (x *LayerRequest) GetForget() *LayerForgetRequest {
	if c, ok := x.GetCall().(*LayerRequest_Forget); ok {
		return c.Forget
	}
	return nil
}

func (x *LayerRequest) reset() { *x = LayerRequest{} }

func (x *LayerRequest) encode(e *encoder) {
	if x == nil {
		return
	}
	switch c := x.Call.(type) {
	case *LayerRequest_Export:
		e.message(1, c.Export)
	case *LayerRequest_Forget:
		e.message(2, c.Forget)
	}
}

func (x *LayerRequest) merge(b []byte) error {
	return fields(b, func(d *decoder, num int, t wireType) error {
		if num != 1 && num != 2 {
			return d.skip(num, t)
		}
		v, ok, err := lengthDelimited(d, num, t)
		if !ok {
			return err
		}
		if num == 1 {
			m := member(x.GetExport())
			x.Call = &LayerRequest_Export{Export: m}
			return m.merge(v)
		}
		m := member(x.GetForget())
		x.Call = &LayerRequest_Forget{Forget: m}
		return m.merge(v)
	})
}

// LayerExportRequest: see agent.proto.
type LayerExportRequest struct{}

func (x *LayerExportRequest) reset()               {}
func (x *LayerExportRequest) encode(*encoder)      {}
func (x *LayerExportRequest) merge(b []byte) error { return skipAll(b) }

// LayerForgetRequest: see agent.proto.
type LayerForgetRequest struct {
	Paths []string
}

func (x *LayerForgetRequest) GetPaths() []string {
	if x == nil {
		return nil
	}
	return x.Paths
}

func (x *LayerForgetRequest) reset() { *x = LayerForgetRequest{} }

func (x *LayerForgetRequest) encode(e *encoder) {
	if x == nil {
		return
	}
	for _, p := range x.Paths {
		e.repeatedString(1, p)
	}
}

func (x *LayerForgetRequest) merge(b []byte) error {
	return fields(b, func(d *decoder, num int, t wireType) error {
		if num != 1 || t != wireBytes {
			return d.skip(num, t)
		}
		s, err := d.string(num)
		x.Paths = append(x.Paths, s)
		return err
	})
}

// LayerResponse: see agent.proto.
type LayerResponse struct {
	// Result is one of *LayerResponse_Done, *LayerResponse_Error.
	Result isLayerResponse_Result
}

type isLayerResponse_Result interface{ isLayerResponse_Result() }

type LayerResponse_Done struct{ Done *LayerDone }
type LayerResponse_Error struct{ Error *Error }

func (*LayerResponse_Done) isLayerResponse_Result()  {}
func (*LayerResponse_Error) isLayerResponse_Result() {}

func (x *LayerResponse) GetResult() isLayerResponse_Result {
	if x == nil {
		return nil
	}
	return x.Result
}

func (x *LayerResponse) GetDone() *LayerDone {
	if r, ok := x.GetResult().(*LayerResponse_Done); ok {
		return r.Done
	}
	return nil
}

func (x *LayerResponse) GetError() *Error {
	if r, ok := x.GetResult().(*LayerResponse_Error); ok {
		return r.Error
	}
	return nil
}

func (x *LayerResponse) reset() { *x = LayerResponse{} }

func (x *LayerResponse) encode(e *encoder) {
	if x == nil {
		return
	}
	switch r := x.Result.(type) {
	case *LayerResponse_Done:
		e.message(1, r.Done)
	case *LayerResponse_Error:
		e.message(2, r.Error)
	}
}

func (x *LayerResponse) merge(b []byte) error {
	return fields(b, func(d *decoder, num int, t wireType) error {
		if num != 1 && num != 2 {
			return d.skip(num, t)
		}
		v, ok, err := lengthDelimited(d, num, t)
		if !ok {
			return err
		}
		if num == 1 {
			m := member(x.GetDone())
			x.Result = &LayerResponse_Done{Done: m}
			return m.merge(v)
		}
		m := member(x.GetError())
		x.Result = &LayerResponse_Error{Error: m}
		return m.merge(v)
	})
}

// LayerDone: see agent.proto.
type LayerDone struct {
	Entries uint64
	Bytes   uint64
}

func (x *LayerDone) GetEntries() uint64 {
	if x == nil {
		return 0
	}
	return x.Entries
}

func (x *LayerDone) GetBytes() uint64 {
	if x == nil {
		return 0
	}
	return x.Bytes
}

func (x *LayerDone) reset() { *x = LayerDone{} }

func (x *LayerDone) encode(e *encoder) {
	if x == nil {
		return
	}
	e.uint64(1, x.Entries, false)
	e.uint64(2, x.Bytes, false)
}

func (x *LayerDone) merge(b []byte) error {
	return fields(b, func(d *decoder, num int, t wireType) error {
		if num != 1 && num != 2 {
			return d.skip(num, t)
		}
		v, ok, err := scalar(d, num, t)
		if ok && num == 1 {
			x.Entries = v
		} else if ok {
			x.Bytes = v
		}
		return err
	})
}
