// Package client is the Go SDK for consumers of an eventq tenant's event queue.
//
// A consumer reads events from the front of its tenant's queue with [Client.Read] (a read
// removes nothing) and, once it has processed them, removes exactly the events it read with
// [Client.Trim]. [Client.Consume] runs that loop for you: read, hand the whole batch to a
// handler, trim the count read, back off while the queue is empty, retry transient errors and
// stop when its context is cancelled.
//
// # Delivery is at least once
//
// An event is removed from the queue only after the handler has returned nil for the batch
// that holds it. If the process crashes, is killed, or loses the network between the end of
// the handler and the trim, the next read returns the same events again, and the handler sees
// them a second time. Handlers must therefore be idempotent: every event's ID is unique (and
// sorts by time), so remembering processed IDs, or writing with the ID as a unique key, makes
// a re-delivered event harmless. Consume never removes an event the handler has not
// finished: it trims exactly the count it read, and it never repeats a trim the server may
// already have applied (see [Client.Consume]).
//
// The trim protocol removes a counted prefix of the queue, so one tenant's queue should have
// one Consume loop at a time; two would trim each other's events.
//
// # Several consumers: leases
//
// [Client.ConsumeShared] (and [Client.ConsumeSharedBatch]) let any number of consumers share
// one queue: each leases a batch that no other consumer gets until the lease runs out, and
// acknowledges what it processed ([Client.Lease], [Client.Ack]). Delivery is again at least
// once, with no order across consumers; an event that fails EVENTQUEUE_MAX_DELIVERIES times
// becomes a dead letter ([Client.DeadLetters]).
//
// # Errors
//
// Every error the server answers is an [*APIError] carrying the HTTP status and the message of
// the Laravel-shaped body ({"message":"…"}). [IsTransient] tells errors worth retrying (network
// failures, 408, 429 and 5xx) from permanent ones (401, 403, 404, 422, …).
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Default settings of a Client made by New without options.
const (
	DefaultTimeout    = 30 * time.Second       // per HTTP request
	DefaultLongPoll   = 20 * time.Second       // how long Consume's reads wait on an empty queue
	DefaultMinBackoff = 200 * time.Millisecond // first wait on an empty queue or a transient error
	DefaultMaxBackoff = 10 * time.Second       // the waits double up to this cap
)

// eventsPath is the queue endpoint, relative to the base URL.
const eventsPath = "/api/platform/events"

