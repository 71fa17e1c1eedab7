package export

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/eventq/eventq/internal/eventstore"
	"github.com/eventq/eventq/models"
)

// rowGroupSize is how many events one Parquet row group holds. A row group is built in memory
// before it is written, so this bounds what Parquet buffers; a file holds at most 32,767 row
// groups (about 327 million events at this size).
var rowGroupSize = 10_000

// Row is one event in a Parquet export: a column per queue event key, in the queue event's
// key order. created_at is a TIMESTAMP(MICROS, adjusted to UTC) and event_sequence an INT64;
// the other columns are UTF-8 strings, audience_member_id the only optional one (null when the
// event has no member). Every column is Snappy-compressed; the low-cardinality ones are
// dictionary-encoded.
type Row struct {
	ID               string    `parquet:"id"`
	Type             string    `parquet:"type,dict"`
	SessionID        string    `parquet:"session_id"`
	AudienceMemberID *string   `parquet:"audience_member_id,optional"`
	URL              string    `parquet:"url"`
	PageHostname     string    `parquet:"page_hostname,dict"`
	PagePath         string    `parquet:"page_path"`
	UserAgent        string    `parquet:"user_agent,dict"`
	IPAddress        string    `parquet:"ip_address"`
	EventSequence    int64     `parquet:"event_sequence"`
	CreatedAt        time.Time `parquet:"created_at,timestamp(microsecond:utc)"`
}

// rowOf is e's Parquet row. created_at keeps microseconds (Postgres's precision); the JSON form
// keeps whole seconds.
func rowOf(e *models.TrackedEvent) Row {
	return Row{
		ID: e.ID, Type: e.Type, SessionID: e.SessionID, AudienceMemberID: e.AudienceMemberID,
		URL: e.URL, PageHostname: e.PageHostname, PagePath: e.PagePath, UserAgent: e.UserAgent,
		IPAddress: e.IPAddress, EventSequence: e.EventSequence,
		CreatedAt: e.CreatedAt.UTC().Truncate(time.Microsecond),
	}
}

// Parquet writes the selected events to w as one Parquet file with the schema of Row, in
// row groups of at most 10,000 events, and returns how many it wrote. Without events it still
// writes a valid file (the schema and no rows). An invalid query writes nothing; a failure part
// way leaves what was written so far, which is not a valid file.
func Parquet(ctx context.Context, db *eventstore.Store, w io.Writer, q Query) (int, error) {
	if err := Validate(q); err != nil {
		return 0, err
	}
	pw := parquet.NewGenericWriter[Row](w,
		parquet.Compression(&parquet.Snappy),
		parquet.MaxRowsPerRowGroup(int64(rowGroupSize)),
		parquet.CreatedBy("eventq", "", ""),
	)
	rows := make([]Row, 0, DefaultPageSize)
	n, err := db.Pages(ctx, q, func(page []models.TrackedEvent) error {
		rows = rows[:0]
		for i := range page {
			rows = append(rows, rowOf(&page[i]))
		}
		if _, err := pw.Write(rows); err != nil {
			return fmt.Errorf("export: write parquet: %w", err)
		}
		return nil
	})
	if err != nil {
		return n, err
	}
	if err := pw.Close(); err != nil {
		return n, fmt.Errorf("export: write parquet: %w", err)
	}
	return n, nil
}
