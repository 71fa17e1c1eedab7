package tracking

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/gorm"

	"github.com/eventq/eventq/models"
)

// trackedEventColumns are the columns both writers (copyEvents, sqliteInserts) fill, in the
// order of appendValues.
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
		values := make([]any, 0, len(trackedEventColumns))
		_, err := c.Conn().CopyFrom(ctx, pgx.Identifier{"tracked_events"}, trackedEventColumns,
			pgx.CopyFromFunc(func() ([]any, error) {
				if len(rows) == 0 {
					return nil, nil
				}
				values = appendValues(values[:0], &rows[0])
				rows = rows[1:]
				return values, nil
			}))
		return err
	})
}

// appendValues appends e's column values to dst, in the order of trackedEventColumns; a
// missing audience member is an untyped nil, which every driver writes as NULL.
func appendValues(dst []any, e *models.TrackedEvent) []any {
	var member any
	if e.AudienceMemberID != nil {
		member = *e.AudienceMemberID
	}
	return append(dst, e.ID, int64(e.TenantID), e.Type, e.SessionID, member, e.URL, e.PageHostname,
		e.PagePath, e.UserAgent, e.IPAddress, e.EventSequence, e.Queued, e.QueuePending, e.CreatedAt)
}
