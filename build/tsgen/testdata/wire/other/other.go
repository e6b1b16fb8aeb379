// Package other is a second package tsgen's test reaches through wire.
package other

// Note is reached from another package.
type Note struct {
	// Text says */ in a comment, which must not end the JSDoc.
	Text string `json:"text"`
}

// Extra is embedded through a pointer: its fields may be missing.
type Extra struct {
	More int `json:"more"`
}
