// Package httpx is eventq's HTTP transport beneath the handlers of package routes: request
// bodies decoded from their content codings within a route's limit, responses compressed in
// segments as they are written, the client's address behind trusted proxies, JSON without HTML
// escaping, and connections that linger after an error answer so that the client reads it.
// It knows no route and no service.
package httpx
