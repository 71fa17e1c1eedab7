package testenv

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
)

// initdbArgs are the options every test cluster is initialised with.
var initdbArgs = []string{"-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"}

// initdbRuns counts the initdb runs of this process, for the test of the cache.
var initdbRuns atomic.Int64

// freshDataDir fills dst (which must not exist) with a newly initialised, never started
// Postgres data directory, running the commands with attr (as the postgres user when root).
//
// initdb costs more CPU than anything else in starting a test server, and every package's
// tests start one, so its output is made once per machine and Postgres installation and
// copied: a directory under os.TempDir() named after the initdb binary (path, size and
// modification time), the options and the user. It is made complete under another name and
// renamed into place, so a reader never sees half of it; processes racing to make it each
// make their own and all but one throw theirs away.
func freshDataDir(bin, dst string, attr *syscall.SysProcAttr) error {
	initdb := filepath.Join(bin, "initdb")
	fi, err := os.Stat(initdb)
	if err != nil {
		return err
	}
	key := sha256.Sum256(fmt.Appendf(nil, "%s %d %d %v %d", initdb, fi.Size(), fi.ModTime().UnixNano(), initdbArgs, os.Geteuid()))
	cache := filepath.Join(os.TempDir(), "eventq-pg-initdb-"+hex.EncodeToString(key[:8]))
	if _, err := os.Stat(filepath.Join(cache, "data", "PG_VERSION")); err != nil {
		if err := makeDataDir(initdb, cache, attr); err != nil {
			return err
		}
	}
	// cp -a keeps the modes Postgres insists on (0700) and, run as the postgres user, the owner.
	cp := exec.Command("cp", "-a", filepath.Join(cache, "data"), dst)
	cp.SysProcAttr = attr
	if out, err := cp.CombinedOutput(); err != nil {
		return fmt.Errorf("copy the initialised data directory: %v: %s", err, out)
	}
	return nil
}

// makeDataDir runs initdb into a new directory and renames it to cache, unless another
// process got there first.
func makeDataDir(initdb, cache string, attr *syscall.SysProcAttr) error {
	tmp, err := os.MkdirTemp(filepath.Dir(cache), filepath.Base(cache)+"-making-")
	if err != nil {
		return err
	}
	if c := attr.Credential; c != nil {
		if err := os.Chown(tmp, int(c.Uid), int(c.Gid)); err != nil {
			os.RemoveAll(tmp)
			return err
		}
	}
	initdbRuns.Add(1)
	cmd := exec.Command(initdb, append([]string{"-D", filepath.Join(tmp, "data")}, initdbArgs...)...)
	cmd.SysProcAttr = attr
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("initdb: %v: %s", err, out)
	}
	if err := os.Rename(tmp, cache); err != nil {
		os.RemoveAll(tmp) // another process renamed its copy first: use that one
		if _, statErr := os.Stat(filepath.Join(cache, "data", "PG_VERSION")); statErr != nil {
			return fmt.Errorf("keep the initialised data directory: %w", err)
		}
	}
	return nil
}
