// Package docs holds eventq's reference documents; the api serves the OpenAPI description from
// here (GET /openapi.yaml), so the file in the repository and the served one are the same.
package docs

import _ "embed"

// OpenAPI is docs/openapi.yaml: the OpenAPI 3.1 description of every HTTP endpoint.
//
//go:embed openapi.yaml
var OpenAPI []byte
