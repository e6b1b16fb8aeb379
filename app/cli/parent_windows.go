package cli

import (
	"golang.org/x/sys/windows"
)

// watched is a process watchParent looks at, through a handle that
// outlives it (so its id cannot be reused meanwhile).
type watched struct{ h windows.Handle }

func openProcess(pid int) (*watched, error) {
	h, err := windows.OpenProcess(windows.SYNCHRONIZE, false, uint32(pid))
	if err != nil {
		return nil, err
	}
	return &watched{h: h}, nil
}

// gone says whether the process has ended (its handle is signalled).
func (w *watched) gone() bool {
	ev, err := windows.WaitForSingleObject(w.h, 0)
	return err == nil && ev == windows.WAIT_OBJECT_0
}

func (w *watched) close() { windows.CloseHandle(w.h) }
