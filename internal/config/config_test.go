package config

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestLoadDefaults(t *testing.T) {
	want := Config{
		HTTPAddr:        "127.0.0.1:8080",
		AppURL:          "http://127.0.0.1:8080",
		DatabaseURL:     "sqlite://var/eventq.db",
		QueueConnection: "default",
		MetricsAddr:     "127.0.0.1:9464",
		Redis: RedisConfig{
			URLs: map[string]string{"default": "redis://127.0.0.1:6379/0"},
		},
		PSP: PSPConfig{ReconcileInterval: 15 * time.Minute},
		Limits: Limits{Track: Rate{1000, time.Second}, TrackIP: Rate{100, time.Second}, Platform: Rate{6000, time.Minute}, QueueMaxLength: 1000000, QueueMaxDeliveries: 10,
			QueueMaxDeadLetters: 10000, IngestSpoolMax: 1000000, IngestSpoolTenantMax: 100000, IngestSpoolMaxBytes: 1 << 30, QueuePageMaxBytes: 8 << 20, DeadLetterRetention: 14 * 24 * time.Hour, Return: Rate{10, time.Second}, AuthFailures: Rate{20, time.Minute}},
		Retention: RetentionConfig{PruneInterval: time.Hour},
	}
	for name, environ := range map[string][]string{
		"nil environment":             nil,
		"empty environment":           {},
		"blank values":                {"HTTP_ADDR=", "APP_URL=  ", "DATABASE_URL=", "REDIS_URL=", "EVENTQUEUE_QUEUE_CONNECTION=", "PSP_WEBHOOK_SECRET="},
		"unrelated variables":         {"PATH=/usr/bin", "HOME=/root", "NOEQUALSSIGN"},
		"redis variables not of _URL": {"REDIS_CLUSTER_ADDRS=", "REDIS__URL=redis://x:1/0", "REDIS_EMPTY_URL="},
	} {
		t.Run("uses documented defaults with "+name, func(t *testing.T) {
			cfg, err := Load(environ)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if !reflect.DeepEqual(cfg, want) {
				t.Errorf("Load(%q) =\n%#v\nwant\n%#v", environ, cfg, want)
			}
		})
	}
}

