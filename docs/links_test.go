package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

var (
	// mdLink is an inline Markdown link or image: [text](target) or [text](target "title").
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	// heading is an ATX heading line.
	heading = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	// fence opens or closes a code block, in which nothing is a link or a heading.
	fence = regexp.MustCompile("^\\s*(```|~~~)")
	// codeSpan is inline code, in which nothing is a link.
	codeSpan = regexp.MustCompile("`[^`]*`")
	// codeMapRow is a row of README's "Where the code is" table; its first cell names packages.
	codeMapRow = regexp.MustCompile("^\\| *(`[^|]*`) *\\|")
)

// prose returns the lines of a Markdown file outside code blocks.
func prose(b []byte) []string {
	var out []string
	in := false
	for _, l := range strings.Split(string(b), "\n") {
		if fence.MatchString(l) {
			in = !in
			continue
		}
		if !in {
			out = append(out, l)
		}
	}
	return out
}

// slug is GitHub's anchor for a heading: lower case, punctuation other than - and _ dropped,
// spaces to -.
func slug(h string) string {
	h = codeSpan.ReplaceAllStringFunc(h, func(s string) string { return strings.Trim(s, "`") })
	h = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the heading anchors of a Markdown file, numbered as GitHub numbers repeats
// (foo, foo-1, …).
func anchors(b []byte) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, l := range prose(b) {
		m := heading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// markdownFiles are the documents whose links are checked, relative to docs/.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no docs/*.md")
	}
	return append(files, filepath.Join("..", "README.md"))
}

// Every relative link of docs/*.md and README.md points to a file or directory of the
// repository, and a #fragment to a heading of the file it names.
func TestRelativeLinksResolve(t *testing.T) {
	cache := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := cache[path]; ok {
			return a
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		cache[path] = anchors(b)
		return cache[path]
	}
	links := 0
	for _, file := range markdownFiles(t) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range prose(b) {
			l = codeSpan.ReplaceAllString(l, "")
			for _, m := range mdLink.FindAllStringSubmatch(l, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				links++
				path, frag, _ := strings.Cut(target, "#")
				dest := file
				if path != "" {
					dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
					if _, err := os.Stat(dest); err != nil {
						t.Errorf("%s (prose line %d): link %q: no such file", file, i+1, target)
						continue
					}
				}
				if frag == "" || !strings.HasSuffix(dest, ".md") {
					continue
				}
				if !anchorsOf(dest)[frag] {
					t.Errorf("%s (prose line %d): link %q: %s has no heading #%s", file, i+1, target, dest, frag)
				}
			}
		}
	}
	if links == 0 {
		t.Fatal("no relative links found: the link pattern is broken")
	}
}

// Every package README's "Where the code is" table names is a directory with Go files. A
// cell names packages in backquotes; after the first, a bare name is under the first one's
// parent (`internal/auth`, `features` is internal/features).
func TestCodeMapPackagesExist(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	start := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == "## Where the code is" {
			start = i
		}
	}
	if start < 0 {
		t.Fatal(`README.md has no "## Where the code is" section`)
	}
	checked := 0
	for _, l := range lines[start+1:] {
		if strings.HasPrefix(l, "## ") {
			break
		}
		m := codeMapRow.FindStringSubmatch(l)
		if m == nil || strings.Contains(l, "---") {
			continue
		}
		parent := ""
		for j, cell := range codeSpan.FindAllString(m[1], -1) {
			name := strings.Trim(cell, "`")
			if j == 0 {
				if k := strings.LastIndex(name, "/"); k >= 0 {
					parent = name[:k+1]
				}
			} else if !strings.Contains(name, "/") {
				name = parent + name
			}
			dir := filepath.Join("..", filepath.FromSlash(name))
			gofiles, _ := filepath.Glob(filepath.Join(dir, "*.go"))
			if len(gofiles) == 0 {
				t.Errorf("README's code map names %s, which is not a directory with Go files", name)
			}
			checked++
		}
	}
	if checked < 10 {
		t.Fatalf("only %d packages found in README's code map: the table's format changed", checked)
	}
}

func TestSlugs(t *testing.T) {
	for h, want := range map[string]string{
		"Redis: persistence and what it holds": "redis-persistence-and-what-it-holds",
		"Metrics and logs":                     "metrics-and-logs",
		"`make run`":                           "make-run",
		"Checkout and return page":             "checkout-and-return-page",
		"Dashboard and alerts":                 "dashboard-and-alerts",
	} {
		if got := slug(h); got != want {
			t.Errorf("slug(%q) = %q, want %q", h, got, want)
		}
	}
}
