package models

import (
	"database/sql/driver"
	"encoding/json"
	"fmt"
)

// StringList is a list of strings stored as a JSON array in a text column; nil is stored as
// "[]" and read back as an empty list.
type StringList []string

// Value stores the list as JSON.
func (l StringList) Value() (driver.Value, error) {
	if len(l) == 0 {
		return "[]", nil
	}
	b, err := json.Marshal([]string(l))
	return string(b), err
}

// Scan reads a JSON array; NULL or "" is an empty list.
func (l *StringList) Scan(src any) error {
	var b []byte
	switch v := src.(type) {
	case nil:
		*l = StringList{}
		return nil
	case string:
		b = []byte(v)
	case []byte:
		b = v
	default:
		return fmt.Errorf("models: StringList from %T", src)
	}
	if len(b) == 0 {
		*l = StringList{}
		return nil
	}
	var out []string
	if err := json.Unmarshal(b, &out); err != nil {
		return fmt.Errorf("models: StringList: %w", err)
	}
	if out == nil {
		out = []string{}
	}
	*l = out
	return nil
}
