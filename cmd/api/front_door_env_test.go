package main

import (
	"encoding/json"
	"testing"

	"github.com/eventq/eventq/internal/members"
	"github.com/eventq/eventq/internal/products"
	"github.com/eventq/eventq/internal/tenants"
	"github.com/eventq/eventq/models"
)

// doJSON sends body (marshalled unless it is already []byte or a string) with a JSON content
// type.
func (e *apiEnv) doJSON(t *testing.T, method, path, token string, body any) response {
	t.Helper()
	var raw []byte
	switch b := body.(type) {
	case nil:
	case []byte:
		raw = b
	case string:
		raw = []byte(b)
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			t.Fatal(err)
		}
	}
	return e.Do(t, method, path, token, raw, "Content-Type", "application/json", "Accept", "application/json")
}

// mustData decodes the "data" of a 2xx answer with the wanted status into v.
func mustData(t *testing.T, res response, status int, v any) {
	t.Helper()
	if res.Status != status {
		t.Fatalf("got %d %s, want %d", res.Status, res.Body, status)
	}
	var body struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(res.Body, &body); err != nil || len(body.Data) == 0 {
		t.Fatalf("no data in %s", res.Body)
	}
	if err := json.Unmarshal(body.Data, v); err != nil {
		t.Fatalf("decode %s: %v", body.Data, err)
	}
}

// count counts the rows of model matching where.
func (e *apiEnv) count(t *testing.T, model any, where string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := e.DB.Model(model).Where(where, args...).Count(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

// memberRows counts a tenant's members.
func (e *apiEnv) memberRows(t *testing.T, tenantID uint64) int64 {
	return e.count(t, &models.AudienceMember{}, "tenant_id = ?", tenantID)
}

// listPage is a cursor-paginated list with items of type T.
type listPage[T any] struct {
	Data  []T `json:"data"`
	Links struct {
		First *string `json:"first"`
		Last  *string `json:"last"`
		Prev  *string `json:"prev"`
		Next  *string `json:"next"`
	} `json:"links"`
	Meta struct {
		Path       string  `json:"path"`
		PerPage    int     `json:"per_page"`
		NextCursor *string `json:"next_cursor"`
		PrevCursor *string `json:"prev_cursor"`
	} `json:"meta"`
}

// The resources as the api renders them: the services' own JSON types.
type (
	memberBody  = members.JSON
	productBody = products.JSON
	tenantBody  = tenants.JSON
)
