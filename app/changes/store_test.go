package changes

import (
	"errors"
	"slices"
	"testing"
)

func TestOpenLocksAndForgetList(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, Options{}); !errors.Is(err, ErrInUse) {
		t.Fatalf("second Open: %v, want ErrInUse", err)
	}
	s.mu.Lock()
	err = s.addForgotten([]string{"a", "b/c", "a"})
	s.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Forgotten()
	if err != nil || !slices.Equal(got, []string{"a", "b/c"}) {
		t.Fatalf("Forgotten = %q, %v", got, err)
	}
	if err := s.ClearForgotten(); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Forgotten(); len(got) != 0 {
		t.Fatalf("after ClearForgotten: %q", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	s2.Close()
}
