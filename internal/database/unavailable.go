package database

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"
	"modernc.org/sqlite"
)

// LookupTimeout bounds a lookup on the request path whose answer can come from memory when the
// database does not give it in time (site keys, tokens, feature flags): a database that hangs,
// or whose connection pool is taken by requests waiting on it, then costs a request this long,
// not the time it takes to come back.
const LookupTimeout = 750 * time.Millisecond

// ColdLookupTimeout bounds such a lookup when memory has no answer (a key the process has not
// read yet) and the database was not just found unavailable: the request answers 503 if the
// lookup fails, so a database that is slow rather than down is given longer: a new Postgres
// connection on a loaded small machine can take most of it. It stays under the 2 s within
// which a request refused during an outage must be answered.
const ColdLookupTimeout = 1500 * time.Millisecond

// DownCooldown is how long a lookup that found the database unavailable keeps answering from
// memory without asking it again (a breaker.Breaker's Cooldown): during an outage each request
// then pays no timeout of its own.
const DownCooldown = time.Second

// Unavailable reports whether err says the database could not be reached or could not work
// (a connection refused or lost, a server starting up or shutting down, a failover to a
// read-only server, a full disk, a lock held too long), as opposed to a refusal of what was
// asked (a constraint, a bad value) or a bug. Callers answer such errors with 503 and keep
// what they can elsewhere; see the contract's "Database outages".
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	var (
		pgErr   *pgconn.PgError
		connErr *pgconn.ConnectError
		netErr  net.Error
		liteErr *sqlite.Error
	)
	switch {
	case errors.As(err, &pgErr):
		// 08: connection exception; 57P01-03: admin or crash shutdown, cannot connect now;
		// 53300: too many connections; 25006: read-only transaction (a replica after a
		// failover); 58: system errors (I/O).
		code := pgErr.Code
		return strings.HasPrefix(code, "08") || strings.HasPrefix(code, "57P") || code == "53300" ||
			code == "25006" || strings.HasPrefix(code, "58") || code == "XX000" && lostNode(pgErr.Message)
	case errors.As(err, &liteErr):
		switch liteErr.Code() & 0xff { // the primary result code
		case 5, 6, 8, 10, 13, 14: // BUSY, LOCKED, READONLY, IOERR, FULL, CANTOPEN
			return true
		}
		return false
	case errors.As(err, &connErr), errors.As(err, &netErr), pgconn.Timeout(err),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, driver.ErrBadConn),
		errors.Is(err, sql.ErrConnDone), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	}
	// pgx reports a connection it closed after a failure by message only.
	msg := err.Error()
	return strings.Contains(msg, "conn closed") || strings.Contains(msg, "failed to connect") ||
		strings.Contains(msg, "connection refused")
}

// UniqueViolation reports whether err is a unique constraint's refusal (Postgres 23505,
// SQLite's SQLITE_CONSTRAINT_UNIQUE or _PRIMARYKEY): a concurrent write got there first.
func UniqueViolation(err error) bool {
	var (
		pgErr   *pgconn.PgError
		liteErr *sqlite.Error
	)
	switch {
	case errors.Is(err, gorm.ErrDuplicatedKey): // translated by the dialector
		return true
	case errors.As(err, &pgErr):
		// Citus reports a worker node's violation during a COPY as an internal error.
		return pgErr.Code == "23505" ||
			pgErr.Code == "XX000" && strings.HasPrefix(pgErr.Message, "duplicate key value violates unique constraint")
	case errors.As(err, &liteErr):
		code := liteErr.Code()
		return code == 2067 || code == 1555 // SQLITE_CONSTRAINT_UNIQUE, SQLITE_CONSTRAINT_PRIMARYKEY
	}
	return false
}

// lostNode reports whether a Citus coordinator's internal error is a worker node lost in the
// middle of a statement (Citus reports it so, not as a connection exception): for the
// tenants the node holds, the database is unavailable.
func lostNode(msg string) bool {
	return strings.Contains(msg, "server closed the connection unexpectedly") ||
		strings.Contains(msg, "connection to the remote node") || strings.Contains(msg, "invalid socket")
}