func TestLoadValues(t *testing.T) {
	cases := []struct {
		name    string
		environ []string
		check   func(t *testing.T, cfg Config)
	}{
		{
			name: "reads every plain variable",
			environ: []string{
				"HTTP_ADDR=:9090", "APP_URL=https://eventq.example/", "DATABASE_URL=postgres://u:p@db:5432/eventq?sslmode=disable",
				"REDIS_URL=redis://cache:6380/2", "WORKER_METRICS_ADDR=0.0.0.0:9100",
				"PPROF_ADDR=127.0.0.1:6060", "BENCH_NOOP_ROUTE=On",
				"REDIS_CLUSTER_ADDRS= 10.0.0.1:7000 ,10.0.0.2:7001,",
				"TRUSTED_PROXIES=10.0.0.0/8, 192.0.2.1 ,2001:db8::1",
			},
			check: func(t *testing.T, cfg Config) {
				eq(t, "HTTPAddr", cfg.HTTPAddr, ":9090")
				eq(t, "AppURL (trailing slash trimmed)", cfg.AppURL, "https://eventq.example")
				eq(t, "DatabaseURL", cfg.DatabaseURL, "postgres://u:p@db:5432/eventq?sslmode=disable")
				eq(t, "Redis.URLs", cfg.Redis.URLs, map[string]string{"default": "redis://cache:6380/2"})
				eq(t, "Redis.ClusterAddrs", cfg.Redis.ClusterAddrs, []string{"10.0.0.1:7000", "10.0.0.2:7001"})
				eq(t, "WorkerMetricsAddr", cfg.WorkerMetricsAddr, "0.0.0.0:9100")
				eq(t, "PprofAddr", cfg.PprofAddr, "127.0.0.1:6060")
				eq(t, "BenchNoopRoute", cfg.BenchNoopRoute, true)
				eq(t, "TrustedProxies", cfg.TrustedProxies, []netip.Prefix{
					netip.MustParsePrefix("10.0.0.0/8"),
					netip.MustParsePrefix("192.0.2.1/32"),
					netip.MustParsePrefix("2001:db8::1/128"),
				})
			},
		},
		{
			name:    "accepts postgresql scheme",
			environ: []string{"DATABASE_URL=postgresql://db/eventq"},
			check: func(t *testing.T, cfg Config) {
				eq(t, "DatabaseURL", cfg.DatabaseURL, "postgresql://db/eventq")
			},
		},
		{
			name:    "accepts absolute sqlite path",
			environ: []string{"DATABASE_URL=sqlite:///var/lib/eventq/eventq.db"},
			check: func(t *testing.T, cfg Config) {
				eq(t, "DatabaseURL", cfg.DatabaseURL, "sqlite:///var/lib/eventq/eventq.db")
			},
		},
		{
			name:    "adds named connections from REDIS_NAME_URL",
			environ: []string{"REDIS_EVENTS_URL=redis://events:6379/1", "REDIS_EVENT_QUEUE_URL=rediss://q:6379/0"},
			check: func(t *testing.T, cfg Config) {
				eq(t, "Redis.URLs", cfg.Redis.URLs, map[string]string{
					"default":     "redis://127.0.0.1:6379/0",
					"events":      "redis://events:6379/1",
					"event_queue": "rediss://q:6379/0",
				})
				eq(t, "QueueConnection", cfg.QueueConnection, "default")
			},
		},
		{
			name:    "uses a named connection for the queues",
			environ: []string{"REDIS_EVENTS_URL=redis://events:6379/1", "EVENTQUEUE_QUEUE_CONNECTION=events"},
			check: func(t *testing.T, cfg Config) {
				eq(t, "QueueConnection", cfg.QueueConnection, "events")
				eq(t, "queue connection URL", cfg.Redis.URLs[cfg.QueueConnection], "redis://events:6379/1")
			},
		},
		{
			name:    "matches the queue connection name case-insensitively",
			environ: []string{"REDIS_EVENTS_URL=redis://events:6379/1", "EVENTQUEUE_QUEUE_CONNECTION=Events"},
			check: func(t *testing.T, cfg Config) {
				eq(t, "QueueConnection", cfg.QueueConnection, "events")
			},
		},
		{
			name:    "splits a comma list of webhook secrets",
			environ: []string{"PSP_WEBHOOK_SECRET= whsec_new , whsec_old,,"},
			check: func(t *testing.T, cfg Config) {
				eq(t, "WebhookSecrets", cfg.PSP.WebhookSecrets, []string{"whsec_new", "whsec_old"})
			},
		},
		{
			name:    "reads a single webhook secret",
			environ: []string{"PSP_WEBHOOK_SECRET=whsec_only"},
			check: func(t *testing.T, cfg Config) {
				eq(t, "WebhookSecrets", cfg.PSP.WebhookSecrets, []string{"whsec_only"})
			},
		},
		{
			name: "reads PSP variables",
			environ: []string{
				"PSP_WEBHOOK_SECRET=whsec_p", "PSP_SECRET_KEY=sk_p", "PSP_PUBLISHABLE_KEY=pk_p",
				"PSP_CONNECT_CLIENT_ID=ca_p", "PSP_API_BASE=http://127.0.0.1:12111/", "PSP_RECONCILE_INTERVAL=1h",
			},
			check: func(t *testing.T, cfg Config) {
				eq(t, "PSP", cfg.PSP, PSPConfig{
					WebhookSecrets: []string{"whsec_p"}, SecretKey: "sk_p", PublishableKey: "pk_p",
					ConnectClientID: "ca_p", APIBase: "http://127.0.0.1:12111", ReconcileInterval: time.Hour,
				})
			},
		},
		{
			name: "falls back to STRIPE aliases when PSP variables are absent",
			environ: []string{
				"STRIPE_WEBHOOK_SECRET=whsec_s1,whsec_s2", "STRIPE_SECRET_KEY=sk_s",
				"STRIPE_PUBLISHABLE_KEY=pk_s", "STRIPE_CONNECT_CLIENT_ID=ca_s", "PSP_SECRET_KEY=",
			},
			check: func(t *testing.T, cfg Config) {
				eq(t, "PSP", cfg.PSP, PSPConfig{
					WebhookSecrets: []string{"whsec_s1", "whsec_s2"}, SecretKey: "sk_s",
					PublishableKey: "pk_s", ConnectClientID: "ca_s", ReconcileInterval: 15 * time.Minute,
				})
			},
		},
		{
			name: "prefers PSP variables over STRIPE aliases",
			environ: []string{
				"STRIPE_WEBHOOK_SECRET=whsec_s", "PSP_WEBHOOK_SECRET=whsec_p",
				"STRIPE_SECRET_KEY=sk_s", "PSP_SECRET_KEY=sk_p",
				"PSP_PUBLISHABLE_KEY=pk_p", "STRIPE_PUBLISHABLE_KEY=pk_s",
				"PSP_CONNECT_CLIENT_ID=ca_p", "STRIPE_CONNECT_CLIENT_ID=ca_s",
			},
			check: func(t *testing.T, cfg Config) {
				eq(t, "PSP", cfg.PSP, PSPConfig{
					WebhookSecrets: []string{"whsec_p"}, SecretKey: "sk_p",
					PublishableKey: "pk_p", ConnectClientID: "ca_p", ReconcileInterval: 15 * time.Minute,
				})
			},
		},
		{
			name:    "mixes PSP and STRIPE names per variable",
			environ: []string{"PSP_SECRET_KEY=sk_p", "STRIPE_WEBHOOK_SECRET=whsec_s"},
			check: func(t *testing.T, cfg Config) {
				eq(t, "SecretKey", cfg.PSP.SecretKey, "sk_p")
				eq(t, "WebhookSecrets", cfg.PSP.WebhookSecrets, []string{"whsec_s"})
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Load(tc.environ)
			if err != nil {
				t.Fatalf("Load(%q): %v", tc.environ, err)
			}
			tc.check(t, cfg)
		})
	}
}

