package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/eventq/eventq/models"
)

// mustExport runs events export with args, which must succeed with nothing on stderr, and
// returns stdout.
func (e *cliEnv) mustExport(t *testing.T, args ...string) []byte {
	t.Helper()
	args = append([]string{"events", "export"}, args...)
	code, stdout, stderr := e.Run(args...)
	if code != 0 || stderr != "" {
		t.Fatalf("eventq %s: exit %d, stderr %q; want exit 0 and empty stderr", strings.Join(args, " "), code, stderr)
	}
	return []byte(stdout)
}

// jsonLines splits JSON lines output into its lines, each of which must be a JSON object with
// exactly the queue event's keys.
func jsonLines(t *testing.T, out []byte) []json.RawMessage {
	t.Helper()
	if len(out) == 0 {
		return nil
	}
	body, ok := bytes.CutSuffix(out, []byte("\n"))
	if !ok {
		t.Fatalf("output %q does not end with a newline", out)
	}
	var lines []json.RawMessage
	for _, line := range bytes.Split(body, []byte("\n")) {
		mustObjectKeys(t, line, queueEventKeys)
		lines = append(lines, line)
	}
	return lines
}

// listedEvents returns the tenant's events as events list prints them: each object's raw
// bytes, oldest first.
func (e *cliEnv) listedEvents(t *testing.T, tenant string) []json.RawMessage {
	t.Helper()
	e.MustArray(t, queueEventKeys, "events", "list", "--tenant", tenant, "--limit", "10000") // checks every object's keys
	var items []json.RawMessage
	if err := json.Unmarshal(e.MustRun(t, "events", "list", "--tenant", tenant, "--limit", "10000"), &items); err != nil {
		t.Fatal(err)
	}
	return items
}

// parquetEvent is one row of a Parquet export, decoded column by column into the queue event's
// JSON shape (so that it compares with events list), plus created_at at full precision.
type parquetEvent struct {
	JSON      map[string]any
	CreatedAt time.Time
}

// mustReadParquet opens a Parquet export, checks its schema (a column per queue event key, in
// that order, with the documented types) and returns its rows in file order.
func mustReadParquet(t *testing.T, data []byte) []parquetEvent {
	t.Helper()
	f, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatalf("open the parquet output: %v", err)
	}
	fields := f.Schema().Fields()
	var names []string
	for _, field := range fields {
		names = append(names, field.Name())
		typ, logical := field.Type(), field.Type().LogicalType()
		switch field.Name() {
		case "created_at":
			ts, _ := logicalValue(logical).(*format.TimestampType)
			micros := false
			if ts != nil {
				_, micros = ts.Unit.Value.(*format.MicroSeconds)
			}
			if !micros || typ.Kind() != parquet.Int64 || !ts.IsAdjustedToUTC || field.Optional() {
				t.Errorf("created_at: type %v, logical %v; want a required INT64 TIMESTAMP(MICROS, UTC)", typ, logical)
			}
		case "event_sequence":
			signed64 := logical == nil // a plain INT64, or one annotated INT(64, signed)
			if it, ok := logicalValue(logical).(*format.IntType); ok {
				signed64 = it.BitWidth == 64 && it.IsSigned
			}
			if typ.Kind() != parquet.Int64 || !signed64 || field.Optional() {
				t.Errorf("event_sequence: type %v, logical %v; want a required signed INT64", typ, logical)
			}
		default:
			if _, ok := logicalValue(logical).(*format.StringType); typ.Kind() != parquet.ByteArray || !ok {
				t.Errorf("%s: type %v, logical %v; want a UTF-8 string", field.Name(), typ, logical)
			}
			if want := field.Name() == "audience_member_id"; field.Optional() != want {
				t.Errorf("%s: optional %v, want %v", field.Name(), field.Optional(), want)
			}
		}
	}
	if !reflect.DeepEqual(names, queueEventKeys) {
		t.Fatalf("parquet columns %q, want %q", names, queueEventKeys)
	}

	var out []parquetEvent
	for _, rg := range f.RowGroups() {
		rows := rg.Rows()
		buf := make([]parquet.Row, 64)
		for {
			n, err := rows.ReadRows(buf)
			for _, row := range buf[:n] {
				ev := parquetEvent{JSON: map[string]any{}}
				for _, v := range row {
					name := names[v.Column()]
					switch {
					case v.IsNull():
						ev.JSON[name] = nil
					case name == "created_at":
						ev.CreatedAt = time.UnixMicro(v.Int64()).UTC()
						ev.JSON[name] = ev.CreatedAt.Format(models.TimeFormat)
					case name == "event_sequence":
						ev.JSON[name] = float64(v.Int64())
					default:
						ev.JSON[name] = v.String()
					}
				}
				out = append(out, ev)
			}
			if err != nil {
				break
			}
		}
		rows.Close()
	}
	if int64(len(out)) != f.NumRows() {
		t.Fatalf("read %d rows, the file says %d", len(out), f.NumRows())
	}
	return out
}

