// Package auth implements Laravel Sanctum personal access tokens: creation, revocation and
// the cached lookup used on every /api/platform request.
package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"strings"
)

// Abilities a token may carry. "*" grants all of them.
const (
	AbilityAll           = "*"
	AbilityEventsRead    = "events:read"
	AbilityEventsDelete  = "events:delete"
	AbilityEventsWrite   = "events:write"
	AbilityCheckoutWrite = "checkout:write"
	AbilityMembersRead   = "members:read"
	AbilityMembersWrite  = "members:write"
	AbilityProductsRead  = "products:read"
	AbilityProductsWrite = "products:write"
)

// KnownAbilities are the abilities a token can be given.
var KnownAbilities = []string{AbilityAll, AbilityEventsRead, AbilityEventsDelete, AbilityEventsWrite, AbilityCheckoutWrite,
	AbilityMembersRead, AbilityMembersWrite, AbilityProductsRead, AbilityProductsWrite}

// HashSecret is what Sanctum stores in personal_access_tokens.token: hex SHA-256 of the secret.
func HashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// NewSecret returns a fresh secret in Sanctum's format: 40 random alphanumerics followed by
// the CRC32b of them in hex (Sanctum's token prefix is empty by default).
func NewSecret() (string, error) {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	buf := make([]byte, 40)
	if _, err := rand.Read(buf); err != nil {
		return "", fmt.Errorf("auth: random: %w", err)
	}
	for i, b := range buf {
		buf[i] = alphabet[int(b)%len(alphabet)]
	}
	return fmt.Sprintf("%s%08x", buf, crc32.ChecksumIEEE(buf)), nil
}

// EncodeAbilities renders abilities as Sanctum's JSON column.
func EncodeAbilities(abilities []string) string {
	if len(abilities) == 0 {
		abilities = []string{AbilityAll}
	}
	b, _ := json.Marshal(abilities)
	return string(b)
}

// decodeAbilities reads Sanctum's JSON column; NULL or garbage grants nothing but "*" when
// the column is absent, as Sanctum's default is ["*"].
func decodeAbilities(raw *string) []string {
	if raw == nil {
		return []string{AbilityAll}
	}
	var out []string
	if err := json.Unmarshal([]byte(*raw), &out); err != nil {
		return nil
	}
	return out
}

// Can reports whether abilities grant ability, as Sanctum's can(): "*" or an exact match.
func Can(abilities []string, ability string) bool {
	for _, a := range abilities {
		if a == AbilityAll || a == ability {
			return true
		}
	}
	return false
}

// splitToken splits "<id>|<secret>". A token without "|" is looked up by its hash alone, as
// Sanctum does; one with "|" but an empty id or secret is not a token (ok is false), as
// Sanctum's find with an empty id finds nothing.
func splitToken(token string) (id, secret string, ok bool) {
	if i := strings.IndexByte(token, '|'); i >= 0 {
		id, secret = token[:i], token[i+1:]
		return id, secret, id != "" && secret != ""
	}
	return "", token, token != ""
}
