package models

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode/utf8"
)

// ExternalPrefix marks a member reference by the tenant's own id of the member
// ("external:user-42"), in paths and in an event's audience_member_id alike.
const ExternalPrefix = "external:"

// MemberRef is a reference to an audience member as paths and events write it: by its id
// ("42") or by its external id (ExternalPrefix + the id). Exactly one of ID and External is
// set.
type MemberRef struct {
	ID       uint64
	External string
}

// MaxExternalID is the most characters of an external id.
const MaxExternalID = 191

// ParseMemberRef reads a reference; ok is false for anything that names no member: an id
// not in its canonical form (ParseID), or an external id that no member can have (empty,
// longer than MaxExternalID, not UTF-8 or holding a NUL, which Postgres refuses in a query).
// A bare external id ("u-1") is not a reference: "1" is member 1, never the member whose
// external id is "1".
func ParseMemberRef(s string) (r MemberRef, ok bool) {
	if ext, isExt := strings.CutPrefix(s, ExternalPrefix); isExt {
		return MemberRef{External: ext}, ext != "" && Storable(ext) && utf8.RuneCountInString(ext) <= MaxExternalID
	}
	id, ok := ParseID(s)
	return MemberRef{ID: id}, ok
}

// Storable reports whether s can be compared with a text column on every database: valid
// UTF-8 without NUL. A lookup by anything else finds nothing, and is not sent.
func Storable(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// String is the reference as written.
func (r MemberRef) String() string {
	if r.ID != 0 {
		return FormatID(r.ID)
	}
	return ExternalPrefix + r.External
}

// ExternalHash is what an erasure keeps of a member's former external id: enough to recognise
// "external:" + it in an event tracked later, not the id.
func ExternalHash(tenantID uint64, external string) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%d|%s", tenantID, external)))
	return hex.EncodeToString(sum[:])
}

// MemberRefs are the values of audience_member_id that name the member with id and
// externalID (nil: none).
func MemberRefs(id uint64, externalID *string) []string {
	out := []string{FormatID(id)}
	if externalID != nil && *externalID != "" {
		out = append(out, ExternalPrefix+*externalID)
	}
	return out
}
