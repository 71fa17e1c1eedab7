package deployments

// The Grafana dashboard (grafana/eventq-dashboard.json) and the Prometheus alert rules
// (prometheus/eventq-alerts.yaml) name metrics in PromQL. These tests parse both with
// Prometheus's own parsers and check every metric they name against what the real api and
// worker serve on /metrics, so a renamed or removed metric cannot leave a panel blank or an
// alert silent.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"

	"github.com/eventq/eventq/internal/openapicheck"
	"github.com/eventq/eventq/internal/psp"
	"github.com/eventq/eventq/internal/testenv"
)

const (
	dashboardFile = "grafana/eventq-dashboard.json"
	alertsFile    = "prometheus/eventq-alerts.yaml"
	webhookSecret = "whsec_deployments_test"
)

// scrapeSeries are the series Prometheus itself adds to every scrape, not served by a target.
var scrapeSeries = []string{"up", "scrape_duration_seconds", "scrape_samples_scraped",
	"scrape_samples_post_metric_relabeling", "scrape_series_added"}

// grafanaVariables are replaced before a dashboard expression is parsed: Grafana substitutes
// them with a duration when it sends the query.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "6h")

var binDir string

func TestMain(m *testing.M) {
	dir, cleanup, err := testenv.BuildBinaries("github.com/eventq/eventq/cmd/api", "github.com/eventq/eventq/cmd/worker")
	if err != nil {
		fmt.Fprintln(os.Stderr, "deployments:", err)
		os.Exit(1)
	}
	binDir = dir
	testenv.Main(openapicheck.Watching(m), cleanup)
}

// --- the files --------------------------------------------------------------------------

// promQL is one PromQL expression of the dashboard or the rules, and where it is.
type promQL struct {
	where string
	expr  string
}

// mustParseRules parses the alert rules as Prometheus loads them and returns their expressions.
func mustParseRules(t *testing.T) []promQL {
	t.Helper()
	groups, errs := rulefmt.ParseFile(alertsFile, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Errorf("rulefmt: %v", err)
	}
	if groups == nil || len(groups.Groups) == 0 {
		t.Fatalf("%s: no rule groups", alertsFile)
	}
	var exprs []promQL
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, promQL{where: fmt.Sprintf("%s: alert %s", alertsFile, r.Alert), expr: r.Expr})
		}
	}
	return exprs
}

// dashboard is the part of a Grafana dashboard these tests read.
type dashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query string `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID         int              `json:"id"`
	Type       string           `json:"type"`
	Title      string           `json:"title"`
	Datasource *json.RawMessage `json:"datasource"`
	Targets    []struct {
		RefID      string           `json:"refId"`
		Expr       string           `json:"expr"`
		Datasource *json.RawMessage `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // of a collapsed row
}

func mustLoadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	testenv.Must(t, err)
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// allPanels flattens the panels of rows, collapsed or not.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// dashboardExprs returns every PromQL expression of the dashboard's panels.
func dashboardExprs(d dashboard) []promQL {
	var exprs []promQL
	for _, p := range allPanels(d.Panels) {
		for _, tg := range p.Targets {
			exprs = append(exprs, promQL{where: fmt.Sprintf("%s: panel %q, query %s", dashboardFile, p.Title, tg.RefID), expr: tg.Expr})
		}
	}
	return exprs
}

// metricNames parses expr and returns the metric names its selectors name, whether as
// `name{…}` or as a `__name__` equality matcher. A selector without a literal name (a regular
// expression on __name__) is an error: it cannot be checked.
func metricNames(expr string) ([]string, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(grafanaVariables.Replace(expr))
	if err != nil {
		return nil, err
	}
	var names []string
	var bad error
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName {
				if m.Type != labels.MatchEqual {
					bad = fmt.Errorf("selector %s matches metric names by %s: name them", vs, m.Type)
				}
				name = m.Value
			}
		}
		if name != "" {
			names = append(names, name)
		}
		return nil
	})
	return names, bad
}

// --- what the processes serve -----------------------------------------------------------

