// Package agentv1 is the host<->guest contract's messages: agent.proto,
// and the code protoc-gen-go-lite generates from it (agent.pb.go), which
// the guest and the host both use. docs/protocol.md says which port and
// framing carries each message.
//
// The generator is protoc-gen-go-lite rather than protoc-gen-go because
// its code needs no reflection: the guest binary is PID 1 and the agent,
// and under emulation (TCG) every package it initialises is code
// translated for the first time on the boot's critical path. The protobuf
// runtime (its registry, reflection, and the compress/flate and text
// packages it pulls in) costs ~40 ms of a process's start under TCG and
// 1.7 MB of the guest binary; the generated code here costs neither
// (docs/performance.md has the measurements).
//
// Error (errors.go) is the contract's one error type: a Code and a
// message, which the guest returns from a handler and the host receives,
// matched with errors.Is against the sentinels ErrNotFound and its
// siblings.
package agentv1

//go:generate protoc --proto_path=. --go-lite_out=paths=source_relative:. --go-lite_opt=features=marshal+unmarshal+size --plugin=protoc-gen-go-lite=../../../../.bin/protoc-gen-go-lite agent.proto
