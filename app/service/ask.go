package service

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/app/egress"
	"github.com/airlock-sandbox/airlock/app/settings"
)

// AskTimeout is how long a connection no rule matches waits for the user
// while a UI that can answer is attached.
const AskTimeout = 60 * time.Second

// answererGrace keeps a UI counted as able to answer after its event stream
// ends, covering a long-polling client's reconnect.
const answererGrace = 5 * time.Second

// Bounds of the pending questions: a guest asking for thousands of hosts
// gets one prompt per task, not thousands.
const (
	// MaxPendingAsks bounds the questions waiting at once in this sandbox;
	// a task asking while that many wait is refused at once.
	MaxPendingAsks = 32
	// MaxAskHosts bounds the destinations one question covers; more from
	// the same task while it waits are refused at once.
	MaxAskHosts = 256
)

// Ask is a question to the user: may this task connect to host:port (and,
// when it asked for more while the question was open, to those too)?
type Ask struct {
	ID       string    `json:"id"`
	Task     string    `json:"task,omitempty"`
	Protocol string    `json:"protocol"`
	Host     string    `json:"host"`
	Port     uint16    `json:"port"`
	Time     time.Time `json:"time"`
	// More lists the other host:port destinations the same task asked for
	// while this question was open (at most MaxAskHosts-1); the one answer
	// covers them all. Each addition is sent as another "ask" event with
	// the same ID.
	More []string `json:"more,omitempty"`
	// Verdict is set on the "ask-answered" event: allow-once,
	// allow-always, deny, timeout, or no-window (the last window that
	// could answer closed).
	Verdict string `json:"verdict,omitempty"`
}

// Verdicts an answer may give.
const (
	VerdictAllowOnce   = "allow-once"
	VerdictAllowAlways = "allow-always"
	VerdictDeny        = "deny"
)

// verdictNoWindow ends a question when the last window that could answer
// it closes: nobody is left to ask, so it is refused as such at once
// rather than when it times out.
const verdictNoWindow = "no-window"

// asks holds the questions waiting for an answer and who can answer them.
// A task has at most one question open: what else it asks for while that
// one waits is added to it (Ask.More).
type asks struct {
	mu        sync.Mutex
	pending   map[string]*pendingAsk // by Ask.ID
	byTask    map[string]*pendingAsk
	answerers int
	subs      map[chan Event]struct{}
}

type pendingAsk struct {
	ask     Ask
	dests   map[string]bool // host:port of Host and More
	waiting int             // Decide calls waiting for the answer
	done    chan struct{}   // closed once answered
	verdict string
}

// ErrNoSuchAsk means the question is not pending.
var ErrNoSuchAsk = errors.New("no such question")

// askDecider is the gate's Decider: it asks the attached UIs, and refuses
// at once when none is attached (a CLI user is never kept waiting), or
// when the last one goes while the question waits.
type askDecider struct{ s *Service }

func (d askDecider) Decide(ctx context.Context, req egress.Request) (egress.Verdict, error) {
	a := &d.s.asks
	dest := net.JoinHostPort(req.Host, strconv.Itoa(int(req.Port)))
	a.mu.Lock()
	if a.answerers == 0 {
		a.mu.Unlock()
		return egress.Deny, egress.ErrNobodyToAsk
	}
	p := a.byTask[req.Task]
	switch {
	case p != nil && !p.dests[dest] && len(p.dests) >= MaxAskHosts:
		a.mu.Unlock()
		return egress.Deny, fmt.Errorf("this task already asked for %d destinations in one question: answer it first", MaxAskHosts)
	case p != nil:
		if !p.dests[dest] {
			p.dests[dest] = true
			p.ask.More = append(slices.Clip(p.ask.More), dest)
			a.publishLocked(Event{Kind: "ask", Ask: copyAsk(p.ask)})
		}
	case len(a.pending) >= MaxPendingAsks:
		a.mu.Unlock()
		return egress.Deny, fmt.Errorf("%d questions are waiting for an answer already: answer them first", MaxPendingAsks)
	default:
		id := make([]byte, 6)
		_, _ = rand.Read(id)
		p = &pendingAsk{
			ask:   Ask{ID: hex.EncodeToString(id), Task: req.Task, Protocol: string(req.Protocol), Host: req.Host, Port: req.Port, Time: time.Now()},
			dests: map[string]bool{dest: true},
			done:  make(chan struct{}),
		}
		if a.pending == nil {
			a.pending, a.byTask = map[string]*pendingAsk{}, map[string]*pendingAsk{}
		}
		a.pending[p.ask.ID], a.byTask[req.Task] = p, p
		a.publishLocked(Event{Kind: "ask", Ask: copyAsk(p.ask)})
	}
	p.waiting++
	a.mu.Unlock()

	select {
	case <-p.done:
	case <-ctx.Done():
	}
	a.mu.Lock()
	p.waiting--
	verdict := p.verdict
	if verdict == "" && p.waiting == 0 {
		// Nobody waits for this answer any more: the question expires.
		a.closeLocked(p, "timeout")
	}
	a.mu.Unlock()
	switch verdict {
	case VerdictAllowOnce:
		return egress.AllowOnce, nil
	case VerdictAllowAlways:
		return egress.AllowAlways, nil // Answer kept it in the settings
	case verdictNoWindow:
		return egress.Deny, egress.ErrNobodyToAsk
	}
	return egress.Deny, nil
}

