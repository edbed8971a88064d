package catalog

import (
	"context"
	"errors"
	"log/slog"
	"math"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/prom"
)

// Core's per-client rate limit on the sidecar's own credential (CORE_FACTS
// §5.2, Addendum 2): /kb/search draws on bz_clients.rate_limit_per_min of
// the client whose token the sidecar uses (60 by default, 0 unlimited), one
// call per knowledge base of the route, for all sessions together.
const (
	q8ClientLimit = "SELECT rate_limit_per_min FROM bz_clients WHERE app_id = ? LIMIT 1"
	q9RouteKBs    = "SELECT knowledge FROM bz_routes WHERE enabled <> 0"
)

// Catalog query names of the rate-limit check.
const (
	QueryClientLimit = "client_limit"
	QueryRouteKBs    = "route_kbs"
)

// ClientRateLimit (Q8) returns the rate_limit_per_min of Core client appID
// (0: unlimited); ErrNotFound when no client has that app_id.
func (c *SQLCatalog) ClientRateLimit(ctx context.Context, appID string) (int, error) {
	var limit int64
	err := c.do(ctx, QueryClientLimit, func(ctx context.Context) error {
		return c.db.QueryRowContext(ctx, q8ClientLimit, appID).Scan(&limit)
	})
	return int(limit), err
}

// MaxKBsPerRoute (Q9, then Q2) is the largest number of knowledge bases one
// enabled route's search calls /kb/search for: its distinct KB ids that exist
// and are enabled (a search skips the others). 0 when no route has any.
func (c *SQLCatalog) MaxKBsPerRoute(ctx context.Context) (int, error) {
	var routes [][]string
	err := c.do(ctx, QueryRouteKBs, func(ctx context.Context) error {
		rows, err := c.db.QueryContext(ctx, q9RouteKBs)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var raw []byte
			if err := rows.Scan(&raw); err != nil {
				return err
			}
			// A column Core would not accept either counts as no knowledge.
			if kc, err := normalized.get(raw); err == nil && kc != nil {
				routes = append(routes, uniqueIDs(kc.KBIDs))
			}
		}
		return rows.Err()
	})
	if err != nil {
		return 0, err
	}
	var all []string
	for _, ids := range routes {
		all = append(all, ids...)
	}
	kbs, err := c.KBs(ctx, uniqueIDs(all))
	if err != nil {
		return 0, err
	}
	most := 0
	for _, ids := range routes {
		n := 0
		for _, id := range ids {
			if kbs[id].Enabled {
				n++
			}
		}
		most = max(most, n)
	}
	return most, nil
}

// clientLimitCatalog is what ClientLimitCheck reads; *SQLCatalog satisfies it.
type clientLimitCatalog interface {
	ClientRateLimit(ctx context.Context, appID string) (int, error)
	MaxKBsPerRoute(ctx context.Context) (int, error)
}

// ClientLimitCheck reads the rate limit Core applies to the sidecar's own
// client (config core.client_app_id) and what it implies: searches a minute
// for all sessions together = limit ÷ the most KBs a route searches. A
// non-zero limit is logged at warn on every Check (run at start-up and on
// each catalog schema re-check, SchemaGate.AfterCheck), and both values are
// exported as gauges:
//
//	core_client_rate_limit_per_minute   rate_limit_per_min as read (0: unlimited)
//	core_search_capacity_per_minute     limit ÷ max KBs per route; +Inf when unlimited
type ClientLimitCheck struct {
	cat      clientLimitCatalog
	appID    string
	log      *slog.Logger
	limit    prometheus.Gauge
	capacity prometheus.Gauge
}

// NewClientLimitCheck builds the check for client appID; reg nil means no
// gauges, log nil means no logs.
func NewClientLimitCheck(cat clientLimitCatalog, appID string, log *slog.Logger, reg prometheus.Registerer) *ClientLimitCheck {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &ClientLimitCheck{
		cat: cat, appID: appID, log: log,
		limit: prom.Gauge("core_client_rate_limit_per_minute",
			"rate_limit_per_min of the sidecar's own Core client (core.client_app_id), which every /kb/search call draws on; 0 means unlimited."),
		capacity: prom.Gauge("core_search_capacity_per_minute",
			"Knowledge searches a minute, all sessions together, that the Core client's rate limit allows on the route with the most knowledge bases (one /kb/search call per KB); +Inf when unlimited."),
	}
	if reg != nil {
		r.limit = prom.Register(reg, r.limit)
		r.capacity = prom.Register(reg, r.capacity)
	}
	return r
}

// Check reads the limit now, updates the gauges and logs. It returns the
// catalog's error (also logged); ErrNotFound when no client has the app id.
func (r *ClientLimitCheck) Check(ctx context.Context) error {
	limit, err := r.cat.ClientRateLimit(ctx, r.appID)
	if errors.Is(err, corefacts.ErrNotFound) {
		r.log.LogAttrs(ctx, slog.LevelWarn, "core.client_app_id names no Core client; its rate limit cannot be checked",
			slog.String("client_app_id", r.appID))
		return err
	}
	if err != nil {
		r.log.LogAttrs(ctx, slog.LevelWarn, "cannot read the Core client's rate limit", slog.Any("error", err))
		return err
	}
	r.limit.Set(float64(limit))
	if limit <= 0 {
		r.capacity.Set(math.Inf(1))
		r.log.LogAttrs(ctx, slog.LevelInfo, "the sidecar's Core client is not rate-limited",
			slog.String("client_app_id", r.appID))
		return nil
	}
	kbs, err := r.cat.MaxKBsPerRoute(ctx)
	if err != nil {
		r.log.LogAttrs(ctx, slog.LevelWarn, "cannot read the routes' knowledge bases", slog.Any("error", err))
		return err
	}
	capacity := float64(limit) / float64(max(kbs, 1))
	r.capacity.Set(capacity)
	r.log.LogAttrs(ctx, slog.LevelWarn,
		"Core rate-limits the sidecar's own client: every search calls /kb/search once per knowledge base, for all sessions together, and Core answers 429 past the limit (that knowledge base then fails); set the client's rate_limit_per_min to 0 or size it",
		slog.String("client_app_id", r.appID),
		slog.Int("rate_limit_per_min", limit),
		slog.Int("max_kbs_per_route", kbs),
		slog.Float64("search_capacity_per_min", capacity))
	return nil
}