// servedSeries GETs a /metrics endpoint and returns the series names it can serve: each family
// of a # TYPE line, and for histograms and summaries their _bucket, _sum and _count series.
func servedSeries(t *testing.T, url string) map[string]bool {
	t.Helper()
	res, err := http.Get(url)
	testenv.Must(t, err)
	defer res.Body.Close()
	if res.StatusCode != 200 {
		body, _ := io.ReadAll(res.Body)
		t.Fatalf("GET %s: %d %s", url, res.StatusCode, body)
	}
	names := map[string]bool{}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 4 || f[0] != "#" || f[1] != "TYPE" {
			continue
		}
		switch name, typ := f[2], f[3]; typ {
		case "histogram":
			names[name+"_bucket"], names[name+"_sum"], names[name+"_count"] = true, true, true
		case "summary":
			names[name], names[name+"_sum"], names[name+"_count"] = true, true, true
		default:
			names[name] = true
		}
	}
	testenv.Must(t, sc.Err())
	return names
}

// startStack runs the real api and worker on one Redis and database and makes them count
// what only shows once it happens (a labelled metric has no series before): a 429, a held-back
// event, a fulfilment and a refund. It returns the api's and the worker's /metrics URLs.
func startStack(t *testing.T) (apiMetrics, workerMetrics string) {
	t.Helper()
	db, dbURL := testenv.DB(t)
	r := testenv.StartRedis(t)
	fake := testenv.StartFakePSP(t)
	apiAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	workerAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	base := "http://" + apiAddr
	openapicheck.API(base)
	env := append(os.Environ(), "DATABASE_URL="+dbURL, "REDIS_URL="+r.URL(), "APP_URL="+base,
		"PSP_WEBHOOK_SECRET="+webhookSecret, "PSP_SECRET_KEY=sk_test_deployments", "PSP_API_BASE="+fake.URL,
		// One track request a minute per address: the second is refused with 429. A queue
		// of one event: the second event of a request is held back.
		"RATE_LIMIT_TRACK=off", "RATE_LIMIT_TRACK_IP=1/m", "RATE_LIMIT_PLATFORM=off", "EVENTQUEUE_MAX_LENGTH=1")
	apiMetricsAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	api := testenv.NewProcess(t, filepath.Join(binDir, "api"), append(env[:len(env):len(env)], "HTTP_ADDR="+apiAddr, "METRICS_ADDR="+apiMetricsAddr))
	api.Start()
	testenv.WaitHTTP(t, base+"/healthz", 20*time.Second)
	worker := testenv.NewProcess(t, filepath.Join(binDir, "worker"), append(env[:len(env):len(env)], "WORKER_METRICS_ADDR="+workerAddr))
	worker.Start()
	testenv.WaitHTTP(t, "http://"+workerAddr+"/healthz", 20*time.Second)

	post := func(path string, body []byte, header ...string) int {
		t.Helper()
		req, err := http.NewRequest("POST", base+path, strings.NewReader(string(body)))
		testenv.Must(t, err)
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		res, err := http.DefaultClient.Do(req)
		testenv.Must(t, err)
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}

	tn := testenv.MustTenant(t, db, true)
	event := func(seq int) map[string]any {
		return map[string]any{"type": "page_view", "session_id": "s", "url": "https://shop.example/", "event_sequence": seq}
	}
	body, _ := json.Marshal(map[string]any{"site_key": tn.SiteKey, "events": []any{event(1), event(2)}})
	if status := post("/api/track", body, "User-Agent", "Mozilla/5.0 (test)"); status != 202 {
		t.Fatalf("POST /api/track: %d", status)
	}
	if status := post("/api/track", body, "User-Agent", "Mozilla/5.0 (test)"); status != 429 {
		t.Fatalf("second POST /api/track: %d, want 429", status)
	}

	// A lease call sets the tenant's leased-events gauge.
	if status := post("/api/platform/events/leases", nil, "Authorization", "Bearer "+tn.Token); status != 200 {
		t.Fatalf("POST /api/platform/events/leases: %d", status)
	}

	sh := testenv.MustShop(t, db, "acct_metrics", false)
	cs := fake.AddSession("acct_metrics", psp.SessionObject{AmountTotal: sh.Product.Amount, Currency: sh.Product.Currency,
		Mode: "payment", PaymentStatus: "unpaid", Status: "open"})
	_, completed := fake.Complete(cs.ID)
	_, refunded := fake.Refund("acct_metrics", "pi_metrics", 1999, 100)
	for _, payload := range [][]byte{completed, refunded} {
		if status := post("/api/webhooks/psp", payload, "PSP-Signature", psp.Sign(payload, webhookSecret, time.Now())); status != 200 {
			t.Fatalf("webhook: %d", status)
		}
	}
	// The asynq metrics need a queue in Redis; the worker's periodic tasks make one, this
	// task makes sure.
	if _, err := asynq.NewClientFromRedisClient(r.Client()).Enqueue(asynq.NewTask("test:metrics", nil)); err != nil {
		t.Fatal(err)
	}

	apiMetrics, workerMetrics = "http://"+apiMetricsAddr+"/metrics", "http://"+workerAddr+"/metrics"
	testenv.Eventually(t, 30*time.Second, "the worker counts a fulfilment, a refund and a full queue", func() bool {
		s := servedSeries(t, workerMetrics)
		return s["eventq_fulfilments_total"] && s["eventq_revocations_total"] && s["eventq_held_queue_length"] && s["asynq_queue_size"]
	})
	return apiMetrics, workerMetrics
}

