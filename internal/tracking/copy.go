package tracking

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/gorm"

	"github.com/eventq/eventq/models"
)

// trackedEventColumns are the columns copyEvents writes, in the order of copyValues.
var trackedEventColumns = []string{"id", "tenant_id", "type", "session_id", "audience_member_id", "url",
	"page_hostname", "page_path", "user_agent", "ip_address", "event_sequence", "queued", "queue_pending", "created_at"}

// copyEvents writes rows to Postgres with one COPY: a single statement, so atomic and
// committed when it returns, without the parsing and per-parameter work of a multi-row INSERT.
func copyEvents(ctx context.Context, db *gorm.DB, rows []models.TrackedEvent) error {
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	conn, err := sqlDB.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(driverConn any) error {
		c, ok := driverConn.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("tracking: copy: driver connection is %T, not pgx", driverConn)
		}
		values := make([]any, len(trackedEventColumns))
		_, err := c.Conn().CopyFrom(ctx, pgx.Identifier{"tracked_events"}, trackedEventColumns,
			pgx.CopyFromFunc(func() ([]any, error) {
				if len(rows) == 0 {
					return nil, nil
				}
				e := &rows[0]
				rows = rows[1:]
				values[0], values[1], values[2], values[3] = e.ID, int64(e.TenantID), e.Type, e.SessionID
				values[4], values[5], values[6], values[7] = e.AudienceMemberID, e.URL, e.PageHostname, e.PagePath
				values[8], values[9], values[10] = e.UserAgent, e.IPAddress, e.EventSequence
				values[11], values[12], values[13] = e.Queued, e.QueuePending, e.CreatedAt
				return values, nil
			}))
		return err
	})
}