// decodeAll decodes raw JSON objects into maps.
func decodeAll(t *testing.T, raws []json.RawMessage) []map[string]any {
	t.Helper()
	out := make([]map[string]any, len(raws))
	for i, raw := range raws {
		if err := json.Unmarshal(raw, &out[i]); err != nil {
			t.Fatalf("decode %s: %v", raw, err)
		}
	}
	return out
}

// exportFixture stores events of tenant at several times (sub-second parts included, one with
// an audience member, URLs with & and <) and one of another tenant, and returns the tenant's
// events as stored, oldest first.
func exportFixture(t *testing.T, e *cliEnv) (tenant string, stored []models.TrackedEvent) {
	t.Helper()
	tenant = e.mustTenant(t, "Acme")
	other := e.mustTenant(t, "Other")
	base := time.Date(2026, 11, 21, 10, 15, 30, 0, time.UTC)
	member := "member-42"
	at := []time.Duration{0, 1500 * time.Millisecond, 2*time.Hour + 123456*time.Microsecond, 49 * time.Hour}
	for _, n := range []int{3, 1, 4, 2} { // inserted out of order
		var m *string
		if n == 3 {
			m = &member
		}
		stored = append(stored, e.insertEvent(t, tenant, n, base.Add(at[n-1]), m))
	}
	e.insertEvent(t, other, 9, base.Add(time.Second), nil)
	stored = []models.TrackedEvent{stored[1], stored[3], stored[0], stored[2]}
	return tenant, stored
}