func TestLoadRejects(t *testing.T) {
	cases := []struct {
		name    string
		environ []string
		// wantVar must appear in the error message.
		wantVar string
	}{
		{"rejects HTTP_ADDR without port", []string{"HTTP_ADDR=localhost"}, "HTTP_ADDR"},
		{"rejects METRICS_ADDR without port", []string{"METRICS_ADDR=localhost"}, "METRICS_ADDR"},
		{"rejects an ADMIN_API_TOKENS entry under 32 characters", []string{"ADMIN_API_TOKENS=" + strings.Repeat("a", 40) + ",short"}, "ADMIN_API_TOKENS"},
		{"rejects the template's operator token", []string{"ADMIN_API_TOKENS=change-me-to-at-least-32-random-characters"}, "ADMIN_API_TOKENS"},
		{"rejects the template's webhook secret", []string{"PSP_WEBHOOK_SECRET=change-me"}, "PSP_WEBHOOK_SECRET"},
		{"rejects the placeholder among webhook secrets", []string{"PSP_WEBHOOK_SECRET=whsec_real,CHANGE-ME"}, "PSP_WEBHOOK_SECRET"},
		{"rejects INGEST_SPOOL_TENANT_MAX of 0", []string{"INGEST_SPOOL_TENANT_MAX=0"}, "INGEST_SPOOL_TENANT_MAX"},
		{"rejects INGEST_SPOOL_MAX_BYTES garbage", []string{"INGEST_SPOOL_MAX_BYTES=lots"}, "INGEST_SPOOL_MAX_BYTES"},
		{"rejects QUEUE_PAGE_MAX_BYTES garbage", []string{"QUEUE_PAGE_MAX_BYTES=big"}, "QUEUE_PAGE_MAX_BYTES"},
		{"rejects QUEUE_PAGE_MAX_BYTES of 0", []string{"QUEUE_PAGE_MAX_BYTES=0"}, "QUEUE_PAGE_MAX_BYTES"},
		{"rejects HTTP_ADDR with bare port", []string{"HTTP_ADDR=8080"}, "HTTP_ADDR"},
		{"rejects APP_URL without scheme", []string{"APP_URL=eventq.example"}, "APP_URL"},
		{"rejects APP_URL with other scheme", []string{"APP_URL=ftp://eventq.example"}, "APP_URL"},
		{"rejects APP_URL without host", []string{"APP_URL=https://"}, "APP_URL"},
		{"rejects APP_URL that does not parse", []string{"APP_URL=http://[::1"}, "APP_URL"},
		{"rejects mysql DATABASE_URL", []string{"DATABASE_URL=mysql://u:p@db/eventq"}, "DATABASE_URL"},
		{"rejects DATABASE_URL without scheme", []string{"DATABASE_URL=var/eventq.db"}, "DATABASE_URL"},
		{"rejects sqlite DATABASE_URL without path", []string{"DATABASE_URL=sqlite://"}, "DATABASE_URL"},
		{"rejects postgres DATABASE_URL that does not parse", []string{"DATABASE_URL=postgres://db:port/x"}, "DATABASE_URL"},
		{"rejects http REDIS_URL", []string{"REDIS_URL=http://x"}, "REDIS_URL"},
		{"rejects REDIS_URL that is not a URL", []string{"REDIS_URL=::garbage"}, "REDIS_URL"},
		{"rejects invalid named redis URL", []string{"REDIS_EVENTS_URL=http://x"}, "REDIS_EVENTS_URL"},
		{"rejects REDIS_CLUSTER_ADDRS entry without port", []string{"REDIS_CLUSTER_ADDRS=10.0.0.1:7000,10.0.0.2"}, "REDIS_CLUSTER_ADDRS"},
		{"rejects unknown queue connection", []string{"EVENTQUEUE_QUEUE_CONNECTION=events"}, "EVENTQUEUE_QUEUE_CONNECTION"},
		{"rejects queue connection whose URL is blank", []string{"REDIS_EVENTS_URL= ", "EVENTQUEUE_QUEUE_CONNECTION=events"}, "EVENTQUEUE_QUEUE_CONNECTION"},
		{"rejects TRUSTED_PROXIES garbage", []string{"TRUSTED_PROXIES=10.0.0.1,not-an-ip"}, "TRUSTED_PROXIES"},
		{"rejects TRUSTED_PROXIES bad CIDR", []string{"TRUSTED_PROXIES=10.0.0.0/33"}, "TRUSTED_PROXIES"},
		{"rejects PSP_API_BASE without host", []string{"PSP_API_BASE=not a url"}, "PSP_API_BASE"},
		{"rejects PSP_API_BASE that does not parse", []string{"PSP_API_BASE=http://[::1"}, "PSP_API_BASE"},
		{"rejects WORKER_METRICS_ADDR without port", []string{"WORKER_METRICS_ADDR=localhost"}, "WORKER_METRICS_ADDR"},
		{"rejects PPROF_ADDR without port", []string{"PPROF_ADDR=localhost"}, "PPROF_ADDR"},
		{"rejects BENCH_NOOP_ROUTE other than on or off", []string{"BENCH_NOOP_ROUTE=yes"}, "BENCH_NOOP_ROUTE"},
		{"rejects a rate without a unit", []string{"RATE_LIMIT_TRACK=100"}, "RATE_LIMIT_TRACK"},
		{"rejects a rate per hour", []string{"RATE_LIMIT_TRACK_IP=10/h"}, "RATE_LIMIT_TRACK_IP"},
		{"rejects a rate of zero", []string{"RATE_LIMIT_PLATFORM=0/m"}, "RATE_LIMIT_PLATFORM"},
		{"rejects a negative rate", []string{"RATE_LIMIT_PLATFORM=-5/s"}, "RATE_LIMIT_PLATFORM"},
		{"rejects a queue length of zero", []string{"EVENTQUEUE_MAX_LENGTH=0"}, "EVENTQUEUE_MAX_LENGTH"},
		{"rejects zero max deliveries", []string{"EVENTQUEUE_MAX_DELIVERIES=0"}, "EVENTQUEUE_MAX_DELIVERIES"},
		{"rejects max deliveries that is not a number", []string{"EVENTQUEUE_MAX_DELIVERIES=ten"}, "EVENTQUEUE_MAX_DELIVERIES"},
		{"rejects a reconcile interval that is not a duration", []string{"PSP_RECONCILE_INTERVAL=15"}, "PSP_RECONCILE_INTERVAL"},
		{"rejects a reconcile interval below a second", []string{"PSP_RECONCILE_INTERVAL=10ms"}, "PSP_RECONCILE_INTERVAL"},
		{"rejects a negative reconcile interval", []string{"PSP_RECONCILE_INTERVAL=-5m"}, "PSP_RECONCILE_INTERVAL"},
		{"rejects a queue length that is not a number", []string{"EVENTQUEUE_MAX_LENGTH=1e6"}, "EVENTQUEUE_MAX_LENGTH"},
		{"rejects a retention below two days", []string{"EVENT_RETENTION=47h"}, "EVENT_RETENTION"},
		{"rejects a retention of one day", []string{"EVENT_RETENTION=1d"}, "EVENT_RETENTION"},
		{"rejects a retention of zero days", []string{"EVENT_RETENTION=0d"}, "EVENT_RETENTION"},
		{"rejects a negative retention", []string{"EVENT_RETENTION=-30d"}, "EVENT_RETENTION"},
		{"rejects a retention in weeks", []string{"EVENT_RETENTION=4w"}, "EVENT_RETENTION"},
		{"rejects a retention of fractional days", []string{"EVENT_RETENTION=2.5d"}, "EVENT_RETENTION"},
		{"rejects a retention that is a bare number", []string{"EVENT_RETENTION=30"}, "EVENT_RETENTION"},
		{"rejects a prune interval below a second", []string{"EVENT_PRUNE_INTERVAL=10ms"}, "EVENT_PRUNE_INTERVAL"},
		{"rejects a prune interval of off", []string{"EVENT_PRUNE_INTERVAL=off"}, "EVENT_PRUNE_INTERVAL"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Load(tc.environ)
			if err == nil {
				t.Fatalf("Load(%q) = %+v, want an error naming %s", tc.environ, cfg, tc.wantVar)
			}
			if !strings.Contains(err.Error(), tc.wantVar) {
				t.Errorf("Load(%q) error %q does not name %s", tc.environ, err, tc.wantVar)
			}
		})
	}
}

