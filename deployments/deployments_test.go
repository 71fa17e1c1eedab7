package deployments

// No container engine or cluster runs in the test suite, so this test reads the deployment
// files instead: every YAML document must parse, and the Dockerfile, docker-compose.yml and the
// Kubernetes manifests must agree with each other and with internal/config on the image, the
// binaries and their subcommands, the environment variable names and values, and the ports.

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/eventq/eventq/internal/config"
)

// notDeployed lists, per target, the config.Variables that target legitimately leaves unset.
// Every other variable must be set somewhere in the target, so new configuration is not
// forgotten in the deployments.
var notDeployed = map[string]map[string]string{
	"kubernetes": {
		"PSP_API_BASE": "points the provider client at a fake provider (tests, local stacks); " +
			"a cluster talks to the real provider, the default",
		"PPROF_ADDR":       profilerOff,
		"BENCH_NOOP_ROUTE": benchOnly,
	},
	"compose": {
		"REDIS_CLUSTER_ADDRS": "compose runs one Redis server, not a cluster",
		"PPROF_ADDR":          profilerOff,
		"BENCH_NOOP_ROUTE":    benchOnly,
	},
}

// Reasons shared by both targets.
const (
	profilerOff = "the profiler is switched on by hand while investigating, not deployed"
	benchOnly   = "a route for make bench's HTTP floor, never deployed"
)

// defaultPath is the PATH of the distroless base image, where bare command names are looked up.
var defaultPath = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

var redisNamedURL = regexp.MustCompile(`^REDIS_[A-Z0-9][A-Z0-9_]*_URL$`)

// knownVar reports whether internal/config reads the environment variable name.
func knownVar(name string) bool {
	if slices.Contains(config.Variables, name) || redisNamedURL.MatchString(name) {
		return true
	}
	if rest, ok := strings.CutPrefix(name, "STRIPE_"); ok {
		return slices.Contains(config.Variables, "PSP_"+rest)
	}
	return false
}

// --- YAML loading -------------------------------------------------------------------------

// yamlDoc is one document of a YAML file under deployments/.
type yamlDoc struct {
	file  string // slash path relative to deployments/
	index int    // 1-based position in the file
	node  *yaml.Node
}

func (d yamlDoc) String() string { return fmt.Sprintf("%s (document %d)", d.file, d.index) }

// loadYAML parses every *.yaml and *.yml file under deployments/, document by document,
// except the Prometheus rules (prometheus/), which observability_test.go parses with
// Prometheus's own parser.
func loadYAML(t *testing.T) []yamlDoc {
	t.Helper()
	var docs []yamlDoc
	err := filepath.WalkDir(".", func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			if p == "prometheus" {
				return filepath.SkipDir
			}
			return nil
		}
		if ext := filepath.Ext(p); ext != ".yaml" && ext != ".yml" {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		dec := yaml.NewDecoder(f)
		for i := 1; ; i++ {
			var n yaml.Node
			if err := dec.Decode(&n); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Errorf("%s: document %d does not parse: %v", p, i, err)
				break
			}
			if len(n.Content) == 0 || n.Content[0].Tag == "!!null" {
				continue // an empty document, e.g. after a trailing ---
			}
			docs = append(docs, yamlDoc{file: filepath.ToSlash(p), index: i, node: &n})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("no YAML documents under deployments/")
	}
	return docs
}

func isKubernetesFile(file string) bool { return strings.HasPrefix(file, "kubernetes/") }

// --- tests --------------------------------------------------------------------------------

func TestEveryYAMLDocumentParses(t *testing.T) {
	for _, d := range loadYAML(t) {
		if !isKubernetesFile(d.file) {
			continue
		}
		var head struct {
			APIVersion string `yaml:"apiVersion"`
			Kind       string `yaml:"kind"`
		}
		if err := d.node.Decode(&head); err != nil || head.APIVersion == "" || head.Kind == "" {
			t.Errorf("%s: a Kubernetes document needs apiVersion and kind (err %v)", d, err)
		}
	}
}

// TestEnvironmentNames checks every variable set anywhere against internal/config (a typo
// fails), and that every variable config reads is set in each target unless notDeployed says
// why not.
func TestEnvironmentNames(t *testing.T) {
	docs := loadYAML(t)
	objs := loadObjects(t, docs)
	image := kubernetesImage(t, objs)
	set := map[string]map[string]bool{"kubernetes": {}, "compose": {}}
	for _, o := range objs {
		for k := range o.envData(t) {
			set["kubernetes"][k] = true
		}
		for _, c := range o.Spec.Template.Spec.Containers {
			for _, e := range c.Env {
				set["kubernetes"][e.Name] = true
			}
		}
	}
	for _, cf := range loadCompose(t, docs) {
		for _, s := range cf.Services {
			if !s.isEventq(image) {
				continue // redis, postgres: their own variables
			}
			for k := range s.Environment {
				set["compose"][k] = true
			}
		}
	}
	for target, names := range set {
		for k := range names {
			if !knownVar(k) {
				t.Errorf("%s sets %s, which internal/config does not read (config.Variables, REDIS_<NAME>_URL, STRIPE_* aliases)", target, k)
			}
		}
		for _, v := range config.Variables {
			reason, exempt := notDeployed[target][v]
			switch {
			case !names[v] && !exempt:
				t.Errorf("%s does not set %s: add it, or list it in notDeployed with the reason", target, v)
			case names[v] && exempt:
				t.Errorf("%s sets %s, which notDeployed says it does not (%s): remove one", target, v, reason)
			}
		}
	}
	for target, m := range notDeployed {
		for v := range m {
			if !slices.Contains(config.Variables, v) {
				t.Errorf("notDeployed[%s] lists %s, which is not in config.Variables", target, v)
			}
		}
	}
}

// Every test file a deployment file cites (as the alert rules cite the test that checks them)
// exists, relative to the repository.
func TestCitedTestFilesExist(t *testing.T) {
	cited := regexp.MustCompile(`[\w./-]+_test\.go`)
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(path, ".go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, name := range cited.FindAllString(string(b), -1) {
			if _, err := os.Stat(filepath.Join("..", name)); err != nil {
				t.Errorf("%s cites %s, which does not exist", path, name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
