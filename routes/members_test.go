package routes

import (
	"testing"
	"time"

	"github.com/eventq/eventq/internal/httpx"
	"github.com/eventq/eventq/internal/purchases"
	"github.com/eventq/eventq/models"
)

// The check's hand-built body is what the JSON encoder writes for the same entitlement.
func TestEntitlementBodyIsTheEncodersBytes(t *testing.T) {
	e := &models.Entitlement{ID: 12, ProductID: 3, PurchaseID: 4567, CreatedAt: time.Date(2026, 11, 27, 2, 3, 4, 999, time.FixedZone("X", 3600))}
	want, err := httpx.JSONMarshal(map[string]any{"data": purchases.ViewEntitlement(e)})
	if err != nil {
		t.Fatal(err)
	}
	if got := entitlementBody(e); string(got) != string(want) {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}
