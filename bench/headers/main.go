// Command headers is the server of bench/headers.sh: bare net/http, no
// Coinpulse, answering every request with one 422-byte JSON body and the
// header keys of a Coinpulse market answer. It tells what the number of
// keys in the header map costs net/http itself: a Coinpulse answer has 4
// keys with limits off and 9 with them on, and Go keeps a map of up to 8
// entries in one small group but moves a ninth into a hash table, in the
// handler's map and again in the copy net/http writes from.
//
//	go run ./bench/headers -keys 9 -addr 127.0.0.1:8099
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// header is one key of the answer and its value, as Coinpulse sends them
// for GET /api/v1/markets/global: first the 4 of every market answer, then
// the 5 that limits add.
type header struct{ key, value string }

var headers = []header{
	{"Content-Type", "application/json; charset=utf-8"},
	{"X-Request-Id", "req_c0652e77212a1"},
	{"Etag", `"mwwiptc0.1xwuyfsn3ea4u"`},
	{"Cache-Control", "private, max-age=55"},
	{"X-Ratelimit-Limit", "100000000"},
	{"X-Ratelimit-Remaining", "99999999"},
	{"X-Ratelimit-Reset", "1795635006"},
	{"Ratelimit", `"second";r=99999999;t=1, "minute";r=99999999;t=1`},
	{"Ratelimit-Policy", `"second";q=100000000;w=1, "minute";q=100000000;w=60`},
}

// body is 422 bytes, as the benchmarked Coinpulse answer.
var body = func() []byte {
	b := `{"success":true,"data":{"total_market_cap_usd":"1234567890123.45","total_volume_24h_usd":"98765432101.23",` +
		`"btc_dominance":"41.2","eth_dominance":"18.7","active_coins":1000},"meta":{"request_id":"req_c0652e77212a1",` +
		`"timestamp":"2026-11-25T19:30:05Z","as_of":"2026-11-25T19:29:05Z","source":"simulated"}}`
	return []byte(b + strings.Repeat(" ", 421-len(b)) + "\n")
}()

func main() {
	addr := flag.String("addr", "127.0.0.1:8099", "address to listen on")
	keys := flag.Int("keys", 4, "header keys per answer, 1 to 9: 4 is Coinpulse's with limits off, 9 with them on")
	sameBytes := flag.Bool("same-bytes", false, "pad the Cache-Control value so that the answer is as long as with 9 keys")
	flag.Parse()
	if *keys < 1 || *keys > len(headers) {
		fmt.Fprintf(os.Stderr, "headers: -keys must be 1 to %d\n", len(headers))
		os.Exit(2)
	}
	names := make([]string, *keys)
	values := make([][]string, *keys)
	for i, h := range headers[:*keys] {
		names[i], values[i] = h.key, []string{h.value}
	}
	if *sameBytes {
		missing := 0
		for _, h := range headers[*keys:] {
			missing += len(h.key) + len(": ") + len(h.value) + len("\r\n")
		}
		for i, n := range names {
			if n == "Cache-Control" && missing > 0 {
				pad := ", x=" + strings.Repeat("a", max(missing-len(", x="), 0))
				values[i] = []string{headers[i].value + pad}
			}
		}
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		for i, n := range names {
			h[n] = values[i]
		}
		w.WriteHeader(http.StatusOK)
		w.Write(body)
	})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("listening on %s with %d header keys\n", ln.Addr(), *keys)
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.Serve(ln))
}
