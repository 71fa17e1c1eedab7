package eventqueue

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A batch id names a run of offsets, which a consumer could otherwise step through to
// acknowledge another consumer's leases, or forge by the thousand to keep Redis busy. Each is
// therefore signed: its last part is an HMAC of the tenant and the rest, with a key every api
// process shares through Redis. Settle checks the signature before any script runs, so a batch
// id the service did not issue costs what a malformed one does.

// BatchKeyKey holds the key batch ids are signed with: random, made by the first process that
// needs it. Losing it (Redis lost its data) makes earlier batch ids unknown, as a rebuild does;
// consumers then acknowledge their leases one by one.
const BatchKeyKey = "eventqueue:batch-key"

// batchMACLen is how many bytes of the HMAC a batch id carries (hex: twice as many characters).
const batchMACLen = 12

// batchKeyReread is how long a process signs with the key it read before reading it again: a
// key Redis lost and another process made anew is taken up within that.
const batchKeyReread = time.Minute

// batchSigner holds the signing key once read.
type batchSigner struct {
	mu   sync.Mutex
	key  []byte
	read time.Time
}

// load returns the signing key, making it if no process has yet.
func (b *batchSigner) load(ctx context.Context, rdb redis.UniversalClient) ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.key != nil && time.Since(b.read) < batchKeyReread {
		return b.key, nil
	}
	if err := rdb.SetNX(ctx, BatchKeyKey, randomHex(32), 0).Err(); err != nil {
		return nil, fmt.Errorf("eventqueue: batch key: %w", err)
	}
	key, err := rdb.Get(ctx, BatchKeyKey).Bytes()
	if err != nil {
		return nil, fmt.Errorf("eventqueue: batch key: %w", err)
	}
	b.key, b.read = key, time.Now()
	return key, nil
}

// batchMAC is the signature of the batch id base of tenantID.
func batchMAC(key []byte, tenantID uint64, base string) string {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(strconv.FormatUint(tenantID, 10)))
	h.Write([]byte{0})
	h.Write([]byte(base))
	return hex.EncodeToString(h.Sum(nil)[:batchMACLen])
}

// signBatchID returns base with its signature appended.
func signBatchID(key []byte, tenantID uint64, base string) string {
	return base + "-" + batchMAC(key, tenantID, base)
}

// verifyBatchID returns the unsigned part of id when its signature is tenantID's under key.
func verifyBatchID(key []byte, tenantID uint64, id string) (string, bool) {
	i := strings.LastIndexByte(id, '-')
	if i < 0 || len(id)-i-1 != 2*batchMACLen {
		return "", false
	}
	base := id[:i]
	if !hmac.Equal([]byte(id[i+1:]), []byte(batchMAC(key, tenantID, base))) {
		return "", false
	}
	return base, true
}
