package notify_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"coinpulse"
	"coinpulse/internal/notify"
	"coinpulse/internal/sqlite"
	"coinpulse/internal/testlog"
)

// newWebhookEnv makes a store with an account whose one webhook endpoint
// is a receiver answering with receive, and n test events queued for it.
func newWebhookEnv(t *testing.T, n int, receive http.HandlerFunc) (*sqlite.DB, coinpulse.Owner, *coinpulse.Webhook) {
	t.Helper()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "d.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	recv := httptest.NewServer(receive)
	t.Cleanup(recv.Close)
	u := &coinpulse.User{Email: "ops@example.com", Tier: coinpulse.TierEnterprise}
	if err := db.CreateUser(ctx, u); err != nil {
		t.Fatal(err)
	}
	o := coinpulse.Owner{UserID: u.ID, Mode: coinpulse.ModeLive}
	secret, _ := notify.NewSecret()
	wh := &coinpulse.Webhook{Owner: o, URL: recv.URL, Events: []string{coinpulse.EventAlertTriggered}, Secret: secret}
	if err := db.CreateWebhook(ctx, wh, -1); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		del := &coinpulse.Delivery{Kind: coinpulse.KindWebhook, Owner: o, EndpointID: wh.ID, EventID: fmt.Sprint("msg_", i+1), EventType: coinpulse.EventWebhookTest,
			Payload: []byte(`{"type":"webhook.test"}`)}
		if err := db.EnqueueDelivery(ctx, del); err != nil {
			t.Fatal(err)
		}
	}
	return db, o, wh
}