func TestEventsExport(t *testing.T) {
	t.Run("jsonl is events list row for row, one queue event per line", func(t *testing.T) {
		e := newCLI(t)
		tenant, stored := exportFixture(t, e)
		lines := jsonLines(t, e.mustExport(t, "--tenant", tenant))
		listed := e.listedEvents(t, tenant)
		if len(lines) != len(stored) || len(listed) != len(stored) {
			t.Fatalf("%d lines, events list %d, want %d", len(lines), len(listed), len(stored))
		}
		for i := range lines {
			if !bytes.Equal(lines[i], listed[i]) {
				t.Errorf("line %d\n%s\nevents list\n%s", i+1, lines[i], listed[i])
			}
			if want := stored[i].MarshalQueue(); !bytes.Equal(lines[i], want) {
				t.Errorf("line %d\n%s\nwant the queue bytes\n%s", i+1, lines[i], want)
			}
		}
		if !bytes.Contains(lines[0], []byte(`"url":"https://shop.example/a/1?x=1&y=<2>"`)) {
			t.Errorf("line 1 %s: URL escaped", lines[0])
		}
		if explicit := e.mustExport(t, "--tenant", tenant, "--format", "jsonl"); string(explicit) != string(bytes.Join(toBytes(lines), []byte("\n")))+"\n" {
			t.Errorf("--format jsonl differs from the default")
		}
	})

	t.Run("parquet holds the same events with typed columns", func(t *testing.T) {
		e := newCLI(t)
		tenant, stored := exportFixture(t, e)
		rows := mustReadParquet(t, e.mustExport(t, "--tenant", tenant, "--format", "parquet"))
		listed := decodeAll(t, e.listedEvents(t, tenant))
		if len(rows) != len(listed) {
			t.Fatalf("%d rows, events list %d", len(rows), len(listed))
		}
		nulls := 0
		for i, row := range rows {
			if !reflect.DeepEqual(row.JSON, listed[i]) {
				t.Errorf("row %d\n%v\nevents list\n%v", i+1, row.JSON, listed[i])
			}
			if !row.CreatedAt.Equal(stored[i].CreatedAt) {
				t.Errorf("row %d: created_at %v, want %v (to the microsecond)", i+1, row.CreatedAt, stored[i].CreatedAt)
			}
			if row.JSON["audience_member_id"] == nil {
				nulls++
			}
		}
		if nulls != 3 || rows[2].JSON["audience_member_id"] != "member-42" {
			t.Errorf("audience_member_id: %d nulls and row 3 %v; want 3 nulls and member-42", nulls, rows[2].JSON["audience_member_id"])
		}
	})

	t.Run("writes nothing in jsonl and an empty file in parquet for a tenant without events", func(t *testing.T) {
		e := newCLI(t)
		tenant := e.mustTenant(t, "Acme")
		if out := e.mustExport(t, "--tenant", tenant); len(out) != 0 {
			t.Errorf("jsonl: stdout %q, want nothing", out)
		}
		if rows := mustReadParquet(t, e.mustExport(t, "--tenant", tenant, "--format", "parquet")); len(rows) != 0 {
			t.Errorf("parquet: %d rows, want 0", len(rows))
		}
	})

	t.Run("includes events at --from and excludes events at --to", func(t *testing.T) {
		e := newCLI(t)
		tenant := e.mustTenant(t, "Acme")
		from := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
		to := from.Add(24 * time.Hour)
		at := []time.Time{from.Add(-time.Microsecond), from, from.Add(time.Hour), to.Add(-time.Microsecond), to, to.Add(time.Second)}
		for i, ts := range at {
			e.insertEvent(t, tenant, i+1, ts, nil)
		}
		for _, tc := range []struct {
			name     string
			args     []string
			wantSeqs []float64
		}{
			{"both bounds", []string{"--from", "2026-03-01T00:00:00Z", "--to", "2026-03-02T00:00:00Z"}, []float64{2, 3, 4}},
			{"both bounds with offsets", []string{"--from", "2026-03-01T01:00:00+01:00", "--to", "2026-03-01T19:00:00-05:00"}, []float64{2, 3, 4}},
			{"only --from", []string{"--from", "2026-03-01T00:00:00Z"}, []float64{2, 3, 4, 5, 6}},
			{"only --to", []string{"--to", "2026-03-02T00:00:00Z"}, []float64{1, 2, 3, 4}},
			{"a fraction of a second", []string{"--from", "2026-03-01T00:59:59.999999Z", "--to", "2026-03-01T01:00:00.000001Z"}, []float64{3}},
			{"no bounds", nil, []float64{1, 2, 3, 4, 5, 6}},
		} {
			args := append([]string{"--tenant", tenant}, tc.args...)
			var jsonSeqs, parquetSeqs []float64
			for _, ev := range decodeAll(t, jsonLines(t, e.mustExport(t, args...))) {
				jsonSeqs = append(jsonSeqs, ev["event_sequence"].(float64))
			}
			for _, ev := range mustReadParquet(t, e.mustExport(t, append(args, "--format", "parquet")...)) {
				parquetSeqs = append(parquetSeqs, ev.JSON["event_sequence"].(float64))
			}
			if fmt.Sprint(jsonSeqs) != fmt.Sprint(tc.wantSeqs) || fmt.Sprint(parquetSeqs) != fmt.Sprint(tc.wantSeqs) {
				t.Errorf("%s: jsonl %v, parquet %v; want events %v", tc.name, jsonSeqs, parquetSeqs, tc.wantSeqs)
			}
		}
	})

	t.Run("pages through many events sharing timestamps without gaps or duplicates", func(t *testing.T) {
		e := newCLI(t)
		exportPageSize = 7
		t.Cleanup(func() { exportPageSize = 0 })
		tenant := e.mustTenant(t, "Acme")
		other := e.mustTenant(t, "Other")
		base := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
		var want []string // ids, in (created_at, id) order: ids grow with n and so does n/4
		for _, n := range rand.New(rand.NewPCG(1, 2)).Perm(50) {
			// Four events per timestamp, so that pages end inside a group of equal created_at.
			e.insertEvent(t, tenant, n, base.Add(time.Duration(n/4)*time.Second), nil)
		}
		for n := range 50 {
			want = append(want, fmt.Sprintf("0193a5b0-0000-7000-8000-%012d", n))
		}
		e.insertEvent(t, other, 1000, base.Add(3*time.Second), nil)

		for _, tc := range []struct {
			name string
			args []string
			want []string
		}{
			{"everything", nil, want},
			// [base+3s, base+11s): events 12 to 43, starting and ending on timestamp boundaries.
			{"within bounds", []string{"--from", "2026-05-01T12:00:03Z", "--to", "2026-05-01T12:00:11Z"}, want[12:44]},
		} {
			args := append([]string{"--tenant", tenant}, tc.args...)
			var jsonIDs, parquetIDs []string
			for _, ev := range decodeAll(t, jsonLines(t, e.mustExport(t, args...))) {
				jsonIDs = append(jsonIDs, ev["id"].(string))
			}
			for _, ev := range mustReadParquet(t, e.mustExport(t, append(args, "--format", "parquet")...)) {
				parquetIDs = append(parquetIDs, ev.JSON["id"].(string))
			}
			if !reflect.DeepEqual(jsonIDs, tc.want) {
				t.Errorf("%s: jsonl ids\n%v\nwant\n%v", tc.name, jsonIDs, tc.want)
			}
			if !reflect.DeepEqual(parquetIDs, tc.want) {
				t.Errorf("%s: parquet ids\n%v\nwant\n%v", tc.name, parquetIDs, tc.want)
			}
		}
	})

	t.Run("fails on bad input with nothing on stdout", func(t *testing.T) {
		e := newCLI(t)
		tenant := e.mustTenant(t, "Acme")
		e.insertEvent(t, tenant, 1, time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC), nil)
		for _, tc := range []struct {
			args []string
			want string // in the message
		}{
			{[]string{}, "--tenant"},
			{[]string{"--tenant", "acme"}, "--tenant"},
			{[]string{"--tenant", tenant, "--format", "csv"}, "--format"},
			{[]string{"--tenant", tenant, "--format", ""}, "--format"},
			{[]string{"--tenant", tenant, "--format", "JSONL"}, "--format"},
			{[]string{"--tenant", tenant, "--from", "yesterday"}, "--from"},
			{[]string{"--tenant", tenant, "--from", "2026-05-01"}, "--from"},
			{[]string{"--tenant", tenant, "--to", "2026-05-01 12:00:00"}, "--to"},
			{[]string{"--tenant", tenant, "--to", "1746100800"}, "--to"},
			{[]string{"--tenant", tenant, "--from", "2026-05-01T12:00:00Z", "--to", "2026-05-01T12:00:00Z"}, "--from must be before --to"},
			{[]string{"--tenant", tenant, "--from", "2026-05-01T14:00:00+02:00", "--to", "2026-05-01T12:00:00Z"}, "--from must be before --to"},
			{[]string{"--tenant", tenant, "--from", "2026-05-02T00:00:00Z", "--to", "2026-05-01T00:00:00Z", "--format", "parquet"}, "--from must be before --to"},
			{[]string{"--tenant", tenant, "extra"}, "extra"},
		} {
			stderr := e.MustFail(t, append([]string{"events", "export"}, tc.args...)...)
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("events export %q: stderr %q does not mention %q", tc.args, stderr, tc.want)
			}
		}
	})

	t.Run("fails for an unknown tenant as events list does", func(t *testing.T) {
		e := newCLI(t)
		listStderr := e.MustFail(t, "events", "list", "--tenant", "999999")
		for _, format := range []string{"jsonl", "parquet"} {
			if stderr := e.MustFail(t, "events", "export", "--tenant", "999999", "--format", format); stderr != listStderr {
				t.Errorf("--format %s: stderr %q, events list says %q", format, stderr, listStderr)
			}
		}
	})
}

// logicalValue is a column's logical type annotation, nil when it has none.
func logicalValue(t *format.LogicalType) format.LogicalTypeValue {
	if t == nil {
		return nil
	}
	return t.Value
}

func toBytes(raws []json.RawMessage) [][]byte {
	out := make([][]byte, len(raws))
	for i, r := range raws {
		out[i] = r
	}
	return out
}
