//go:build !race

package proxy

const raceAllocs = 0
