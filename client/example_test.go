package client_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/eventq/eventq/client"
)

// A consumer that stores each event keyed by its id, so that a re-delivered batch does no harm.
func ExampleClient_Consume() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	c := client.New("https://events.example.com", os.Getenv("EVENTQ_TOKEN"))
	err := c.Consume(ctx, func(ctx context.Context, batch client.Batch) error {
		for _, e := range batch.Events {
			// Upsert by e.ID here; returning an error keeps the whole batch in the queue.
			fmt.Println(e.ID, e.Type, e.URL)
		}
		return nil // the batch is trimmed now
	})
	if err != nil {
		log.Fatal(err) // a permanent error, e.g. *client.APIError 401 for a revoked token
	}
}

// Several such processes (or goroutines) share one queue: each event goes to one of them,
// at least once.
func ExampleClient_ConsumeShared() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	c := client.New("https://events.example.com", os.Getenv("EVENTQ_TOKEN"))
	err := c.ConsumeShared(ctx, func(ctx context.Context, e client.LeasedEvent) error {
		// Upsert by e.Event.ID here; an error hands the event back for a later delivery.
		fmt.Println(e.Offset, e.Deliveries, e.Event.ID)
		return nil // acknowledged with the rest of its batch
	}, client.WithLeaseLimit(100), client.WithVisibility(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
}
