package deployments

// No container engine or cluster runs in the test suite, so this test reads the deployment
// files instead: every YAML document must parse, and the Dockerfile, docker-compose.yml and the
// Kubernetes manifests must agree with each other and with internal/config on the image, the
// binaries and their subcommands, the environment variable names and values, and the ports.

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/build"
	"io"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
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
	},
	"compose": {
		"REDIS_CLUSTER_ADDRS": "compose runs one Redis server, not a cluster",
	},
}

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

// loadYAML parses every *.yaml and *.yml file under deployments/, document by document.
func loadYAML(t *testing.T) []yamlDoc {
	t.Helper()
	var docs []yamlDoc
	err := filepath.WalkDir(".", func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
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

// --- Kubernetes ---------------------------------------------------------------------------

type meta struct {
	Name        string            `yaml:"name"`
	Namespace   string            `yaml:"namespace"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// portRef is an int-or-string port: a number or the name of a container port.
type portRef string

func (p *portRef) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: a port must be a number or a name", n.Line)
	}
	*p = portRef(n.Value)
	return nil
}

type probe struct {
	HTTPGet *struct {
		Path string  `yaml:"path"`
		Port portRef `yaml:"port"`
	} `yaml:"httpGet"`
}

type keyRef struct {
	Name string `yaml:"name"`
	Key  string `yaml:"key"`
}

type container struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Ports   []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	Env []struct {
		Name      string `yaml:"name"`
		Value     any    `yaml:"value"`
		ValueFrom *struct {
			SecretKeyRef    *keyRef `yaml:"secretKeyRef"`
			ConfigMapKeyRef *keyRef `yaml:"configMapKeyRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	EnvFrom []struct {
		ConfigMapRef *keyRef `yaml:"configMapRef"`
		SecretRef    *keyRef `yaml:"secretRef"`
	} `yaml:"envFrom"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	Resources      struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	SecurityContext *securityContext `yaml:"securityContext"`
}

type securityContext struct {
	RunAsNonRoot             *bool  `yaml:"runAsNonRoot"`
	RunAsUser                *int64 `yaml:"runAsUser"`
	ReadOnlyRootFilesystem   *bool  `yaml:"readOnlyRootFilesystem"`
	AllowPrivilegeEscalation *bool  `yaml:"allowPrivilegeEscalation"`
}

type podTemplate struct {
	Metadata meta `yaml:"metadata"`
	Spec     struct {
		RestartPolicy   string           `yaml:"restartPolicy"`
		SecurityContext *securityContext `yaml:"securityContext"`
		InitContainers  []container      `yaml:"initContainers"`
		Containers      []container      `yaml:"containers"`
	} `yaml:"spec"`
}

type servicePort struct {
	Name       string  `yaml:"name"`
	Port       int     `yaml:"port"`
	TargetPort portRef `yaml:"targetPort"`
}

type hpaMetric struct {
	Type     string `yaml:"type"`
	Resource struct {
		Name string `yaml:"name"`
	} `yaml:"resource"`
}

type object struct {
	doc        yamlDoc
	APIVersion string         `yaml:"apiVersion"`
	Kind       string         `yaml:"kind"`
	Metadata   meta           `yaml:"metadata"`
	Data       map[string]any `yaml:"data"`
	StringData map[string]any `yaml:"stringData"`
	Resources  []string       `yaml:"resources"` // Kustomization
	Spec       struct {
		Replicas       *int           `yaml:"replicas"`
		Selector       map[string]any `yaml:"selector"`
		Template       podTemplate    `yaml:"template"`
		BackoffLimit   *int           `yaml:"backoffLimit"`
		Ports          []servicePort  `yaml:"ports"`
		ScaleTargetRef struct {
			Kind string `yaml:"kind"`
			Name string `yaml:"name"`
		} `yaml:"scaleTargetRef"`
		MinReplicas *int        `yaml:"minReplicas"`
		MaxReplicas int         `yaml:"maxReplicas"`
		Metrics     []hpaMetric `yaml:"metrics"`
	} `yaml:"spec"`
}

func (o *object) String() string { return fmt.Sprintf("%s %s in %s", o.Kind, o.Metadata.Name, o.doc) }

// envData is a ConfigMap's data or a Secret's stringData and data, as environment variables.
func (o *object) envData(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, m := range []map[string]any{o.Data, o.StringData} {
		for k, v := range m {
			s, ok := v.(string)
			if !ok {
				t.Errorf("%s: %s: value %v must be a (quoted) string", o, k, v)
			}
			out[k] = s
		}
	}
	return out
}

// workload is a pod template of a Deployment or Job with the program each container runs.
type workload struct {
	obj   *object
	progs []string            // per container of obj.Spec.Template.Spec.Containers
	envs  []map[string]string // per container: the environment it sees
}

func (w workload) runs(prog string) bool { return slices.Contains(w.progs, prog) }

func (w workload) container(prog string) (*container, map[string]string) {
	i := slices.Index(w.progs, prog)
	return &w.obj.Spec.Template.Spec.Containers[i], w.envs[i]
}

func containerPort(c *container, ref portRef) (int, bool) {
	if n, err := strconv.Atoi(string(ref)); err == nil {
		return n, true
	}
	for _, p := range c.Ports {
		if p.Name == string(ref) {
			return p.ContainerPort, true
		}
	}
	return 0, false
}

func namedPort(c *container, name string) (int, bool) {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort, true
		}
	}
	return 0, false
}

// listenPort is the port of a host:port variable; a loopback host is an error in a container,
// where probes and peers connect from outside.
func listenPort(t *testing.T, where, name string, env map[string]string) string {
	t.Helper()
	v, ok := env[name]
	if !ok {
		t.Errorf("%s: %s is not set", where, name)
		return ""
	}
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		t.Errorf("%s: %s=%q: %v", where, name, v, err)
		return ""
	}
	if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
		t.Errorf("%s: %s=%q listens on loopback only: unreachable from outside the container", where, name, v)
	}
	return port
}

func loadObjects(t *testing.T, docs []yamlDoc) []*object {
	t.Helper()
	var objs []*object
	names := map[string]string{}
	for _, d := range docs {
		if !isKubernetesFile(d.file) {
			continue
		}
		o := &object{doc: d}
		if err := d.node.Decode(o); err != nil {
			t.Errorf("%s: %v", d, err)
			continue
		}
		if o.APIVersion == "" || o.Kind == "" {
			t.Errorf("%s: apiVersion and kind are required", d)
			continue
		}
		if o.Kind != "Kustomization" {
			if o.Metadata.Name == "" {
				t.Errorf("%s: metadata.name is required", d)
			}
			if o.Metadata.Namespace != "" {
				t.Errorf("%s: metadata.namespace %q: the manifests are namespace-agnostic (kubectl -n)", d, o.Metadata.Namespace)
			}
			key := o.Kind + "/" + o.Metadata.Name
			if prev, dup := names[key]; dup {
				t.Errorf("%s: %s is also defined in %s", d, key, prev)
			}
			names[key] = d.String()
		}
		objs = append(objs, o)
	}
	return objs
}

func find(objs []*object, kind, name string) *object {
	for _, o := range objs {
		if o.Kind == kind && o.Metadata.Name == name {
			return o
		}
	}
	return nil
}

func subset(sub, super map[string]string) bool {
	for k, v := range sub {
		if super[k] != v {
			return false
		}
	}
	return len(sub) > 0
}

func stringMap(m any) map[string]string {
	out := map[string]string{}
	mm, _ := m.(map[string]any)
	for k, v := range mm {
		out[k] = fmt.Sprint(v)
	}
	return out
}

// containerEnv is the environment a container sees, and whether every reference resolved.
func containerEnv(t *testing.T, objs []*object, where string, c *container) map[string]string {
	t.Helper()
	env := map[string]string{}
	from := map[string]string{}
	for _, ef := range c.EnvFrom {
		var kind string
		var ref *keyRef
		switch {
		case ef.ConfigMapRef != nil:
			kind, ref = "ConfigMap", ef.ConfigMapRef
		case ef.SecretRef != nil:
			kind, ref = "Secret", ef.SecretRef
		default:
			t.Errorf("%s: envFrom entry without configMapRef or secretRef", where)
			continue
		}
		src := find(objs, kind, ref.Name)
		if src == nil {
			t.Errorf("%s: envFrom %s %q is not defined in deployments/kubernetes", where, kind, ref.Name)
			continue
		}
		for k, v := range src.envData(t) {
			if prev, dup := from[k]; dup {
				t.Errorf("%s: %s is set by both %s and %s %s: keep each variable in one place", where, k, prev, kind, ref.Name)
			}
			from[k] = kind + " " + ref.Name
			env[k] = v
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			s, ok := e.Value.(string)
			if !ok && e.Value != nil {
				t.Errorf("%s: env %s: value %v must be a (quoted) string", where, e.Name, e.Value)
			}
			env[e.Name] = s
		case e.ValueFrom.SecretKeyRef != nil || e.ValueFrom.ConfigMapKeyRef != nil:
			kind, ref := "Secret", e.ValueFrom.SecretKeyRef
			if ref == nil {
				kind, ref = "ConfigMap", e.ValueFrom.ConfigMapKeyRef
			}
			src := find(objs, kind, ref.Name)
			if src == nil {
				t.Errorf("%s: env %s: %s %q is not defined", where, e.Name, kind, ref.Name)
				continue
			}
			v, ok := src.envData(t)[ref.Key]
			if !ok {
				t.Errorf("%s: env %s: %s %q has no key %q", where, e.Name, kind, ref.Name, ref.Key)
			}
			env[e.Name] = v
		}
	}
	return env
}

func environ(env map[string]string) []string {
	var out []string
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

func checkProbe(t *testing.T, where, which string, p *probe, c *container, path string, want int) {
	t.Helper()
	if p == nil || p.HTTPGet == nil {
		t.Errorf("%s: no %s httpGet %s", where, which, path)
		return
	}
	if p.HTTPGet.Path != path {
		t.Errorf("%s: %s path %q, want %q", where, which, p.HTTPGet.Path, path)
	}
	if port, ok := containerPort(c, p.HTTPGet.Port); !ok || port != want {
		t.Errorf("%s: %s port %q is %d, want the container port %d", where, which, p.HTTPGet.Port, port, want)
	}
}

func checkScrape(t *testing.T, where string, ann map[string]string, port int) {
	t.Helper()
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/path"] != "/metrics" ||
		ann["prometheus.io/port"] != strconv.Itoa(port) {
		t.Errorf("%s: pod annotations %v: want prometheus.io/scrape \"true\", path /metrics, port %d", where, ann, port)
	}
}

func kubernetesImage(t *testing.T, objs []*object) string {
	t.Helper()
	for _, o := range objs {
		for _, c := range o.Spec.Template.Spec.Containers {
			return c.Image
		}
	}
	t.Fatal("no container in deployments/kubernetes")
	return ""
}

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

func TestKubernetes(t *testing.T) {
	df := parseDockerfile(t)
	subcommands := eventqSubcommands(t)
	objs := loadObjects(t, loadYAML(t))
	image := kubernetesImage(t, objs)
	uid, _, _ := strings.Cut(df.user, ":")
	if image != normalizeImage(df.tag) && normalizeImage(image) != normalizeImage(df.tag) {
		t.Errorf("kubernetes image %q is not the one the Dockerfile's build command tags (%q)", image, df.tag)
	}

	var workloads []workload
	for _, o := range objs {
		switch o.Kind {
		case "Deployment", "StatefulSet", "DaemonSet", "Job":
		default:
			continue
		}
		w := workload{obj: o}
		pod := &o.Spec.Template
		if len(pod.Spec.Containers) == 0 {
			t.Errorf("%s: no containers", o)
		}
		if o.Kind != "Job" {
			sel := stringMap(o.Spec.Selector["matchLabels"])
			if !subset(sel, pod.Metadata.Labels) {
				t.Errorf("%s: selector %v does not match the pod labels %v", o, sel, pod.Metadata.Labels)
			}
		}
		podSC := pod.Spec.SecurityContext
		for i := range pod.Spec.Containers {
			c := &pod.Spec.Containers[i]
			where := fmt.Sprintf("%s, container %s", o, c.Name)
			if c.Image != image {
				t.Errorf("%s: image %q, want %q like every eventq container", where, c.Image, image)
			}
			argv := c.Command
			if len(argv) == 0 {
				argv = df.cmd
			}
			argv = append(slices.Clip(argv), c.Args...)
			w.progs = append(w.progs, checkArgv(t, df, subcommands, where, argv))

			env := containerEnv(t, objs, where, c)
			w.envs = append(w.envs, env)
			for k := range env {
				if !knownVar(k) {
					t.Errorf("%s: environment variable %s: internal/config does not read it", where, k)
				}
			}
			if _, err := config.Load(environ(env)); err != nil {
				t.Errorf("%s: config.Load rejects the environment: %v", where, err)
			}
			if u := env["DATABASE_URL"]; !strings.HasPrefix(u, "postgres://") && !strings.HasPrefix(u, "postgresql://") {
				t.Errorf("%s: DATABASE_URL %q: replicas share one database, so it must be Postgres", where, u)
			}

			if c.Resources.Requests["cpu"] == "" || c.Resources.Requests["memory"] == "" {
				t.Errorf("%s: resources.requests needs cpu and memory (the HPA scales on CPU requests)", where)
			}
			if c.Resources.Limits["memory"] == "" {
				t.Errorf("%s: resources.limits.memory is not set", where)
			}
			sc := c.SecurityContext
			nonRoot := (sc != nil && sc.RunAsNonRoot != nil && *sc.RunAsNonRoot) ||
				(podSC != nil && podSC.RunAsNonRoot != nil && *podSC.RunAsNonRoot)
			if !nonRoot {
				t.Errorf("%s: runAsNonRoot: true is not set", where)
			}
			for _, s := range []*securityContext{podSC, sc} {
				if s != nil && s.RunAsUser != nil && strconv.FormatInt(*s.RunAsUser, 10) != uid {
					t.Errorf("%s: runAsUser %d, but the image's USER is %s", where, *s.RunAsUser, df.user)
				}
			}
			if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("%s: securityContext.readOnlyRootFilesystem: true is not set", where)
			}
			if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				t.Errorf("%s: securityContext.allowPrivilegeEscalation: false is not set", where)
			}
		}
		workloads = append(workloads, w)
	}

	byProg := func(prog, kind string) *workload {
		var found []workload
		for _, w := range workloads {
			if w.runs(prog) && w.obj.Kind == kind {
				found = append(found, w)
			}
		}
		if len(found) != 1 {
			t.Errorf("want exactly one %s running %s, found %d", kind, prog, len(found))
			return nil
		}
		return &found[0]
	}

	// The api: HTTP_ADDR's port is the container port "http", the probes' and the Service's.
	if api := byProg("api", "Deployment"); api != nil {
		c, env := api.container("api")
		where := api.obj.String()
		if r := api.obj.Spec.Replicas; r == nil || *r < 2 {
			t.Errorf("%s: want at least 2 replicas", where)
		}
		port, _ := strconv.Atoi(listenPort(t, where, "HTTP_ADDR", env))
		if got, ok := namedPort(c, "http"); !ok || got != port {
			t.Errorf("%s: container port \"http\" is %d, HTTP_ADDR's port is %d", where, got, port)
		}
		checkProbe(t, where, "readinessProbe", c.ReadinessProbe, c, "/readyz", port)
		checkProbe(t, where, "livenessProbe", c.LivenessProbe, c, "/healthz", port)
		checkScrape(t, where, api.obj.Spec.Template.Metadata.Annotations, port)

		services := 0
		for _, o := range objs {
			if o.Kind != "Service" {
				continue
			}
			sel := stringMap(o.Spec.Selector)
			if !subset(sel, api.obj.Spec.Template.Metadata.Labels) {
				if !slices.ContainsFunc(workloads, func(w workload) bool { return subset(sel, w.obj.Spec.Template.Metadata.Labels) }) {
					t.Errorf("%s: selector %v matches no workload", o, sel)
				}
				continue
			}
			services++
			if len(o.Spec.Ports) == 0 {
				t.Errorf("%s: no ports", o)
			}
			for _, p := range o.Spec.Ports {
				if got, ok := containerPort(c, p.TargetPort); !ok || got != port {
					t.Errorf("%s: port %d targets %q = %d, want the api's HTTP_ADDR port %d", o, p.Port, p.TargetPort, got, port)
				}
			}
			if !slices.ContainsFunc(o.Spec.Ports, func(p servicePort) bool { return p.Port == 80 }) {
				t.Errorf("%s: want port 80", o)
			}
		}
		if services != 1 {
			t.Errorf("want one Service in front of the api, found %d", services)
		}

		hpas := 0
		for _, o := range objs {
			if o.Kind != "HorizontalPodAutoscaler" {
				continue
			}
			hpas++
			if o.APIVersion != "autoscaling/v2" {
				t.Errorf("%s: apiVersion %s, want autoscaling/v2", o, o.APIVersion)
			}
			ref := o.Spec.ScaleTargetRef
			if find(objs, ref.Kind, ref.Name) == nil {
				t.Errorf("%s: scaleTargetRef %s/%s is not defined", o, ref.Kind, ref.Name)
			}
			if ref.Kind != "Deployment" || ref.Name != api.obj.Metadata.Name {
				t.Errorf("%s: scales %s/%s, want the api Deployment %s", o, ref.Kind, ref.Name, api.obj.Metadata.Name)
			}
			if m := o.Spec.MinReplicas; m == nil || *m != 2 || o.Spec.MaxReplicas != 10 {
				t.Errorf("%s: want minReplicas 2, maxReplicas 10", o)
			}
			if !slices.ContainsFunc(o.Spec.Metrics, func(m hpaMetric) bool {
				return m.Type == "Resource" && m.Resource.Name == "cpu"
			}) {
				t.Errorf("%s: want a cpu Resource metric", o)
			}
		}
		if hpas != 1 {
			t.Errorf("want one HorizontalPodAutoscaler for the api, found %d", hpas)
		}
	}

	// The worker: WORKER_METRICS_ADDR's port is the container port "metrics" and the liveness
	// probe's.
	if worker := byProg("worker", "Deployment"); worker != nil {
		c, env := worker.container("worker")
		where := worker.obj.String()
		if r := worker.obj.Spec.Replicas; r == nil || *r < 2 {
			t.Errorf("%s: want at least 2 replicas", where)
		}
		port, _ := strconv.Atoi(listenPort(t, where, "WORKER_METRICS_ADDR", env))
		if got, ok := namedPort(c, "metrics"); !ok || got != port {
			t.Errorf("%s: container port \"metrics\" is %d, WORKER_METRICS_ADDR's port is %d", where, got, port)
		}
		checkProbe(t, where, "livenessProbe", c.LivenessProbe, c, "/healthz", port)
		checkScrape(t, where, worker.obj.Spec.Template.Metadata.Annotations, port)
	}

	// The migration Job runs `eventq migrate` and retries.
	var migrate *workload
	for i, w := range workloads {
		if w.obj.Kind != "Job" {
			continue
		}
		if !w.runs("eventq") {
			t.Errorf("%s: want the command [eventq migrate]", w.obj)
			continue
		}
		c, _ := w.container("eventq")
		if argv := append(slices.Clip(c.Command), c.Args...); len(argv) != 2 || argv[1] != "migrate" {
			t.Errorf("%s: command %q, want [eventq migrate]", w.obj, argv)
			continue
		}
		migrate = &workloads[i]
	}
	if migrate == nil {
		t.Error("no Job runs `eventq migrate`")
	} else {
		if p := migrate.obj.Spec.Template.Spec.RestartPolicy; p != "OnFailure" {
			t.Errorf("%s: restartPolicy %q, want OnFailure", migrate.obj, p)
		}
		if b := migrate.obj.Spec.BackoffLimit; b == nil || *b < 1 {
			t.Errorf("%s: want a backoffLimit of at least 1", migrate.obj)
		}
	}

	// Every eventq container gets the same configuration.
	var sources string
	for _, w := range workloads {
		for _, c := range w.obj.Spec.Template.Spec.Containers {
			var refs []string
			for _, ef := range c.EnvFrom {
				if ef.ConfigMapRef != nil {
					refs = append(refs, "ConfigMap "+ef.ConfigMapRef.Name)
				}
				if ef.SecretRef != nil {
					refs = append(refs, "Secret "+ef.SecretRef.Name)
				}
			}
			sort.Strings(refs)
			got := strings.Join(refs, ", ")
			if sources == "" {
				sources = got
			} else if got != sources {
				t.Errorf("%s, container %s: envFrom %s, but other containers use %s", w.obj, c.Name, got, sources)
			}
		}
	}

	// kustomization.yaml lists every manifest except the Secret template.
	for _, k := range objs {
		if k.Kind != "Kustomization" {
			continue
		}
		dir := path.Dir(k.doc.file)
		files := map[string]bool{}
		secrets := map[string]bool{}
		for _, o := range objs {
			if o.Kind == "Kustomization" || path.Dir(o.doc.file) != dir {
				continue
			}
			files[path.Base(o.doc.file)] = true
			if o.Kind == "Secret" {
				secrets[path.Base(o.doc.file)] = true
			}
		}
		for _, r := range k.Resources {
			if !files[r] {
				t.Errorf("%s: resource %s is not a manifest in %s", k.doc, r, dir)
			}
			if secrets[r] {
				t.Errorf("%s: lists %s, a Secret template with placeholders: apply -k would overwrite the real Secret", k.doc, r)
			}
		}
		for f := range files {
			if !secrets[f] && !slices.Contains(k.Resources, f) {
				t.Errorf("%s: does not list %s", k.doc, f)
			}
		}
	}
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
