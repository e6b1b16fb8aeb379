// Package wire holds the shapes tsgen's test writes as TypeScript.
package wire

import (
	"context"
	"encoding/json"
	"io/fs"
	"time"

	"github.com/airlock-sandbox/airlock/build/tsgen/testdata/wire/other"
)

// API is a root interface: its methods' types are written.
type API interface {
	Get(ctx context.Context, id string) (Thing, error)
	Follow(ctx context.Context) (<-chan other.Note, error)
}

// Color is a named string with constants: a union of their values.
type Color string

// Colors.
const (
	Red   Color = "red"
	Green Color = "green"
	// Crimson repeats a value, which the union lists once.
	Crimson Color = "red"
)

// Level is a named number with constants.
type Level uint8

// Levels.
const (
	Low  Level = 1
	High Level = 2
)

// Free is a named string without constants.
type Free string

// Stamp writes itself as text.
type Stamp struct{ s string }

// MarshalText writes the stamp.
func (s Stamp) MarshalText() ([]byte, error) { return []byte(s.s), nil }

// Base is embedded in Thing, whose JSON it flattens into.
type Base struct {
	// Kind is a field of Base.
	Kind Color `json:"kind"`
}

// Thing has one field of each kind.
type Thing struct {
	Base
	*other.Extra
	// Name is a plain field.
	Name     string            `json:"name"`
	Opt      string            `json:"opt,omitempty"`
	When     time.Time         `json:"when"`
	Took     time.Duration     `json:"took_ns"`
	Zero     time.Time         `json:"zero,omitzero"`
	Bytes    []byte            `json:"bytes"`
	List     []string          `json:"list"`
	OptList  []string          `json:"opt_list,omitempty"`
	Ptr      *other.Note       `json:"ptr"`
	OptPtr   *other.Note       `json:"opt_ptr,omitempty"`
	ByName   map[string]Level  `json:"by_name"`
	Any      any               `json:"any"`
	Raw      json.RawMessage   `json:"raw,omitempty"`
	Mode     fs.FileMode       `json:"mode"`
	Stamp    Stamp             `json:"stamp"`
	Quoted   int64             `json:"quoted,string"`
	Untagged int               // a line comment
	Skipped  string            `json:"-"`
	hidden   string            // not exported: left out
	Free     Free              `json:"free"`
	Inline   struct{ A int }   `json:"inline"`
	Dashed   string            `json:"x-y"`
	Structs  []*other.Note     `json:"structs"`
	Nested   map[Color][]Level `json:"nested,omitempty"`
}
