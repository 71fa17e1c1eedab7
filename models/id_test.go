package models

import "testing"

// An id has one spelling: the decimal form of a positive integer below 2^63, without sign or
// leading zeros. Every other form is no id (the routes answer it 404, as an unknown id).
func TestParseIDTakesOnlyTheCanonicalForm(t *testing.T) {
	for s, want := range map[string]uint64{"1": 1, "42": 42, "9223372036854775807": 1<<63 - 1} {
		if got, ok := ParseID(s); !ok || got != want {
			t.Errorf("ParseID(%q) = %d %v, want %d", s, got, ok, want)
		}
	}
	for _, s := range []string{"", "0", "00", "004", "+4", "-4", " 4", "4 ", "4.0", "0x4", "1e3",
		"9223372036854775808", "18446744073709551615", "18446744073709551616", "099999999999999999999"} {
		if got, ok := ParseID(s); ok {
			t.Errorf("ParseID(%q) = %d, accepted", s, got)
		}
	}
}
