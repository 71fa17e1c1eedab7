// Package deployments holds eventq's deployment files: the Dockerfile, docker-compose.yml, the
// Kubernetes manifests in kubernetes/, the Grafana dashboard in grafana/ and the Prometheus
// alert rules in prometheus/. It has no code. Its tests parse every file and check that image,
// binaries, environment variable names and ports agree with each other and with
// internal/config, since no container engine or cluster runs in the test suite; and that every
// metric the dashboard and the rules name is served by the real api or worker (started on a
// test database, so the package is not in scripts/test.sh's database-free list).
package deployments
