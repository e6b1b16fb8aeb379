package vz

import (
	"errors"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/vm"
)

// An Intel Mac is refused before boot with what to do; Apple silicon
// passes.
func TestCheckHost(t *testing.T) {
	if err := checkHost("arm64"); err != nil {
		t.Fatalf("arm64: %v", err)
	}
	err := checkHost("amd64")
	if !errors.Is(err, vm.ErrNoHypervisor) {
		t.Fatalf("amd64: %v, want vm.ErrNoHypervisor (not retried)", err)
	}
	for _, want := range []string{"Intel", "Apple silicon", "Linux or Windows"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q: %v", want, err)
		}
	}
}
