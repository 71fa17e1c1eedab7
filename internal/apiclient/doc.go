// Package apiclient is a client of eventq's HTTP API generated from docs/openapi.yaml by
// oapi-codegen, a maintained generator no one here wrote: tests drive the api through it, so
// that the document is proved true by code that only knows the document. It covers the
// members, products, entitlements and operator routes (the tags in oapi-codegen.yaml).
package apiclient

//go:generate go tool oapi-codegen -config oapi-codegen.yaml ../../docs/openapi.yaml
