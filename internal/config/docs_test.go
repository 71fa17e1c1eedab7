package config

import (
	"os"
	"reflect"
	"regexp"
	"testing"
)

// Every variable Load reads has a row in docs/configuration.md, and the default that row gives
// is the real one: loading the documented value gives the configuration loading nothing does.
func TestConfigurationDocumentsEveryVariableAndItsDefault(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	base, err := Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	defaults := map[string][]byte{} // a row may name several variables: | `A`, `B` | default |
	for _, row := range regexp.MustCompile("(?m)^\\| ((?:`[A-Z_<>]+`(?:, )?)+) \\| ([^|]*) \\|").FindAllSubmatch(doc, -1) {
		for _, name := range regexp.MustCompile("`([A-Z_<>]+)`").FindAllSubmatch(row[1], -1) {
			defaults[string(name[1])] = row[2]
		}
	}
	for _, name := range Variables {
		cell, ok := defaults[name]
		if !ok {
			t.Errorf("docs/configuration.md has no row for %s", name)
			continue
		}
		value := regexp.MustCompile("^`([^`]*)`").FindSubmatch(cell)
		if value == nil { // "none", "empty": not set by default
			continue
		}
		got, err := Load([]string{name + "=" + string(value[1])})
		if err != nil {
			t.Errorf("%s: the documented default %q does not load: %v", name, value[1], err)
			continue
		}
		if !reflect.DeepEqual(got, base) {
			t.Errorf("%s: the documented default %q is not the default", name, value[1])
		}
	}
}
