package ledger

import (
	"container/list"
	"context"
	"crypto/sha256"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bailinghub/knowledge-sidecar/config"
	"github.com/bailinghub/knowledge-sidecar/telemetry"
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
type Memory struct {
	mu         sync.Mutex
	entries    map[[sha256.Size]byte]*memEntry
	sessions   map[[sha256.Size]byte]*memSession
	lru        *list.List // of *memEntry, most recently used at the front
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
	v := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: telemetry.Namespace, Name: "ledger_evictions_total",
		Help: evictionsHelp,
	}, []string{"bound"})
	v.WithLabelValues(EvictedSession)
	v.WithLabelValues(EvictedLedger)
	return v
}

type memEntry struct {
	key     [sha256.Size]byte
	mode    string
	expires time.Time
	// gen names this record (a new one for every record created) and
	// pending counts the attempts that reserved it and were not released
	// since: it is removed when the last one is (SPEC §7).
	gen     uint64
	pending int
	sess    *memSession
	global  *list.Element
	inSess  *list.Element
}

type memSession struct {
	key     [sha256.Size]byte
	entries *list.List // of *memEntry, most recently used at the front
}

var _ Ledger = (*Memory)(nil)

// NewMemory returns an in-memory ledger holding at most maxEntries records
// (≤ 0 → ledger.max_entries' default, config.Defaults(): never unbounded,
// never size 0), each kept for
// ttl (≤ 0 → DefaultTTL). now is the clock (nil → time.Now). A session holds
// at most SessionCap() records.
func NewMemory(maxEntries int, ttl time.Duration, now func() time.Time) *Memory {
	if maxEntries <= 0 {
		maxEntries = config.Defaults().Ledger.MaxEntries
	}
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	if now == nil {
		now = time.Now
	}
	return &Memory{
		entries:    map[[sha256.Size]byte]*memEntry{},
		sessions:   map[[sha256.Size]byte]*memSession{},
		lru:        list.New(),
		max:        maxEntries,
		sessionCap: max(2, min(maxEntries/4, MaxSessionEntries)),
		ttl:        ttl,
		now:        now,
		evictions:  newEvictions(),
	}
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
	return telemetry.Register(reg, newEvictions())
}

// SessionCap is how many records one session may hold.
func (m *Memory) SessionCap() int { return m.sessionCap }

// live returns the unexpired record under key, dropping an expired one.
func (m *Memory) live(key [sha256.Size]byte, now time.Time) *memEntry {
	e := m.entries[key]
	if e == nil {
		return nil
	}
	if !now.Before(e.expires) {
		m.remove(e)
		return nil
	}
	return e
}

// remove drops e from every index.
func (m *Memory) remove(e *memEntry) {
	delete(m.entries, e.key)
	m.lru.Remove(e.global)
	e.sess.entries.Remove(e.inSess)
	if e.sess.entries.Len() == 0 {
		delete(m.sessions, e.sess.key)
	}
}

// touch makes e the most recently used record, globally and in its session.
func (m *Memory) touch(e *memEntry) {
	m.lru.MoveToFront(e.global)
	e.sess.entries.MoveToFront(e.inSess)
}

// add creates a record in session sk, evicting first the session's own
// oldest record when it is at its cap, else the ledger's oldest when the
// ledger is full.
func (m *Memory) add(key, sk [sha256.Size]byte, mode string, expires time.Time) *memEntry {
	s := m.sessions[sk]
	if s == nil {
		s = &memSession{key: sk, entries: list.New()}
		m.sessions[sk] = s
	}
	switch {
	case s.entries.Len() >= m.sessionCap:
		m.remove(s.entries.Back().Value.(*memEntry)) // cap ≥ 2: s keeps a record
		m.evictions.WithLabelValues(EvictedSession).Inc()
	case len(m.entries) >= m.max:
		m.remove(m.lru.Back().Value.(*memEntry))
		m.evictions.WithLabelValues(EvictedLedger).Inc()
	}
	m.gen++
	e := &memEntry{key: key, mode: mode, expires: expires, gen: m.gen, pending: 1, sess: s}
	e.global = m.lru.PushFront(e)
	e.inSess = s.entries.PushFront(e)
	m.entries[key] = e
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
	for _, e := range found {
		if e != nil {
			e.pending++
			e.expires = expires
			m.touch(e)
		}
	}
	for i, key := range keys {
		e := found[i]
		if e == nil || m.entries[key] != e { // absent (or evicted: a ledger of size 1)
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
			m.remove(e)
		}
	}
	return nil
}

// Len reports how many records (two per turn) are held, expired ones included
// until they are looked at or evicted.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.entries)
}

// Close drops every record; later calls fail with ErrUnavailable.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	clear(m.entries)
	clear(m.sessions)
	m.lru.Init()
	return nil
}
