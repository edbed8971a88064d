package coreclient

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// TestReadAnswer: an answer is read to its end — the read that sees io.EOF
// included, which is what hands a keep-alive connection back — whatever the
// reader's pace and whether its length is known; a longer one than limit is
// cut one byte past it; a reader's error is returned.
func TestReadAnswer(t *testing.T) {
	const limit = 100
	body := strings.Repeat("a", 60)
	long := strings.Repeat("b", 300)
	for _, tc := range []struct {
		name  string
		r     func() io.Reader
		n     int64
		want  string
		error bool
	}{
		{"known length", func() io.Reader { return strings.NewReader(body) }, 60, body, false},
		{"unknown length", func() io.Reader { return strings.NewReader(body) }, -1, body, false},
		{"one byte at a time", func() io.Reader { return iotest.OneByteReader(strings.NewReader(body)) }, 60, body, false},
		{"data with EOF", func() io.Reader { return iotest.DataErrReader(strings.NewReader(body)) }, 60, body, false},
		{"empty", func() io.Reader { return strings.NewReader("") }, 0, "", false},
		{"exactly limit", func() io.Reader { return strings.NewReader(long[:limit]) }, limit, long[:limit], false},
		{"over limit, unknown length", func() io.Reader { return strings.NewReader(long) }, -1, long[:limit+1], false},
		{"over limit, one byte at a time", func() io.Reader { return iotest.OneByteReader(strings.NewReader(long)) }, -1, long[:limit+1], false},
		{"longer than its length says", func() io.Reader { return strings.NewReader(long) }, 60, long[:limit+1], false},
		{"reader error", func() io.Reader { return iotest.TimeoutReader(iotest.HalfReader(strings.NewReader(body))) }, 60, "", true},
	} {
		eofSeen := &eofReader{r: tc.r()}
		got, err := readAnswer(eofSeen, tc.n, limit)
		if tc.error {
			if !errors.Is(err, iotest.ErrTimeout) {
				t.Errorf("%s: got %q, %v; want the reader's error", tc.name, got, err)
			}
			continue
		}
		if err != nil || !bytes.Equal(got, []byte(tc.want)) {
			t.Errorf("%s: got %d bytes, %v; want %d bytes", tc.name, len(got), err, len(tc.want))
		}
		if len(tc.want) <= limit && !eofSeen.eof {
			t.Errorf("%s: the end of the answer was never read", tc.name)
		}
	}
}

type eofReader struct {
	r   io.Reader
	eof bool
}

func (e *eofReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err == io.EOF {
		e.eof = true
	}
	return n, err
}
