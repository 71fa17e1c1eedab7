package delivery

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/eventq/eventq/models"
)

// A spooled request is its rows in a compact binary form, read back without reflection (JSON
// took half of a drain's CPU): per row its fields in a fixed order, each string as a uvarint
// length and its bytes, the member as a presence byte then a string, the sequence as a varint
// and created_at as Unix nanoseconds (a varint). The first byte is spoolCodecVersion.
// Whether a row is queued is not kept: the drain decides it.

const spoolCodecVersion = 1

var errSpoolEntry = errors.New("delivery: spool: malformed entry")

// encodeSpoolEntry appends the encoding of rows to b.
func encodeSpoolEntry(b []byte, rows []models.TrackedEvent) []byte {
	b = append(b, spoolCodecVersion)
	b = binary.AppendUvarint(b, uint64(len(rows)))
	for i := range rows {
		r := &rows[i]
		b = appendString(b, r.ID)
		b = binary.AppendUvarint(b, r.TenantID)
		for _, s := range []string{r.Type, r.SessionID} {
			b = appendString(b, s)
		}
		if r.AudienceMemberID == nil {
			b = append(b, 0)
		} else {
			b = appendString(append(b, 1), *r.AudienceMemberID)
		}
		for _, s := range []string{r.URL, r.PageHostname, r.PagePath, r.UserAgent, r.IPAddress} {
			b = appendString(b, s)
		}
		b = binary.AppendVarint(b, r.EventSequence)
		b = binary.AppendVarint(b, r.CreatedAt.UnixNano())
	}
	return b
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// decodeSpoolEntry appends the rows of an entry to rows.
// A malformed entry adds no row.
func decodeSpoolEntry(rows []models.TrackedEvent, b []byte) ([]models.TrackedEvent, error) {
	d := spoolDecoder{b: b}
	if len(b) == 0 || b[0] != spoolCodecVersion {
		return rows, errSpoolEntry
	}
	start := len(rows)
	d.b = d.b[1:]
	n := d.uvarint()
	for i := uint64(0); i < n && d.err == nil; i++ {
		var r models.TrackedEvent
		r.ID = d.str()
		r.TenantID = d.uvarint()
		r.Type, r.SessionID = d.str(), d.str()
		if d.byte() == 1 {
			m := d.str()
			r.AudienceMemberID = &m
		}
		r.URL, r.PageHostname, r.PagePath, r.UserAgent, r.IPAddress = d.str(), d.str(), d.str(), d.str(), d.str()
		r.EventSequence = d.varint()
		r.CreatedAt = time.Unix(0, d.varint()).UTC()
		rows = append(rows, r)
	}
	if d.err != nil || len(d.b) != 0 {
		return rows[:start], errSpoolEntry
	}
	return rows, nil
}

type spoolDecoder struct {
	b   []byte
	err error
}

func (d *spoolDecoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err, d.b = errSpoolEntry, nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *spoolDecoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err, d.b = errSpoolEntry, nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *spoolDecoder) byte() byte {
	if len(d.b) == 0 {
		d.err = errSpoolEntry
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *spoolDecoder) str() string {
	n := d.uvarint()
	if uint64(len(d.b)) < n {
		d.err, d.b = errSpoolEntry, nil
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}
