package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/testenv"
)

// lines splits printed JSON lines.
func lines(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == '\n' })
}

// sorted returns a sorted copy.
func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// holdAcks is a proxy in front of base that forwards everything but POST
// /api/platform/events/acks, which it holds until the client goes away: a consumer behind it
// prints its batch and then hangs before acknowledging it.
func holdAcks(t *testing.T, base string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ErrorLog = log.New(io.Discard, "", 0) // the killed client's requests are expected to fail
	ended := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/api/platform/events/acks" {
			io.Copy(io.Discard, r.Body) // so that the server notices the client going away
			select {
			case <-r.Context().Done():
			case <-ended:
			}
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(ended) }) // runs first
	return srv.URL
}

// testConsumeShared runs the --shared subtests of TestConsumeCommand.
func testConsumeShared(t *testing.T, a *consumeAPI, bins string) {
	ctx := context.Background()

	t.Run("--shared --once prints one leased batch and acknowledges it", func(t *testing.T) {
		tn := a.mustTenant(t)
		stored := a.track(t, tn, "s-1", 3)
		var out strings.Builder
		code, stderr := a.consume(ctx, &out, nil, "--url", a.base, "--token", tn.token, "--shared", "--once", "--batch", "2")
		if code != 0 || stderr != "" {
			t.Fatalf("exit %d, stderr %q", code, stderr)
		}
		if got := out.String(); got != strings.Join(stored[:2], "\n")+"\n" {
			t.Fatalf("stdout\n%s\nwant the first two events", got)
		}
		if n := a.queueLen(t, tn); n != 1 {
			t.Errorf("queue length %d, want 1 (the two acknowledged events trimmed)", n)
		}
	})

	t.Run("several --shared consumers print every event exactly once between them", func(t *testing.T) {
		tn := a.mustTenant(t)
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		outs := make([]*testenv.SyncBuffer, 3)
		done := make(chan int, len(outs))
		for i := range outs {
			outs[i] = &testenv.SyncBuffer{}
			go func() {
				code, stderr := a.consume(cctx, outs[i], []string{"EVENTQ_URL=" + a.base, "EVENTQ_TOKEN=" + tn.token}, "--shared", "--batch", "5")
				if stderr != "" {
					t.Errorf("consumer %d: stderr %q", i, stderr)
				}
				done <- code
			}()
		}
		var stored []string
		for i := range 12 {
			stored = append(stored, a.track(t, tn, fmt.Sprintf("s-%d", i), 1+i%7)...)
		}
		printed := func() []string {
			var all []string
			for _, o := range outs {
				all = append(all, lines(o.String())...)
			}
			return all
		}
		testenv.Eventually(t, 20*time.Second, "every event is printed and the queue is empty", func() bool {
			return len(printed()) >= len(stored) && a.queueLen(t, tn) == 0
		})
		cancel()
		for range outs {
			select {
			case code := <-done:
				if code != 0 {
					t.Errorf("exit %d after cancel", code)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("a consumer did not stop within 5s of cancel")
			}
		}
		if got, want := sorted(printed()), sorted(stored); !slices.Equal(got, want) {
			t.Fatalf("printed %d lines for %d events (each must be printed once, as served):\n%s", len(got), len(want), strings.Join(got, "\n"))
		}
		busy := 0
		for _, o := range outs {
			if o.String() != "" {
				busy++
			}
		}
		t.Logf("%d events over %d of %d consumers", len(stored), busy, len(outs))
	})

	t.Run("a --shared process killed before acknowledging loses nothing", func(t *testing.T) {
		tn := a.mustTenant(t)
		stored := a.track(t, tn, "s-1", 6)
		start := func(base string) (*exec.Cmd, *testenv.SyncBuffer, *testenv.SyncBuffer) {
			cmd := exec.Command(filepath.Join(bins, "eventq"), "consume", "--shared", "--visibility", "2s")
			cmd.Env = []string{"EVENTQ_URL=" + base, "EVENTQ_TOKEN=" + tn.token}
			var out, errOut testenv.SyncBuffer
			cmd.Stdout, cmd.Stderr = &out, &errOut
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			return cmd, &out, &errOut
		}
		doomed, doomedOut, _ := start(holdAcks(t, a.base))
		testenv.Eventually(t, 10*time.Second, "the doomed consumer printed its batch", func() bool {
			return len(lines(doomedOut.String())) == len(stored)
		})
		doomed.Process.Kill() // SIGKILL while its ack is on the way
		doomed.Wait()
		if n := a.queueLen(t, tn); n != int64(len(stored)) {
			t.Fatalf("queue length %d after the kill, want %d (nothing acknowledged)", n, len(stored))
		}
		killedAt := time.Now()
		heir, heirOut, heirErr := start(a.base)
		testenv.Eventually(t, 15*time.Second, "another consumer printed the events after the visibility", func() bool {
			return len(lines(heirOut.String())) == len(stored) && a.queueLen(t, tn) == 0
		})
		if took := time.Since(killedAt); took < time.Second {
			t.Errorf("the events came back %v after the kill, want after their 2s visibility", took)
		}
		heir.Process.Signal(syscall.SIGTERM)
		if err := heir.Wait(); err != nil {
			t.Errorf("SIGTERM: %v, stderr %q; want exit 0", err, heirErr.String())
		}
		if got := lines(heirOut.String()); !slices.Equal(got, stored) {
			t.Fatalf("the second consumer printed\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(stored, "\n"))
		}
	})

	t.Run("--batch without --shared exits 1", func(t *testing.T) {
		var out strings.Builder
		code, stderr := a.consume(ctx, &out, nil, "--url", a.base, "--token", "1|x", "--batch", "5")
		if code != 1 || out.Len() != 0 || !strings.Contains(stderr, "--shared") {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), stderr)
		}
	})

	t.Run("--shared with a failed write exits 1 and hands the batch back", func(t *testing.T) {
		tn := a.mustTenant(t)
		a.track(t, tn, "s-1", 2)
		code, stderr := a.consume(ctx, failingWriter{}, nil, "--url", a.base, "--token", tn.token, "--shared")
		if code != 1 || !strings.Contains(stderr, "disk full") || a.queueLen(t, tn) != 2 {
			t.Fatalf("exit %d, stderr %q, queue %d", code, stderr, a.queueLen(t, tn))
		}
		var out strings.Builder
		code, stderr = a.consume(ctx, &out, nil, "--url", a.base, "--token", tn.token, "--shared", "--once")
		if code != 0 || len(lines(out.String())) != 2 {
			t.Fatalf("after the failed write: exit %d, stdout %q, stderr %q; want both events at once", code, out.String(), stderr)
		}
	})
}
