package httpx

import (
	"net/netip"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// ClientIP is the caller's address. X-Forwarded-For is believed only when the connection
// comes from a trusted proxy; then the right-most address that is not itself a trusted proxy
// is the client, as Symfony's TrustProxies does.
// A zone (fe80::1%eth0) is dropped: it names an interface of the sender, not an address.
func ClientIP(c *fiber.Ctx, trusted []netip.Prefix) string {
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
