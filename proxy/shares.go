package proxy

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
)

// Fair shares of the edge's global caps (SPEC §8.3): no single client
// address holds more than its share of the connections, the requests in
// flight or the turn body budget, so a flood from one client never refuses
// everyone else.

// clientKey is what a client's shares are counted under: its address, an
// IPv6 address cut to its /64 (one host commonly holds a whole /64, and
// would otherwise get a share per address). The zero key is "unknown"
// (a peer address that does not parse: a Unix socket, a test pipe).
type clientKey struct{ a netip.Addr }

func keyOf(a netip.Addr) clientKey {
	a = a.Unmap()
	if a.Is6() {
		if p, err := a.Prefix(64); err == nil {
			return clientKey{p.Addr()}
		}
	}
	return clientKey{a.WithZone("")}
}

// peerAddr is the address of a request's (or connection's) peer.
func peerAddr(remoteAddr string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(remoteAddr); err == nil {
		return ap.Addr().Unmap(), true
	}
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	a, err := netip.ParseAddr(host)
	return a.Unmap(), err == nil
}

// trustedAddr reports whether a is in the trusted-proxy list.
func (f forwarding) trustedAddr(a netip.Addr) bool {
	for _, p := range f.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// clientAddr is the address a request comes from: its peer, or, when the
// peer is a trusted proxy, the nearest address in X-Forwarded-For that is
// not one (the rightmost untrusted entry: what a trusted proxy appended,
// never what the client wrote itself). A trusted peer with no usable
// X-Forwarded-For entry is its own client. The address is whole (an IPv6
// address is not cut to its /64); ok is false when the peer address does
// not parse (a Unix socket, a test pipe).
func (f forwarding) clientAddr(r *http.Request) (netip.Addr, bool) {
	a, ok := peerAddr(r.RemoteAddr)
	if !ok {
		return netip.Addr{}, false
	}
	if len(f.trusted) == 0 || !f.trustedAddr(a) {
		return a, true
	}
	xff := r.Header["X-Forwarded-For"]
	for i := len(xff) - 1; i >= 0; i-- {
		v := xff[i]
		for v != "" {
			var part string
			if j := strings.LastIndexByte(v, ','); j >= 0 {
				v, part = v[:j], v[j+1:]
			} else {
				v, part = "", v
			}
			h, ok := peerAddr(strings.TrimSpace(part))
			if !ok {
				return a, true // a malformed hop: nothing left of it can be trusted
			}
			if !f.trustedAddr(h) {
				return h, true
			}
			a = h
		}
	}
	return a, true
}

// clientOf is the client a request is counted as: the key of its
// clientAddr (the zero key when that is unknown).
func (f forwarding) clientOf(r *http.Request) clientKey {
	a, ok := f.clientAddr(r)
	if !ok {
		return clientKey{}
	}
	return keyOf(a)
}

// shares caps a quantity held at once: max for all clients together, per
// for any one client (each ≤ 0: no cap). acquire never waits.
//
// A client's share shrinks with the number of clients holding something
// (shareLocked): min(per, max ÷ (active + 1)), never below floor. The "+1"
// is a reserve: k active clients at their shares hold at most k/(k+1) of
// the cap, so the next client always finds room, however many addresses
// flood (with a fixed quarter, any four held it all).
type shares struct {
	max, per int64
	floor    int64 // the least a share shrinks to (default 1)
	mu       sync.Mutex
	n        int64
	by       map[clientKey]int64
}

func newShares(total, per int64) *shares {
	return &shares{max: total, per: per, floor: 1, by: map[clientKey]int64{}}
}

// withFloor keeps every share at least f (never above the configured
// share): a budget whose one item can be f large (a whole turn body, a
// whole MCP answer) must leave a client room for one item, or a crowd of
// small holders would refuse it while the budget has room.
func (s *shares) withFloor(f int64) *shares {
	if s.per > 0 {
		f = min(f, s.per)
	}
	s.floor = max(f, 1)
	return s
}

// acquire takes k for client c, or reports which cap refused it: global
// is true when the cap of everyone together had no room, false when c's
// own share had none.
func (s *shares) acquire(c clientKey, k int64) (ok, global bool) {
	return s.take(c, k, true)
}

// acquireUnshared is acquire without c's share: only the global cap
// applies (a trusted proxy's connections carry many clients).
func (s *shares) acquireUnshared(c clientKey, k int64) (ok, global bool) {
	return s.take(c, k, false)
}

func (s *shares) take(c clientKey, k int64, shared bool) (ok, global bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	held := s.by[c]
	if shared {
		if per := s.shareLocked(c); per > 0 && held+k > per {
			return false, false
		}
	}
	if s.max > 0 && s.n+k > s.max {
		return false, true
	}
	s.n += k
	s.by[c] = held + k
	return true, false
}

// shareLocked is c's share now (0: none): the configured share, shrunk to
// the cap ÷ (active clients + 1), c counted as active, never below floor.
// The caller holds mu.
func (s *shares) shareLocked(c clientKey) int64 {
	if s.per <= 0 || s.max <= 0 {
		return s.per
	}
	active := int64(len(s.by))
	if _, ok := s.by[c]; !ok {
		active++
	}
	return min(s.per, max(s.max/(active+1), s.floor))
}

// belowShare reports whether c holds less than its share now (a client
// with no share is never below it).
func (s *shares) belowShare(c clientKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	per := s.shareLocked(c)
	return per > 0 && s.by[c] < per
}

// release gives back k of what c holds.
func (s *shares) release(c clientKey, k int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n -= k
	if held := s.by[c] - k; held > 0 {
		s.by[c] = held
	} else {
		delete(s.by, c)
	}
}

// held is what c holds now, and all clients together.
func (s *shares) held(c clientKey) (client, all int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.by[c], s.n
}

// perClient is a client's configured share of a cap: per when set (> 0),
// a quarter of the cap (at least 1) when 0, no share (the whole cap) when
// negative. The share applied shrinks further with the number of active
// clients (shares.shareLocked).
func perClient(per, total int64) int64 {
	switch {
	case per < 0 || total <= 0:
		return 0
	case per == 0:
		return max(total/4, 1)
	}
	return per
}
