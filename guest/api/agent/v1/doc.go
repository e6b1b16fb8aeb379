// Package agentv1 holds the guest agent's messages, which guest/api/execwire
// frames carry between the host and the guest. The contract is
// agentpb/agent.proto, and the bytes on the wire are its protobuf
// encoding; the Go types here are written by hand, named and shaped as
// protoc-gen-go would make them (fields, oneof members, getters), with
// their own encoder and decoder (wire.go) instead of the protobuf runtime.
//
// Why: the guest binary is PID 1 and the agent, and under emulation
// (TCG) every package it initialises is code translated for the first
// time on the boot's critical path. The protobuf runtime (its registry,
// reflection, and the gzip, flate and go/token packages it pulls in) was
// ~35 ms of PID 1's start for fourteen small messages.
//
// TestConformance and FuzzConformance hold this package to protoc-gen-go's
// code for the same .proto (agentpb, used only by tests): the same bytes
// for the same message, the same message or a refusal for the same bytes.
// A field added to agent.proto must be added here too; those tests fail
// until it is.
package agentv1
