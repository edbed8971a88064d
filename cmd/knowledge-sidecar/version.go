package main

import (
	"crypto/rand"
	"encoding/base64"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"time"
)

// buildTime is set at build time with -ldflags "-X main.buildTime=…"
// (RFC 3339); Go's build info has no build time of its own.
var buildTime = ""

// buildInfo is what `version` prints and the start-up line logs.
type buildInfo struct {
	Version   string // -X main.version, else the module version
	Revision  string // VCS revision, "+dirty" when modified; "unknown" without VCS info
	BuildTime string // -X main.buildTime, else the commit time, else "unknown"
	GoVersion string
}

func readBuildInfo() buildInfo {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return buildInfoFrom(bi, version, buildTime)
}

// buildInfoFrom reads Go's build info (nil: none) with the -X values.
func buildInfoFrom(bi *debug.BuildInfo, version, buildTime string) buildInfo {
	b := buildInfo{Version: version, Revision: "unknown", BuildTime: "unknown"}
	if bi == nil {
		if buildTime != "" {
			b.BuildTime = buildTime
		}
		return b
	}
	b.GoVersion = bi.GoVersion
	if version == "dev" && bi.Main.Version != "" {
		b.Version = bi.Main.Version // "(devel)" or a pseudo-version from VCS
	}
	var rev, at string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev != "" {
		b.Revision = rev
		if dirty {
			b.Revision += "+dirty"
		}
	}
	switch {
	case buildTime != "":
		b.BuildTime = buildTime
	case at != "":
		b.BuildTime = at + " (commit time)"
	}
	return b
}

func cmdVersion(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: knowledge-sidecar version\n\nPrints the version, VCS revision, build time and Go version. No flags.")
	}
	if code, stop := parseFlags(fs, args); stop {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "version: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	b := readBuildInfo()
	fmt.Fprintf(stdout, "knowledge-sidecar %s\n  revision: %s\n  built:    %s\n  go:       %s\n", b.Version, b.Revision, b.BuildTime, b.GoVersion)
	return 0
}

// keygenBytes is the size of a generated signing secret (the minimum is 32).
const keygenBytes = 32

// cmdKeygen prints a new signing key in the KNOWLEDGE_SIDECAR_SIGNING_KEYS
// format, "id:BASE64". The id defaults to k<YYYYMMDD> so rotations sort.
func cmdKeygen(args []string, stdout, stderr io.Writer, now func() time.Time) int {
	fs := flag.NewFlagSet("keygen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	id := fs.String("id", "k"+now().UTC().Format("20060102"), "key id (1–16 characters of A-Z a-z 0-9 _ -)")
	if code, stop := parseFlags(fs, args); stop {
		return code
	}
	if !validKeyID(*id) {
		fmt.Fprintln(stderr, "keygen: --id must be 1–16 characters of A-Z a-z 0-9 _ -")
		return 2
	}
	secret := make([]byte, keygenBytes)
	if _, err := rand.Read(secret); err != nil {
		fmt.Fprintln(stderr, "keygen: no randomness available")
		return 1
	}
	fmt.Fprintf(stdout, "%s:%s\n", *id, base64.StdEncoding.EncodeToString(secret))
	return 0
}

func validKeyID(id string) bool {
	if len(id) < 1 || len(id) > 16 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}
