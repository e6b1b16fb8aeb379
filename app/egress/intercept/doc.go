// Package intercept is the egress gate's TLS interception: the
// per-installation CA and the leaf certificates it makes, TLS termination
// on both sides of a tunnel (Upstream verifies the real server, CA.Accept
// answers the guest), and the secrets: checking them (NewSecrets), adding
// them to a request and refusing placeholders that go where they must not
// (Secrets.Apply, Secrets.ScanBody), and replacing their values in what a
// secret's host answers (Redactor).
//
// The guest only ever holds a secret's placeholder; the value stays in the
// host's memory, is added only to HTTPS requests to the secret's hosts,
// and is never logged. The CA's key never leaves the host.
//
// It does not decide which tunnels are intercepted, read or relay
// requests, or log: the gate (package egress) does, calling it for each
// request.
package intercept
