package cli

import (
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/egress"
)

func TestRepeatedText(t *testing.T) {
	if got := repeatedText(egress.Decision{}); got != "" {
		t.Errorf("a single decision: %q", got)
	}
	if got := repeatedText(egress.Decision{Repeated: 4200, Duration: 4700 * time.Millisecond}); got != "  ×4200 more in 5s" {
		t.Errorf("a summary: %q", got)
	}
}
