package routes

import "github.com/gofiber/fiber/v2"

// query is the value of the query parameter name. When the parameter is repeated, the last
// value wins, as in PHP and so Laravel (fasthttp's Peek would return the first). The string
// is a copy: it may outlive the request.
func query(c *fiber.Ctx, name string) string {
	values := c.Context().QueryArgs().PeekMulti(name)
	if len(values) == 0 {
		return ""
	}
	return string(values[len(values)-1])
}
