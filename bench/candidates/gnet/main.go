// Command gnet answers HTTP/1.1 keep-alive requests with a fixed "hello" on gnet's event loop, taking each
// connection from a Go listener (Client.EnrollContext), as the worker would: one read per readiness event and
// one write per batch of requests, no goroutine per request.
package main

import (
	"bytes"
	"flag"
	"log"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
)

// maxHeader bounds a request's header block, as the worker's server does (4 KiB).
const maxHeader = 4096

type responder struct {
	gnet.BuiltinEventEngine
	head atomic.Pointer[[]byte] // the response up to its body, with a Date refreshed every second
}

var body = []byte("hello")

func (r *responder) refresh() {
	h := []byte("HTTP/1.1 200 OK\r\nServer: gnet\r\nDate: " + time.Now().UTC().Format(http1Date) +
		"\r\nContent-Type: text/plain\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n")
	r.head.Store(&h)
}

const http1Date = "Mon, 02 Jan 2006 15:04:05 GMT"

// OnTraffic answers every whole request buffered, in order, with one write.
func (r *responder) OnTraffic(c gnet.Conn) gnet.Action {
	in, _ := c.Peek(-1)
	var out []byte
	used := 0
	for {
		end := bytes.Index(in[used:], []byte("\r\n\r\n"))
		if end < 0 {
			break
		}
		used += end + 4
		out = append(append(out, *r.head.Load()...), body...)
	}
	if used == 0 && len(in) > maxHeader {
		return gnet.Close
	}
	_, _ = c.Discard(used)
	if len(out) > 0 {
		if _, err := c.Write(out); err != nil {
			return gnet.Close
		}
	}
	return gnet.None
}

func main() {
	addr := flag.String("listen", "127.0.0.1:8080", "address to serve on")
	flag.Parse()
	r := &responder{}
	r.refresh()
	go func() {
		for range time.Tick(time.Second) {
			r.refresh()
		}
	}()
	cli, err := gnet.NewClient(r, gnet.WithNumEventLoop(1), gnet.WithLockOSThread(false))
	if err != nil {
		log.Fatal(err)
	}
	if err := cli.Start(); err != nil {
		log.Fatal(err)
	}
	l, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	for {
		c, err := l.Accept()
		if err != nil {
			log.Fatal(err)
		}
		if _, err := cli.EnrollContext(c, nil); err != nil {
			log.Print(err)
		}
	}
}
