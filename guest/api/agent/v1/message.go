package agentv1

import protobuf_go_lite "github.com/aperturerobotics/protobuf-go-lite"

// Message is any of this package's messages: the methods
// protoc-gen-go-lite generates for each, which encode and decode the
// protobuf wire format without reflection. UnmarshalVT merges into the
// message (Reset first to replace it), copies what it keeps of the input,
// and skips unknown fields; it does not check that strings are UTF-8, so
// a guest-chosen string is escaped (internal/printable) before a terminal
// or a log sees it.
type Message = protobuf_go_lite.Message
