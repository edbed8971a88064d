//go:build !unix

package hostclient

import (
	"os"
	"os/exec"
)

// ownProcessGroup: without process groups, cancellation kills the shell only.
func ownProcessGroup(*exec.Cmd) {}

// openNoBlock opens path for reading; the platform has no FIFOs to block on.
func openNoBlock(path string) (*os.File, error) { return os.Open(path) }