func TestLoadReconcileInterval(t *testing.T) {
	for value, want := range map[string]time.Duration{"off": 0, "OFF": 0, "1s": time.Second, "90m": 90 * time.Minute, " 2h ": 2 * time.Hour} {
		t.Run("reads "+value, func(t *testing.T) {
			cfg, err := Load([]string{"PSP_RECONCILE_INTERVAL=" + value})
			if err != nil {
				t.Fatal(err)
			}
			if cfg.PSP.ReconcileInterval != want {
				t.Errorf("ReconcileInterval = %s, want %s", cfg.PSP.ReconcileInterval, want)
			}
		})
	}
}

func TestLoadLimits(t *testing.T) {
	cfg, err := Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Limits{Track: Rate{1000, time.Second}, TrackIP: Rate{100, time.Second}, Platform: Rate{6000, time.Minute}, QueueMaxLength: 1000000, QueueMaxDeliveries: 10,
		QueueMaxDeadLetters: 10000, IngestSpoolMax: 1000000, IngestSpoolTenantMax: 100000, IngestSpoolMaxBytes: 1 << 30, QueuePageMaxBytes: 8 << 20, DeadLetterRetention: 14 * 24 * time.Hour, Return: Rate{10, time.Second}, AuthFailures: Rate{20, time.Minute}}
	if cfg.Limits != want {
		t.Fatalf("defaults %+v, want %+v", cfg.Limits, want)
	}
	cfg, err = Load([]string{"RATE_LIMIT_TRACK=off", "RATE_LIMIT_TRACK_IP=7/m", "RATE_LIMIT_PLATFORM=OFF", "EVENTQUEUE_MAX_LENGTH=50"})
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Limits.Track.Off() || cfg.Limits.TrackIP != (Rate{7, time.Minute}) || !cfg.Limits.Platform.Off() || cfg.Limits.QueueMaxLength != 50 {
		t.Fatalf("parsed %+v", cfg.Limits)
	}
	if s := cfg.Limits.TrackIP.String(); s != "7/m" {
		t.Fatalf("String %q", s)
	}
	cfg, err = Load([]string{"EVENTQUEUE_MAX_DEAD_LETTERS=5", "DEAD_LETTER_RETENTION=36h", "RATE_LIMIT_RETURN=off", "RATE_LIMIT_AUTH_FAILURES=3/s"})
	if err != nil {
		t.Fatal(err)
	}
	if l := cfg.Limits; l.QueueMaxDeadLetters != 5 || l.DeadLetterRetention != 36*time.Hour || !l.Return.Off() || l.AuthFailures != (Rate{3, time.Second}) {
		t.Fatalf("parsed %+v", cfg.Limits)
	}
	for _, bad := range []string{"EVENTQUEUE_MAX_DEAD_LETTERS=0", "EVENTQUEUE_MAX_DEAD_LETTERS=x", "DEAD_LETTER_RETENTION=0s", "DEAD_LETTER_RETENTION=soon", "RATE_LIMIT_RETURN=7", "RATE_LIMIT_AUTH_FAILURES=1/h"} {
		name, _, _ := strings.Cut(bad, "=")
		if _, err := Load([]string{bad}); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: error %v should name the variable", bad, err)
		}
	}
}

