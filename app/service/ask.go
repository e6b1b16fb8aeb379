package service

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
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

// Ask is a question to the user: may this task connect to host:port?
type Ask struct {
	ID       string    `json:"id"`
	Task     string    `json:"task,omitempty"`
	Protocol string    `json:"protocol"`
	Host     string    `json:"host"`
	Port     uint16    `json:"port"`
	Time     time.Time `json:"time"`
	// Verdict is set on the "ask-answered" event: allow-once,
	// allow-always, deny or timeout.
	Verdict string `json:"verdict,omitempty"`
}

// Verdicts an answer may give.
const (
	VerdictAllowOnce   = "allow-once"
	VerdictAllowAlways = "allow-always"
	VerdictDeny        = "deny"
)

// asks holds the questions waiting for an answer and who can answer them.
type asks struct {
	mu        sync.Mutex
	pending   map[string]*pendingAsk
	answerers int
	subs      map[chan Event]struct{}
}

type pendingAsk struct {
	ask    Ask
	answer chan string
}

// ErrNoSuchAsk means the question is not pending.
var ErrNoSuchAsk = errors.New("no such question")

// askDecider is the gate's Decider: it asks the attached UIs, and denies
// at once when none is attached (a CLI user is never kept waiting).
type askDecider struct{ s *Service }

func (d askDecider) Decide(ctx context.Context, req egress.Request) (egress.Verdict, error) {
	a := &d.s.asks
	a.mu.Lock()
	if a.answerers == 0 {
		a.mu.Unlock()
		return egress.Deny, nil
	}
	id := make([]byte, 6)
	_, _ = rand.Read(id)
	p := &pendingAsk{
		ask:    Ask{ID: hex.EncodeToString(id), Task: req.Task, Protocol: string(req.Protocol), Host: req.Host, Port: req.Port, Time: time.Now()},
		answer: make(chan string, 1),
	}
	if a.pending == nil {
		a.pending = map[string]*pendingAsk{}
	}
	a.pending[p.ask.ID] = p
	a.publishLocked(Event{Kind: "ask", Ask: &p.ask})
	a.mu.Unlock()

	verdict := "timeout"
	select {
	case verdict = <-p.answer:
	case <-ctx.Done():
	}
	a.mu.Lock()
	delete(a.pending, p.ask.ID)
	done := p.ask
	done.Verdict = verdict
	a.publishLocked(Event{Kind: "ask-answered", Ask: &done})
	a.mu.Unlock()
	switch verdict {
	case VerdictAllowOnce:
		return egress.AllowOnce, nil
	case VerdictAllowAlways:
		// The gate adds it to this session; the settings keep it for the next.
		entry := net.JoinHostPort(req.Host, strconv.Itoa(int(req.Port)))
		if err := d.s.updateSettings(func(st *settings.Settings) error {
			st.Allow = appendNew(st.Allow, entry)
			return nil
		}); err != nil {
			d.s.log.Warn("could not save an allow-always answer", "entry", entry, "err", err)
		}
		return egress.AllowAlways, nil
	}
	return egress.Deny, nil
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
		out = append(out, p.ask)
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].Time.Before(out[j-1].Time); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out, nil
}

// Answer answers a pending question.
func (s *Service) Answer(_ context.Context, id, verdict string) error {
	switch verdict {
	case VerdictAllowOnce, VerdictAllowAlways, VerdictDeny:
	default:
		return fmt.Errorf("verdict %q: use %s, %s or %s", verdict, VerdictAllowOnce, VerdictAllowAlways, VerdictDeny)
	}
	s.asks.mu.Lock()
	p, ok := s.asks.pending[id]
	s.asks.mu.Unlock()
	if !ok {
		return fmt.Errorf("question %s: %w (answered already, or it timed out)", id, ErrNoSuchAsk)
	}
	select {
	case p.answer <- verdict:
	default:
	}
	return nil
}
