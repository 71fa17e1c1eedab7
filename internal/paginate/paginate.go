// Package paginate is Laravel's cursor pagination in id order: the opaque cursor Laravel
// encodes, the keyset query that reads one page whatever its depth, and the page's neighbours.
package paginate

import (
	"encoding/base64"
	"encoding/json"
	"strconv"

	"gorm.io/gorm"
)

// DefaultPerPage and MaxPerPage bound a page's size, as the contract sets them.
const (
	DefaultPerPage = 15
	MaxPerPage     = 100
)

// Cursor points at an item: the page after it (Next) or the page before it.
type Cursor struct {
	ID   uint64
	Next bool
}

// Encode renders the cursor as Laravel does: URL-safe base64, unpadded, of
// {"id":N,"_pointsToNextItems":bool}.
func (c Cursor) Encode() string {
	b := []byte(`{"id":`)
	b = strconv.AppendUint(b, c.ID, 10)
	b = append(b, `,"_pointsToNextItems":`...)
	b = strconv.AppendBool(b, c.Next)
	b = append(b, '}')
	return base64.RawURLEncoding.EncodeToString(b)
}

// Decode reads a cursor Encode made. Anything else is no cursor (ok false): the first page,
// as Laravel treats a cursor it cannot read.
func Decode(s string) (Cursor, bool) {
	if s == "" {
		return Cursor{}, false
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		if b, err = base64.URLEncoding.DecodeString(s); err != nil {
			return Cursor{}, false
		}
	}
	var v struct {
		ID   json.Number `json:"id"`
		Next *bool       `json:"_pointsToNextItems"`
	}
	if json.Unmarshal(b, &v) != nil || v.Next == nil {
		return Cursor{}, false
	}
	// Below 2^63, as the ids it points between: a larger one is a cursor not issued here.
	id, err := strconv.ParseUint(v.ID.String(), 10, 63)
	if err != nil {
		return Cursor{}, false
	}
	return Cursor{ID: id, Next: *v.Next}, true
}

// Request is one page asked for: after or before a cursor (nil: the first page), PerPage items.
type Request struct {
	Cursor  *Cursor
	PerPage int
}

// Page is one page of items in id order and the cursors of its neighbours (nil: none).
type Page[T any] struct {
	Items      []T
	Next, Prev *Cursor
}

// Find reads the page r asks for from q (a query already filtered to what may be listed),
// keyed on column (the table's id), into a Page; id gives an item's id.
func Find[T any](q *gorm.DB, column string, r Request, id func(*T) uint64) (Page[T], error) {
	backwards := r.Cursor != nil && !r.Cursor.Next
	switch {
	case r.Cursor == nil:
		q = q.Order(column)
	case backwards:
		q = q.Where(column+" < ?", r.Cursor.ID).Order(column + " DESC")
	default:
		q = q.Where(column+" > ?", r.Cursor.ID).Order(column)
	}
	var rows []T
	if err := q.Limit(r.PerPage + 1).Find(&rows).Error; err != nil {
		return Page[T]{}, err
	}
	more := len(rows) > r.PerPage
	if more {
		rows = rows[:r.PerPage]
	}
	if backwards {
		for i, j := 0, len(rows)-1; i < j; i, j = i+1, j-1 {
			rows[i], rows[j] = rows[j], rows[i]
		}
	}
	p := Page[T]{Items: rows}
	if len(rows) == 0 {
		return p, nil
	}
	first, last := id(&rows[0]), id(&rows[len(rows)-1])
	// Forwards, there is a next page when more rows followed, and a previous one whenever a
	// cursor led here; backwards, the reverse.
	if (!backwards && more) || backwards {
		p.Next = &Cursor{ID: last, Next: true}
	}
	if (backwards && more) || (!backwards && r.Cursor != nil) {
		p.Prev = &Cursor{ID: first, Next: false}
	}
	return p, nil
}

// Map converts a page's items, keeping its cursors.
func Map[T, U any](p Page[T], f func(*T) U) Page[U] {
	out := Page[U]{Items: make([]U, len(p.Items)), Next: p.Next, Prev: p.Prev}
	for i := range p.Items {
		out.Items[i] = f(&p.Items[i])
	}
	return out
}