// --- tests ------------------------------------------------------------------------------

func TestAlertRulesParseWithPrometheus(t *testing.T) {
	exprs := mustParseRules(t)
	groups, _ := rulefmt.ParseFile(alertsFile, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			t.Run(r.Alert, func(t *testing.T) {
				if r.Alert == "" {
					t.Fatalf("group %s: a recording rule; this file holds alerts only", g.Name)
				}
				if s := r.Labels["severity"]; s != "critical" && s != "warning" {
					t.Errorf("severity %q, want critical or warning", s)
				}
				if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
					t.Error("needs a summary and a description")
				}
			})
		}
	}
	for _, want := range []string{"EventqReconciliationStale", "EventqPruneStale", "EventqFulfilmentFailing",
		"EventqEventsHeldBackGrowing", "EventqWebhookLost", "EventqRedisUnreachable", "EventqAPIServerErrors",
		"EventqDatabaseUnreachableFromWorker", "EventqRateLimitStoreFailing", "EventqTargetDown"} {
		if !slices.ContainsFunc(exprs, func(e promQL) bool { return strings.HasSuffix(e.where, " "+want) }) {
			t.Errorf("no alert %s", want)
		}
	}
}

func TestDashboardIsGrafanaJSONOverAPrometheusVariable(t *testing.T) {
	d := mustLoadDashboard(t)
	if d.Title == "" || d.UID == "" {
		t.Errorf("title %q, uid %q: both are needed to import the dashboard", d.Title, d.UID)
	}
	if !slices.ContainsFunc(d.Templating.List, func(v struct {
		Name  string `json:"name"`
		Type  string `json:"type"`
		Query string `json:"query"`
	}) bool {
		return v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus"
	}) {
		t.Fatal("no datasource variable of type prometheus named datasource")
	}
	ids := map[int]bool{}
	for _, p := range allPanels(d.Panels) {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || !strings.Contains(string(*p.Datasource), `"${datasource}"`) {
			t.Errorf("panel %q: datasource is not the ${datasource} variable", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Datasource == nil || !strings.Contains(string(*tg.Datasource), `"${datasource}"`) {
				t.Errorf("panel %q, query %s: datasource is not the ${datasource} variable", p.Title, tg.RefID)
			}
		}
	}
	for _, e := range dashboardExprs(d) {
		if _, err := metricNames(e.expr); err != nil {
			t.Errorf("%s: %v\n%s", e.where, err, e.expr)
		}
	}
}

func TestMetricNamesFromPromQL(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`histogram_quantile(0.99, sum by (le) (rate(eventq_http_request_duration_seconds_bucket{route="/api/track"}[$__rate_interval])))`,
			[]string{"eventq_http_request_duration_seconds_bucket"}},
		{`{__name__="eventq_events_ingested_total", job="x"} / on() up`, []string{"eventq_events_ingested_total", "up"}},
		{`time() - max(eventq_psp_reconcile_last_success_timestamp_seconds) > 3600`, []string{"eventq_psp_reconcile_last_success_timestamp_seconds"}},
	} {
		got, err := metricNames(tc.expr)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %q, %v; want %q", tc.expr, got, err, tc.want)
		}
	}
	if _, err := metricNames(`{__name__=~"eventq_.*"}`); err == nil {
		t.Error("a regular expression on __name__ is accepted; it cannot be checked")
	}
}

