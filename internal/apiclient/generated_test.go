package apiclient

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// apiclient.gen.go is what the generator makes of docs/openapi.yaml today: a change of the
// document that is not regenerated (go generate ./internal/apiclient) fails here.
func TestGeneratedClientIsUpToDate(t *testing.T) {
	// Read here too, so that go test's cache knows the test depends on the document.
	if _, err := os.ReadFile("../../docs/openapi.yaml"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "apiclient.gen.go")
	cfg, err := os.ReadFile("oapi-codegen.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg = bytes.Replace(cfg, []byte("output: apiclient.gen.go"), []byte("output: "+out), 1)
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "tool", "oapi-codegen", "-config", filepath.Join(dir, "config.yaml"), "../../docs/openapi.yaml")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("oapi-codegen: %v\n%s", err, b)
	}
	want, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("apiclient.gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("apiclient.gen.go is not what oapi-codegen makes of docs/openapi.yaml: run go generate ./internal/apiclient")
	}
}
