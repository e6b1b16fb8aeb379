package api

import (
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
)

// MaxReadySize bounds the Ready message the host will read from the guest.
const MaxReadySize = 4096

// maxAgentVersion bounds the agent version a Ready may carry.
const maxAgentVersion = 128

// Ready is the message the guest writes on PortReady once the agent
// serves: agentv1.Ready, its protobuf encoding the whole stream.
type Ready = agentv1.Ready

// WriteReady writes r, the whole of what the guest sends on PortReady.
func WriteReady(w io.Writer, r Ready) error {
	b, err := r.MarshalVT()
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// ReadReady reads one Ready message to the end of r, reading at most
// MaxReadySize bytes: the guest is not trusted, so a longer or malformed
// message, or one without an agent version, is an error.
func ReadReady(r io.Reader) (Ready, error) {
	var ready Ready
	b, err := io.ReadAll(io.LimitReader(r, MaxReadySize+1))
	if err != nil {
		return ready, fmt.Errorf("read ready message: %w", err)
	}
	if len(b) > MaxReadySize {
		return ready, fmt.Errorf("ready message longer than %d bytes", MaxReadySize)
	}
	if len(b) > 0 && b[0] == '{' {
		// Ready was a JSON line before it was agentv1.Ready.
		return Ready{}, errors.New("a JSON ready message, from an image older than this airlock: rebuild it (make image)")
	}
	if err := ready.UnmarshalVT(b); err != nil {
		return Ready{}, fmt.Errorf("malformed ready message: %w", err)
	}
	if err := checkReady(&ready); err != nil {
		return Ready{}, fmt.Errorf("malformed ready message: %w", err)
	}
	return ready, nil
}

func checkReady(r *Ready) error {
	switch v := r.GetAgentVersion(); {
	case v == "":
		return errors.New("no agent version")
	case len(v) > maxAgentVersion:
		return errors.New("agent version too long")
	case !utf8.ValidString(v):
		return errors.New("agent version not UTF-8")
	}
	return nil
}
