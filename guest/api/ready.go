package api

import (
	"encoding/json"
	"fmt"
	"io"
)

// MaxReadySize bounds the Ready message the host will read from the guest.
const MaxReadySize = 4096

// Ready is the message the guest writes on PortReady once the agent serves.
type Ready struct {
	AgentVersion string `json:"agent_version"`
	// BootMillis is the guest's uptime when the agent became ready.
	BootMillis int64 `json:"boot_ms"`
	// AgentInstance is the agent's Info.agent_instance, so the
	// host knows it before its first Info call; 0 from an older agent.
	AgentInstance uint64 `json:"agent_instance,omitempty"`
}

// WriteReady writes r as one JSON line.
func WriteReady(w io.Writer, r Ready) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// ReadReady reads one Ready message, reading at most MaxReadySize bytes: the
// guest is not trusted, so a longer or malformed message is an error.
func ReadReady(r io.Reader) (Ready, error) {
	var ready Ready
	b, err := io.ReadAll(io.LimitReader(r, MaxReadySize+1))
	if err != nil {
		return ready, fmt.Errorf("read ready message: %w", err)
	}
	if len(b) > MaxReadySize {
		return ready, fmt.Errorf("ready message longer than %d bytes", MaxReadySize)
	}
	if err := json.Unmarshal(b, &ready); err != nil {
		return ready, fmt.Errorf("malformed ready message: %w", err)
	}
	if len(ready.AgentVersion) > 128 {
		return ready, fmt.Errorf("malformed ready message: agent version too long")
	}
	return ready, nil
}
