package upstream

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"time"
)

// readResponse reads one HTTP/1.1 response from br and discards its body. It keeps only what IRS needs: the
// status, whether an IRS worker made it (x-irs-worker), and the service time it reported (server-timing).
// reusable says whether the connection may carry another request. A connection that ends before a response
// starts reads io.EOF itself; one that ends inside a response, a wrapped io.ErrUnexpectedEOF or errMalformed.
func readResponse(br *bufio.Reader) (resp Response, reusable bool, err error) {
	for {
		h, err := readHead(br)
		if err != nil {
			return Response{}, false, err
		}
		if h.status >= 100 && h.status < 200 && h.status != 101 {
			continue // an informational response precedes the real one
		}
		resp = Response{Status: h.status, FromWorker: h.fromWorker, ServerTime: h.serverTime, HasServerTime: h.hasServerTime,
			ProxyFlags: h.proxyFlags, ProxyError: h.proxyError}
		untilClose, err := discardBody(br, h)
		if err != nil {
			return Response{}, false, err
		}
		// After 101 Switching Protocols the connection no longer speaks HTTP/1.1.
		return resp, !h.close && !untilClose && h.status != 101, nil
	}
}

// responseHead is what IRS reads of a response's status line and headers.
type responseHead struct {
	status        int
	fromWorker    bool
	proxyFlags    string // only on a proxy's own response: no allocation otherwise
	proxyError    string
	serverTime    time.Duration
	hasServerTime bool
	close         bool  // the connection ends after this response
	chunked       bool  // Transfer-Encoding: chunked
	length        int64 // Content-Length, -1 when absent
}

func readHead(br *bufio.Reader) (h responseHead, err error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		if len(line) > 0 {
			return h, fmt.Errorf("%w: status line: %w", errMalformed, err)
		}
		return h, err
	}
	// "HTTP/1.1 200 OK"; the reason phrase may be missing.
	line = trimEOL(line)
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' ||
		(len(line) > 12 && line[12] != ' ') {
		return h, fmt.Errorf("%w: status line %q", errMalformed, line)
	}
	for _, d := range line[9:12] {
		if d < '0' || d > '9' {
			return h, fmt.Errorf("%w: status line %q", errMalformed, line)
		}
		h.status = h.status*10 + int(d-'0')
	}
	h.close = line[7] == '0' // HTTP/1.0 closes unless it says keep-alive
	h.length = -1
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return h, fmt.Errorf("%w: headers: %w", errMalformed, err)
		}
		line = trimEOL(line)
		if len(line) == 0 {
			return h, nil
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return h, fmt.Errorf("%w: header line %q", errMalformed, line)
		}
		name, value := line[:colon], bytes.TrimSpace(line[colon+1:])
		switch {
		case equalFold(name, "content-length"):
			n, ok := parseLength(value)
			if !ok || (h.length >= 0 && h.length != n) {
				return h, fmt.Errorf("%w: content-length %q", errMalformed, value)
			}
			h.length = n
		case equalFold(name, "transfer-encoding"):
			h.chunked = equalFold(lastToken(value), "chunked")
		case equalFold(name, "connection"):
			switch {
			case hasToken(value, "close"):
				h.close = true
			case hasToken(value, "keep-alive"):
				h.close = false
			}
		case equalFold(name, HeaderWorker):
			h.fromWorker = true
		case equalFold(name, HeaderProxyFlags):
			h.proxyFlags = string(value)
		case equalFold(name, HeaderLinkerdError):
			h.proxyError = string(value[:min(len(value), 200)])
		case equalFold(name, HeaderServerTiming):
			if !h.hasServerTime {
				h.serverTime, h.hasServerTime = ParseServerTiming(value)
			}
		}
	}
}

// discardBody reads and drops the body that h announces. untilClose says the body ran to the end of the
// connection, which then cannot be reused.
func discardBody(br *bufio.Reader, h responseHead) (untilClose bool, err error) {
	switch {
	case h.status == 204 || h.status == 304 || h.status == 101:
		return false, nil
	case h.chunked:
		return false, discardChunked(br)
	case h.length >= 0:
		if h.length > MaxBody {
			return false, errBodyTooLarge
		}
		_, err := br.Discard(int(h.length))
		return false, unexpectedEOF(err)
	}
	n, err := io.CopyN(io.Discard, br, MaxBody+1)
	if err == io.EOF {
		return true, nil
	}
	if err == nil && n > MaxBody {
		return true, errBodyTooLarge
	}
	return true, err
}

func discardChunked(br *bufio.Reader) error {
	var total int64
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return fmt.Errorf("%w: chunk size: %w", errMalformed, unexpectedEOF(err))
		}
		line = trimEOL(line)
		if i := bytes.IndexByte(line, ';'); i >= 0 {
			line = line[:i] // chunk extensions
		}
		size, ok := parseHex(bytes.TrimSpace(line))
		if !ok {
			return fmt.Errorf("%w: chunk size %q", errMalformed, line)
		}
		if size == 0 {
			break
		}
		if total += size; total > MaxBody {
			return errBodyTooLarge
		}
		if _, err := br.Discard(int(size)); err != nil {
			return unexpectedEOF(err)
		}
		if err := expectEOL(br); err != nil {
			return err
		}
	}
	for { // trailers, up to the empty line
		line, err := br.ReadSlice('\n')
		if err != nil {
			return fmt.Errorf("%w: trailers: %w", errMalformed, unexpectedEOF(err))
		}
		if len(trimEOL(line)) == 0 {
			return nil
		}
	}
}

func expectEOL(br *bufio.Reader) error {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return unexpectedEOF(err)
	}
	if len(trimEOL(line)) != 0 {
		return fmt.Errorf("%w: no line end after a chunk", errMalformed)
	}
	return nil
}

func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

func trimEOL(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte("\n"))
	return bytes.TrimSuffix(b, []byte("\r"))
}

// equalFold compares an ASCII header name with a lower-case one, without allocating.
func equalFold(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i := range len(b) {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// hasToken reports whether a comma-separated header value holds token (case-insensitive).
func hasToken(v []byte, token string) bool {
	for len(v) > 0 {
		item := v
		if i := bytes.IndexByte(v, ','); i >= 0 {
			item, v = v[:i], v[i+1:]
		} else {
			v = nil
		}
		if equalFold(bytes.TrimSpace(item), token) {
			return true
		}
	}
	return false
}

// lastToken is the last item of a comma-separated value ("gzip, chunked" → "chunked").
func lastToken(v []byte) []byte {
	if i := bytes.LastIndexByte(v, ','); i >= 0 {
		v = v[i+1:]
	}
	return bytes.TrimSpace(v)
}

func parseLength(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

func parseHex(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 15 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		n = n<<4 | int64(c)
	}
	return n, true
}
