package consume

import (
	"io"
	"log/slog"
	"testing"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// Close writes what was recorded and says whether it could: a front written reports nil, a
// front the database refused reports the error (it was only logged before).
func TestTrimLogCloseReportsTheLastWrite(t *testing.T) {
	db, _ := testenv.DB(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	l := NewTrimLog(db, clock.Real{}, log)
	l.Record(7, eventqueue.Trimmed{Count: 3, Front: 3, LastID: "a"})
	testenv.Must(t, l.Close())
	var front models.QueueFront
	testenv.Must(t, db.Where("tenant_id = ?", 7).Take(&front).Error)
	if front.Front != 3 {
		t.Fatalf("front %d, want 3", front.Front)
	}

	broken, _ := testenv.DB(t)
	l = NewTrimLog(broken, clock.Real{}, log)
	l.Record(7, eventqueue.Trimmed{Count: 1, Front: 4, LastID: "b"})
	testenv.Must(t, database.Close(broken))
	if err := l.Close(); err == nil {
		t.Fatal("Close reported nothing of a front it could not write")
	}
}
