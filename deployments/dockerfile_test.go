package deployments

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/build"
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// --- Dockerfile ---------------------------------------------------------------------------

// dockerfile is what the test needs from deployments/Dockerfile.
type dockerfile struct {
	goVersion string            // ARG GO_VERSION's default
	tag       string            // the -t of the build command in the header comment
	packages  []string          // ./cmd/... packages built by `go build`
	binaries  map[string]string // program name -> absolute path in the final image
	path      []string          // PATH of the final image
	user      string            // USER of the final image
	env       map[string]string // ENV of the final image
	expose    []string          // EXPOSE of the final image
	cmd       []string          // CMD of the final image
}

// buildTag finds the image tag in the Dockerfile's `docker build ... -t NAME` comment.
var buildTag = regexp.MustCompile(`docker build .*-t\s+(\S+)`)

func parseDockerfile(t *testing.T) dockerfile {
	t.Helper()
	raw, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := dockerfile{binaries: map[string]string{}, env: map[string]string{}, path: defaultPath}
	built := map[string][]string{} // stage name -> binaries it builds (absolute paths)
	stage, final := "", false
	var instr []string
	var cont strings.Builder
	for _, line := range strings.Split(string(raw), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			if m := buildTag.FindStringSubmatch(trimmed); m != nil {
				df.tag = m[1]
			}
			continue
		}
		if s, ok := strings.CutSuffix(trimmed, `\`); ok {
			cont.WriteString(s + " ")
			continue
		}
		cont.WriteString(trimmed)
		if s := strings.TrimSpace(cont.String()); s != "" {
			instr = append(instr, s)
		}
		cont.Reset()
	}
	froms := 0
	for _, in := range instr {
		if strings.HasPrefix(strings.ToUpper(in), "FROM ") {
			froms++
		}
	}
	seen := 0
	for _, in := range instr {
		kw, rest, _ := strings.Cut(in, " ")
		rest = strings.TrimSpace(rest)
		fields := strings.Fields(rest)
		switch strings.ToUpper(kw) {
		case "ARG":
			if v, ok := strings.CutPrefix(rest, "GO_VERSION="); ok {
				df.goVersion = v
			}
		case "FROM":
			seen++
			final = seen == froms
			stage = strconv.Itoa(seen - 1) // stages can be named by index
			if i := slices.IndexFunc(fields, func(f string) bool { return strings.EqualFold(f, "AS") }); i >= 0 && i+1 < len(fields) {
				stage = fields[i+1]
			}
		case "RUN":
			i := slices.Index(fields, "go")
			if i < 0 || i+1 >= len(fields) || fields[i+1] != "build" {
				continue
			}
			out := ""
			var pkgs []string
			for j := i + 2; j < len(fields); j++ {
				f := fields[j]
				switch {
				case f == "&&" || f == ";":
					j = len(fields)
				case f == "-o" && j+1 < len(fields):
					out = fields[j+1]
					j++
				case strings.HasPrefix(f, "-o="):
					out = strings.TrimPrefix(f, "-o=")
				case strings.HasPrefix(f, "./"):
					pkgs = append(pkgs, f)
				}
			}
			df.packages = append(df.packages, pkgs...)
			for _, p := range pkgs {
				switch {
				case strings.HasSuffix(out, "/"):
					built[stage] = append(built[stage], out+path.Base(p))
				case out != "" && len(pkgs) == 1:
					built[stage] = append(built[stage], out)
				default:
					t.Errorf("Dockerfile: cannot tell where `go build` puts %s (-o %q)", p, out)
				}
			}
		case "COPY":
			if !final {
				continue
			}
			from := ""
			var args []string
			for _, f := range fields {
				if v, ok := strings.CutPrefix(f, "--from="); ok {
					from = v
				} else if !strings.HasPrefix(f, "--") {
					args = append(args, f)
				}
			}
			if from == "" || len(args) < 2 {
				continue
			}
			dest, srcs := args[len(args)-1], args[:len(args)-1]
			for _, src := range srcs {
				if !slices.Contains(built[from], src) {
					continue
				}
				to := dest
				if strings.HasSuffix(dest, "/") || len(srcs) > 1 {
					to = path.Join(dest, path.Base(src))
				}
				df.binaries[path.Base(to)] = to
			}
		case "USER":
			if final {
				df.user = rest
			}
		case "ENV":
			if !final {
				continue
			}
			for _, kv := range fields {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					t.Errorf("Dockerfile: ENV %q: use the KEY=value form", rest)
					continue
				}
				df.env[k] = v
				if k == "PATH" {
					df.path = strings.Split(v, ":")
				}
			}
		case "EXPOSE":
			if final {
				for _, f := range fields {
					df.expose = append(df.expose, strings.TrimSuffix(f, "/tcp"))
				}
			}
		case "CMD":
			if final {
				if err := json.Unmarshal([]byte(rest), &df.cmd); err != nil {
					t.Errorf("Dockerfile: CMD %s: use the exec (JSON) form: %v", rest, err)
				}
			}
		}
	}
	return df
}

// resolve returns the program an argv runs in the image, or an error naming the problem.
func (df dockerfile) resolve(argv []string) (string, error) {
	if len(argv) == 0 {
		return "", errors.New("empty command")
	}
	name := argv[0]
	if strings.Contains(name, "/") {
		for prog, p := range df.binaries {
			if p == name {
				return prog, nil
			}
		}
		return "", fmt.Errorf("%s is not a binary the Dockerfile installs (%v)", name, df.binaries)
	}
	p, ok := df.binaries[name]
	if !ok {
		return "", fmt.Errorf("%s is not a binary the Dockerfile installs (%v)", name, df.binaries)
	}
	if !slices.Contains(df.path, path.Dir(p)) {
		return "", fmt.Errorf("%s is installed at %s, which is not on the image's PATH", name, p)
	}
	return name, nil
}

// eventqSubcommands are the cobra command names defined in cmd/eventq.
func eventqSubcommands(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "cmd", "eventq", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	use := regexp.MustCompile(`Use:\s*"([a-z][a-z0-9-]*)`)
	cmds := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range use.FindAllStringSubmatch(string(src), -1) {
			cmds[m[1]] = true
		}
	}
	return cmds
}

