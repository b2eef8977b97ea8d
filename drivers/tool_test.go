package drivers

import (
	"context"
	"errors"
	"testing"
)

// A Turn lets one through; a second waits, and gives up when its context
// ends.
func TestTurn(t *testing.T) {
	turn := NewTurn()
	release, err := turn.Take(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := turn.Take(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Take while taken, ctx cancelled: got %v, want context.Canceled", err)
	}
	release()
	again, err := turn.Take(context.Background())
	if err != nil {
		t.Fatalf("Take after release: %v", err)
	}
	again()
}