func TestLoadUnknownQueueConnectionNamesTheMissingVariable(t *testing.T) {
	_, err := Load([]string{"EVENTQUEUE_QUEUE_CONNECTION=events"})
	if err == nil || !strings.Contains(err.Error(), "REDIS_EVENTS_URL") {
		t.Errorf("error %v should tell the operator to set REDIS_EVENTS_URL", err)
	}
}

func TestRedisVar(t *testing.T) {
	for name, want := range map[string]string{
		"default":     "REDIS_URL",
		"events":      "REDIS_EVENTS_URL",
		"event_queue": "REDIS_EVENT_QUEUE_URL",
	} {
		t.Run("names "+want, func(t *testing.T) {
			eq(t, "RedisVar("+name+")", RedisVar(name), want)
		})
	}
}

func eq[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s = %#v, want %#v", what, got, want)
	}
}

func TestLoadRetention(t *testing.T) {
	for value, want := range map[string]time.Duration{"off": 0, "Off": 0, "2d": 48 * time.Hour, "30d": 30 * 24 * time.Hour,
		"48h": 48 * time.Hour, "720h": 720 * time.Hour, " 90d ": 90 * 24 * time.Hour} {
		t.Run("reads "+value, func(t *testing.T) {
			cfg, err := Load([]string{"EVENT_RETENTION=" + value, "EVENT_PRUNE_INTERVAL=5m"})
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Retention.Keep != want || cfg.Retention.PruneInterval != 5*time.Minute {
				t.Errorf("Retention = %+v, want Keep %s and PruneInterval 5m", cfg.Retention, want)
			}
		})
	}
}
