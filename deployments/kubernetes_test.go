package deployments

import (
	"fmt"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/eventq/eventq/internal/config"
)

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
			// The Secret's placeholders stop the processes until an operator edits them.
			if _, err := config.Load(environ(env)); err == nil || !strings.Contains(err.Error(), config.Placeholder) {
				t.Errorf("%s: config.Load with the Secret's placeholders: %v, want them refused", where, err)
			}
			if _, err := config.Load(environ(edited(env))); err != nil {
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
		// Readiness must not follow the database: the api keeps tracking through an outage
		// (the spool), which it could not if every replica left the Service.
		checkProbe(t, where, "readinessProbe", c.ReadinessProbe, c, "/healthz", port)
		checkProbe(t, where, "livenessProbe", c.LivenessProbe, c, "/healthz", port)
		// /metrics is on METRICS_ADDR, the container port "metrics", which no Service exposes.
		metrics, _ := strconv.Atoi(listenPort(t, where, "METRICS_ADDR", env))
		if got, ok := namedPort(c, "metrics"); !ok || got != metrics || metrics == port {
			t.Errorf("%s: container port \"metrics\" is %d, METRICS_ADDR's port is %d (HTTP_ADDR's %d)", where, got, metrics, port)
		}
		checkScrape(t, where, api.obj.Spec.Template.Metadata.Annotations, metrics)

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

// edited is env with every placeholder replaced, as an operator fills in the Secret.
func edited(env map[string]string) map[string]string {
	out := make(map[string]string, len(env))
	for k, v := range env {
		out[k] = strings.ReplaceAll(v, config.Placeholder, "b1d4c07e9f2a5386")
	}
	return out
}
