package deployments

import (
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"testing"

	"go.yaml.in/yaml/v3"
)

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
