package turns

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A key's n turns are taken, the next caller waits (or is refused by Try), another key's is
// served, and once every turn is given back the key holds nothing.
func TestTurns(t *testing.T) {
	var tu Turns
	ctx := context.Background()
	first, err := tu.Wait(ctx, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tu.Try(1, 1); ok {
		t.Fatal("a second turn of a key with one")
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := tu.Wait(short, 1, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waited %v, want the deadline", err)
	}
	other, ok := tu.Try(2, 1)
	if !ok {
		t.Fatal("another key refused")
	}
	other()
	done := make(chan func())
	go func() {
		r, err := tu.Wait(ctx, 1, 1)
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	first()
	first() // once
	(<-done)()
	if n := tu.Keys(); n != 0 {
		t.Fatalf("%d keys kept after every turn was given back", n)
	}
}
