package testkit

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
)

// FullSuite is the command that runs every test, services included.
const FullSuite = "./scripts/test.sh"

var skips struct {
	mu sync.Mutex
	n  map[string]int // service → tests skipped for want of it
}

// RequireService reports an unavailable real service (MariaDB, Redis, a
// Redis Cluster): with CI=true the test fails, naming it; elsewhere the
// test is skipped and counted, and Main prints one line for all of them.
// A nil err returns at once.
func RequireService(t testing.TB, service string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s unavailable (CI=true): %v", service, err)
	}
	skips.mu.Lock()
	if skips.n == nil {
		skips.n = map[string]int{}
	}
	skips.n[service]++
	skips.mu.Unlock()
	t.Skipf("%s unavailable, skipping (%s runs everything): %v", service, FullSuite, err)
}

// Main is the TestMain of a package whose tests need MariaDB or Redis: it
// runs the tests and, when some were skipped for want of a service, prints
// one line saying how many and which command runs them. `go test ./...`
// shows a passing package's output only with -v, so the line also goes to
// the terminal (/dev/tty) when there is one and stderr is not it: a laptop
// run that skipped most end-to-end tests does not look like a full pass.
// Each after function runs once the tests are done (a package's shared
// clean-up: TestMain's own defers would not run past os.Exit).
func Main(m *testing.M, after ...func()) {
	code := m.Run()
	for _, f := range after {
		f()
	}
	if line := skipLine(); line != "" {
		fmt.Fprintln(os.Stderr, line)
		toTerminal(line)
	}
	os.Exit(code)
}

// skipLine is the one line about skipped service tests, "" when none was.
func skipLine() string {
	skips.mu.Lock()
	defer skips.mu.Unlock()
	if len(skips.n) == 0 {
		return ""
	}
	total := 0
	var names []string
	for s, n := range skips.n {
		total += n
		names = append(names, s)
	}
	sort.Strings(names)
	return fmt.Sprintf("!!! %s: %d tests SKIPPED, not run: %s unavailable (without CI=true a missing service skips). Run %s to run everything.",
		packageDir(), total, strings.Join(names, ", "), FullSuite)
}

// toTerminal writes line to the controlling terminal unless stderr already
// is one (go test in a package directory streams it) or there is none.
func toTerminal(line string) {
	if fi, err := os.Stderr.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		return
	}
	tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0)
	if err != nil {
		return
	}
	defer tty.Close()
	fmt.Fprintln(tty, line)
}

// packageDir is the test's package directory (go test runs a test binary
// there) relative to the module root, like "./test".
func packageDir() string {
	wd, err := os.Getwd()
	if err != nil {
		return "this package"
	}
	for root := wd; ; {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			if rel, err := filepath.Rel(root, wd); err == nil {
				return "./" + filepath.ToSlash(rel)
			}
			return wd
		}
		up := filepath.Dir(root)
		if up == root {
			return wd
		}
		root = up
	}
}
