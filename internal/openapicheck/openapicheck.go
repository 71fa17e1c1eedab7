// Package openapicheck holds the tests' HTTP exchanges up to docs/openapi.yaml: every answer
// of a documented route must be one the document lists, with its headers and body, and every
// request the api accepted (2xx) must be one the document says is valid. A difference fails
// the test that made the call, so the document cannot drift from the server.
package openapicheck

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"go.yaml.in/yaml/v3"

	"github.com/eventq/eventq/docs"
)

var (
	once   sync.Once
	router routers.Router
	err    error
)

// load reads the document once per test binary.
func load() (routers.Router, error) {
	once.Do(func() {
		// The document itself is read as a YAML tool reads it: a mapping.
		openapi3filter.RegisterBodyDecoder("application/yaml", func(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
			var doc any
			if err := yaml.NewDecoder(body).Decode(&doc); err != nil {
				return nil, err
			}
			b, err := json.Marshal(doc) // JSON's types, which the schemas speak
			if err != nil {
				return nil, err
			}
			var v any
			return v, json.Unmarshal(b, &v)
		})
		for _, ct := range []string{"application/javascript", "application/x-ndjson", "text/html"} {
			openapi3filter.RegisterBodyDecoder(ct, func(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
				b, err := io.ReadAll(body)
				return string(b), err
			})
		}
		// The tracking routes read any body as JSON, whatever its type (the browser client
		// sends text/plain): so is it checked.
		openapi3filter.RegisterBodyDecoder("text/plain", func(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
			b, err := io.ReadAll(body)
			if err != nil {
				return nil, err
			}
			var v any
			if json.Unmarshal(b, &v) == nil {
				return v, nil
			}
			return string(b), nil
		})
		var doc *openapi3.T
		if doc, err = openapi3.NewLoader().LoadFromData(docs.OpenAPI); err != nil {
			return
		}
		if err = doc.Validate(context.Background()); err != nil {
			return
		}
		doc.Servers = nil // any host: the tests' servers listen on free ports
		router, err = legacy.NewRouter(doc)
	})
	return router, err
}

// Check returns how the exchange differs from the document, or nil. A path or method the
// document does not describe is not checked (a test of a 404 or a 405 sends those on
// purpose), unless the api answered it 2xx.
func Check(method, rawURL string, reqHeader http.Header, reqBody []byte, status int, resHeader http.Header, resBody []byte) error {
	return check(method, rawURL, reqHeader, reqBody, status, resHeader, resBody, true)
}

// check is Check; an exchange on a route the document does not describe is an error only when
// strict (and answered 2xx).
func check(method, rawURL string, reqHeader http.Header, reqBody []byte, status int, resHeader http.Header, resBody []byte, strict bool) error {
	r, err := load()
	if err != nil {
		return fmt.Errorf("docs/openapi.yaml: %w", err)
	}
	u, err := url.Parse(rawURL)
	if err != nil || method == http.MethodOptions || strings.HasPrefix(u.Path, "/bench/") {
		return nil // CORS preflights, and make bench's floors, are not the API
	}
	req, err := http.NewRequest(method, u.String(), bytes.NewReader(reqBody))
	if err != nil {
		return nil
	}
	req.Header = reqHeader.Clone()
	route, params, err := r.FindRoute(req)
	if err != nil {
		// A path with an escaped slash (an external id with "/") is matched by the server, not
		// by the router, which matches the decoded path.
		if strict && status >= 200 && status < 300 && !strings.Contains(u.RawPath, "%2F") && !strings.Contains(u.RawPath, "%2f") {
			return fmt.Errorf("%s %s answered %d but is not in docs/openapi.yaml", method, u.Path, status)
		}
		return nil
	}
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true}
	if rb := route.Operation.RequestBody; rb != nil && rb.Value != nil {
		if any := rb.Value.Content.Get("*/*"); any != nil {
			if any.Schema == nil || any.Schema.Value == nil || any.Schema.Value.IsEmpty() {
				opts.ExcludeRequestBody = true // an opaque body (the webhook's): any bytes are accepted
			} else if len(reqBody) > 0 && req.Header.Get("Content-Type") == "" {
				req.Header.Set("Content-Type", "application/json") // read as JSON whatever its type
			}
		}
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
	if status >= 200 && status < 300 {
		if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
			return fmt.Errorf("%s %s was answered %d, but docs/openapi.yaml says the request is invalid: %w", method, u.RequestURI(), status, err)
		}
	}
	err = openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: status, Header: resHeader,
		Body:    io.NopCloser(bytes.NewReader(resBody)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	})
	var noContent *openapi3filter.ResponseError
	if errors.As(err, &noContent) && len(resBody) == 0 && status == http.StatusNoContent {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("%s %s answered %d, not as docs/openapi.yaml says: %w\n%.500s", method, u.RequestURI(), status, err, resBody)
	}
	return nil
}
