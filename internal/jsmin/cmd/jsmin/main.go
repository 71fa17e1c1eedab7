// Command jsmin minifies one script: jsmin SRC DST. `go generate ./routes` runs it.
package main

import (
	"fmt"
	"os"

	"github.com/eventq/eventq/internal/jsmin"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: jsmin SRC DST")
		os.Exit(2)
	}
	src, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "jsmin:", err)
		os.Exit(1)
	}
	out, err := jsmin.Minify(src)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := os.WriteFile(os.Args[2], out, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "jsmin:", err)
		os.Exit(1)
	}
}
