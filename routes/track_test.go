package routes

import (
	"testing"

	"github.com/eventq/eventq/internal/httpx"
	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"
)

func TestAcceptedBodyIsWhatTheJSONEncoderWrites(t *testing.T) {
	for _, n := range []int{0, 1, 2, 50, 100} {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = uuid.Must(uuid.NewV7()).String()
		}
		want, err := httpx.JSONMarshal(fiber.Map{"data": fiber.Map{"ids": ids}})
		if err != nil {
			t.Fatal(err)
		}
		if got := acceptedBody(ids); string(got) != string(want) {
			t.Errorf("%d ids: %s\nwant %s", n, got, want)
		}
	}
}