// Client talks to one eventq installation with one tenant token. It is safe for concurrent
// use, but a tenant's queue should have only one Consume loop; ConsumeShared loops may be many
// (see the package doc).
type Client struct {
	base       string
	token      string
	http       *http.Client
	log        *slog.Logger
	minBackoff time.Duration
	maxBackoff time.Duration
	longPoll   time.Duration

	// sleep waits d or until ctx is done, returning ctx.Err() in that case. Tests replace it.
	sleep func(ctx context.Context, d time.Duration) error
	// jitter returns a random duration in [0, n). Tests replace it.
	jitter func(n time.Duration) time.Duration
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the Client send its requests with hc instead of its own http.Client
// (which has a 30s timeout).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.http = hc } }

// WithLogger makes Consume log its retries and back-offs on log (at Debug for waits on an
// empty queue, Warn for transient errors). The default discards. Tokens are never logged.
func WithLogger(log *slog.Logger) Option { return func(c *Client) { c.log = log } }

// WithBackoff sets the waits of Consume: the first wait after an empty read or a transient
// error is about min, each further one doubles, never above max. Non-positive values keep the
// defaults (200ms and 10s); max below min is raised to min.
func WithBackoff(min, max time.Duration) Option {
	return func(c *Client) {
		if min > 0 {
			c.minBackoff = min
		}
		if max > 0 {
			c.maxBackoff = max
		}
	}
}

// WithLongPoll sets how long Consume's reads wait on an empty queue for an event to arrive
// (the server's wait parameter, at most 20s); 0 turns long polling off, so Consume backs off
// between reads of an empty queue instead. The default is 20s. An HTTP client given with
// WithHTTPClient must allow requests that long.
func WithLongPoll(d time.Duration) Option {
	return func(c *Client) { c.longPoll = min(max(d, 0), MaxWait) }
}

// MaxWait is the longest wait the server accepts.
const MaxWait = 20 * time.Second

// New returns a Client for the installation at baseURL (e.g. "https://events.example.com";
// a path prefix is kept) authenticating with token, a personal access token "<id>|<secret>"
// with the abilities events:read and events:delete.
func New(baseURL, token string, opts ...Option) *Client {
	c := &Client{
		base:       strings.TrimRight(baseURL, "/"),
		token:      token,
		http:       &http.Client{Timeout: DefaultTimeout},
		log:        slog.New(slog.DiscardHandler),
		minBackoff: DefaultMinBackoff,
		maxBackoff: DefaultMaxBackoff,
		longPoll:   DefaultLongPoll,
		sleep:      sleepContext,
		jitter:     func(n time.Duration) time.Duration { return rand.N(n) },
	}
	for _, opt := range opts {
		opt(c)
	}
	if c.maxBackoff < c.minBackoff {
		c.maxBackoff = c.minBackoff
	}
	return c
}

// Batch is the result of one read: Count events from the front of the queue, oldest first.
// Count is the number to pass to Trim once the events are processed. Offset is the absolute
// position of the first event (how many events were ever trimmed from the queue), for
// TrimAt; HasOffset is false when the server does not report offsets (an older server, or the
// tenant's UseQueueEvents flag is off).
type Batch struct {
	Count     int
	Events    []Event
	Offset    int64
	HasOffset bool
}

// Read returns up to 10,000 events from the front of the tenant's queue without removing
// them (GET /api/platform/events). Reading again before a trim returns the same events first.
// When the tenant's UseQueueEvents flag is off, the batch is empty.
func (c *Client) Read(ctx context.Context) (Batch, error) {
	return c.ReadWait(ctx, 0)
}

// ReadWait is Read with long polling: when the queue is empty, the server holds the request
// until an event arrives or wait passes (whole seconds, at most MaxWait), then answers. A
// server without long polling answers at once.
func (c *Client) ReadWait(ctx context.Context, wait time.Duration) (Batch, error) {
	path := eventsPath
	if secs := int(min(wait, MaxWait) / time.Second); secs > 0 {
		path += "?wait=" + strconv.Itoa(secs)
	}
	body, header, err := c.do(ctx, http.MethodGet, path, http.StatusOK)
	if err != nil {
		return Batch{}, fmt.Errorf("read events: %w", err)
	}
	var res struct {
		Data *struct {
			Count  int     `json:"count"`
			Events []Event `json:"events"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &res); err != nil {
		return Batch{}, fmt.Errorf("read events: decode response: %w", err)
	}
	if res.Data == nil || res.Data.Count != len(res.Data.Events) {
		return Batch{}, fmt.Errorf("read events: malformed response: %.200s", body)
	}
	events := res.Data.Events
	if events == nil {
		events = []Event{}
	}
	b := Batch{Count: res.Data.Count, Events: events}
	if v := header.Get("Queue-Offset"); v != "" {
		if b.Offset, err = strconv.ParseInt(v, 10, 64); err != nil {
			return Batch{}, fmt.Errorf("read events: malformed Queue-Offset %q", v)
		}
		b.HasOffset = true
	}
	return b, nil
}

// Trim removes exactly the first count events from the tenant's queue
// (DELETE /api/platform/events?count=N); events behind them stay, however recently they
// arrived. count must be at least 1; a smaller count is an error and sends nothing.
//
// Trim is not idempotent: calling it twice removes 2×count events. After an error that may
// have happened after the server applied it (a timeout, a lost connection, a 5xx), check the
// queue with Read before trimming again — Consume does that.
func (c *Client) Trim(ctx context.Context, count int) error {
	if count < 1 {
		return fmt.Errorf("trim events: count must be at least 1, got %d", count)
	}
	_, _, err := c.do(ctx, http.MethodDelete, eventsPath+"?count="+strconv.Itoa(count), http.StatusNoContent)
	if err != nil {
		return fmt.Errorf("trim events: %w", err)
	}
	return nil
}

// TrimAt removes the events of a batch read at offset (Batch.Offset): those up to absolute
// position offset+count that are still in the queue (DELETE ?count=N&offset=O). Unlike Trim it
// is idempotent: repeating it after a timeout or a lost answer removes nothing more. When the
// queue's front is behind offset (the queue was lost and rebuilt since the read), the server
// answers 422 on offset: IsOffsetAhead reports it, and the consumer should read again.
func (c *Client) TrimAt(ctx context.Context, count int, offset int64) error {
	if count < 1 {
		return fmt.Errorf("trim events: count must be at least 1, got %d", count)
	}
	path := eventsPath + "?count=" + strconv.Itoa(count) + "&offset=" + strconv.FormatInt(offset, 10)
	if _, _, err := c.do(ctx, http.MethodDelete, path, http.StatusNoContent); err != nil {
		return fmt.Errorf("trim events: %w", err)
	}
	return nil
}

// IsOffsetAhead reports whether err is TrimAt's 422 for an offset beyond the queue's front.
func IsOffsetAhead(err error) bool {
	ae, ok := errors.AsType[*APIError](err)
	return ok && ae.Status == http.StatusUnprocessableEntity && len(ae.Errors["offset"]) > 0
}

// maxBody bounds a response body: 10,000 events of at most a few KiB each fit many times.
const maxBody = 512 << 20

// do sends one request and returns the body and header of a response with status want. Any
// other status is an *APIError; a failure to send or to read the answer is a *NetworkError.
// Bodies come gzip-compressed when the server offers it (net/http asks and decompresses).
func (c *Client) do(ctx context.Context, method, path string, want int) ([]byte, http.Header, error) {
	return c.doJSON(ctx, method, path, nil, want)
}

// doJSON is do with a JSON request body (none when body is nil).
func (c *Client) doJSON(ctx context.Context, method, path string, body []byte, want int) ([]byte, http.Header, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "eventq-client-go/1")
	res, err := c.http.Do(req)
	if err != nil {
		return nil, nil, &NetworkError{Err: stripURL(err)}
	}
	defer res.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(res.Body, maxBody))
	if err != nil {
		return nil, nil, &NetworkError{Err: err}
	}
	if res.StatusCode != want {
		return nil, nil, newAPIError(res, answer)
	}
	return answer, res.Header, nil
}

// stripURL drops the method and URL that *url.Error repeats: the caller names the operation.
func stripURL(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return ue.Err
	}
	return err
}

// APIError is an answer of the server other than success. Message is the "message" of the
// Laravel-shaped JSON body, or the status text when the body has none.
type APIError struct {
	Status  int
	Message string
	// Errors holds the per-field validation messages of a 422, keyed by field.
	Errors map[string][]string
	// RetryAfter is the server's Retry-After (on 429 and 503), zero when absent.
	RetryAfter time.Duration
}

// Error returns e.g. "HTTP 401: Unauthenticated.".
func (e *APIError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.Status, e.Message) }

func newAPIError(res *http.Response, body []byte) *APIError {
	e := &APIError{Status: res.StatusCode, RetryAfter: parseRetryAfter(res.Header.Get("Retry-After"), time.Now())}
	var b struct {
		Message string              `json:"message"`
		Errors  map[string][]string `json:"errors"`
	}
	if json.Unmarshal(body, &b) == nil {
		e.Message, e.Errors = b.Message, b.Errors
	}
	if e.Message == "" {
		e.Message = http.StatusText(res.StatusCode)
	}
	return e
}

// parseRetryAfter reads delay-seconds or an HTTP date; anything else is no delay.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(min(s, 86400)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now).Round(time.Second)
	}
	return 0
}

// NetworkError is a request that got no complete answer: the connection failed, timed out or
// broke while the body was read. It is always transient — except for the caller's own
// cancellation, which IsTransient reports as permanent.
type NetworkError struct{ Err error }

// Error returns the cause.
func (e *NetworkError) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *NetworkError) Unwrap() error { return e.Err }

// IsTransient reports whether err is worth retrying as is: a network error, or an answer
// 408, 429 or 5xx. Authentication and authorisation failures, 404, validation errors, a
// malformed response and a cancelled context are permanent.
func IsTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	if ae, ok := errors.AsType[*APIError](err); ok {
		return ae.Status == http.StatusRequestTimeout || ae.Status == http.StatusTooManyRequests || ae.Status >= 500
	}
	_, ok := errors.AsType[*NetworkError](err)
	return ok
}

// Event is one queue event. The fields mirror the JSON keys (id, type, session_id,
// audience_member_id, url, page_hostname, page_path, user_agent, ip_address, event_sequence,
// created_at); Raw holds the exact bytes the server served for the event.
type Event struct {
	ID        string
	Type      string
	SessionID string
	// AudienceMemberID names the event's audience member: eventq's member id ("42"), or the
	// site's own id of the member written "external:" + it ("external:user-42"); nil when the
	// event is not tied to a member. Member reads it.
	AudienceMemberID *string
	URL              string
	PageHostname     string
	PagePath         string
	UserAgent        string
	IPAddress        string
	EventSequence    int64
	CreatedAt        time.Time // keeps the offset the server sent
	// Raw is the event's JSON exactly as the server sent it, byte for byte. MarshalJSON
	// ignores it.
	Raw json.RawMessage
}

// TimeFormat is the layout of created_at on the wire: ISO 8601 with a numeric offset.
const TimeFormat = "2006-01-02T15:04:05-07:00"

// Member reads AudienceMemberID: the member's eventq id, or its external id (the site's own)
// when the event names it by "external:" + that id. ok is false when the event names no
// member; any other value (a bare string) names none either.
func (e Event) Member() (id, externalID string, ok bool) {
	if e.AudienceMemberID == nil {
		return "", "", false
	}
	ref := *e.AudienceMemberID
	if ext, isExt := strings.CutPrefix(ref, "external:"); isExt {
		return "", ext, ext != ""
	}
	if ref == "" || ref[0] == '0' || strings.Trim(ref, "0123456789") != "" {
		return "", "", false
	}
	return ref, "", true
}

// wireEvent is the JSON shape of an event, keys in the server's order.
type wireEvent struct {
	ID               string  `json:"id"`
	Type             string  `json:"type"`
	SessionID        string  `json:"session_id"`
	AudienceMemberID *string `json:"audience_member_id"`
	URL              string  `json:"url"`
	PageHostname     string  `json:"page_hostname"`
	PagePath         string  `json:"page_path"`
	UserAgent        string  `json:"user_agent"`
	IPAddress        string  `json:"ip_address"`
	EventSequence    int64   `json:"event_sequence"`
	CreatedAt        string  `json:"created_at"`
}

// UnmarshalJSON decodes one queue event and keeps a copy of data in Raw. created_at must be
// RFC 3339; the server always writes a numeric offset ("+00:00"), never "Z".
func (e *Event) UnmarshalJSON(data []byte) error {
	var w wireEvent
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	created, err := time.Parse(time.RFC3339, w.CreatedAt)
	if err != nil {
		return fmt.Errorf("event %q: created_at: %w", w.ID, err)
	}
	*e = Event{
		ID: w.ID, Type: w.Type, SessionID: w.SessionID, AudienceMemberID: w.AudienceMemberID,
		URL: w.URL, PageHostname: w.PageHostname, PagePath: w.PagePath, UserAgent: w.UserAgent,
		IPAddress: w.IPAddress, EventSequence: w.EventSequence, CreatedAt: created,
		Raw: bytes.Clone(data),
	}
	return nil
}

// MarshalJSON encodes the fields in the wire shape: the eleven keys in the server's order,
// audience_member_id null when nil, created_at in TimeFormat. For an unmodified event served
// by eventq, a json.Encoder with SetEscapeHTML(false) writes exactly Raw (json.Marshal also
// escapes <, > and & as \u003c, \u003e and \u0026).
func (e Event) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	err := enc.Encode(wireEvent{
		ID: e.ID, Type: e.Type, SessionID: e.SessionID, AudienceMemberID: e.AudienceMemberID,
		URL: e.URL, PageHostname: e.PageHostname, PagePath: e.PagePath, UserAgent: e.UserAgent,
		IPAddress: e.IPAddress, EventSequence: e.EventSequence, CreatedAt: e.CreatedAt.Format(TimeFormat),
	})
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), err
}
