package computecore

import (
	"context"
	"fmt"
	"time"

	"github.com/airlock-sandbox/airlock/vm/hcs"
)

// How an HCS operation is waited for. This file has no Windows calls, so
// the logic is tested on every platform with fakes of
// HcsWaitForOperationResult and HcsCancelOperation.
const (
	// waitSlice bounds one HcsWaitForOperationResult call, so a context
	// that is cancelled (rather than past a deadline) is noticed within
	// it.
	waitSlice = 200 * time.Millisecond
	// cancelGrace bounds the last wait after HcsCancelOperation, for an
	// operation that completes anyway (the documentation says
	// HcsCancelOperation returns E_NOTIMPL; hcsshim calls it regardless).
	cancelGrace = 2 * time.Second
)

// hrOperationTimeout is HCS_E_OPERATION_TIMEOUT: HcsWaitForOperationResult
// ran out of time while the operation goes on (hcsshim
// internal/hcs/v2/operation.go hcsErrOperationTimeout).
const hrOperationTimeout hcs.HRESULT = 0x80370118

// sliceMs is the timeout of the next wait: what is left of ctx's deadline
// (rounded up to a whole millisecond), at most waitSlice.
func sliceMs(ctx context.Context) uint32 {
	d := waitSlice
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	if d <= 0 {
		return 0
	}
	return uint32((d + time.Millisecond - 1) / time.Millisecond)
}

// awaitOperation waits for an operation HCS has accepted, the way
// hcsshim's runOperation does (internal/hcs/v2/operation.go): the wait's
// timeout comes from ctx, and when ctx ends first the operation is
// cancelled rather than abandoned, then given cancelGrace to finish.
// wait is HcsWaitForOperationResult with a timeout in milliseconds and
// returns its HRESULT and result document; cancel is HcsCancelOperation.
//
// It returns the operation's HRESULT and document once the operation has
// completed, or ctx's error (with the operation cancelled) if it had not.
func awaitOperation(ctx context.Context, wait func(timeoutMs uint32) (hcs.HRESULT, string), cancel func()) (hcs.HRESULT, string, error) {
	for {
		hr, doc := wait(sliceMs(ctx))
		if hr != hrOperationTimeout {
			return hr, doc, nil
		}
		if ctx.Err() == nil {
			continue
		}
		cancel()
		hr, doc = wait(uint32(cancelGrace / time.Millisecond))
		if hr != hrOperationTimeout && !hr.Failed() {
			return hr, doc, nil // it completed after all
		}
		if hr != hrOperationTimeout {
			return hr, doc, fmt.Errorf("cancelled the operation, which ended with %s: %w", hr, ctx.Err())
		}
		return hr, doc, fmt.Errorf("cancelled the operation, still running: %w", ctx.Err())
	}
}