// A delivery the sender refuses to send to a non-public address (an
// endpoint registered while private addresses were allowed, or a name
// that now resolves inside) is recorded in the delivery log, retried, and
// logged for the operator.
func TestDispatcherLogsARefusedAddress(t *testing.T) {
	ctx := context.Background()
	var hits atomic.Int32
	db, o, wh := newWebhookEnv(t, 1, func(http.ResponseWriter, *http.Request) { hits.Add(1) })
	var logs testlog.Buffer
	d := notify.NewDispatcher(db, notify.NewSender(notify.SenderOptions{}), nil, slog.New(slog.NewTextHandler(&logs, nil)),
		notify.DispatchOptions{Poll: 10 * time.Millisecond})
	dctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { d.Run(dctx); close(done) }()
	defer func() { stop(); <-done }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ds, err := db.Deliveries(ctx, o, wh.ID, 0, 10)
		if err == nil && len(ds) == 1 && ds[0].Attempts == 1 {
			if ds[0].Status != coinpulse.DeliveryPending || !strings.Contains(ds[0].LastError, "refused to connect to 127.0.0.1, a loopback address") {
				t.Errorf("delivery %+v", ds[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no attempt after 10 s: %+v %v", ds, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	<-done
	if got := logs.String(); !strings.Contains(got, "webhook delivery refused") || !strings.Contains(got, "host=127.0.0.1") || !strings.Contains(got, "a loopback address") {
		t.Errorf("log:\n%s", got)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the receiver got %d requests", n)
	}
}

// claimWatch is a store that counts the deliveries claimed and not yet
// recorded, keeping the most there were at once.
type claimWatch struct {
	*sqlite.DB
	mu               sync.Mutex
	outstanding, max int
}

func (c *claimWatch) ClaimDeliveries(ctx context.Context, kind coinpulse.DeliveryKind, now time.Time, lease time.Duration, n int) ([]coinpulse.Delivery, error) {
	ds, err := c.DB.ClaimDeliveries(ctx, kind, now, lease, n)
	c.mu.Lock()
	c.outstanding += len(ds)
	c.max = max(c.max, c.outstanding)
	c.mu.Unlock()
	return ds, err
}

func (c *claimWatch) RecordAttempt(ctx context.Context, id int64, a coinpulse.Attempt) error {
	c.mu.Lock()
	c.outstanding--
	c.mu.Unlock()
	return c.DB.RecordAttempt(ctx, id, a)
}

// failingClaims is a store whose claims fail while fail is set, as
// during a database outage.
type failingClaims struct {
	*sqlite.DB
	fail     atomic.Bool
	failures atomic.Int64
	claims   atomic.Int64 // that worked
}

func (f *failingClaims) ClaimDeliveries(ctx context.Context, kind coinpulse.DeliveryKind, now time.Time, lease time.Duration, n int) ([]coinpulse.Delivery, error) {
	if f.fail.Load() {
		f.failures.Add(1)
		return nil, fmt.Errorf("connection refused")
	}
	f.claims.Add(1)
	return f.DB.ClaimDeliveries(ctx, kind, now, lease, n)
}

// While claims fail (the database is down), the dispatcher logs a line at
// once and then at most one every ClaimLogEvery, by its clock, not one a
// poll (an audit: one ERROR a second for as long as the outage lasted);
// once claims work again a line says so, within ClaimLogEvery of the
// last, with the failures since it (a review: a database failing every
// other poll logged an ERROR and an INFO each time). (A poll whose
// webhook claim fails tries no e-mail claim.)
func TestDispatcherRationsClaimFailures(t *testing.T) {
	db, _, _ := newWebhookEnv(t, 0, func(http.ResponseWriter, *http.Request) {})
	store := &failingClaims{DB: db}
	store.fail.Store(true)
	var now atomic.Int64
	now.Store(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC).UnixNano())
	advance := func() { now.Add(int64(notify.ClaimLogEvery + time.Second)) }
	var logs testlog.Buffer
	d := notify.NewDispatcher(store, notify.NewSender(notify.SenderOptions{AllowPrivate: true}), nil, slog.New(slog.NewTextHandler(&logs, nil)),
		notify.DispatchOptions{Poll: 2 * time.Millisecond, Clock: func() time.Time { return time.Unix(0, now.Load()).UTC() }})
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	defer func() { stop(); <-done }()
	deadline := time.Now().Add(30 * time.Second)
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("no %s after 30 s\n%s", what, logs.String())
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	lines := func(s string) int { return logs.Count(s) }

	// An outage: one line at once, however many polls fail.
	waitFor("20 failed claims", func() bool { return store.failures.Load() >= 20 })
	if n := lines(`msg="claim deliveries"`); n != 1 {
		t.Fatalf("%d lines for %d failed claims within %s, want one\n%s", n, store.failures.Load(), notify.ClaimLogEvery, logs.String())
	}
	// ClaimLogEvery later, the next, counting the failures since.
	advance()
	waitFor("a second line", func() bool { return lines(`msg="claim deliveries"`) == 2 })
	m := regexp.MustCompile(`msg="claim deliveries".* failures=(\d+)\n`).FindAllStringSubmatch(logs.String(), -1)
	if len(m) != 2 {
		t.Errorf("%d lines that count failures, want 2\n%s", len(m), logs.String())
	} else if since, _ := strconv.Atoi(m[1][1]); m[0][1] != "1" || since < 19 {
		t.Errorf("the lines count %s and %s failures, want 1, then those since (at least 19)\n%s", m[0][1], m[1][1], logs.String())
	}
	// Claims work again: said once the line's time has come, not before.
	store.fail.Store(false)
	claims := store.claims.Load()
	waitFor("20 claims", func() bool { return store.claims.Load() >= claims+20 })
	if n := lines("claimed again"); n != 0 {
		t.Errorf("%d recovery lines within %s of the last line, want none yet\n%s", n, notify.ClaimLogEvery, logs.String())
	}
	advance()
	waitFor("a recovery line", func() bool { return lines("claimed again") == 1 })
	if !strings.Contains(logs.String(), `level=INFO msg="deliveries are claimed again" kind=webhook failures=`) {
		t.Errorf("recovery line:\n%s", logs.String())
	}
	// Another poll adds nothing.
	claims = store.claims.Load()
	waitFor("20 claims more", func() bool { return store.claims.Load() >= claims+20 })
	if n := lines("claimed again") + lines(`msg="claim deliveries"`); n != 3 {
		t.Errorf("%d lines, want 3\n%s", n, logs.String())
	}
}

// A node claims no more deliveries than it has workers free to send: a
// delivery claimed to wait in the node would lose its lease meanwhile, and
// another node would send it too (a multi-node audit: with the shortest
// lease, healthy nodes sent 140 of 400 webhooks twice).
func TestDispatcherClaimsOnlyWhatItCanSend(t *testing.T) {
	ctx := context.Background()
	const deliveries = 12
	db, o, wh := newWebhookEnv(t, deliveries, func(http.ResponseWriter, *http.Request) { time.Sleep(50 * time.Millisecond) })
	store := &claimWatch{DB: db}
	d := notify.NewDispatcher(store, notify.NewSender(notify.SenderOptions{AllowPrivate: true}), nil, slog.New(slog.NewTextHandler(io.Discard, nil)),
		notify.DispatchOptions{Poll: 10 * time.Millisecond, Workers: 3, Batch: 128})
	dctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { d.Run(dctx); close(done) }()
	defer func() { stop(); <-done }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ds, err := db.Deliveries(ctx, o, wh.ID, 0, 100)
		sent := 0
		for _, del := range ds {
			if del.Status == coinpulse.DeliveryDelivered {
				sent++
			}
		}
		if err == nil && sent == deliveries {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d delivered after 10 s (%v)", sent, deliveries, err)
		}
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	if store.max > 3 {
		t.Errorf("the dispatcher held %d deliveries claimed at once with 3 workers", store.max)
	}
}

// An attempt that outlives its lease (the node stalled) is not recorded
// over the claim another node has made since: that node records its own
// attempt, and this one logs what it dropped.
func TestDispatcherAttemptPastItsLease(t *testing.T) {
	ctx := context.Background()
	release := make(chan struct{})
	var hits atomic.Int32
	db, o, wh := newWebhookEnv(t, 1, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		<-release
	})
	var logs testlog.Buffer
	const lease = 100 * time.Millisecond
	d := notify.NewDispatcher(db, notify.NewSender(notify.SenderOptions{AllowPrivate: true}), nil, slog.New(slog.NewTextHandler(&logs, nil)),
		notify.DispatchOptions{Poll: 10 * time.Millisecond, Workers: 1, Lease: lease})
	dctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { d.Run(dctx); close(done) }()
	defer func() { stop(); <-done }()
	for deadline := time.Now().Add(10 * time.Second); hits.Load() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no attempt after 10 s")
		}
	}
	// Another node claims the delivery once the lease has ended.
	time.Sleep(lease)
	other, err := db.ClaimDeliveries(ctx, coinpulse.KindWebhook, time.Now(), time.Hour, 10)
	if err != nil || len(other) != 1 {
		t.Fatalf("the other node's claim: %v, %v", other, err)
	}
	close(release)
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(logs.String(), "outlived its lease"); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no warning after 10 s:\n%s", logs.String())
		}
	}
	ds, err := db.Deliveries(ctx, o, wh.ID, 0, 10)
	if err != nil || len(ds) != 1 || ds[0].Attempts != 0 || ds[0].Status != coinpulse.DeliveryPending {
		t.Fatalf("after the stalled attempt: %+v, %v", ds, err)
	}
	if err := db.RecordAttempt(ctx, other[0].ID, coinpulse.Attempt{Status: coinpulse.DeliveryDelivered, StatusCode: 204, Lease: other[0].LeaseUntil}); err != nil {
		t.Errorf("the other node's attempt: %v", err)
	}
}
