// Package config loads eventq's configuration from the environment once, at start-up.
package config

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/eventq/eventq/internal/validate"
)

// DefaultConnection is the name of the Redis connection configured by REDIS_URL.
const DefaultConnection = "default"

// DefaultMetricsAddr is METRICS_ADDR's default.
const DefaultMetricsAddr = "127.0.0.1:9464"

// MinAdminTokenLen is the shortest operator token accepted: a short one can be guessed.
const MinAdminTokenLen = 32

// Variables lists every environment variable Load reads, besides the REDIS_<NAME>_URL family
// and the STRIPE_* aliases of the PSP_* names.
var Variables = []string{
	"HTTP_ADDR", "APP_URL", "DATABASE_URL", "REDIS_URL", "REDIS_CLUSTER_ADDRS",
	"EVENTQUEUE_QUEUE_CONNECTION", "TRUSTED_PROXIES", "METRICS_ADDR", "WORKER_METRICS_ADDR", "PPROF_ADDR",
	"PSP_WEBHOOK_SECRET", "PSP_SECRET_KEY", "PSP_PUBLISHABLE_KEY", "PSP_CONNECT_CLIENT_ID", "PSP_API_BASE",
	"PSP_RECONCILE_INTERVAL",
	"RATE_LIMIT_TRACK", "RATE_LIMIT_TRACK_IP", "RATE_LIMIT_PLATFORM", "EVENTQUEUE_MAX_LENGTH",
	"EVENTQUEUE_MAX_DELIVERIES", "EVENTQUEUE_MAX_DEAD_LETTERS", "DEAD_LETTER_RETENTION",
	"RATE_LIMIT_RETURN", "RATE_LIMIT_AUTH_FAILURES", "INGEST_SPOOL_MAX", "INGEST_SPOOL_TENANT_MAX", "INGEST_SPOOL_MAX_BYTES", "QUEUE_PAGE_MAX_BYTES", "EVENT_RETENTION", "EVENT_PRUNE_INTERVAL",
	"BENCH_NOOP_ROUTE", "ADMIN_API_TOKENS",
}

// Config is everything the three binaries read from the environment. The zero value is not
// usable; Load fills every field with its documented default.
type Config struct {
	// HTTPAddr is the api listen address (HTTP_ADDR). Default 127.0.0.1:8080.
	HTTPAddr string
	// AppURL is the public base URL, without a trailing slash (APP_URL).
	// Default http://127.0.0.1:8080.
	AppURL string
	// DatabaseURL is sqlite://PATH or postgres://… (DATABASE_URL). Default sqlite://var/eventq.db.
	DatabaseURL string
	// Redis holds the named Redis connections.
	Redis RedisConfig
	// QueueConnection names the Redis connection that holds the event queues
	// (EVENTQUEUE_QUEUE_CONNECTION). Default "default".
	QueueConnection string
	// TrustedProxies are the addresses whose X-Forwarded-For is believed (TRUSTED_PROXIES,
	// a comma list of IPs or CIDRs). Default none.
	TrustedProxies []netip.Prefix
	// MetricsAddr is where the api serves /metrics (METRICS_ADDR), apart from HTTPAddr so that
	// it is never public through the ingress. Default 127.0.0.1:9464; "off" (empty here): not
	// served.
	MetricsAddr string
	// WorkerMetricsAddr is where the worker serves its metrics (WORKER_METRICS_ADDR).
	// Default empty: not served.
	WorkerMetricsAddr string
	// PprofAddr is where the process serves Go's runtime profiles (PPROF_ADDR), for
	// measurement. Default empty: not served.
	PprofAddr string
	// PSP is the payment provider's configuration.
	PSP PSPConfig
	// Limits are the rate limits and the queue length limit.
	Limits Limits
	// Retention is how long stored events are kept.
	Retention RetentionConfig
	// AdminTokens are the operator API's bearer tokens (ADMIN_API_TOKENS, comma list). Default
	// none: no operator API, every /api/admin path is 404.
	AdminTokens []string
	// BenchNoopRoute adds the api's POST /bench/noop, which answers like a tracking request
	// without doing any of its work, and GET /bench/page, a body of a given size from memory:
	// the HTTP floors `make bench` measures ingestion and reads against (BENCH_NOOP_ROUTE, on
	// or off). Default off.
	BenchNoopRoute bool
}

// RedisConfig describes every named Redis connection.
type RedisConfig struct {
	// URLs maps a lower-case connection name to its redis:// URL: REDIS_URL is "default",
	// REDIS_<NAME>_URL is "<name>". Default {"default": "redis://127.0.0.1:6379/0"}.
	URLs map[string]string
	// ClusterAddrs, when not empty, makes the default connection a Redis Cluster
	// (REDIS_CLUSTER_ADDRS, a comma list of host:port).
	ClusterAddrs []string
}

