package ledger

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bailinghub/knowledge-sidecar/internal/prom"
)

// MaxSessionEntries caps the records one Agent Session holds in the memory
// ledger: a quarter of the ledger's capacity, at most this many (1,000
// turns), at least 2 (one turn).
const MaxSessionEntries = 2_000

// Memory is the in-process ledger: records guarded by a mutex (so a Reserve
// covering two records is atomic), with expiry computed from an injected
// clock. Each turn uses two records.
//
// It is bounded twice. Each session holds at most SessionCap records: past
// that, a new record evicts that session's own least recently used one, so
// a session flooding the ledger with turns cannot evict another session's
// records. And the whole ledger holds at most maxEntries: past that (many
// sessions near their cap at once) the least recently used record of any
// session goes. Size max_entries for the retry window. A turn whose records
// were evicted is forgotten before ledger.ttl: a mode switch on it is then
// served (SPEC §7). Every eviction is counted in ledger_evictions_total
// (Register).
//
// Both bounds are golang-lru's simplelru (the ledger's mutex guards them):
// one LRU of every record, and one per session of its records' keys; each
// one's eviction callback drops the record from the other, so a record is
// in both or in neither.
type Memory struct {
	mu         sync.Mutex
	entries    *simplelru.LRU[[sha256.Size]byte, *memEntry] // every record, bounded by max
	sessions   map[[sha256.Size]byte]*memSession
	max        int
	sessionCap int
	ttl        time.Duration
	now        func() time.Time
	gen        uint64 // last record generation handed out
	closed     bool
	evictions  *prometheus.CounterVec // ledger_evictions_total{bound}
}

// Eviction bounds, the label values of ledger_evictions_total.
const (
	EvictedSession = "session" // the session was at SessionCap
	EvictedLedger  = "ledger"  // the whole ledger was at max_entries
)

const evictionsHelp = "Turn-mode records the memory ledger evicted before ledger.ttl, by bound (session: the session held its cap of records; ledger: the ledger held max_entries). An evicted turn can be switched to the other mode."

func newEvictions() *prometheus.CounterVec {
	return prom.ClosedCounter("ledger_evictions_total", evictionsHelp, "bound", []string{EvictedSession, EvictedLedger})
}

type memEntry struct {
	mode    string
	expires time.Time
	// gen names this record (a new one for every record created) and
	// pending counts the attempts that reserved it and were not released
	// since: it is removed when the last one is (SPEC §7).
	gen     uint64
	pending int
	sess    *memSession
}

type memSession struct {
	key     [sha256.Size]byte
	entries *simplelru.LRU[[sha256.Size]byte, struct{}] // its records' keys, bounded by sessionCap
}

var _ Ledger = (*Memory)(nil)

// NewMemory returns an in-memory ledger holding at most maxEntries records
// (≤ 0 → DefaultMaxEntries: never unbounded, never size 0), each kept for
// ttl (≤ 0 → DefaultTTL). now is the clock (nil → time.Now). A session holds
// at most SessionCap() records.
func NewMemory(maxEntries int, ttl time.Duration, now func() time.Time) *Memory {
	if maxEntries <= 0 {
		maxEntries = DefaultMaxEntries
	}
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	if now == nil {
		now = time.Now
	}
	m := &Memory{
		sessions:   map[[sha256.Size]byte]*memSession{},
		max:        maxEntries,
		sessionCap: max(2, min(maxEntries/4, MaxSessionEntries)),
		ttl:        ttl,
		now:        now,
		evictions:  newEvictions(),
	}
	// A record leaving the ledger (evicted, expired, released) leaves its
	// session; NewLRU fails only for a size ≤ 0.
	m.entries, _ = simplelru.NewLRU(maxEntries, func(key [sha256.Size]byte, e *memEntry) {
		e.sess.entries.Remove(key)
	})
	return m
}

// Register registers ledger_evictions_total on reg (RegisterEvictions), so
// evictions show in /metrics. Call it before the ledger is used: evictions
// counted earlier stay with the unregistered counter.
func (m *Memory) Register(reg prometheus.Registerer) {
	v := RegisterEvictions(reg)
	m.mu.Lock()
	m.evictions = v
	m.mu.Unlock()
}

// RegisterEvictions registers ledger_evictions_total on reg, or returns the
// equal collector already registered there. A sidecar on the Redis ledger
// registers it too, so the series exist whatever the backend (Redis keeps
// every record for its TTL: they stay 0).
func RegisterEvictions(reg prometheus.Registerer) *prometheus.CounterVec {
	return prom.Register(reg, newEvictions())
}

