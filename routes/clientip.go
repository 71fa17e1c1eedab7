package routes

import (
	"net/netip"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// clientIP is the caller's address. X-Forwarded-For is believed only when the connection
// comes from a trusted proxy; then the right-most address that is not itself a trusted proxy
// is the client, as Symfony's TrustProxies does.
// A zone (fe80::1%eth0) is dropped: it names an interface of the sender, not an address.
func clientIP(c *fiber.Ctx, trusted []netip.Prefix) string {
	remote := c.Context().RemoteIP().String()
	addr, err := netip.ParseAddr(remote)
	if err != nil || !isTrusted(addr.Unmap(), trusted) {
		return remote
	}
	// Several X-Forwarded-For lines are one list, in order (RFC 9110 5.3): reading only the
	// first would let a client put its own choice before what the proxy appended.
	var hops []string
	for _, line := range c.Request().Header.PeekAll(fiber.HeaderXForwardedFor) {
		hops = append(hops, strings.Split(string(line), ",")...)
	}
	for i := len(hops) - 1; i >= 0; i-- {
		hop, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			break
		}
		if hop = hop.Unmap().WithZone(""); !isTrusted(hop, trusted) {
			return hop.String()
		}
	}
	return remote
}

func isTrusted(addr netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// budgetKey is the key of a client address's rate-limit budgets: an IPv4 address as is, an
// IPv6 address by its /64 (one subscriber's network, which hands its hosts any address in it:
// keyed by the full address, one /64 would have unlimited budgets).
func budgetKey(ip string) string {
	addr, err := netip.ParseAddr(ip)
	if err != nil || !addr.Unmap().Is6() {
		return ip
	}
	p, _ := addr.WithZone("").Prefix(64)
	return p.String()
}

// clientBudgetKey is budgetKey of the caller's address.
func (s *Server) clientBudgetKey(c *fiber.Ctx) string {
	return budgetKey(clientIP(c, s.TrustedProxies))
}
