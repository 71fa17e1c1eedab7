// Package profiling serves Go's runtime profiles (net/http/pprof) on an address of their own,
// for measuring a running api or worker. It is off unless PPROF_ADDR is set.
package profiling

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// Server serves /debug/pprof/ on its own listener, never on the api's public address.
type Server struct {
	ln  net.Listener
	srv *http.Server
}

// Start listens on addr (host:port; port 0 picks one) and serves the profiles until Close.
// It returns nil and no error when addr is empty: profiling is off.
func Start(addr string, log *slog.Logger) (*Server, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	s := &Server{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("profiling: server stopped", "err", err)
		}
	}()
	log.Info("profiling: serving /debug/pprof/", "addr", ln.Addr().String())
	return s, nil
}

// Addr is the bound address, "" when s is nil.
func (s *Server) Addr() string {
	if s == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Close stops serving. Safe on a nil Server.
func (s *Server) Close() error {
	if s == nil {
		return nil
	}
	return s.srv.Close()
}
