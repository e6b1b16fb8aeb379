package hcs

import (
	"testing"

	"github.com/Microsoft/go-winio"
)

// TestServiceIDIsGoWinio: the document's HvSocketConfig keys (ServiceID,
// portable) are the ids go-winio binds and dials (VsockServiceID).
func TestServiceIDIsGoWinio(t *testing.T) {
	for _, port := range []uint32{0, 564, 1023, 1024, 0xffffffff} {
		if a, b := ServiceID(port), winio.VsockServiceID(port); a != b {
			t.Errorf("port %d: ServiceID %s, go-winio %s", port, a, b)
		}
	}
}
