// Package bad holds shapes tsgen refuses.
package bad

// Custom writes its own JSON, whose shape tsgen cannot know.
type Custom struct{}

// MarshalJSON writes nothing useful.
func (Custom) MarshalJSON() ([]byte, error) { return []byte("1"), nil }

// HasCustom reaches Custom.
type HasCustom struct {
	C Custom `json:"c"`
}

// HasFunc has a field JSON cannot write.
type HasFunc struct {
	F func() `json:"f"`
}
