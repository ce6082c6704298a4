package alerting_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"coinpulse"
	"coinpulse/internal/alerting"
	"coinpulse/internal/market"
	"coinpulse/internal/sqlite"
)

var snapSeq int

func snapshot(at time.Time, prices map[string]float64) *market.Snapshot {
	var ds []coinpulse.CoinDetail
	for id, p := range prices {
		var d coinpulse.CoinDetail
		mcap := p * 1000
		d.ID, d.Symbol, d.Name, d.CurrentPrice, d.MarketCap = id, id[:3], id, p, &mcap
		ds = append(ds, d)
	}
	snapSeq++
	return market.Build("t"+strconv.Itoa(snapSeq), at, "test", true, ds, nil, 0)
}

func event(a *coinpulse.Alert) coinpulse.Event {
	return coinpulse.Event{ID: "msg_" + strconv.FormatInt(a.ID, 10), Type: coinpulse.EventAlertTriggered, Payload: []byte(`{}`)}
}

// failingStore fails FireAlerts while fail is set.
type failingStore struct {
	coinpulse.AlertStore
	fail bool
}

func (s *failingStore) FireAlerts(ctx context.Context, fs []coinpulse.Firing, ev coinpulse.EventFunc) ([]coinpulse.Alert, error) {
	if s.fail {
		return nil, errors.New("database unavailable")
	}
	return s.AlertStore.FireAlerts(ctx, fs, ev)
}

func TestEvaluator(t *testing.T) {
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "e.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	u := &coinpulse.User{Email: "e@example.com", Tier: coinpulse.TierPro}
	if err := db.CreateUser(ctx, u); err != nil {
		t.Fatal(err)
	}
	o := coinpulse.Owner{UserID: u.ID, Mode: coinpulse.ModeLive}
	now := time.Now().UTC().Truncate(time.Second)
	create := func(coin string, target int64, c coinpulse.Condition) *coinpulse.Alert {
		a := &coinpulse.Alert{Owner: o, CoinID: coin, CoinSymbol: coin[:3], TargetPrice: decimal.NewFromInt(target), Condition: c, IsActive: true, CreatedAt: now}
		if err := db.CreateAlert(ctx, a, -1); err != nil {
			t.Fatal(err)
		}
		return a
	}
	// Armed before the evaluator starts: an alert already crossed fires at
	// the first tick (a crossing while the server was down).
	down := create("bitcoin", 100, coinpulse.Above)
	later := create("bitcoin", 200, coinpulse.Above)
	below := create("ethereum", 50, coinpulse.Below)

	store := &failingStore{AlertStore: db}
	var announced []int64
	ev := alerting.NewEvaluator(alerting.EvaluatorConfig{Store: store, Event: event, Clock: func() time.Time { return now },
		OnFire: func(fired []coinpulse.Alert) {
			for _, a := range fired {
				announced = append(announced, a.ID)
			}
		}})

	ids := func(as []coinpulse.Alert) []int64 {
		var out []int64
		for _, a := range as {
			out = append(out, a.ID)
		}
		return out
	}
	fired, err := ev.Evaluate(ctx, snapshot(now, map[string]float64{"bitcoin": 150, "ethereum": 60}))
	if err != nil || len(fired) != 1 || fired[0].ID != down.ID {
		t.Fatalf("first tick fired %v, %v; want [%d]", ids(fired), err, down.ID)
	}
	if fired[0].IsActive || fired[0].TriggeredAt == nil || !fired[0].TriggeredPrice.Decimal.Equal(decimal.NewFromInt(150)) {
		t.Fatalf("fired alert %+v", fired[0])
	}
	// Price equal to the target: nothing.
	if fired, err := ev.Evaluate(ctx, snapshot(now.Add(time.Second), map[string]float64{"bitcoin": 200, "ethereum": 50})); err != nil || len(fired) != 0 {
		t.Fatalf("tick at the targets fired %v, %v", ids(fired), err)
	}
	// The store fails: nothing is lost, the next tick fires.
	store.fail = true
	if _, err := ev.Evaluate(ctx, snapshot(now.Add(2*time.Second), map[string]float64{"bitcoin": 250, "ethereum": 40})); err == nil {
		t.Fatal("want the store's error")
	}
	store.fail = false
	fired, err = ev.Evaluate(ctx, snapshot(now.Add(3*time.Second), map[string]float64{"bitcoin": 250, "ethereum": 40}))
	if err != nil || len(fired) != 2 {
		t.Fatalf("after the failure fired %v, %v; want %d and %d", ids(fired), err, later.ID, below.ID)
	}
	// Fired alerts stay fired; an alert armed by another node (straight in
	// the store, not through Armed) is found by the next poll.
	other := create("ethereum", 45, coinpulse.Below)
	fired, err = ev.Evaluate(ctx, snapshot(now.Add(4*time.Second), map[string]float64{"bitcoin": 300, "ethereum": 30}))
	if err != nil || len(fired) != 1 || fired[0].ID != other.ID {
		t.Fatalf("fired %v, %v; want only [%d]", ids(fired), err, other.ID)
	}
	// Re-enabled: armed again, fires again once.
	if _, err := db.ToggleAlert(ctx, o, down.ID, -1, now); err != nil { // off (already inactive: on)
		t.Fatal(err)
	}
	a, err := db.Alert(ctx, o, down.ID)
	if err != nil || !a.IsActive {
		t.Fatalf("re-enabled alert %+v, %v", a, err)
	}
	for range 2 {
		fired, err = ev.Evaluate(ctx, snapshot(now.Add(5*time.Second), map[string]float64{"bitcoin": 300, "ethereum": 30}))
		if err != nil {
			t.Fatal(err)
		}
		if len(fired) > 0 && (len(fired) != 1 || fired[0].ID != down.ID) {
			t.Fatalf("fired %v after re-enable; want only [%d]", ids(fired), down.ID)
		}
	}
	want := []int64{down.ID, later.ID, below.ID, other.ID, down.ID}
	if len(announced) != len(want) {
		t.Fatalf("announced %v, want %v (in some order within a tick)", announced, want)
	}
	if ev.Index().Len() != 0 {
		t.Fatalf("index holds %d entries, want 0", ev.Index().Len())
	}
}

