package docs

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"go.yaml.in/yaml/v3"
)

// The rules of Redocly's recommended ruleset that a document can break without being invalid
// (operation-operationId, -operationId-unique, -operationId-url-safe, -summary,
// -4xx-response, -2xx-response, operation-tag-defined, security-defined,
// path-parameters-defined, no-unused-components, info-license), checked here so that make test
// needs no Node: each problem as a line, minus the exceptions .redocly.lint-ignore.yaml keeps
// for the linter itself (`make lint-openapi`).
func TestOpenAPIDocumentFollowsTheLintRules(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("not a valid OpenAPI document: %v", err)
	}
	ignored := lintIgnores(t)
	var problems []string
	report := func(rule, pointer, format string, args ...any) {
		if !slices.Contains(ignored[rule], pointer) {
			problems = append(problems, fmt.Sprintf("%s at %s: %s", rule, pointer, fmt.Sprintf(format, args...)))
		}
	}
	if doc.Info.License == nil {
		report("info-license", "#/info", "no license")
	}
	tags := map[string]bool{}
	for _, tag := range doc.Tags {
		tags[tag.Name] = true
	}
	ids := map[string]string{}
	urlSafe := regexp.MustCompile(`^[A-Za-z0-9_.~-]+$`)
	pathParam := regexp.MustCompile(`\{([^}]+)\}`)
	for _, path := range doc.Paths.InMatchingOrder() {
		item := doc.Paths.Value(path)
		for method, op := range item.Operations() {
			at := "#/paths/" + strings.ReplaceAll(strings.ReplaceAll(path, "~", "~0"), "/", "~1") + "/" + strings.ToLower(method)
			where := method + " " + path
			switch {
			case op.OperationID == "":
				report("operation-operationId", at, "%s has no operationId", where)
			case ids[op.OperationID] != "":
				report("operation-operationId-unique", at, "%s repeats the operationId of %s", where, ids[op.OperationID])
			case !urlSafe.MatchString(op.OperationID):
				report("operation-operationId-url-safe", at, "%q", op.OperationID)
			}
			ids[op.OperationID] = where
			if op.Summary == "" {
				report("operation-summary", at, "%s has no summary", where)
			}
			if len(op.Tags) == 0 {
				report("operation-tag-defined", at, "%s has no tag", where)
			}
			for _, tag := range op.Tags {
				if !tags[tag] {
					report("operation-tag-defined", at, "%s has tag %q, not in the document's tags", where, tag)
				}
			}
			if op.Security == nil {
				report("security-defined", at, "%s does not say its security (security: [] on a public route)", where)
			} else {
				for _, req := range *op.Security {
					for scheme := range req {
						if doc.Components.SecuritySchemes[scheme] == nil {
							report("security-defined", at, "%s uses undefined scheme %q", where, scheme)
						}
					}
				}
			}
			var ok2xx, has4xx bool
			for code := range op.Responses.Map() {
				ok2xx = ok2xx || strings.HasPrefix(code, "2") || strings.HasPrefix(code, "3")
				has4xx = has4xx || strings.HasPrefix(code, "4")
			}
			if !ok2xx {
				report("operation-2xx-response", at+"/responses", "%s has no success response", where)
			}
			if !has4xx {
				report("operation-4xx-response", at+"/responses", "%s has no 4XX response", where)
			}
			declared := map[string]bool{}
			for _, p := range append(append(openapi3.Parameters{}, item.Parameters...), op.Parameters...) {
				if p.Value.In == "path" {
					declared[p.Value.Name] = true
				}
			}
			for _, m := range pathParam.FindAllStringSubmatch(path, -1) {
				if !declared[m[1]] {
					report("path-parameters-defined", at, "%s does not declare path parameter %s", where, m[1])
				}
			}
		}
	}
	for _, kind := range []string{"schemas", "parameters", "responses", "headers"} {
		for _, name := range componentNames(doc, kind) {
			ref := "#/components/" + kind + "/" + name
			if !strings.Contains(string(OpenAPI), "'"+ref+"'") {
				report("no-unused-components", ref, "never referred to")
			}
		}
	}
	if len(problems) > 0 {
		t.Fatalf("docs/openapi.yaml breaks %d rule(s):\n%s", len(problems), strings.Join(problems, "\n"))
	}
}

func componentNames(doc *openapi3.T, kind string) []string {
	var names []string
	switch kind {
	case "schemas":
		for n := range doc.Components.Schemas {
			names = append(names, n)
		}
	case "parameters":
		for n := range doc.Components.Parameters {
			names = append(names, n)
		}
	case "responses":
		for n := range doc.Components.Responses {
			names = append(names, n)
		}
	case "headers":
		for n := range doc.Components.Headers {
			names = append(names, n)
		}
	}
	return names
}

// lintIgnores reads .redocly.lint-ignore.yaml: rule to JSON pointers.
func lintIgnores(t *testing.T) map[string][]string {
	b, err := os.ReadFile(".redocly.lint-ignore.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var file map[string]map[string][]string
	if err := yaml.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	return file["openapi.yaml"]
}
