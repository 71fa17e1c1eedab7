package routes

import (
	"bufio"
	"context"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/eventq/eventq/internal/export"
	"github.com/eventq/eventq/internal/httpx"
	"github.com/eventq/eventq/internal/members"
	"github.com/eventq/eventq/internal/purchases"
	"github.com/eventq/eventq/models"
)

// accessExportTimeout bounds how long one access export may stream.
const accessExportTimeout = 30 * time.Minute

// accessLine is one line of the access export.
type accessLine struct {
	Kind string `json:"kind"`
	Data any    `json:"data"`
}

// memberData answers GET /api/platform/members/{member}/data, the member's access export:
// application/x-ndjson, a line for the member, each purchase, each entitlement ever granted
// (with revoked_at) and each stored event that names the member by id or external id, oldest
// first. The events are read a page at a time as they are written, so memory does not grow
// with their number. The member, purchases and entitlements are read before the answer
// starts: a failure there is an ordinary error answer; one while the events stream ends it.
func (s *Server) memberData(c *fiber.Ctx) error {
	tenantID := principal(c).TenantID
	done, ok := s.Tenant.Export.Begin(tenantID)
	if !ok { // one export of a tenant at a time: each reads all its stored events
		c.Set(fiber.HeaderRetryAfter, "1")
		return errTooManyAttempts
	}
	streaming := false
	defer func() {
		if !streaming {
			done()
		}
	}()
	m, err := s.Tenant.Members.Get(c.UserContext(), tenantID, memberRef(c))
	if err != nil {
		return err
	}
	bought, err := s.Tenant.Purchases.Purchases(c.UserContext(), tenantID, m.ID)
	if err != nil {
		return err
	}
	granted, err := s.Tenant.Purchases.Granted(c.UserContext(), tenantID, m.ID)
	if err != nil {
		return err
	}
	head := make([]accessLine, 0, 1+len(bought)+len(granted))
	head = append(head, accessLine{"member", members.View(m)})
	for i := range bought {
		head = append(head, accessLine{"purchase", purchases.ViewPurchase(&bought[i])})
	}
	for i := range granted {
		head = append(head, accessLine{"entitlement", purchases.ViewGrant(&granted[i])})
	}
	names := models.MemberRefs(m.ID, m.ExternalID)
	q := export.Query{TenantID: tenantID, Members: names}
	log := s.log(c)
	c.Set(fiber.HeaderContentType, "application/x-ndjson")
	streaming = true
	c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
		defer done()
		for _, line := range head {
			b, _ := httpx.JSONMarshal(line)
			w.Write(append(b, '\n'))
		}
		ctx, cancel := context.WithTimeout(context.Background(), accessExportTimeout)
		defer cancel()
		_, err := s.Tenant.Export.Each(ctx, q, func(ev *models.TrackedEvent) error {
			w.WriteString(`{"kind":"event","data":`)
			w.Write(ev.MarshalQueue())
			_, err := w.WriteString("}\n")
			return err
		})
		if err != nil {
			log.Error("access export stopped", "tenant", tenantID, "err", err) // the member is not named
			return
		}
		w.Flush()
	})
	return nil
}
