// Package agentv1 holds the generated code for the guest agent's RPC contract
// (agent.proto). Regenerate with `make proto`; CI fails when it drifts.
package agentv1

//go:generate protoc --proto_path=. --go_out=paths=source_relative:. --go-grpc_out=paths=source_relative:. --plugin=protoc-gen-go=../../../../.bin/protoc-gen-go --plugin=protoc-gen-go-grpc=../../../../.bin/protoc-gen-go-grpc agent.proto
