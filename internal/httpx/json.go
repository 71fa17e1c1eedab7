package httpx

import (
	"bytes"
	"encoding/json"
)

// JSONMarshal is json.Marshal without HTML escaping: URLs keep their "&" as sent.
func JSONMarshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
