// Command nbio answers HTTP/1.1 keep-alive requests with a fixed "hello" through nbio's nbhttp, its handlers
// run inline on the poller (ServerExecutor), as the worker's fast path would.
package main

import (
	"flag"
	"log"
	"net/http"

	"github.com/lesismal/nbio/nbhttp"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:8080", "address to serve on")
	flag.Parse()
	body := []byte("hello")
	engine := nbhttp.NewEngine(nbhttp.Config{
		Network:        "tcp",
		Addrs:          []string{*addr},
		NPoller:        1,
		ServerExecutor: func(f func()) { f() },
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Set("Content-Length", "5") // as nginx answers: not chunked
			_, _ = w.Write(body)
		}),
	})
	if err := engine.Start(); err != nil {
		log.Fatal(err)
	}
	select {}
}