// Two nodes: an alert that node A arms and fires before node B has ever
// seen it armed still reaches B's announcements (its WebSocket clients),
// once.
func TestEvaluatorAnnouncesOtherNodesFirings(t *testing.T) {
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "e.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	u := &coinpulse.User{Email: "n@example.com", Tier: coinpulse.TierPro}
	if err := db.CreateUser(ctx, u); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	clock := func() time.Time { return now }
	var heardA, heardB []int64
	a := alerting.NewEvaluator(alerting.EvaluatorConfig{Store: db, Event: event, Clock: clock,
		OnFire: func(fs []coinpulse.Alert) {
			for _, f := range fs {
				heardA = append(heardA, f.ID)
			}
		}})
	b := alerting.NewEvaluator(alerting.EvaluatorConfig{Store: db, Event: event, Clock: clock,
		OnFire: func(fs []coinpulse.Alert) {
			for _, f := range fs {
				heardB = append(heardB, f.ID)
			}
		}})
	// Both nodes have loaded (an empty store) at the first tick.
	first := snapshot(now, map[string]float64{"bitcoin": 100})
	for _, ev := range []*alerting.Evaluator{a, b} {
		if _, err := ev.Evaluate(ctx, first); err != nil {
			t.Fatal(err)
		}
	}
	al := &coinpulse.Alert{Owner: coinpulse.Owner{UserID: u.ID, Mode: coinpulse.ModeLive}, CoinID: "bitcoin", CoinSymbol: "btc",
		TargetPrice: decimal.NewFromInt(150), Condition: coinpulse.Above, IsActive: true, CreatedAt: now}
	if err := db.CreateAlert(ctx, al, -1); err != nil {
		t.Fatal(err)
	}
	a.Armed(al) // created through node A
	tick := snapshot(now.Add(time.Second), map[string]float64{"bitcoin": 200})
	if _, err := a.Evaluate(ctx, tick); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Evaluate(ctx, tick); err != nil { // B polls after A fired: never sees it armed
		t.Fatal(err)
	}
	for range 2 {
		later := snapshot(now.Add(2*time.Second), map[string]float64{"bitcoin": 300})
		for _, ev := range []*alerting.Evaluator{a, b} {
			if _, err := ev.Evaluate(ctx, later); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(heardA) != 1 || heardA[0] != al.ID || len(heardB) != 1 || heardB[0] != al.ID {
		t.Fatalf("node A announced %v, node B %v; want [%d] each", heardA, heardB, al.ID)
	}
}

// Entitled holds the crossed alerts of accounts without alerts, armed, and
// a failed look-up holds the account's crossed alerts for the next tick.
func TestEvaluatorHoldsAlertsWithoutEntitlement(t *testing.T) {
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "e.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	now := time.Now().UTC().Truncate(time.Second)
	alert := func(email string) (*coinpulse.User, *coinpulse.Alert) {
		u := &coinpulse.User{Email: email, Tier: coinpulse.TierPro}
		if err := db.CreateUser(ctx, u); err != nil {
			t.Fatal(err)
		}
		a := &coinpulse.Alert{Owner: coinpulse.Owner{UserID: u.ID, Mode: coinpulse.ModeLive}, CoinID: "bitcoin", CoinSymbol: "btc",
			TargetPrice: decimal.NewFromInt(100), Condition: coinpulse.Above, IsActive: true, CreatedAt: now}
		if err := db.CreateAlert(ctx, a, -1); err != nil {
			t.Fatal(err)
		}
		return u, a
	}
	paying, pa := alert("paying@example.com")
	lapsed, la := alert("lapsed@example.com")
	entitled := map[int64]bool{paying.ID: true}
	failing := map[int64]bool{}
	looks := 0
	ev := alerting.NewEvaluator(alerting.EvaluatorConfig{Store: db, Event: event, Clock: func() time.Time { return now },
		Entitled: func(_ context.Context, id int64) (coinpulse.Entitlement, error) {
			looks++
			if failing[id] {
				return coinpulse.Entitlement{}, errors.New("database unavailable")
			}
			return coinpulse.Entitlement{Alerts: entitled[id], Webhooks: entitled[id]}, nil
		}})
	tick := func(sec int) ([]coinpulse.Alert, error) {
		return ev.Evaluate(ctx, snapshot(now.Add(time.Duration(sec)*time.Second), map[string]float64{"bitcoin": 150}))
	}

	failing[paying.ID], failing[lapsed.ID] = true, true
	if fired, err := tick(0); err != nil || len(fired) != 0 {
		t.Fatalf("failed look-ups: fired %+v, %v; want nothing, and no error", fired, err)
	}
	if ev.Index().Len() != 2 {
		t.Fatalf("after failed look-ups the index holds %d, want both alerts", ev.Index().Len())
	}
	// One account's failed look-up holds its alerts alone.
	failing[paying.ID] = false
	fired, err := tick(1)
	if err != nil || len(fired) != 1 || fired[0].ID != pa.ID {
		t.Fatalf("fired %+v, %v; want only the paying account's %d", fired, err, pa.ID)
	}
	if _, armed := ev.Index().Get(la.ID); !armed {
		t.Fatal("the lapsed account's alert left the index")
	}
	if a, err := db.Alert(ctx, la.Owner, la.ID); err != nil || !a.IsActive || a.TriggeredAt != nil {
		t.Fatalf("the held alert in the store: %+v, %v", a, err)
	}
	failing[lapsed.ID] = false
	looks = 0
	if fired, err := tick(2); err != nil || len(fired) != 0 || looks != 1 {
		t.Fatalf("held again: fired %+v, %v, %d look-ups; want none, one look-up", fired, err, looks)
	}
	entitled[lapsed.ID] = true
	if fired, err := tick(3); err != nil || len(fired) != 1 || fired[0].ID != la.ID {
		t.Fatalf("entitled again: fired %+v, %v; want %d", fired, err, la.ID)
	}
}

// A target is exact (up to 18 decimal places); prices are float64s. The
// index crosses an alert exactly when the price is past the exact target,
// also where the nearest float64 to the target is the price itself.
func TestEntryTargetIsExact(t *testing.T) {
	one := 1.0
	after, before := math.Nextafter(one, 2), math.Nextafter(one, 0)
	for _, tc := range []struct {
		target string
		cond   coinpulse.Condition
		price  float64
		want   bool
	}{
		{"0.999999999999999999", coinpulse.Above, one, true}, // rounds to 1
		{"0.999999999999999999", coinpulse.Above, before, false},
		{"1.000000000000000001", coinpulse.Below, one, true}, // rounds to 1
		{"1.000000000000000001", coinpulse.Below, after, false},
		{"1", coinpulse.Above, one, false}, // strictly past
		{"1", coinpulse.Above, after, true},
		{"1", coinpulse.Below, one, false},
		{"1", coinpulse.Below, before, true},
		{"1.000000000000000001", coinpulse.Above, one, false},
		{"1.000000000000000001", coinpulse.Above, after, true},
		{"0.999999999999999999", coinpulse.Below, one, false},
		{"0.999999999999999999", coinpulse.Below, before, true},
		{"0.1", coinpulse.Above, 0.1, false}, // the float 0.1 is over 0.1: does not count
		{"0.1", coinpulse.Below, 0.1, false},
		{"999999999999999.999999999999999999", coinpulse.Above, 1e15, true},
	} {
		if got := crosses(tc.target, tc.cond, tc.price); got != tc.want {
			t.Errorf("%s %s at a price of %v: crossed %v, want %v", tc.cond, tc.target, tc.price, got, tc.want)
		}
	}
	// Random targets of 1 to 18 decimal places, and the floats nearest
	// them and either side: crossed exactly when the price's decimal (as
	// the API shows it) is past the target.
	r := rand.New(rand.NewPCG(7, 8))
	for range 20_000 {
		target := decimal.New(r.Int64N(1e18), -int32(1+r.IntN(18))).Add(decimal.New(r.Int64N(1000), 0))
		if !target.IsPositive() {
			continue
		}
		near := target.InexactFloat64()
		for _, price := range []float64{math.Nextafter(near, 0), near, math.Nextafter(near, 2e15)} {
			shown := decimal.RequireFromString(strconv.FormatFloat(price, 'f', -1, 64))
			for _, cond := range []coinpulse.Condition{coinpulse.Above, coinpulse.Below} {
				want := shown.GreaterThan(target)
				if cond == coinpulse.Below {
					want = shown.LessThan(target)
				}
				if got := crosses(target.String(), cond, price); got != want {
					t.Fatalf("%s %s at a price of %v (%s): crossed %v, want %v", cond, target, price, shown, got, want)
				}
			}
		}
	}
}

// crosses reports whether an index holding one alert on target crosses it
// at price.
func crosses(target string, cond coinpulse.Condition, price float64) bool {
	ix := alerting.NewIndex()
	ix.Add(alerting.EntryOf(&coinpulse.Alert{ID: 1, ArmedSeq: 1, CoinID: "usdc", TargetPrice: decimal.RequireFromString(target), Condition: cond}))
	return len(ix.Cross(nil, "usdc", price)) == 1
}
