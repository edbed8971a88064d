package testkit

import (
	"bytes"
	"errors"
	"os"
	"strconv"
)

// ProcessGone reports whether process pid has ended: no /proc entry, or a
// zombie no one has reaped yet (a killed grandchild whose parent died before
// it, in a container whose init does not reap). Linux only: elsewhere it
// reports false.
func ProcessGone(pid int) bool {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if errors.Is(err, os.ErrNotExist) {
		return true
	}
	// pid (comm) state …; comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(raw, ')')
	if err != nil || i < 0 || i+2 >= len(raw) {
		return false
	}
	state := raw[i+2]
	return state == 'Z' || state == 'X'
}
