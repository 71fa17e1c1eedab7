package testenv

import (
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
)

// The binaries of a suite share one Postgres server under SharedPostgresEnv: the first starts
// it and the others find it; the template is migrated once, copies made by two binaries at once
// do not trip over each other (only the lock file serialises them: each binary has its own
// mutex), and each binary drops its own databases and no other's.
func TestASharedServerIsStartedOnceAndEachBinaryDropsItsOwn(t *testing.T) {
	t.Setenv(SharedPostgresEnv, t.TempDir())
	first, err := packageServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(first.Stop) // what make test does at the end of the suite
	second, err := packageServer()
	if err != nil {
		t.Fatal(err)
	}
	if second.Port != first.Port || second.cmd != nil || !first.shared() || !second.shared() {
		t.Fatalf("the second binary's server: port %d (the first's %d), started one itself: %v", second.Port, first.Port, second.cmd != nil)
	}

	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 10 {
		for j, s := range []*Postgres{first, second} {
			wg.Go(func() {
				name := fmt.Sprintf("shared_%d_%d", j, i)
				if _, err := s.CreateMigratedDatabase(name); err != nil {
					errs <- fmt.Errorf("%s: %w", name, err)
					return
				}
				s.createdM.Lock()
				s.created = append(s.created, name)
				s.createdM.Unlock()
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var templates int
	Must(t, first.admin.QueryRow(`SELECT count(*) FROM pg_database WHERE datname LIKE 'eventq_template%'`).Scan(&templates))
	if templates != 1 {
		t.Errorf("%d template databases, want 1", templates)
	}

	list := func() string {
		names, err := names(first.admin, `SELECT datname FROM pg_database WHERE datname LIKE 'shared_%' ORDER BY 1`)
		Must(t, err)
		return strings.Join(names, " ")
	}
	second.release()
	var want []string
	for i := range 10 {
		want = append(want, fmt.Sprintf("shared_0_%d", i))
	}
	slices.Sort(want)
	if got := list(); got != strings.Join(want, " ") {
		t.Fatalf("after the second binary ended: %s; want only the first's", got)
	}
	if err := first.admin.Ping(); err != nil {
		t.Fatalf("the server stopped with the second binary: %v", err)
	}
	first.release()
	admin, err := sql.Open("pgx", first.URL("postgres"))
	Must(t, err)
	defer admin.Close()
	var left int
	Must(t, admin.QueryRow(`SELECT count(*) FROM pg_database WHERE datname LIKE 'shared_%'`).Scan(&left))
	if left != 0 {
		t.Fatalf("%d databases left after both binaries ended, want 0", left)
	}
}