// Every metric the dashboard and the alert rules name is served by the api or the worker
// (histograms as their _bucket, _sum and _count series), or added by Prometheus to each scrape.
func TestDashboardAndAlertsNameOnlyExportedMetrics(t *testing.T) {
	testenv.OnOneDatabase(t)
	apiURL, workerURL := startStack(t)
	served := map[string]bool{}
	for _, url := range []string{apiURL, workerURL} {
		for name := range servedSeries(t, url) {
			served[name] = true
		}
	}
	for _, name := range scrapeSeries {
		served[name] = true
	}

	exprs := append(mustParseRules(t), dashboardExprs(mustLoadDashboard(t))...)
	named := map[string]bool{}
	for _, e := range exprs {
		names, err := metricNames(e.expr)
		if err != nil {
			t.Errorf("%s: %v", e.where, err)
			continue
		}
		for _, name := range names {
			named[name] = true
			if !served[name] {
				t.Errorf("%s names %s, which neither the api nor the worker serves", e.where, name)
			}
		}
	}
	if t.Failed() {
		var all []string
		for name := range served {
			all = append(all, name)
		}
		sort.Strings(all)
		t.Logf("served: %s", strings.Join(all, " "))
	}
	// So that an empty dashboard or rules file does not pass.
	for _, want := range []string{"eventq_http_request_duration_seconds_bucket", "eventq_events_ingested_total",
		"eventq_psp_reconcile_last_success_timestamp_seconds", "eventq_events_prune_last_success_timestamp_seconds",
		"eventq_fulfilments_total", "eventq_webhooks_total", "asynq_queue_size"} {
		if !named[want] {
			t.Errorf("neither the dashboard nor the rules use %s", want)
		}
	}
}

// The scrape configuration (prometheus/prometheus.yml) defines every job the alert rules and
// the dashboard select on, each keeping the pods of the workload it is named after.
func TestScrapeConfigDefinesTheJobsTheAlertsUse(t *testing.T) {
	raw, err := os.ReadFile("prometheus/prometheus.yml")
	testenv.Must(t, err)
	var cfg struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName        string `yaml:"job_name"`
			RelabelConfigs []struct {
				SourceLabels []string `yaml:"source_labels"`
				Regex        string   `yaml:"regex"`
				Action       string   `yaml:"action"`
			} `yaml:"relabel_configs"`
		} `yaml:"scrape_configs"`
	}
	testenv.Must(t, yaml.Unmarshal(raw, &cfg))
	if !slices.Contains(cfg.RuleFiles, filepath.Base(alertsFile)) {
		t.Errorf("rule_files %v does not load %s", cfg.RuleFiles, filepath.Base(alertsFile))
	}
	jobs := map[string]bool{}
	for _, sc := range cfg.ScrapeConfigs {
		jobs[sc.JobName] = true
		component := strings.TrimPrefix(sc.JobName, "eventq-")
		kept := slices.ContainsFunc(sc.RelabelConfigs, func(r struct {
			SourceLabels []string `yaml:"source_labels"`
			Regex        string   `yaml:"regex"`
			Action       string   `yaml:"action"`
		}) bool {
			return r.Action == "keep" && r.Regex == "eventq;"+component
		})
		if !kept {
			t.Errorf("job %s does not keep the pods of component %q", sc.JobName, component)
		}
	}
	exprs := append(mustParseRules(t), dashboardExprs(mustLoadDashboard(t))...)
	for _, e := range exprs {
		expr, err := parser.NewParser(parser.Options{}).ParseExpr(grafanaVariables.Replace(e.expr))
		if err != nil {
			t.Errorf("%s: %v", e.where, err)
			continue
		}
		parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
			vs, ok := n.(*parser.VectorSelector)
			if !ok {
				return nil
			}
			for _, m := range vs.LabelMatchers {
				if m.Name != "job" || (m.Type != labels.MatchEqual && m.Type != labels.MatchRegexp) {
					continue
				}
				for _, job := range strings.Split(m.Value, "|") {
					if !jobs[job] {
						t.Errorf("%s selects job %q, which prometheus/prometheus.yml does not scrape", e.where, job)
					}
				}
			}
			return nil
		})
	}
}
