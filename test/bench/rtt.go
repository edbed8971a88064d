package main

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"time"

	"github.com/go-sql-driver/mysql"
)

// rttProbe times one simple catalog round trip while a load runs: a
// primary-key SELECT from the load tool to the bench's MariaDB database, with
// the driver interpolating the argument as the sidecar's catalog does. It is
// the yardstick for "no more than one catalog round trip" (issue 12) under
// the same load, on the same cores, in the same run.
type rttProbe struct {
	db   *sql.DB
	stop chan struct{}
	done chan []time.Duration
}

// startRTT probes at rate per second until finish; nil when dsn is empty
// (the in-memory catalog) or does not parse.
func startRTT(dsn string, rate int) *rttProbe {
	if dsn == "" {
		return nil
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil
	}
	cfg.InterpolateParams = true
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil
	}
	p := &rttProbe{db: sql.OpenDB(conn), stop: make(chan struct{}), done: make(chan []time.Duration, 1)}
	p.db.SetMaxOpenConns(1)
	go p.run(rate)
	return p
}

func (p *rttProbe) run(rate int) {
	var lat []time.Duration
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	const q = "SELECT run_id, status FROM bz_agent_client_runs WHERE run_id = ? LIMIT 1"
	for {
		select {
		case <-p.stop:
			p.done <- lat
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		var id, status string
		start := time.Now()
		err := p.db.QueryRowContext(ctx, q, "00000000-0000-4000-8000-000000000000").Scan(&id, &status)
		d := time.Since(start)
		cancel()
		if err == nil || errors.Is(err, sql.ErrNoRows) {
			lat = append(lat, d)
		}
	}
}

// finish stops the probe and returns its percentiles (zero without samples).
func (p *rttProbe) finish() *pcts {
	if p == nil {
		return nil
	}
	close(p.stop)
	lat := <-p.done
	p.db.Close()
	if len(lat) == 0 {
		return nil
	}
	slices.Sort(lat)
	return &pcts{P50: ms(quantile(lat, .5)), P99: ms(quantile(lat, .99)), P999: ms(quantile(lat, .999))}
}
