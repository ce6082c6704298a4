package notify_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"coinpulse"
	"coinpulse/internal/notify"
	"coinpulse/internal/sqlite"
)

// BenchmarkFireAndDeliver1000 is the delivery figure: 1,000 alerts
// fire in one tick (one FireAlerts call, as the evaluator makes it) and a
// running Dispatcher delivers them to a local receiver. It reports
// ms/1000-delivered: from the start of FireAlerts to the receiver holding
// all 1,000 distinct webhook-ids (goal: under 2,000 ms), on SQLite.
func BenchmarkFireAndDeliver1000(b *testing.B) {
	const n = 1000
	ctx := context.Background()
	var (
		mu   sync.Mutex
		seen = map[string]bool{}
		all  = make(chan struct{}, 1)
	)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		seen[r.Header.Get(notify.HeaderID)] = true
		if len(seen) == n {
			all <- struct{}{}
		}
		mu.Unlock()
	}))
	defer recv.Close()

	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		db, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "bench.db"))
		if err != nil {
			b.Fatal(err)
		}
		u := &coinpulse.User{Email: "bench" + strconv.Itoa(i) + "@example.com", Tier: coinpulse.TierEnterprise}
		if err := db.CreateUser(ctx, u); err != nil {
			b.Fatal(err)
		}
		o := coinpulse.Owner{UserID: u.ID, Mode: coinpulse.ModeLive}
		secret, _ := notify.NewSecret()
		if err := db.CreateWebhook(ctx, &coinpulse.Webhook{Owner: o, URL: recv.URL, Events: []string{coinpulse.EventAlertTriggered}, Secret: secret}, -1); err != nil {
			b.Fatal(err)
		}
		fs := make([]coinpulse.Firing, n)
		now := time.Now().UTC()
		for j := range fs {
			a := &coinpulse.Alert{Owner: o, CoinID: "bitcoin", CoinSymbol: "btc", TargetPrice: decimal.NewFromInt(int64(1000 + j)),
				Condition: coinpulse.Above, IsActive: true, CreatedAt: now}
			if err := db.CreateAlert(ctx, a, -1); err != nil {
				b.Fatal(err)
			}
			fs[j] = coinpulse.Firing{AlertID: a.ID, ArmedSeq: a.ArmedSeq, Price: decimal.NewFromInt(100000), At: now}
		}
		mu.Lock()
		clear(seen)
		mu.Unlock()
		d := notify.NewDispatcher(db, notify.NewSender(notify.SenderOptions{AllowPrivate: true}), nil, nil, notify.DispatchOptions{})
		// As serve's (api.Server.Entitlement): each delivery reads its
		// account.
		d.SetEntitled(func(ctx context.Context, id int64) (coinpulse.Entitlement, error) {
			u, err := db.UserByID(ctx, id)
			if err != nil {
				return coinpulse.Entitlement{}, err
			}
			ok := !u.SubscriptionExpired(time.Now())
			return coinpulse.Entitlement{Alerts: ok, Webhooks: ok}, nil
		})
		dctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { d.Run(dctx); close(done) }()
		event := func(a *coinpulse.Alert) coinpulse.Event {
			return coinpulse.Event{ID: "msg_bench" + strconv.FormatInt(a.ID, 10), Type: coinpulse.EventAlertTriggered,
				Payload: []byte(`{"type":"alert.triggered","data":{"alert":{"id":` + strconv.FormatInt(a.ID, 10) + `}}}`), CreatedAt: now}
		}

		b.StartTimer()
		start := time.Now()
		fired, err := db.FireAlerts(ctx, fs, event)
		if err != nil || len(fired) != n {
			b.Fatalf("FireAlerts: %d fired, %v", len(fired), err)
		}
		d.Wake()
		select {
		case <-all:
		case <-time.After(60 * time.Second):
			mu.Lock()
			b.Fatalf("only %d of %d delivered after 60 s", len(seen), n)
		}
		total += time.Since(start)
		b.StopTimer()
		stop()
		<-done
		db.Close()
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/1000-delivered")
}
