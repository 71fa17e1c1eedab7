package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/eventq/eventq/docs"
	"github.com/eventq/eventq/internal/testenv"
)

// Real responses of the api, good and bad, validate against docs/openapi.yaml (statuses,
// headers and bodies), and the api serves that same document.
func TestResponsesMatchTheOpenAPIDescription(t *testing.T) {
	e := startAPI(t, "EVENTQUEUE_MAX_DELIVERIES=1", "ADMIN_API_TOKENS="+adminToken)
	tn := testenv.MustTenant(t, e.DB, true)
	readOnly := testenv.MustTenant(t, e.DB, true, "events:read")
	for _, ct := range []string{"application/javascript", "application/x-ndjson"} {
		openapi3filter.RegisterBodyDecoder(ct, func(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
			b, err := io.ReadAll(body)
			return string(b), err
		})
	}
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(docs.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("docs/openapi.yaml is not a valid OpenAPI document: %v", err)
	}
	doc.Servers = openapi3.Servers{{URL: e.Base}}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	e.MustTrack(t, tn, pageView("s", 1), pageView("s", 2))
	// A tenant with a dead letter: its one event leased and retried EVENTQUEUE_MAX_DELIVERIES
	// (1) times; the next lease call moves it to the dead letters.
	deadTenant := testenv.MustTenant(t, e.DB, true)
	e.MustTrack(t, deadTenant, pageView("d", 1))
	if st := e.mustAck(t, deadTenant, map[string]any{"retries": leaseIDs(e.mustLease(t, deadTenant, "?limit=1"))}); len(st) != 1 || st[0] != "retried" {
		t.Fatalf("retry: %v", st)
	}
	track, _ := json.Marshal(map[string]any{"site_key": tn.SiteKey, "events": []any{pageView("s", 3)}})
	badTrack, _ := json.Marshal(map[string]any{"site_key": tn.SiteKey, "events": []any{map[string]any{"type": "BAD"}}})
	unknownSite, _ := json.Marshal(map[string]any{"site_key": "nope", "events": []any{pageView("s", 1)}})
	platform, _ := json.Marshal(map[string]any{"events": []any{pageView("p", 1)}})

	// The front door's resources: a member, a product and a second token to revoke.
	var member memberBody
	mustData(t, e.doJSON(t, "POST", "/api/platform/members", tn.Token, map[string]any{"email": "ada@example.com", "external_id": "u-1"}), 201, &member)
	var product productBody
	mustData(t, e.doJSON(t, "POST", "/api/platform/products", tn.Token, map[string]any{"name": "Course", "amount": 1999, "currency": "usd"}), 201, &product)
	var spare struct {
		ID string `json:"id"`
	}
	mustData(t, e.doJSON(t, "POST", fmt.Sprintf("/api/admin/tenants/%d/tokens", tn.ID), adminToken, `{}`), 201, &spare)
	tenantPath := fmt.Sprintf("/api/admin/tenants/%d", tn.ID)
	var doomed memberBody
	mustData(t, e.doJSON(t, "POST", "/api/platform/members", tn.Token, map[string]any{"email": "gone@example.com"}), 201, &doomed)
	var erasure struct {
		ID string `json:"id"`
	}
	mustData(t, e.doJSON(t, "DELETE", "/api/platform/members/"+doomed.ID, tn.Token, nil), 202, &erasure)
	var doomed2 memberBody
	mustData(t, e.doJSON(t, "POST", "/api/platform/members", tn.Token, map[string]any{"email": "gone2@example.com"}), 201, &doomed2)

	type call struct {
		method, path, token string
		body                []byte
		status              int
		headers             []string
	}
	calls := []call{
		{"POST", "/api/track", "", track, 202, nil},
		{"POST", "/api/track", "", badTrack, 422, nil},
		{"POST", "/api/track", "", unknownSite, 401, nil},
		{"POST", "/api/track", "", bytes.Repeat([]byte("x"), 70<<10), 413, nil},
		{"POST", "/api/platform/track", tn.Token, platform, 202, nil},
		{"POST", "/api/platform/track", readOnly.Token, platform, 403, nil},
		{"GET", "/api/platform/events", tn.Token, nil, 200, nil},
		{"GET", "/api/platform/events?limit=1&wait=0", tn.Token, nil, 200, nil},
		{"GET", "/api/platform/events?limit=0", tn.Token, nil, 422, nil},
		{"GET", "/api/platform/events", "", nil, 401, nil},
		{"DELETE", "/api/platform/events?count=1&offset=0", tn.Token, nil, 204, nil},
		{"DELETE", "/api/platform/events?count=1&offset=99", tn.Token, nil, 422, nil},
		{"DELETE", "/api/platform/events", tn.Token, nil, 422, nil},
		{"DELETE", "/api/platform/events?count=1", readOnly.Token, nil, 403, nil},
		{"POST", "/api/platform/events/leases?limit=1&visibility=1", tn.Token, nil, 200, nil},
		{"POST", "/api/platform/events/leases?limit=0", tn.Token, nil, 422, nil},
		{"POST", "/api/platform/events/leases", "", nil, 401, nil},
		{"POST", "/api/platform/events/acks", tn.Token, []byte(`{"acks":["nope"],"retries":[],"extends":["x"],"visibility":60}`), 200, nil},
		{"POST", "/api/platform/events/acks", tn.Token, []byte(`{"acks":"nope"}`), 422, nil},
		{"POST", "/api/platform/events/acks", readOnly.Token, []byte(`{}`), 403, nil},
		{"POST", "/api/platform/events/leases?limit=1&visibility=1", deadTenant.Token, nil, 200, nil}, // sends the retried event to the dead letters
		{"GET", "/api/platform/events/dead-letters?limit=10", deadTenant.Token, nil, 200, nil},
		{"GET", "/api/platform/events/dead-letters?limit=x", tn.Token, nil, 422, nil},
		{"DELETE", "/api/platform/events/dead-letters?count=1", deadTenant.Token, nil, 204, nil},
		{"DELETE", "/api/platform/events/dead-letters", tn.Token, nil, 422, nil},
		{"DELETE", "/api/platform/events/dead-letters?count=1", readOnly.Token, nil, 403, nil},
		{"POST", "/api/platform/checkout/sessions", tn.Token, []byte(`{"audience_member_id":"999999","product_id":"999999","cancel_url":"https://shop.example/"}`), 422, nil},
		{"POST", "/api/webhooks/psp", "", []byte(`{"type":"checkout.session.completed"}`), 200, nil},
		{"POST", "/api/webhooks/stripe", "", []byte(`not json`), 200, nil},
		{"GET", "/checkout/return?tenant=1&session_id=cs_x", "", nil, 503, []string{"Accept", "application/json"}},
		{"POST", "/api/platform/members", tn.Token, []byte(`{"email":"bob@example.com"}`), 201, nil},
		{"POST", "/api/platform/members", tn.Token, []byte(`{"email":"bob"}`), 422, nil},
		{"GET", "/api/platform/members?per_page=1", tn.Token, nil, 200, nil},
		{"GET", "/api/platform/members?per_page=0", tn.Token, nil, 422, nil},
		{"GET", "/api/platform/members/" + member.ID, tn.Token, nil, 200, nil},
		{"GET", "/api/platform/members/external:u-1", tn.Token, nil, 200, nil},
		{"GET", "/api/platform/members/999999", tn.Token, nil, 404, nil},
		{"PATCH", "/api/platform/members/" + member.ID, tn.Token, []byte(`{"name":"Ada"}`), 200, nil},
		{"PATCH", "/api/platform/members/" + member.ID, readOnly.Token, []byte(`{"name":"Ada"}`), 403, nil},
		{"GET", "/api/platform/members/" + member.ID + "/entitlements", tn.Token, nil, 200, nil},
		{"GET", "/api/platform/members/" + member.ID + "/entitlements/" + product.ID, tn.Token, nil, 404, nil},
		{"GET", "/api/platform/members/" + member.ID + "/purchases", tn.Token, nil, 200, nil},
		{"GET", "/api/platform/members/" + member.ID + "/data", tn.Token, nil, 200, nil},
		{"GET", "/api/platform/erasures/" + erasure.ID, tn.Token, nil, 200, nil},
		{"GET", "/api/platform/erasures/999999", tn.Token, nil, 404, nil},
		{"DELETE", "/api/platform/members/" + doomed.ID, tn.Token, nil, 404, nil},
		{"DELETE", "/api/platform/members/" + doomed2.ID, tn.Token, nil, 202, nil},
		{"POST", "/api/platform/products", tn.Token, []byte(`{"name":"Book","amount":500,"currency":"eur"}`), 201, nil},
		{"POST", "/api/platform/products", tn.Token, []byte(`{}`), 422, nil},
		{"GET", "/api/platform/products?active=true", tn.Token, nil, 200, nil},
		{"GET", "/api/platform/products/" + product.ID, tn.Token, nil, 200, nil},
		{"PATCH", "/api/platform/products/" + product.ID, tn.Token, []byte(`{"active":false}`), 200, nil},
		{"POST", "/api/admin/tenants", adminToken, []byte(`{"name":"New","allowed_hostnames":["shop.example"]}`), 201, nil},
		{"POST", "/api/admin/tenants", adminToken, []byte(`{}`), 422, nil},
		{"GET", "/api/admin/tenants", adminToken, nil, 200, nil},
		{"GET", "/api/admin/tenants", "wrong", nil, 401, nil},
		{"GET", tenantPath, adminToken, nil, 200, nil},
		{"GET", "/api/admin/tenants/999999", adminToken, nil, 404, nil},
		{"PATCH", tenantPath, adminToken, []byte(`{"redact_query_params":["email"]}`), 200, nil},
		{"GET", tenantPath + "/tokens", adminToken, nil, 200, nil},
		{"POST", tenantPath + "/tokens", adminToken, []byte(`{"abilities":["members:read"]}`), 201, nil},
		{"DELETE", "/api/admin/tokens/" + spare.ID, adminToken, nil, 204, nil},
		{"DELETE", "/api/admin/tokens/999999", adminToken, nil, 404, nil},
		{"PUT", tenantPath + "/features/AnonymizeIp", adminToken, []byte(`{"active":false}`), 200, nil},
		{"POST", tenantPath + "/site-key", adminToken, nil, 200, nil},
		{"GET", "/tracker.js", "", nil, 200, nil},
		{"GET", "/healthz", "", nil, 200, nil},
		{"GET", "/readyz", "", nil, 200, nil},
		{"GET", "/openapi.yaml", "", nil, 200, nil},
	}
	for _, c := range calls {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			headers := append([]string{"Content-Type", "application/json", "Accept-Encoding", "identity"}, c.headers...)
			res := e.Do(t, c.method, c.path, c.token, c.body, headers...)
			if res.Status != c.status {
				t.Fatalf("status %d, want %d: %s", res.Status, c.status, res.Body)
			}
			req, _ := http.NewRequest(c.method, e.Base+c.path, bytes.NewReader(c.body))
			route, params, err := router.FindRoute(req)
			if err != nil {
				t.Fatalf("not in the description: %v", err)
			}
			in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
				Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
			err = openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
				RequestValidationInput: in, Status: res.Status, Header: res.Header,
				Body:    io.NopCloser(bytes.NewReader(res.Body)),
				Options: &openapi3filter.Options{IncludeResponseStatus: true},
			})
			if err != nil {
				t.Fatalf("the response does not match the description: %v\n%s", err, res.Body)
			}
		})
	}
	if res := e.Do(t, "GET", "/openapi.yaml", "", nil); !bytes.Equal(res.Body, docs.OpenAPI) || !strings.HasPrefix(res.Header.Get("Content-Type"), "application/yaml") {
		t.Fatalf("GET /openapi.yaml is not docs/openapi.yaml (%s)", res.Header.Get("Content-Type"))
	}
}
