package ledger

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// DefaultMemoryEntries is the capacity used when NewMemory gets maxEntries ≤ 0.
const DefaultMemoryEntries = 100_000

// Memory is the in-process ledger: one bounded LRU of records guarded by a
// mutex (so a Reserve covering two records is atomic), with expiry computed
// from an injected clock. Each turn uses two entries. When the LRU is full the
// least recently used record is evicted early; size it for the retry window.
type Memory struct {
	mu     sync.Mutex
	lru    *simplelru.LRU[[sha256.Size]byte, memRecord]
	ttl    time.Duration
	now    func() time.Time
	closed bool
}

type memRecord struct {
	mode    string
	expires time.Time
}

var _ Ledger = (*Memory)(nil)

// NewMemory returns an in-memory ledger holding at most maxEntries records
// (≤ 0 → DefaultMemoryEntries; never unbounded, never size 0), each kept for
// ttl (≤ 0 → DefaultTTL). now is the clock (nil → time.Now).
func NewMemory(maxEntries int, ttl time.Duration, now func() time.Time) *Memory {
	if maxEntries <= 0 {
		maxEntries = DefaultMemoryEntries
	}
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	if now == nil {
		now = time.Now
	}
	l, err := simplelru.NewLRU[[sha256.Size]byte, memRecord](maxEntries, nil)
	if err != nil { // only for size ≤ 0, excluded above
		panic(fmt.Sprintf("ledger: %v", err))
	}
	return &Memory{lru: l, ttl: ttl, now: now}
}

// live returns the unexpired record under key, dropping an expired one.
func (m *Memory) live(key [sha256.Size]byte, now time.Time) (memRecord, bool) {
	r, ok := m.lru.Get(key)
	if !ok {
		return memRecord{}, false
	}
	if !now.Before(r.expires) {
		m.lru.Remove(key)
		return memRecord{}, false
	}
	return r, true
}

// Reserve implements Ledger.
func (m *Memory) Reserve(ctx context.Context, k Key, mode string) (bool, error) {
	if err := k.validate(mode); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("ledger: reserve: %w", err)
	}
	tk, mk := k.turnHash(), k.messageHash()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false, fmt.Errorf("ledger: reserve: memory ledger closed: %w", ErrUnavailable)
	}
	now := m.now()
	created := true
	for _, key := range [2][sha256.Size]byte{tk, mk} {
		r, ok := m.live(key, now)
		if !ok {
			continue
		}
		if r.mode != mode {
			return false, ErrConflict
		}
		created = false
	}
	rec := memRecord{mode: mode, expires: now.Add(m.ttl)}
	m.lru.Add(tk, rec)
	m.lru.Add(mk, rec)
	return created, nil
}

// Release implements Ledger.
func (m *Memory) Release(ctx context.Context, k Key, mode string) error {
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
	for _, key := range [2][sha256.Size]byte{k.turnHash(), k.messageHash()} {
		if r, ok := m.live(key, now); ok && r.mode == mode {
			m.lru.Remove(key)
		}
	}
	return nil
}

// Len reports how many records (two per turn) are held, expired ones included
// until they are looked at or evicted.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lru.Len()
}

// Close drops every record; later calls fail with ErrUnavailable.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	m.lru.Purge()
	return nil
}
