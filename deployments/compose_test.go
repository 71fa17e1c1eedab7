package deployments

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/eventq/eventq/internal/config"
)

// --- docker compose -----------------------------------------------------------------------

// stringList is a compose command: a list, or a string split on spaces.
type stringList []string

func (s *stringList) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*s = strings.Fields(n.Value)
		return nil
	}
	var l []string
	err := n.Decode(&l)
	*s = l
	return err
}

// envMap is a compose environment: a mapping or a list of KEY=value.
type envMap map[string]string

func (e *envMap) UnmarshalYAML(n *yaml.Node) error {
	*e = envMap{}
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			v := n.Content[i+1]
			if v.Tag == "!!null" {
				(*e)[n.Content[i].Value] = ""
			} else {
				(*e)[n.Content[i].Value] = v.Value
			}
		}
	case yaml.SequenceNode:
		for _, item := range n.Content {
			k, v, _ := strings.Cut(item.Value, "=")
			(*e)[k] = v
		}
	default:
		return fmt.Errorf("line %d: environment must be a mapping or a list", n.Line)
	}
	return nil
}

// composePort is the container side of a ports entry.
type composePort string

func (p *composePort) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		parts := strings.Split(n.Value, ":")
		*p = composePort(strings.TrimSuffix(parts[len(parts)-1], "/tcp"))
	case yaml.MappingNode:
		var long struct {
			Target string `yaml:"target"`
		}
		if err := n.Decode(&long); err != nil {
			return err
		}
		*p = composePort(long.Target)
	default:
		return fmt.Errorf("line %d: bad ports entry", n.Line)
	}
	return nil
}

// dependsOn maps a service to its condition.
type dependsOn map[string]string

func (d *dependsOn) UnmarshalYAML(n *yaml.Node) error {
	*d = dependsOn{}
	switch n.Kind {
	case yaml.SequenceNode:
		for _, item := range n.Content {
			(*d)[item.Value] = "service_started"
		}
	case yaml.MappingNode:
		var long map[string]struct {
			Condition string `yaml:"condition"`
		}
		if err := n.Decode(&long); err != nil {
			return err
		}
		for k, v := range long {
			(*d)[k] = v.Condition
			if v.Condition == "" {
				(*d)[k] = "service_started"
			}
		}
	}
	return nil
}

type composeService struct {
	Image string `yaml:"image"`
	Build struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
	} `yaml:"build"`
	Command     stringList    `yaml:"command"`
	Entrypoint  stringList    `yaml:"entrypoint"`
	Environment envMap        `yaml:"environment"`
	Ports       []composePort `yaml:"ports"`
	DependsOn   dependsOn     `yaml:"depends_on"`
	Restart     string        `yaml:"restart"`
}

// isEventq reports whether a compose service runs the eventq image.
func (s composeService) isEventq(image string) bool {
	return s.Build.Dockerfile != "" || s.Build.Context != "" || s.Image == image
}

type composeFile struct {
	doc      yamlDoc
	Services map[string]composeService `yaml:"services"`
}

func loadCompose(t *testing.T, docs []yamlDoc) []composeFile {
	t.Helper()
	var out []composeFile
	for _, d := range docs {
		if isKubernetesFile(d.file) {
			continue
		}
		cf := composeFile{doc: d}
		if err := d.node.Decode(&cf); err != nil {
			t.Errorf("%s: %v", d, err)
			continue
		}
		if len(cf.Services) == 0 {
			t.Errorf("%s: not a Kubernetes manifest (those live in kubernetes/) and no compose services", d)
			continue
		}
		out = append(out, cf)
	}
	if len(out) == 0 {
		t.Fatal("no docker-compose file under deployments/")
	}
	return out
}