// closeLocked ends a pending question with verdict and tells the UIs.
func (a *asks) closeLocked(p *pendingAsk, verdict string) {
	p.verdict = verdict
	close(p.done)
	delete(a.pending, p.ask.ID)
	if a.byTask[p.ask.Task] == p {
		delete(a.byTask, p.ask.Task)
	}
	done := copyAsk(p.ask)
	done.Verdict = verdict
	a.publishLocked(Event{Kind: "ask-answered", Ask: done})
}

// copyAsk returns a copy the receiver of an event may keep.
func copyAsk(a Ask) *Ask {
	a.More = slices.Clone(a.More)
	return &a
}

func (a *asks) publishLocked(e Event) {
	for ch := range a.subs {
		select {
		case ch <- e:
		default: // a consumer that does not keep up misses it; Asks() has the truth
		}
	}
}

// subscribe delivers ask events until ctx is done; answer also counts the
// subscriber as a UI that can answer.
func (a *asks) subscribe(ctx context.Context, answer bool) <-chan Event {
	ch := make(chan Event, 16)
	a.mu.Lock()
	if a.subs == nil {
		a.subs = map[chan Event]struct{}{}
	}
	a.subs[ch] = struct{}{}
	if answer {
		a.answerers++
	}
	a.mu.Unlock()
	go func() {
		<-ctx.Done()
		a.mu.Lock()
		delete(a.subs, ch)
		a.mu.Unlock()
		close(ch)
		if answer {
			// A UI that long-polls reconnects between polls: it stays an
			// answerer for a moment, so an ask in that gap still reaches it.
			time.AfterFunc(answererGrace, func() {
				a.mu.Lock()
				a.answerers--
				if a.answerers == 0 {
					for _, p := range a.pending {
						a.closeLocked(p, verdictNoWindow)
					}
				}
				a.mu.Unlock()
			})
		}
	}()
	return ch
}

// Asks lists the questions waiting for an answer, oldest first.
func (s *Service) Asks(context.Context) ([]Ask, error) {
	s.asks.mu.Lock()
	defer s.asks.mu.Unlock()
	out := make([]Ask, 0, len(s.asks.pending))
	for _, p := range s.asks.pending {
		out = append(out, *copyAsk(p.ask))
	}
	slices.SortFunc(out, func(x, y Ask) int { return x.Time.Compare(y.Time) })
	return out, nil
}

// Answer answers a pending question, for every destination it covers. An
// allow-always answer is kept in the settings for all of them.
func (s *Service) Answer(_ context.Context, id, verdict string) error {
	switch verdict {
	case VerdictAllowOnce, VerdictAllowAlways, VerdictDeny:
	default:
		return fmt.Errorf("verdict %q: use %s, %s or %s", verdict, VerdictAllowOnce, VerdictAllowAlways, VerdictDeny)
	}
	s.asks.mu.Lock()
	p, ok := s.asks.pending[id]
	var dests []string
	if ok {
		dests = append([]string{net.JoinHostPort(p.ask.Host, strconv.Itoa(int(p.ask.Port)))}, p.ask.More...)
		if verdict != VerdictAllowAlways {
			s.asks.closeLocked(p, verdict)
		}
	}
	s.asks.mu.Unlock()
	if !ok {
		return fmt.Errorf("question %s: %w (answered already, or it timed out)", id, ErrNoSuchAsk)
	}
	if verdict == VerdictAllowAlways {
		// Kept before the waiting connections go on, so the gate's session
		// entries and the settings agree; the gate adds its own for them.
		if err := s.updateSettings(func(st *settings.Settings) error {
			for _, e := range dests {
				st.Allow = appendNew(st.Allow, e)
			}
			return s.gate.SetPolicy(st.Allow, st.Deny, st.MapHosts)
		}); err != nil {
			s.log.Warn("could not save an allow-always answer", "entries", len(dests), "err", err)
		}
		s.asks.mu.Lock()
		if s.asks.pending[id] == p {
			s.asks.closeLocked(p, verdict)
		}
		s.asks.mu.Unlock()
	}
	return nil
}
