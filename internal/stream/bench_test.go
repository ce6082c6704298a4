package stream

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// BenchmarkFanout measures the fan-out of one tick over real WebSocket
// connections on loopback: 1,000 clients follow 100 coins each (of a
// market of 500 that all update every tick); the latency of a client is
// from the moment PublishPrices is called to the moment the client has
// read the whole message. Each iteration is one tick; p50, p99 and max are
// over every client of every tick. "distinct" gives every client its own
// random set of coins (every message is assembled from its own list);
// "shared" gives them all the same set (one list, shared). Three warm-up
// ticks are not counted; with STREAM_BENCH_COLD=1 every tick follows two
// garbage collections, like a real tick a minute after the previous one.
// -v logs every tick's slowest client.
//
//	go test -run '^$' -bench Fanout -benchtime 100x ./internal/stream/
func BenchmarkFanout(b *testing.B) {
	for _, distinct := range []bool{true, false} {
		name := "1000clients-100coins-shared"
		if distinct {
			name = "1000clients-100coins-distinct"
		}
		b.Run(name, func(b *testing.B) { benchFanout(b, 1000, 100, 500, distinct) })
	}
}

// coldTicks runs two garbage collections before each tick, as happen in
// the minute between real ticks: pooled buffers are freed and goroutine
// stacks shrunk, so every tick pays for them again.
var coldTicks = os.Getenv("STREAM_BENCH_COLD") != ""

func benchFanout(b *testing.B, clients, perClient, universe int, distinct bool) {
	hub := NewHub(Config{Heartbeat: -1})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hub.Serve(w, r, &Principal{UserID: 1, Mode: "live", KeyID: 1})
	}))
	defer srv.Close()
	url := "ws" + strings.TrimPrefix(srv.URL, "http")

	coins := make([]string, universe)
	updates := make([]PriceUpdate, universe)
	for i := range coins {
		coins[i] = fmt.Sprintf("coin-%03d", i)
		updates[i] = PriceUpdate{CoinID: coins[i], Symbol: fmt.Sprintf("c%03d", i), Price: 1000 + float64(i)*1.37,
			PriceChangePercentage24h: pf(-1.25), MarketCap: pf(1.23e11), TotalVolume: pf(4.56e9), LastUpdated: time.Now()}
	}

	var (
		t0       atomic.Pointer[time.Time]
		target   atomic.Int64
		received atomic.Int64
		allIn    = make(chan struct{}, 1)
		lat      = make([][]time.Duration, clients)
		conns    = make([]*websocket.Conn, clients)
		readers  sync.WaitGroup
		dialers  sync.WaitGroup
		sem      = make(chan struct{}, 32)
		failed   atomic.Value
	)
	for i := range clients {
		dialers.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ws, _, err := websocket.Dial(ctx, url, nil)
			if err != nil {
				failed.Store(err)
				return
			}
			ws.SetReadLimit(-1)
			set := coins[:perClient]
			if distinct {
				r := rand.New(rand.NewPCG(uint64(i), 7))
				set = slices.Clone(coins)
				r.Shuffle(len(set), func(a, b int) { set[a], set[b] = set[b], set[a] })
				set = set[:perClient]
			}
			msg := `{"type":"subscribe","channel":"prices","coins":["` + strings.Join(set, `","`) + `"]}`
			if err := ws.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
				failed.Store(err)
				return
			}
			for _, want := range []string{`{"type":"welcome"`, `{"type":"subscribed"`} {
				_, data, err := ws.Read(ctx)
				if err != nil || !bytes.HasPrefix(data, []byte(want)) {
					failed.Store(fmt.Errorf("got %.80s, %v; want %s", data, err, want))
					return
				}
			}
			conns[i] = ws
		})
	}
	dialers.Wait()
	if err := failed.Load(); err != nil {
		b.Fatal(err)
	}
	prefix := []byte(`{"type":"prices"`)
	for i, ws := range conns {
		readers.Go(func() {
			var buf bytes.Buffer
			for {
				_, r, err := ws.Reader(context.Background())
				if err != nil {
					return
				}
				buf.Reset()
				if _, err := buf.ReadFrom(r); err != nil {
					return
				}
				if bytes.HasPrefix(buf.Bytes(), prefix) {
					lat[i] = append(lat[i], time.Since(*t0.Load()))
					if received.Add(1) == target.Load() {
						allIn <- struct{}{}
					}
				}
			}
		})
	}

	var publish time.Duration
	ticks := 0
	tick := func() {
		if coldTicks {
			b.StopTimer()
			runtime.GC() // twice: empties the sync.Pools, shrinks stacks
			runtime.GC()
			b.StartTimer()
		}
		target.Add(int64(clients))
		now := time.Now()
		t0.Store(&now)
		hub.PublishPrices(now, fmt.Sprint(ticks), updates)
		publish += time.Since(now)
		ticks++
		select {
		case <-allIn:
		case <-time.After(30 * time.Second):
			b.Fatalf("tick %d: %d of %d messages arrived", ticks, received.Load(), target.Load())
		}
	}
	// Warm up (buffers, goroutine stacks), as a server long running is.
	for range 3 {
		tick()
	}
	for i := range lat {
		lat[i] = lat[i][:0]
	}
	publish, ticks = 0, 0
	b.ReportAllocs()
	for b.Loop() {
		tick()
	}
	b.StopTimer()

	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	if testing.Verbose() {
		for t := range ticks {
			var worst time.Duration
			for _, l := range lat {
				worst = max(worst, l[t])
			}
			b.Logf("tick %d: slowest client %v", t, worst)
		}
	}
	slices.Sort(all)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(all[len(all)/2]), "p50-ms")
	b.ReportMetric(ms(all[len(all)*99/100]), "p99-ms")
	b.ReportMetric(ms(all[len(all)-1]), "max-ms")
	b.ReportMetric(ms(publish)/float64(ticks), "publish-ms")

	hub.Close()
	readers.Wait()
	if n := hub.Len(); n != 0 {
		b.Fatalf("Len = %d after Close", n)
	}
}
