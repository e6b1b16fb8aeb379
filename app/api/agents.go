package api

import (
	"errors"
	"net/http"

	"github.com/airlock-sandbox/airlock/app/agents"
)

// Option configures Handler.
type Option func(*handler)

// Agents are the agents whose MCP configuration the API may change
// (/v1/agents): those on Host, given Entry, the airlock program that is to
// serve them. Unavailable, when set, is why there is no such program here;
// every agent endpoint then answers it.
type Agents struct {
	Host        agents.Host
	Entry       agents.Entry
	Unavailable error
}

// WithAgents serves /v1/agents over a: GET lists the agents (found,
// connected), POST /v1/agents/{name}/connect and .../disconnect add or
// remove Airlock's entry in that agent's configuration file.
func WithAgents(a Agents) Option {
	return func(h *handler) { h.agents = &a }
}

var errNoAgents = errors.New("this Airlock does not connect agents: run `airlock connect` instead")

func (h *handler) agentsReady(w http.ResponseWriter) bool {
	switch {
	case h.agents == nil:
		h.fail(w, errNoAgents)
		return false
	case h.agents.Unavailable != nil:
		h.fail(w, h.agents.Unavailable)
		return false
	}
	return true
}

func (h *handler) listAgents(w http.ResponseWriter, r *http.Request) {
	if h.agentsReady(w) {
		writeJSON(w, http.StatusOK, h.agents.Host.Statuses(h.agents.Entry))
	}
}

func (h *handler) changeAgent(w http.ResponseWriter, r *http.Request) {
	if !h.agentsReady(w) {
		return
	}
	a, err := agents.Lookup(r.PathValue("name"))
	if err != nil {
		h.fail(w, invalid(err))
		return
	}
	var res agents.Result
	switch r.PathValue("action") {
	case "connect":
		res, err = h.agents.Host.Connect(a, h.agents.Entry)
	case "disconnect":
		res, err = h.agents.Host.Disconnect(a)
	default:
		err = invalid(errors.New("unknown action: use connect or disconnect"))
	}
	if errors.Is(err, agents.ErrNotFound) {
		err = invalid(err)
	}
	h.answer(w, res, err)
}
