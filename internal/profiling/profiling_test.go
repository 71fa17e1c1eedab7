package profiling

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

func TestStart(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	t.Run("is off without an address", func(t *testing.T) {
		s, err := Start("", log)
		if s != nil || err != nil {
			t.Fatalf("Start(\"\") = %v, %v; want nil, nil", s, err)
		}
		if s.Addr() != "" || s.Close() != nil {
			t.Error("a nil Server has an address or fails to close")
		}
	})
	t.Run("serves the profiles index on its address", func(t *testing.T) {
		s, err := Start("127.0.0.1:0", log)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		res, err := http.Get("http://" + s.Addr() + "/debug/pprof/goroutine?debug=1")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || !strings.Contains(string(body), "goroutine profile:") {
			t.Fatalf("status %d, body %.200q", res.StatusCode, body)
		}
	})
	t.Run("fails on an address in use", func(t *testing.T) {
		s, err := Start("127.0.0.1:0", log)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if again, err := Start(s.Addr(), log); err == nil {
			again.Close()
			t.Fatal("a second Start on the same address succeeded")
		}
	})
}
