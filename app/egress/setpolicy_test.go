package egress

import (
	"errors"
	"testing"

	"github.com/airlock-sandbox/airlock/app/egress/policy"
)

func TestSetPolicy(t *testing.T) {
	g, err := New(Config{Allow: []string{"a.test"}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	before := g.policy.Load()
	if err := g.SetPolicy([]string{"*.com"}, nil, nil); !errors.Is(err, policy.ErrInvalidEntry) {
		t.Fatalf("allow *.com: %v", err)
	}
	if g.policy.Load() != before {
		t.Fatalf("a refused policy replaced the old one")
	}
	if err := g.SetPolicy([]string{"b.test"}, []string{"*.com"}, []string{"c.test=127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	p := g.policy.Load()
	for host, want := range map[string]policy.Outcome{
		"a.test": policy.Unmatched, "b.test": policy.Allowed, "x.com": policy.Denied,
	} {
		if m := p.Match(policy.Target{Host: host, Port: 443}); m.Outcome != want {
			t.Errorf("new policy: %s is %v, want %v", host, m.Outcome, want)
		}
	}
	if m := p.Match(policy.Target{Host: "c.test", Port: 443}); m.Rule != "map-host c.test=127.0.0.1" {
		t.Errorf("new policy: c.test matched %+v, want its pin", m)
	}
}
