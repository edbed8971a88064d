package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"golang.org/x/sync/errgroup"
)

// ServeOptions are the listener settings of Run.
type ServeOptions struct {
	Listen, AdminListen string
	// Listener and AdminListener, when set, are used instead of listening on
	// Listen/AdminListen (tests, socket activation).
	Listener, AdminListener net.Listener
	ReadHeaderTimeout       time.Duration
	IdleTimeout             time.Duration
	MaxHeaderBytes          int
	// MaxConnections caps the proxy listener's open connections (0:
	// DefaultMaxConnections; negative: no cap).
	MaxConnections int
	// MaxConnectionsPerClient is one peer address's share of them (0: a
	// quarter of MaxConnections; negative: no share). Trusted proxies have
	// none: only MaxConnections applies to them.
	MaxConnectionsPerClient int
	DrainDelay              time.Duration
	ShutdownTimeout         time.Duration
	// OnListening is called once both listeners are bound.
	OnListening func(proxyAddr, adminAddr net.Addr)
}

// NewHTTPServer returns an http.Server with the sidecar's timeouts: a header
// read timeout against slowloris, an idle timeout, a header size cap, and no
// overall read/write timeout (bodies and streams may run long; the client's
// disconnect cancels them). base, when not nil, is every request's parent
// context, cancelled to tear down upgraded connections after a drain.
func NewHTTPServer(h http.Handler, o ServeOptions, base context.Context, log *slog.Logger) *http.Server {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		IdleTimeout:       o.IdleTimeout,
		MaxHeaderBytes:    o.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		ConnContext:       connContext,
		ConnState:         connState,
	}
	if base != nil {
		srv.BaseContext = func(net.Listener) context.Context { return base }
	}
	return srv
}

// Run serves the proxy and admin listeners until ctx is done, then drains:
// /readyz turns 503, the drain delay lets load balancers notice, Shutdown
// waits for in-flight requests up to the deadline, and finally upgraded
// connections (WebSockets) are closed.
func (s *Server) Run(ctx context.Context, o ServeOptions) error {
	ln, err := listen(o.Listener, o.Listen)
	if err != nil {
		return fmt.Errorf("proxy listener: %w", err)
	}
	aln, err := listen(o.AdminListener, o.AdminListen)
	if err != nil {
		ln.Close()
		return fmt.Errorf("admin listener: %w", err)
	}
	maxConns := o.MaxConnections
	if maxConns == 0 {
		maxConns = DefaultMaxConnections
	}
	ln = newLimitListener(ln, maxConns, o.MaxConnectionsPerClient, s.fw, s.lim.m)
	base, cancelBase := context.WithCancel(context.Background())
	defer cancelBase()
	srv := NewHTTPServer(s.Handler(), o, base, s.log)
	admin := NewHTTPServer(s.AdminHandler(), ServeOptions{ReadHeaderTimeout: 5 * time.Second, IdleTimeout: o.IdleTimeout, MaxHeaderBytes: 64 << 10}, nil, s.log)
	if o.OnListening != nil {
		o.OnListening(ln.Addr(), aln.Addr())
	}
	s.log.Info("listening", slog.String("proxy", ln.Addr().String()), slog.String("admin", aln.Addr().String()))

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return serve(srv, ln) })
	g.Go(func() error { return serve(admin, aln) })
	g.Go(func() error {
		<-gctx.Done()
		s.SetReady(false)
		if ctx.Err() != nil && o.DrainDelay > 0 { // a signal, not a listener failure
			s.log.Info("draining", slog.Float64("delay_ms", durationMS(o.DrainDelay)))
			t := time.NewTimer(o.DrainDelay)
			<-t.C
		}
		sctx, cancel := context.WithTimeout(context.Background(), o.ShutdownTimeout)
		defer cancel()
		err := srv.Shutdown(sctx)
		cancelBase()
		if aerr := admin.Shutdown(sctx); err == nil {
			err = aerr
		}
		if err != nil {
			s.log.Warn("shutdown deadline passed with requests in flight", slog.Any("error", err))
			srv.Close()
			admin.Close()
		}
		return nil
	})
	err = g.Wait()
	s.log.Info("stopped")
	return err
}

func listen(ln net.Listener, addr string) (net.Listener, error) {
	if ln != nil {
		return ln, nil
	}
	return net.Listen("tcp", addr)
}

func serve(srv *http.Server, ln net.Listener) error {
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
