// Package jsmin minifies the browser scripts the api serves, at build time (go generate), with
// esbuild's Go API: no Node.js or npm on the build machine.
package jsmin

import (
	"errors"
	"fmt"

	"github.com/evanw/esbuild/pkg/api"
)

// Minify returns src minified (whitespace, identifiers, syntax) for browsers from 2017 on
// (ES2017). Comments starting with /*! are dropped too: the source carries the documentation.
func Minify(src []byte) ([]byte, error) {
	r := api.Transform(string(src), api.TransformOptions{
		MinifyWhitespace:  true,
		MinifyIdentifiers: true,
		MinifySyntax:      true,
		Target:            api.ES2017,
		LegalComments:     api.LegalCommentsNone,
		Charset:           api.CharsetUTF8,
	})
	if len(r.Errors) > 0 {
		var errs []error
		for _, m := range r.Errors {
			errs = append(errs, fmt.Errorf("%s", m.Text))
		}
		return nil, fmt.Errorf("jsmin: %w", errors.Join(errs...))
	}
	return r.Code, nil
}