// PSPConfig is the payment provider's keys. PSP_* variables win over their STRIPE_* aliases.
type PSPConfig struct {
	// WebhookSecrets are the accepted signing secrets (PSP_WEBHOOK_SECRET, comma list).
	WebhookSecrets []string
	// SecretKey is the platform secret key (PSP_SECRET_KEY).
	SecretKey string
	// PublishableKey is the publishable key (PSP_PUBLISHABLE_KEY). Nothing uses it: it is
	// accepted so that the environment of the Laravel service eventq replaces works unchanged
	// (checkout uses the provider's hosted pages, which need no browser-side key).
	PublishableKey string
	// ConnectClientID is the connect application's client id (PSP_CONNECT_CLIENT_ID). Nothing
	// uses it, for the same reason: connected accounts are onboarded outside eventq.
	ConnectClientID string
	// APIBase overrides the provider's API base URL (PSP_API_BASE). Default empty: production.
	APIBase string
	// ReconcileInterval is how often the worker reconciles with the provider's event list
	// (PSP_RECONCILE_INTERVAL, a Go duration of at least 1s, or "off"). Default 15m; zero
	// means off.
	ReconcileInterval time.Duration
}

// DefaultReconcileInterval is PSP_RECONCILE_INTERVAL's default.
const DefaultReconcileInterval = 15 * time.Minute

