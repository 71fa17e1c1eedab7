package routes

import (
	"net/url"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/eventq/eventq/internal/apperr"
	"github.com/eventq/eventq/internal/paginate"
	"github.com/eventq/eventq/internal/validate"
)

// pageRequest reads per_page (1–100, default 15) and cursor (a cursor this service made;
// anything else is the first page, as Laravel treats it) into errs and a request.
func pageRequest(c *fiber.Ctx, errs *apperr.FieldErrors) paginate.Request {
	r := paginate.Request{PerPage: int(validate.OptionalInteger(errs, "per_page", strings.TrimSpace(query(c, "per_page")),
		1, paginate.MaxPerPage, paginate.DefaultPerPage))}
	if cur, ok := paginate.Decode(query(c, "cursor")); ok {
		r.Cursor = &cur
	}
	return r
}

// listBody is Laravel's cursor-paginated resource collection.
type listBody[T any] struct {
	Data  []T       `json:"data"`
	Links pageLinks `json:"links"`
	Meta  pageMeta  `json:"meta"`
}

type pageLinks struct {
	First *string `json:"first"`
	Last  *string `json:"last"`
	Prev  *string `json:"prev"`
	Next  *string `json:"next"`
}

type pageMeta struct {
	Path       string  `json:"path"`
	PerPage    int     `json:"per_page"`
	NextCursor *string `json:"next_cursor"`
	PrevCursor *string `json:"prev_cursor"`
}

// sendList answers a list as Laravel's cursor paginator does: next and prev are the request's
// URL with its other query parameters kept in their order and cursor set (where it was, or
// last). The URL starts with appURL, never with the request's Host or X-Forwarded-* headers:
// a client must not be able to make the service hand out links to another site.
func sendList[T any](c *fiber.Ctx, appURL string, r paginate.Request, p paginate.Page[T]) error {
	path := appURL + c.Path()
	body := listBody[T]{Data: p.Items, Meta: pageMeta{Path: path, PerPage: r.PerPage}}
	if body.Data == nil {
		body.Data = []T{}
	}
	link := func(cur *paginate.Cursor) (*string, *string) {
		if cur == nil {
			return nil, nil
		}
		enc := cur.Encode()
		u := path + "?" + withCursor(string(c.Request().URI().QueryString()), enc)
		return &u, &enc
	}
	body.Links.Next, body.Meta.NextCursor = link(p.Next)
	body.Links.Prev, body.Meta.PrevCursor = link(p.Prev)
	return c.JSON(body)
}

// withCursor returns the query string raw with its cursor parameter set to cursor: in the
// place of the first one, others dropped, or appended.
func withCursor(raw, cursor string) string {
	var parts []string
	set := false
	for _, part := range strings.Split(raw, "&") {
		if part == "" {
			continue
		}
		name, _, _ := strings.Cut(part, "=")
		if n, err := url.QueryUnescape(name); err == nil && n == "cursor" {
			if !set {
				parts = append(parts, "cursor="+url.QueryEscape(cursor))
				set = true
			}
			continue
		}
		parts = append(parts, part)
	}
	if !set {
		parts = append(parts, "cursor="+url.QueryEscape(cursor))
	}
	return strings.Join(parts, "&")
}
