// Package deployments holds eventq's deployment files: the Dockerfile, docker-compose.yml and
// the Kubernetes manifests in kubernetes/. It has no code; its test parses every file and
// checks that image, binaries, environment variable names and ports agree with each other and
// with internal/config, since no container engine or cluster runs in the test suite.
package deployments