// SessionCap is how many records one session may hold.
func (m *Memory) SessionCap() int { return m.sessionCap }

// live returns the unexpired record under key, dropping an expired one.
func (m *Memory) live(key [sha256.Size]byte, now time.Time) *memEntry {
	e, ok := m.entries.Peek(key)
	if !ok {
		return nil
	}
	if !now.Before(e.expires) {
		m.entries.Remove(key)
		return nil
	}
	return e
}

// touch makes the record under key the most recently used, globally and in
// its session.
func (m *Memory) touch(key [sha256.Size]byte, e *memEntry) {
	m.entries.Get(key)
	e.sess.entries.Get(key)
}

// add creates a record in session sk: past the session's cap its own least
// recently used record goes, else past max_entries the ledger's.
func (m *Memory) add(key, sk [sha256.Size]byte, mode string, expires time.Time) *memEntry {
	s := m.sessions[sk]
	if s == nil {
		s = &memSession{key: sk}
		// A key leaving the session (evicted at its cap) leaves the
		// ledger; the session goes with its last record.
		s.entries, _ = simplelru.NewLRU(m.sessionCap, func(key [sha256.Size]byte, _ struct{}) {
			m.entries.Remove(key)
			if s.entries.Len() == 0 {
				delete(m.sessions, s.key)
			}
		})
		m.sessions[sk] = s
	}
	m.gen++
	e := &memEntry{mode: mode, expires: expires, gen: m.gen, pending: 1, sess: s}
	// The session first: evicting its own record (cap ≥ 2: it keeps one)
	// makes room in the ledger, so one record goes, never two.
	if s.entries.Add(key, struct{}{}) {
		m.evictions.WithLabelValues(EvictedSession).Inc()
	}
	if m.entries.Add(key, e) {
		m.evictions.WithLabelValues(EvictedLedger).Inc()
	}
	return e
}

// Reserve implements Ledger.
func (m *Memory) Reserve(ctx context.Context, k Key, mode string) (Reservation, error) {
	if err := k.validate(mode); err != nil {
		return Reservation{}, err
	}
	if err := ctx.Err(); err != nil {
		return Reservation{}, fmt.Errorf("ledger: reserve: %w", err)
	}
	tk, mk, sk := k.turnHash(), k.messageHash(), k.sessionHash()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return Reservation{}, fmt.Errorf("ledger: reserve: memory ledger closed: %w", ErrUnavailable)
	}
	now := m.now()
	keys := [2][sha256.Size]byte{tk, mk}
	var found [2]*memEntry
	for i, key := range keys {
		e := m.live(key, now)
		if e != nil && e.mode != mode {
			return Reservation{}, ErrConflict
		}
		found[i] = e
	}
	res := Reservation{Created: found[0] == nil && found[1] == nil}
	expires := now.Add(m.ttl)
	// Join the records there first, so that adding the missing one cannot
	// evict them (they are the most recently used).
	for i, e := range found {
		if e != nil {
			e.pending++
			e.expires = expires
			m.touch(keys[i], e)
		}
	}
	for i, key := range keys {
		e := found[i]
		if cur, ok := m.entries.Peek(key); e == nil || !ok || cur != e { // absent (or evicted: a ledger of size 1)
			e = m.add(key, sk, mode, expires)
		}
		res.tokens[i] = strconv.FormatUint(e.gen, 36)
	}
	return res, nil
}

// Release implements Ledger.
func (m *Memory) Release(ctx context.Context, k Key, mode string, r Reservation) error {
	if err := k.validate(mode); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ledger: release: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return fmt.Errorf("ledger: release: memory ledger closed: %w", ErrUnavailable)
	}
	now := m.now()
	for i, key := range [2][sha256.Size]byte{k.turnHash(), k.messageHash()} {
		e := m.live(key, now)
		if e == nil || e.mode != mode || r.tokens[i] == "" || strconv.FormatUint(e.gen, 36) != r.tokens[i] {
			continue // gone, another mode's, or a newer record than the one reserved
		}
		if e.pending--; e.pending <= 0 {
			m.entries.Remove(key)
		}
	}
	return nil
}

// Len reports how many records (two per turn) are held, expired ones included
// until they are looked at or evicted.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.entries.Len()
}

// Close drops every record; later calls fail with ErrUnavailable.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	m.entries.Purge()
	clear(m.sessions)
	return nil
}