// checkArgv checks that argv runs a binary of the image with a subcommand that exists, and
// returns the program's name.
func checkArgv(t *testing.T, df dockerfile, subcommands map[string]bool, where string, argv []string) string {
	t.Helper()
	prog, err := df.resolve(argv)
	if err != nil {
		t.Errorf("%s: command %q: %v", where, argv, err)
		return ""
	}
	if prog == "eventq" && len(argv) > 1 && !strings.HasPrefix(argv[1], "-") && !subcommands[argv[1]] {
		t.Errorf("%s: command %q: eventq has no subcommand %q", where, argv, argv[1])
	}
	return prog
}

// normalizeImage adds the implicit :latest tag.
func normalizeImage(image string) string {
	if image == "" || strings.Contains(image, "@") || strings.Contains(path.Base(image), ":") {
		return image
	}
	return image + ":latest"
}

func TestDockerfile(t *testing.T) {
	df := parseDockerfile(t)

	// Every program under cmd/ is built and installed.
	dirs, err := os.ReadDir(filepath.Join("..", "cmd"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		pkg, err := build.ImportDir(filepath.Join("..", "cmd", d.Name()), 0)
		if err != nil || pkg.Name != "main" {
			continue
		}
		if !slices.Contains(df.packages, "./cmd/"+d.Name()) {
			t.Errorf("Dockerfile: go build does not build ./cmd/%s", d.Name())
		}
		if _, ok := df.binaries[d.Name()]; !ok {
			t.Errorf("Dockerfile: the final image does not contain %s (installed: %v)", d.Name(), df.binaries)
		}
	}
	for _, p := range df.packages {
		if pkg, err := build.ImportDir(filepath.Join("..", filepath.FromSlash(p)), 0); err != nil || pkg.Name != "main" {
			t.Errorf("Dockerfile: go build %s: not a main package in the repository (%v)", p, err)
		}
	}

	uid, _, _ := strings.Cut(df.user, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("Dockerfile: USER %q: want a numeric non-root user, so that Kubernetes can verify runAsNonRoot", df.user)
	}
	if _, err := df.resolve(df.cmd); err != nil {
		t.Errorf("Dockerfile: CMD %q: %v", df.cmd, err)
	}
	for k := range df.env {
		if k != "PATH" && !knownVar(k) {
			t.Errorf("Dockerfile: ENV %s: internal/config does not read it", k)
		}
	}
	if addr, ok := df.env["HTTP_ADDR"]; ok {
		if _, port, err := net.SplitHostPort(addr); err != nil || !slices.Contains(df.expose, port) {
			t.Errorf("Dockerfile: ENV HTTP_ADDR=%s but EXPOSE %v", addr, df.expose)
		}
	}

	gomod, err := os.ReadFile(filepath.Join("..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	if m == nil || (df.goVersion != string(m[1]) && !strings.HasPrefix(df.goVersion, string(m[1])+".")) {
		t.Errorf("Dockerfile: ARG GO_VERSION=%s does not match go.mod's go %s", df.goVersion, m)
	}
}
