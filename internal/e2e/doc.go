// Package e2e holds end-to-end tests that run the real api and worker binaries as separate
// processes against real Redis and a real database, so that processes can be stopped, killed
// and restarted the way operators and crashes do it.
package e2e
