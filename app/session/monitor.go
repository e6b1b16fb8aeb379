package session

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

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

// watch starts the monitor. A value on poke asks for a check now (see
// Session.CheckAgent). reconnected is called (from the monitor's
// goroutine) each time the agent is found to have restarted and answers
// again, with the count so far on this VM.
func watch(sb Sandbox, h HealthPolicy, clock Clock, log *slog.Logger, poke <-chan struct{}, reconnected func(n int)) *monitor {
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
			m.checkAgent(ctx, sb, h, clock, log, poke, reconnected)
		}()
	}
	return m
}

// checkAgent asks the agent for Info every h.Interval and reports it dead
// after h.Misses failed calls in a row. An answer with another
// agent_instance than the last one means the guest restarted its agent and
// the successor answers; more than h.Reconnects of those within
// h.ReconnectWindow report the VM lost, so a guest that keeps restarting
// its agent costs its VM as before. Restarts between two checks count as
// one, as the instance only tells that the agent changed. The first
// instance is the one the agent announced in its Ready message.
//
// A poke checks at once, outside the schedule; while its checks fail (the
// agent init runs again may take a moment to listen) they are retried every
// pokeRetry for one interval and count no miss: only the scheduled checks
// decide that the agent is dead.
func (m *monitor) checkAgent(ctx context.Context, sb Sandbox, h HealthPolicy, clock Clock, log *slog.Logger, poke <-chan struct{}, reconnected func(int)) {
	misses := 0
	seen := sb.Ready().AgentInstance // the agent's instance at the last answer; 0: none yet
	var recent []time.Time           // restarts within h.ReconnectWindow
	total := 0
	tick := clock.After(h.Interval)
	var retry <-chan time.Time // the next retry of a poke's failed check
	var retryUntil time.Time
	for {
		scheduled := false
		select {
		case <-ctx.Done():
			return
		case <-tick:
			scheduled, tick = true, clock.After(h.Interval)
		case <-poke:
			retryUntil = clock.Now().Add(h.Interval)
		case <-retry:
		}
		retry = nil
		cctx, cancel := context.WithTimeout(ctx, h.Timeout)
		info, err := sb.Agent().Info(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil && clock.Now().Before(retryUntil) {
			retry = clock.After(pokeRetry)
		}
		if err != nil && !scheduled {
			continue
		}
		if err == nil {
			misses, retryUntil = 0, time.Time{}
			inst := info.GetAgentInstance()
			if inst == 0 || inst == seen {
				continue // an agent too old to tell, or the same one
			}
			first := seen == 0
			seen = inst
			if first {
				continue
			}
			now := clock.Now()
			recent = slices.DeleteFunc(recent, func(t time.Time) bool { return now.Sub(t) >= h.ReconnectWindow })
			recent = append(recent, now)
			total++
			if h.Reconnects < 0 || len(recent) > h.Reconnects {
				m.report(fmt.Errorf("%w: %d restarts within %s", ErrAgentRestarting, len(recent), h.ReconnectWindow))
				return
			}
			log.Warn("guest agent restarted; the new agent answers on the same VM", "agent_restarts", total)
			reconnected(total)
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

// pokeRetry is how soon a poked check that failed is tried again.
const pokeRetry = 200 * time.Millisecond

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
