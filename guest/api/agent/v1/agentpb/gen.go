// Package agentpb is protoc-gen-go's code for the guest agent's contract
// (agent.proto). Only tests use it: they hold the hand-written messages
// of agentv1, which the guest and the host use, to this code's encoding,
// so that the contract stays protobuf while the guest binary carries no
// protobuf runtime. Regenerate with `make proto`; CI fails when it drifts.
package agentpb

//go:generate protoc --proto_path=. --go_out=paths=source_relative:. --plugin=protoc-gen-go=../../../../../.bin/protoc-gen-go agent.proto
