package sidecar

import (
	"runtime/debug"
	"testing"
)

func TestApplyGCPercent(t *testing.T) {
	old := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(old) })
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	if p, src := ApplyGCPercent(env(nil)); p != DefaultGCPercent || src != "default" || debug.SetGCPercent(p) != DefaultGCPercent {
		t.Errorf("no GOGC: got %d from %s; want %d from default, applied", p, src, DefaultGCPercent)
	}
	debug.SetGCPercent(150) // what the runtime made of GOGC=150
	if p, src := ApplyGCPercent(env(map[string]string{"GOGC": "150"})); p != 150 || src != "GOGC" || debug.SetGCPercent(p) != 150 {
		t.Errorf("GOGC=150: got %d from %s; want 150 from GOGC, left as the runtime set it", p, src)
	}
}
