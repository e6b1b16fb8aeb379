package session

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"

	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/vm"
)

// monitor watches one running VM: the machine's exit, and the agent's
// answers to periodic Info calls. The first sign of death goes to lost.
type monitor struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	lost   chan error // buffered; only the first report is kept
}

func watch(sb Sandbox, h HealthPolicy, clock Clock, log *slog.Logger) *monitor {
	ctx, cancel := context.WithCancel(context.Background())
	m := &monitor{cancel: cancel, lost: make(chan error, 1)}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		err := sb.Machine().Wait(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = fmt.Errorf("%w: it powered off", ErrMachineExited)
		} else {
			err = fmt.Errorf("%w: %w", ErrMachineExited, err)
		}
		m.report(err)
	}()
	if h.Interval > 0 {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.checkAgent(ctx, sb, h, clock, log)
		}()
	}
	return m
}

// checkAgent asks the agent for Info every h.Interval and reports it dead
// after h.Misses failed calls in a row.
func (m *monitor) checkAgent(ctx context.Context, sb Sandbox, h HealthPolicy, clock Clock, log *slog.Logger) {
	misses := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-clock.After(h.Interval):
		}
		cctx, cancel := context.WithTimeout(ctx, h.Timeout)
		_, err := sb.Agent().Info(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			misses = 0
			continue
		}
		misses++
		log.Warn("guest agent health check failed", "miss", misses, "of", h.Misses, "err", err)
		if misses >= h.Misses {
			m.report(fmt.Errorf("%w: %d checks in a row failed, the last with: %w", ErrAgentUnresponsive, misses, err))
			return
		}
	}
}

func (m *monitor) report(err error) {
	select {
	case m.lost <- err:
	default:
	}
}

// stop ends the watch and waits for its goroutines.
func (m *monitor) stop() {
	m.cancel()
	m.wg.Wait()
}

// trackedMachine reports the boot's progress as sandbox.Start drives the
// machine: starting it, then waiting for the guest, then reaching the agent.
type trackedMachine struct {
	vm.Machine
	progress func(phase string)
	dialed   atomic.Bool
}

func (m *trackedMachine) Start(ctx context.Context) error {
	m.progress(PhaseStartingMachine)
	if err := m.Machine.Start(ctx); err != nil {
		return err
	}
	m.progress(PhaseWaitingForGuest)
	return nil
}

func (m *trackedMachine) Dial(ctx context.Context, port uint32) (net.Conn, error) {
	if port == api.PortAgent && m.dialed.CompareAndSwap(false, true) {
		m.progress(PhaseConnectingAgent)
	}
	return m.Machine.Dial(ctx, port)
}
