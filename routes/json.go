package routes

import (
	"bytes"
	"encoding/json"
)

// jsonMarshal is json.Marshal without HTML escaping: URLs keep their "&" as sent.
func jsonMarshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
