package egress

import (
	"errors"
	"testing"
)

func TestSetPolicy(t *testing.T) {
	g, err := New(Config{Allow: []string{"a.test"}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	before := g.policy.Load()
	if err := g.SetPolicy([]string{"*.com"}, nil, nil); !errors.Is(err, ErrInvalidEntry) {
		t.Fatalf("allow *.com: %v", err)
	}
	if g.policy.Load() != before {
		t.Fatalf("a refused policy replaced the old one")
	}
	if err := g.SetPolicy([]string{"b.test"}, []string{"*.com"}, []string{"c.test=127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	p := g.policy.Load()
	if len(p.allow) != 1 || p.allow[0].Name != "b.test" || len(p.deny) != 1 || len(p.pins["c.test"]) != 1 {
		t.Fatalf("new policy %+v", p)
	}
	if _, err := ParseAllowEntry("*.com"); err == nil {
		t.Fatalf("ParseAllowEntry accepted *.com")
	}
	if _, err := ParseAllowEntry("*.example.com"); err != nil {
		t.Fatal(err)
	}
}
