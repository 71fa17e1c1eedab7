package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// profileDuring records CPU profiles of the api and the worker for d from now, when the run
// was started with -profile, into the temp dir as NAME-api.pprof and NAME-worker.pprof (read
// them with go tool pprof -top BINARY FILE). The returned wait blocks until both are written;
// a profile that cannot be taken is logged, not fatal.
func (s *stack) profileDuring(ctx context.Context, name string, d time.Duration) (wait func()) {
	if !s.profile {
		return func() {}
	}
	var wg sync.WaitGroup
	for proc, addr := range map[string]string{"api": s.pprofAPI, "worker": s.pprofWorker} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := filepath.Join(s.dir, fmt.Sprintf("%s-%s.pprof", name, proc))
			if err := fetchProfile(ctx, addr, d, path); err != nil {
				s.logf("  profile %s of the %s: %v", name, proc, err)
				return
			}
			s.logf("  profile %s of the %s: %s", name, proc, path)
		}()
	}
	return wg.Wait
}

// fetchProfile writes the CPU profile of the process serving pprof at addr, taken over d, to path.
func fetchProfile(ctx context.Context, addr string, d time.Duration, path string) error {
	secs := max(1, int(d.Round(time.Second)/time.Second))
	req, err := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs), nil)
	if err != nil {
		return err
	}
	res, err := (&http.Client{Timeout: time.Duration(secs)*time.Second + 30*time.Second}).Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		return fmt.Errorf("status %d", res.StatusCode)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, res.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
