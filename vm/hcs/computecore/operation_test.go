package computecore

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/vm/hcs"
)

// fakeOp is an HCS operation that completes with hr at done (never, if
// zero), seen through HcsWaitForOperationResult and HcsCancelOperation.
type fakeOp struct {
	mu       sync.Mutex
	done     time.Time
	hr       hcs.HRESULT
	timeouts []uint32
	cancels  int
	// cancelEnds makes HcsCancelOperation complete the operation with
	// E_ABORT; otherwise it does nothing (E_NOTIMPL, as documented).
	cancelEnds bool
}

func (o *fakeOp) wait(ms uint32) (hcs.HRESULT, string) {
	o.mu.Lock()
	o.timeouts = append(o.timeouts, ms)
	done, hr := o.done, o.hr
	o.mu.Unlock()
	d := time.Duration(ms) * time.Millisecond
	if !done.IsZero() {
		d = min(d, time.Until(done))
	}
	if d > 0 {
		time.Sleep(d)
	}
	if !done.IsZero() && !time.Now().Before(done) {
		return hr, `{"ok":true}`
	}
	return hrOperationTimeout, ""
}

func (o *fakeOp) cancel() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.cancels++
	if o.cancelEnds {
		o.done, o.hr = time.Now(), 0x80004004 // E_ABORT
	}
}

func TestAwaitCompletes(t *testing.T) {
	op := &fakeOp{done: time.Now().Add(450 * time.Millisecond)}
	hr, doc, err := awaitOperation(context.Background(), op.wait, op.cancel)
	if err != nil || hr != 0 || doc == "" {
		t.Fatalf("hr %s, doc %q, err %v", hr, doc, err)
	}
	if op.cancels != 0 {
		t.Error("a completed operation was cancelled")
	}
	// No deadline still means no unbounded wait: the context is polled.
	for _, ms := range op.timeouts {
		if ms == 0xFFFFFFFF || ms > uint32(waitSlice/time.Millisecond) {
			t.Errorf("a wait of %d ms", ms)
		}
	}
}

func TestAwaitFailure(t *testing.T) {
	op := &fakeOp{done: time.Now(), hr: 0x80370106}
	hr, _, err := awaitOperation(context.Background(), op.wait, op.cancel)
	if err != nil || hr != 0x80370106 {
		t.Fatalf("hr %s, err %v", hr, err)
	}
}

// TestAwaitDeadline: an operation that never ends is cancelled when the
// context's deadline passes, and the wait's timeouts come from it.
func TestAwaitDeadline(t *testing.T) {
	op := &fakeOp{}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err := awaitOperation(ctx, op.wait, op.cancel)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v", err)
	}
	if op.cancels != 1 {
		t.Errorf("cancelled %d times", op.cancels)
	}
	if op.timeouts[0] > 120 {
		t.Errorf("first wait %d ms, past the deadline", op.timeouts[0])
	}
	if el := time.Since(start); el > 120*time.Millisecond+cancelGrace+time.Second {
		t.Errorf("took %v", el)
	}
}

// TestAwaitCancelled: a context cancelled without a deadline ends the
// wait too, and an operation HcsCancelOperation ends is not waited for
// longer.
func TestAwaitCancelled(t *testing.T) {
	op := &fakeOp{cancelEnds: true}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	hr, _, err := awaitOperation(ctx, op.wait, op.cancel)
	if !errors.Is(err, context.Canceled) || hr != 0x80004004 {
		t.Fatalf("hr %s, err %v", hr, err)
	}
	if el := time.Since(start); el > time.Second {
		t.Errorf("took %v to notice the cancellation", el)
	}
}

// TestAwaitCompletesInGrace: an operation that completes right after the
// cancel is a success.
func TestAwaitCompletesInGrace(t *testing.T) {
	op := &fakeOp{done: time.Now().Add(150 * time.Millisecond)}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	hr, _, err := awaitOperation(ctx, op.wait, op.cancel)
	if err != nil || hr != 0 || op.cancels != 1 {
		t.Fatalf("hr %s, err %v, cancels %d", hr, err, op.cancels)
	}
}

func TestSliceMs(t *testing.T) {
	if got := sliceMs(context.Background()); got != uint32(waitSlice/time.Millisecond) {
		t.Errorf("no deadline: %d", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if got := sliceMs(ctx); got == 0 || got > 30 {
		t.Errorf("30ms deadline: %d", got)
	}
	past, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	if got := sliceMs(past); got != 0 {
		t.Errorf("past deadline: %d", got)
	}
}
