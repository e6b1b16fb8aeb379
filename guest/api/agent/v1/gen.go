// Package agentv1 holds the generated code for the guest agent's contract
// (agent.proto): protobuf messages only, carried in guest/api/execwire's
// frames. Regenerate with `make proto`; CI fails when it drifts.
package agentv1

//go:generate protoc --proto_path=. --go_out=paths=source_relative:. --plugin=protoc-gen-go=../../../../.bin/protoc-gen-go agent.proto