// parseInterval reads PSP_RECONCILE_INTERVAL: "off" (zero) or a duration of at least 1s.
func parseInterval(s string) (time.Duration, error) {
	if strings.EqualFold(s, "off") {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < time.Second {
		return 0, fmt.Errorf("config: PSP_RECONCILE_INTERVAL: %q is not a duration of at least 1s (e.g. 15m) or off", s)
	}
	return d, nil
}

// Load reads the configuration from environ (os.Environ's format) and validates it. Every
// error names the variable at fault.
func Load(environ []string) (Config, error) {
	env := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	get := func(name, def string) string {
		if v := strings.TrimSpace(env[name]); v != "" {
			return v
		}
		return def
	}
	psp := func(name string) string { return get("PSP_"+name, get("STRIPE_"+name, "")) }

	cfg := Config{
		HTTPAddr:          get("HTTP_ADDR", "127.0.0.1:8080"),
		AppURL:            strings.TrimRight(get("APP_URL", "http://127.0.0.1:8080"), "/"),
		DatabaseURL:       get("DATABASE_URL", "sqlite://var/eventq.db"),
		QueueConnection:   strings.ToLower(get("EVENTQUEUE_QUEUE_CONNECTION", DefaultConnection)),
		MetricsAddr:       get("METRICS_ADDR", DefaultMetricsAddr),
		WorkerMetricsAddr: get("WORKER_METRICS_ADDR", ""),
		AdminTokens:       splitList(get("ADMIN_API_TOKENS", "")),
		PprofAddr:         get("PPROF_ADDR", ""),
		Redis: RedisConfig{
			URLs:         map[string]string{DefaultConnection: get("REDIS_URL", "redis://127.0.0.1:6379/0")},
			ClusterAddrs: splitList(get("REDIS_CLUSTER_ADDRS", "")),
		},
		PSP: PSPConfig{
			WebhookSecrets:  splitList(psp("WEBHOOK_SECRET")),
			SecretKey:       psp("SECRET_KEY"),
			PublishableKey:  psp("PUBLISHABLE_KEY"),
			ConnectClientID: psp("CONNECT_CLIENT_ID"),
			APIBase:         strings.TrimRight(psp("API_BASE"), "/"),
		},
	}
	for k, v := range env {
		if name, ok := strings.CutPrefix(k, "REDIS_"); ok && strings.HasSuffix(name, "_URL") && name != "_URL" {
			name = strings.ToLower(strings.TrimSuffix(name, "_URL"))
			if name != "" && strings.TrimSpace(v) != "" {
				cfg.Redis.URLs[name] = strings.TrimSpace(v)
			}
		}
	}
	interval, err := parseInterval(get("PSP_RECONCILE_INTERVAL", DefaultReconcileInterval.String()))
	if err != nil {
		return Config{}, err
	}
	cfg.PSP.ReconcileInterval = interval
	switch noop := get("BENCH_NOOP_ROUTE", "off"); {
	case strings.EqualFold(noop, "on"):
		cfg.BenchNoopRoute = true
	case !strings.EqualFold(noop, "off"):
		return Config{}, fmt.Errorf("config: BENCH_NOOP_ROUTE: %q is not on or off", noop)
	}
	limits, err := loadLimits(get)
	if err != nil {
		return Config{}, err
	}
	cfg.Limits = limits
	if cfg.Retention, err = loadRetention(get); err != nil {
		return Config{}, err
	}
	for _, p := range splitList(get("TRUSTED_PROXIES", "")) {
		prefix, err := parsePrefix(p)
		if err != nil {
			return Config{}, fmt.Errorf("config: TRUSTED_PROXIES: %q is not an IP address or CIDR", p)
		}
		cfg.TrustedProxies = append(cfg.TrustedProxies, prefix)
	}
	if strings.EqualFold(cfg.MetricsAddr, "off") {
		cfg.MetricsAddr = ""
	}
	return cfg, cfg.Validate()
}

// Validate reports the first invalid setting, naming its environment variable.
func (c Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		return fmt.Errorf("config: HTTP_ADDR: %q is not host:port", c.HTTPAddr)
	}
	if !validate.HTTPURL(c.AppURL) {
		return fmt.Errorf("config: APP_URL: %q is not an absolute http(s) URL", c.AppURL)
	}
	switch {
	case strings.HasPrefix(c.DatabaseURL, "sqlite://"):
		if strings.TrimPrefix(c.DatabaseURL, "sqlite://") == "" {
			return fmt.Errorf("config: DATABASE_URL: sqlite:// needs a path")
		}
	case strings.HasPrefix(c.DatabaseURL, "postgres://"), strings.HasPrefix(c.DatabaseURL, "postgresql://"):
		if _, err := url.Parse(c.DatabaseURL); err != nil {
			return fmt.Errorf("config: DATABASE_URL: not a valid URL")
		}
	default:
		return fmt.Errorf("config: DATABASE_URL: must start with sqlite:// or postgres://")
	}
	names := make([]string, 0, len(c.Redis.URLs))
	for name := range c.Redis.URLs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if _, err := redis.ParseURL(c.Redis.URLs[name]); err != nil {
			return fmt.Errorf("config: %s: %v", RedisVar(name), err)
		}
	}
	for _, addr := range c.Redis.ClusterAddrs {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("config: REDIS_CLUSTER_ADDRS: %q is not host:port", addr)
		}
	}
	if _, ok := c.Redis.URLs[c.QueueConnection]; !ok {
		return fmt.Errorf("config: EVENTQUEUE_QUEUE_CONNECTION: no Redis connection named %q (set %s)",
			c.QueueConnection, RedisVar(c.QueueConnection))
	}
	if c.PSP.APIBase != "" {
		if u, err := url.Parse(c.PSP.APIBase); err != nil || u.Host == "" {
			return fmt.Errorf("config: PSP_API_BASE: %q is not an absolute URL", c.PSP.APIBase)
		}
	}
	if c.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			return fmt.Errorf("config: METRICS_ADDR: %q is not host:port (or off)", c.MetricsAddr)
		}
	}
	for _, t := range c.AdminTokens {
		if len(t) < MinAdminTokenLen { // the token itself is never printed
			return fmt.Errorf("config: ADMIN_API_TOKENS: an entry is %d characters, shorter than %d", len(t), MinAdminTokenLen)
		}
		if isPlaceholder(t) {
			return fmt.Errorf("config: ADMIN_API_TOKENS: an entry still holds the template's placeholder %q: set a random token", Placeholder)
		}
	}
	for _, s := range c.PSP.WebhookSecrets {
		if isPlaceholder(s) {
			return fmt.Errorf("config: PSP_WEBHOOK_SECRET: still holds the template's placeholder %q: set the provider's signing secret", Placeholder)
		}
	}
	if c.WorkerMetricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.WorkerMetricsAddr); err != nil {
			return fmt.Errorf("config: WORKER_METRICS_ADDR: %q is not host:port", c.WorkerMetricsAddr)
		}
	}
	if c.PprofAddr != "" {
		if _, _, err := net.SplitHostPort(c.PprofAddr); err != nil {
			return fmt.Errorf("config: PPROF_ADDR: %q is not host:port", c.PprofAddr)
		}
	}
	return nil
}

// Placeholder is the text the deployment templates put in their secrets. A secret that still
// holds it was applied unedited: the operator token would be public and webhooks forgeable.
const Placeholder = "change-me"

func isPlaceholder(secret string) bool {
	return strings.Contains(strings.ToLower(secret), Placeholder)
}

// RedisVar is the environment variable that configures the named Redis connection.
func RedisVar(name string) string {
	if name == DefaultConnection {
		return "REDIS_URL"
	}
	return "REDIS_" + strings.ToUpper(name) + "_URL"
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		return netip.ParsePrefix(s)
	}
	addr, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(addr, addr.BitLen()), nil
}
