package upstream

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"

	"github.com/irs-sim/irs/worker/stats"
)

// ErrNoEndpoints is returned when a service has no endpoint to call.
var ErrNoEndpoints = errors.New("no endpoints")

// Classify sorts a transport error into the kinds that stats count.
func Classify(err error) stats.ErrorKind {
	var (
		ne        net.Error
		dns       *net.DNSError
		record    tls.RecordHeaderError
		verify    *tls.CertificateVerificationError
		alert     tls.AlertError
		authority x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
	)
	switch {
	case errors.Is(err, context.Canceled):
		return stats.ErrCanceled
	case errors.As(err, &dns): // before timeouts: a resolver that timed out is a DNS failure
		return stats.ErrDNS
	case errors.As(err, &record), errors.As(err, &verify), errors.As(err, &alert), errors.As(err, &authority),
		errors.As(err, &hostname), errors.As(err, &invalid):
		return stats.ErrTLS
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return stats.ErrTimeout
	case errors.As(err, &ne) && ne.Timeout():
		return stats.ErrTimeout
	case errors.Is(err, ErrNoEndpoints), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EADDRNOTAVAIL):
		return stats.ErrRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return stats.ErrReset
	}
	// Libraries that flatten errors into text (fasthttp, grpc transport) still say what happened.
	msg := err.Error()
	switch {
	case strings.Contains(msg, "no such host"), strings.Contains(msg, "lookup "):
		return stats.ErrDNS
	case strings.Contains(msg, "tls: "), strings.Contains(msg, "x509: "), strings.Contains(msg, "HTTP response to HTTPS client"):
		return stats.ErrTLS
	case strings.Contains(msg, "connection refused"):
		return stats.ErrRefused
	case strings.Contains(msg, "timeout"), strings.Contains(msg, "timed out"), strings.Contains(msg, "deadline"):
		return stats.ErrTimeout
	case strings.Contains(msg, "connection reset"), strings.Contains(msg, "broken pipe"),
		strings.Contains(msg, "EOF"), strings.Contains(msg, "connection closed"), strings.Contains(msg, "closed the connection"):
		return stats.ErrReset
	}
	return stats.ErrOther
}

// FailureStatus is the inbound status that reports a failed call: 504 for a timeout, 503 when no connection
// could be made, 502 for a broken connection or a 5xx answer.
func FailureStatus(r Response) int {
	if r.Status != 0 {
		return 502
	}
	switch r.Err {
	case stats.ErrTimeout:
		return 504
	case stats.ErrRefused:
		return 503
	}
	return 502
}