var interpolation = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])([^}]*))?\}`)

// interpolate expands ${NAME}, ${NAME:-default} and the like as compose does when NAME is not
// set, and returns the names it referred to.
func interpolate(s string) (string, []string) {
	var names []string
	out := interpolation.ReplaceAllStringFunc(s, func(m string) string {
		sub := interpolation.FindStringSubmatch(m)
		names = append(names, sub[1])
		if strings.Contains(sub[2], "-") {
			return sub[3]
		}
		return ""
	})
	return out, names
}

// dependsClosure is every service svc waits for, directly or not.
func dependsClosure(services map[string]composeService, svc string) map[string]bool {
	seen := map[string]bool{}
	var walk func(string)
	walk = func(s string) {
		for dep := range services[s].DependsOn {
			if !seen[dep] {
				seen[dep] = true
				walk(dep)
			}
		}
	}
	walk(svc)
	return seen
}

func TestCompose(t *testing.T) {
	df := parseDockerfile(t)
	subcommands := eventqSubcommands(t)
	docs := loadYAML(t)
	image := kubernetesImage(t, loadObjects(t, docs))
	for _, cf := range loadCompose(t, docs) {
		eventq := map[string]composeService{}
		for name, s := range cf.Services {
			if !s.isEventq(image) {
				continue
			}
			where := fmt.Sprintf("%s: service %s", cf.doc.file, name)
			eventq[name] = s
			if s.Build.Dockerfile != "" {
				ctx := filepath.Join(filepath.Dir(cf.doc.file), s.Build.Context)
				got, _ := filepath.Abs(filepath.Join(ctx, s.Build.Dockerfile))
				if want, _ := filepath.Abs("Dockerfile"); got != want {
					t.Errorf("%s: builds %s, want deployments/Dockerfile", where, got)
				}
				if _, err := os.Stat(filepath.Join(ctx, "go.mod")); err != nil {
					t.Errorf("%s: build context %s is not the repository root", where, s.Build.Context)
				}
			}
			if s.Image != image {
				t.Errorf("%s: image %q, want %q as in deployments/kubernetes", where, s.Image, image)
			}
			argv := append(slices.Clip([]string(s.Entrypoint)), s.Command...)
			if len(s.Entrypoint) == 0 && len(s.Command) == 0 {
				argv = df.cmd
			}
			checkArgv(t, df, subcommands, where, argv)
		}
		for _, prog := range []string{"api", "worker", "migrate"} {
			if _, ok := eventq[prog]; !ok {
				t.Errorf("%s: no eventq service %s", cf.doc.file, prog)
			}
		}

		for name, s := range eventq {
			where := fmt.Sprintf("%s: service %s", cf.doc.file, name)
			env := map[string]string{}
			for k, v := range s.Environment {
				if !knownVar(k) {
					t.Errorf("%s: environment variable %s: internal/config does not read it", where, k)
				}
				var refs []string
				env[k], refs = interpolate(v)
				for _, r := range refs {
					if !knownVar(r) {
						t.Errorf("%s: %s=%s passes through ${%s}, which internal/config does not read", where, k, v, r)
					}
				}
			}
			if _, err := config.Load(environ(env)); err != nil {
				t.Errorf("%s: config.Load rejects the environment: %v", where, err)
			}
			// The database and Redis are services started before this one.
			needs := []string{"DATABASE_URL"}
			if name != "migrate" {
				needs = append(needs, "REDIS_URL")
			}
			for _, k := range needs {
				host := ""
				if u := env[k]; strings.Contains(u, "@") {
					host = u[strings.LastIndex(u, "@")+1:]
				} else {
					host = u[strings.Index(u, "://")+3:]
				}
				host, _, _ = strings.Cut(host, "/")
				host, _, _ = strings.Cut(host, ":")
				if _, ok := cf.Services[host]; !ok {
					t.Errorf("%s: %s=%s: host %q is not a compose service", where, k, env[k], host)
				} else if !dependsClosure(cf.Services, name)[host] {
					t.Errorf("%s: does not wait for %s, the host of %s", where, host, k)
				}
			}

			switch name {
			case "api":
				port := listenPort(t, where, "HTTP_ADDR", env)
				if !slices.Contains(s.Ports, composePort(port)) {
					t.Errorf("%s: publishes %v, want HTTP_ADDR's port %s", where, s.Ports, port)
				}
			case "worker":
				if len(s.Ports) > 0 {
					port := listenPort(t, where, "WORKER_METRICS_ADDR", env)
					if !slices.Contains(s.Ports, composePort(port)) {
						t.Errorf("%s: publishes %v, want WORKER_METRICS_ADDR's port %s", where, s.Ports, port)
					}
				}
			case "migrate":
				argv := append(slices.Clip([]string(s.Entrypoint)), s.Command...)
				if len(argv) != 2 || path.Base(argv[0]) != "eventq" || argv[1] != "migrate" {
					t.Errorf("%s: command %q, want [eventq migrate]", where, argv)
				}
				if s.Restart != "" && s.Restart != "no" {
					t.Errorf("%s: restart %q: a one-shot must not restart", where, s.Restart)
				}
			}
			if name == "api" || name == "worker" {
				if c := s.DependsOn["migrate"]; c != "service_completed_successfully" {
					t.Errorf("%s: depends_on migrate condition %q, want service_completed_successfully", where, c)
				}
			}
		}
	}
}
