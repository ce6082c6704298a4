package storetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/shopspring/decimal"

	"coinpulse"
	"coinpulse/internal/ledger"
)

// d parses a decimal the test spells out.
// ignoreVersion leaves Version, which testPortfolioVersion checks, out of
// comparisons of portfolios.
var ignoreVersion = cmpopts.IgnoreFields(coinpulse.Portfolio{}, "Version")

func d(s string) decimal.Decimal { return decimal.RequireFromString(s) }

// wantDec fails t unless got is exactly want: the same digits, not merely
// a close number.
func wantDec(t *testing.T, what string, got decimal.Decimal, want string) {
	t.Helper()
	if got.String() != want {
		t.Errorf("%s = %s, want %s", what, got.String(), want)
	}
}

// live and test are the owners of user u.
func live(u *coinpulse.User) coinpulse.Owner {
	return coinpulse.Owner{UserID: u.ID, Mode: coinpulse.ModeLive}
}

func sandbox(u *coinpulse.User) coinpulse.Owner {
	return coinpulse.Owner{UserID: u.ID, Mode: coinpulse.ModeTest}
}

// newPortfolio creates a portfolio of o, created at t0, with no cap.
func newPortfolio(t *testing.T, s coinpulse.Store, o coinpulse.Owner, name string) *coinpulse.Portfolio {
	t.Helper()
	p := &coinpulse.Portfolio{Owner: o, Name: name, Description: name + "'s description", CreatedAt: t0}
	if err := s.CreatePortfolio(t.Context(), p, coinpulse.Unlimited); err != nil {
		t.Fatalf("CreatePortfolio(%s): %v", name, err)
	}
	return p
}

// getPortfolio returns the stored portfolio or fails t.
func getPortfolio(t *testing.T, s coinpulse.Store, o coinpulse.Owner, id int64) *coinpulse.Portfolio {
	t.Helper()
	p, err := s.Portfolio(t.Context(), o, id)
	if err != nil {
		t.Fatalf("Portfolio(%d): %v", id, err)
	}
	wantUTC(t, "Portfolio", portfolioTimes(p)...)
	return p
}

func portfolioTimes(p *coinpulse.Portfolio) []*time.Time {
	times := []*time.Time{&p.CreatedAt, &p.UpdatedAt, p.SyncedAt}
	for i := range p.Holdings {
		times = append(times, &p.Holdings[i].CreatedAt, &p.Holdings[i].UpdatedAt)
	}
	return times
}

// lot is a ledger.Lot of quantity q at price px.
func lot(q, px string) ledger.Lot {
	return ledger.Lot{Quantity: d(q), Price: d(px)}
}

// trade runs a trade of coin in portfolio pid and fails t on an error.
func trade(t *testing.T, s coinpulse.Store, o coinpulse.Owner, pid int64, coin string, now time.Time, apply coinpulse.TradeFunc) (coinpulse.Holding, coinpulse.Transaction) {
	t.Helper()
	h, tx, err := s.Trade(t.Context(), o, coinTrade(pid, coin, now), apply)
	if err != nil {
		t.Fatalf("Trade(%s in %d): %v", coin, pid, err)
	}
	return h, tx
}

// coinTrade names coin's holding in portfolio pid.
func coinTrade(pid int64, coin string, now time.Time) coinpulse.Trade {
	return coinpulse.Trade{PortfolioID: pid, CoinID: coin, CoinSymbol: strings.ToUpper(coin[:3]), CoinName: strings.ToUpper(coin[:1]) + coin[1:], Now: now}
}

// transactions returns all of a portfolio's transactions, newest first.
func transactions(t *testing.T, s coinpulse.Store, o coinpulse.Owner, pid int64) []coinpulse.Transaction {
	t.Helper()
	txns, total, err := s.Transactions(t.Context(), o, pid, coinpulse.TxPage{Limit: 1000})
	if err != nil {
		t.Fatalf("Transactions(%d): %v", pid, err)
	}
	if total != len(txns) {
		t.Errorf("Transactions(%d): total %d, but %d returned", pid, total, len(txns))
	}
	for i := range txns {
		wantUTC(t, "Transactions", &txns[i].ExecutedAt, &txns[i].CreatedAt)
	}
	return txns
}

func testCreatePortfolio(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "alice@example.com")
	o := live(u)
	p := &coinpulse.Portfolio{
		Owner: o, Name: "Long term", Description: "HODL",
		RealizedPL: d("123"), SyncedAt: ptr(t0), ID: 99, // ignored
		CreatedAt: t0.In(time.FixedZone("X", 3600)),
	}
	if err := s.CreatePortfolio(ctx, p, 3); err != nil {
		t.Fatalf("CreatePortfolio: %v", err)
	}
	if p.ID == 0 || p.ID == 99 {
		t.Errorf("CreatePortfolio set ID %d", p.ID)
	}
	want := &coinpulse.Portfolio{
		ID: p.ID, Owner: o, Name: "Long term", Description: "HODL",
		RealizedPL: decimal.Zero, CreatedAt: us(t0), UpdatedAt: us(t0), Version: 1, Holdings: []coinpulse.Holding{},
	}
	if diff := cmp.Diff(want, p); diff != "" {
		t.Errorf("portfolio after CreatePortfolio mismatch (-want +got):\n%s", diff)
	}
	wantUTC(t, "CreatePortfolio", portfolioTimes(p)...)
	if diff := cmp.Diff(want, getPortfolio(t, s, o, p.ID)); diff != "" {
		t.Errorf("Portfolio mismatch (-want +got):\n%s", diff)
	}

	// Without CreatedAt it is now.
	before := time.Now().Truncate(time.Microsecond)
	q := &coinpulse.Portfolio{Owner: o, Name: "Trading"}
	if err := s.CreatePortfolio(ctx, q, coinpulse.Unlimited); err != nil {
		t.Fatalf("CreatePortfolio: %v", err)
	}
	if q.CreatedAt.Before(before) || q.CreatedAt.After(time.Now()) || !q.UpdatedAt.Equal(q.CreatedAt) {
		t.Errorf("CreatedAt, UpdatedAt = %v, %v; want equal, now", q.CreatedAt, q.UpdatedAt)
	}
	if q.ID == p.ID {
		t.Errorf("two portfolios share ID %d", p.ID)
	}

	// Holdings come with both reads, oldest first.
	t1 := t0.Add(time.Hour)
	eth, _ := trade(t, s, o, p.ID, "ethereum", t1, ledger.BuyFunc(lot("2", "3000")))
	btc, _ := trade(t, s, o, p.ID, "bitcoin", t1.Add(time.Minute), ledger.BuyFunc(lot("0.5", "60000")))
	sol, _ := trade(t, s, o, q.ID, "solana", t1, ledger.BuyFunc(lot("10", "150")))
	gotP := getPortfolio(t, s, o, p.ID)
	if diff := cmp.Diff([]coinpulse.Holding{eth, btc}, gotP.Holdings); diff != "" {
		t.Errorf("Portfolio holdings mismatch (-want +got):\n%s", diff)
	}
	if !gotP.UpdatedAt.Equal(us(t1.Add(time.Minute))) {
		t.Errorf("UpdatedAt after trades = %v, want the last trade's %v", gotP.UpdatedAt, us(t1.Add(time.Minute)))
	}
	gotQ := getPortfolio(t, s, o, q.ID)
	if diff := cmp.Diff([]coinpulse.Holding{sol}, gotQ.Holdings); diff != "" {
		t.Errorf("Portfolio holdings mismatch (-want +got):\n%s", diff)
	}
	list, _, err := s.Portfolios(ctx, o, coinpulse.AllPortfolios)
	if err != nil {
		t.Fatalf("Portfolios: %v", err)
	}
	if diff := cmp.Diff([]coinpulse.Portfolio{*gotP, *gotQ}, list); diff != "" {
		t.Errorf("Portfolios mismatch (-want +got):\n%s", diff)
	}
	for i := range list {
		wantUTC(t, "Portfolios", portfolioTimes(&list[i])...)
	}

	// An owner with none gets an empty list.
	list, _, err = s.Portfolios(ctx, sandbox(u), coinpulse.AllPortfolios)
	if err != nil || list == nil || len(list) != 0 {
		t.Errorf("Portfolios of an owner with none = %v, %v; want an empty slice", list, err)
	}
}

func testCreatePortfolioInvalid(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "bob@example.com")
	err := s.CreatePortfolio(ctx, &coinpulse.Portfolio{Owner: coinpulse.Owner{UserID: u.ID, Mode: "prod"}, Name: "x"}, coinpulse.Unlimited)
	wantCode(t, err, coinpulse.CodeValidation)
	err = s.CreatePortfolio(ctx, &coinpulse.Portfolio{Owner: coinpulse.Owner{UserID: u.ID + 1000, Mode: coinpulse.ModeLive}, Name: "x"}, 5)
	wantCode(t, err, coinpulse.CodeNotFound)
	if list, _, err := s.Portfolios(ctx, live(u), coinpulse.AllPortfolios); err != nil || len(list) != 0 {
		t.Errorf("Portfolios = %v, %v; want none", list, err)
	}
}

func testPortfolioOwnerScoping(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "carol@example.com")
	mallory := newUser(t, s, "mallory@example.com")
	o := live(u)
	p := newPortfolio(t, s, o, "Main")
	h, _ := trade(t, s, o, p.ID, "bitcoin", t0, ledger.BuyFunc(lot("1", "50000")))
	if err := s.RecordValue(ctx, o, p.ID, 0, coinpulse.ValuePoint{At: t0, TotalValue: d("50000"), TotalCost: d("50000")}); err != nil {
		t.Fatalf("RecordValue: %v", err)
	}
	before := getPortfolio(t, s, o, p.ID)

	// Another user, and the same user in the other mode, see nothing.
	for _, other := range []coinpulse.Owner{live(mallory), sandbox(mallory), sandbox(u)} {
		t.Run(fmt.Sprintf("%d/%s", other.UserID, other.Mode), func(t *testing.T) {
			// Each has a portfolio of its own, which must not reveal u's.
			own := newPortfolio(t, s, other, "Own")
			list, _, err := s.Portfolios(ctx, other, coinpulse.AllPortfolios)
			if err != nil {
				t.Fatalf("Portfolios: %v", err)
			}
			if len(list) != 1 || list[0].ID != own.ID {
				t.Errorf("Portfolios lists %v, want only portfolio %d", list, own.ID)
			}
			_, err = s.Portfolio(ctx, other, p.ID)
			wantCode(t, err, coinpulse.CodeNotFound)
			_, err = s.UpdatePortfolio(ctx, other, p.ID, coinpulse.PortfolioPatch{Name: ptr("Mine")}, t0.Add(time.Hour))
			wantCode(t, err, coinpulse.CodeNotFound)
			_, _, err = s.Trade(ctx, other, coinTrade(p.ID, "bitcoin", t0.Add(time.Hour)), ledger.SellFunc(lot("1", "1")))
			wantCode(t, err, coinpulse.CodeNotFound)
			_, _, err = s.Trade(ctx, other, coinpulse.Trade{HoldingID: h.ID, Now: t0.Add(time.Hour)}, ledger.SellFunc(lot("1", "1")))
			wantCode(t, err, coinpulse.CodeNotFound)
			// Naming its own portfolio and u's holding does not help.
			_, _, err = s.Trade(ctx, other, coinpulse.Trade{HoldingID: h.ID, PortfolioID: own.ID, Now: t0.Add(time.Hour)}, ledger.SellFunc(lot("1", "1")))
			wantCode(t, err, coinpulse.CodeNotFound)
			wantCode(t, s.DeleteHolding(ctx, other, h.ID), coinpulse.CodeNotFound)
			_, _, err = s.Transactions(ctx, other, p.ID, coinpulse.TxPage{Limit: 10})
			wantCode(t, err, coinpulse.CodeNotFound)
			err = s.RecordValue(ctx, other, p.ID, 0, coinpulse.ValuePoint{At: t0.Add(time.Hour), TotalValue: d("1"), TotalCost: d("1")})
			wantCode(t, err, coinpulse.CodeNotFound)
			_, err = s.ValueHistory(ctx, other, p.ID, t0.Add(-time.Hour))
			wantCode(t, err, coinpulse.CodeNotFound)
			wantCode(t, s.DeletePortfolio(ctx, other, p.ID), coinpulse.CodeNotFound)
		})
	}

	// Nothing changed.
	if diff := cmp.Diff(before, getPortfolio(t, s, o, p.ID)); diff != "" {
		t.Errorf("portfolio changed by other owners (-before +after):\n%s", diff)
	}
	if n := len(transactions(t, s, o, p.ID)); n != 1 {
		t.Errorf("%d transactions, want 1", n)
	}
	points, err := s.ValueHistory(ctx, o, p.ID, t0.Add(-time.Hour))
	if err != nil || len(points) != 1 {
		t.Errorf("ValueHistory = %v, %v; want the one point", points, err)
	}
	if list, _, err := s.Portfolios(ctx, o, coinpulse.AllPortfolios); err != nil || len(list) != 1 {
		t.Errorf("Portfolios = %v, %v; want one portfolio", list, err)
	}

	// Unknown ids are not found either.
	_, err = s.Portfolio(ctx, o, p.ID+1000)
	wantCode(t, err, coinpulse.CodeNotFound)
	_, _, err = s.Trade(ctx, o, coinpulse.Trade{HoldingID: h.ID + 1000, Now: t0}, ledger.BuyFunc(lot("1", "1")))
	wantCode(t, err, coinpulse.CodeNotFound)
	_, _, err = s.Trade(ctx, o, coinTrade(p.ID+1000, "bitcoin", t0), ledger.BuyFunc(lot("1", "1")))
	wantCode(t, err, coinpulse.CodeNotFound)
	if !strings.Contains(coinpulse.ErrorMessage(err), fmt.Sprint(p.ID+1000)) {
		t.Errorf("message = %q, want it to name portfolio %d", coinpulse.ErrorMessage(err), p.ID+1000)
	}
}

func testPortfolioLimit(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "dave@example.com")
	o := live(u)
	create := func(o coinpulse.Owner, limit int) error {
		return s.CreatePortfolio(ctx, &coinpulse.Portfolio{Owner: o, Name: "p", CreatedAt: t0}, limit)
	}
	for i := range 3 {
		if err := create(o, 3); err != nil {
			t.Fatalf("CreatePortfolio %d of 3: %v", i+1, err)
		}
	}
	err := create(o, 3)
	wantCode(t, err, coinpulse.CodePortfolioLimitReached)
	if msg := coinpulse.ErrorMessage(err); !strings.Contains(msg, "3") {
		t.Errorf("message = %q, want it to name the limit", msg)
	}
	wantCode(t, create(o, 0), coinpulse.CodePortfolioLimitReached)
	if list, _, err := s.Portfolios(ctx, o, coinpulse.AllPortfolios); err != nil || len(list) != 3 {
		t.Fatalf("Portfolios: %d, %v; want 3", len(list), err)
	}

	// The count is per owner: the sandbox and another user start afresh.
	if err := create(sandbox(u), 3); err != nil {
		t.Errorf("CreatePortfolio in the sandbox: %v", err)
	}
	if err := create(live(newUser(t, s, "erin@example.com")), 1); err != nil {
		t.Errorf("CreatePortfolio of another user: %v", err)
	}
	wantCode(t, create(sandbox(u), 1), coinpulse.CodePortfolioLimitReached)

	// Unlimited has no cap; a higher cap lets more in.
	for range 5 {
		if err := create(o, coinpulse.Unlimited); err != nil {
			t.Fatalf("CreatePortfolio, unlimited: %v", err)
		}
	}
	if err := create(o, 9); err != nil {
		t.Errorf("CreatePortfolio with 8 of 9: %v", err)
	}
	wantCode(t, create(o, 9), coinpulse.CodePortfolioLimitReached)

	// Deleting one makes room.
	list, _, err := s.Portfolios(ctx, o, coinpulse.AllPortfolios)
	if err != nil {
		t.Fatalf("Portfolios: %v", err)
	}
	if err := s.DeletePortfolio(ctx, o, list[0].ID); err != nil {
		t.Fatalf("DeletePortfolio: %v", err)
	}
	if err := create(o, 9); err != nil {
		t.Errorf("CreatePortfolio after a delete: %v", err)
	}
}

// warmUp pings s from n goroutines at once, so that a pool has its
// connections open before a test races writers on it.
func warmUp(t *testing.T, s coinpulse.Store, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if err := s.Ping(t.Context()); err != nil {
				t.Errorf("Ping: %v", err)
			}
		})
	}
	wg.Wait()
}

func testPortfolioLimitConcurrent(t *testing.T, s coinpulse.Store) {
	u := newUser(t, s, "frank@example.com")
	other := newUser(t, s, "grace@example.com")
	warmUp(t, s, 20)
	const n, limit = 20, 5
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = s.CreatePortfolio(t.Context(), &coinpulse.Portfolio{Owner: live(u), Name: fmt.Sprint(i), CreatedAt: t0}, limit)
		})
	}
	// Another user's creations at the same time take none of u's places.
	for range 3 {
		wg.Go(func() {
			<-start
			if err := s.CreatePortfolio(t.Context(), &coinpulse.Portfolio{Owner: live(other), Name: "x", CreatedAt: t0}, limit); err != nil {
				t.Errorf("CreatePortfolio of another user: %v", err)
			}
		})
	}
	close(start)
	wg.Wait()
	created := 0
	for _, err := range errs {
		switch coinpulse.ErrorCode(err) {
		case "":
			created++
		case coinpulse.CodePortfolioLimitReached:
		default:
			t.Errorf("CreatePortfolio: %v, want success or PORTFOLIO_LIMIT_REACHED", err)
		}
	}
	if created != limit {
		t.Errorf("%d of %d concurrent CreatePortfolio calls succeeded, want %d", created, n, limit)
	}
	list, _, err := s.Portfolios(t.Context(), live(u), coinpulse.AllPortfolios)
	if err != nil {
		t.Fatalf("Portfolios: %v", err)
	}
	if len(list) != limit {
		t.Errorf("owner holds %d portfolios, want %d", len(list), limit)
	}
}

func testUpdatePortfolio(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "heidi@example.com")
	o := live(u)
	p := newPortfolio(t, s, o, "Old")
	h, _ := trade(t, s, o, p.ID, "bitcoin", t0.Add(time.Minute), ledger.BuyFunc(lot("1", "100")))

	t1 := t0.Add(time.Hour + 123)
	got, err := s.UpdatePortfolio(ctx, o, p.ID, coinpulse.PortfolioPatch{Name: ptr("New")}, t1)
	if err != nil {
		t.Fatalf("UpdatePortfolio: %v", err)
	}
	want := *p
	want.Name, want.UpdatedAt, want.Holdings = "New", us(t1), []coinpulse.Holding{h}
	if diff := cmp.Diff(&want, got, ignoreVersion); diff != "" {
		t.Errorf("UpdatePortfolio(name) mismatch (-want +got):\n%s", diff)
	}
	wantUTC(t, "UpdatePortfolio", portfolioTimes(got)...)

	t2 := t1.Add(time.Hour)
	got, err = s.UpdatePortfolio(ctx, o, p.ID, coinpulse.PortfolioPatch{Description: ptr("")}, t2)
	if err != nil {
		t.Fatalf("UpdatePortfolio: %v", err)
	}
	want.Description, want.UpdatedAt = "", us(t2)
	if diff := cmp.Diff(&want, got, ignoreVersion); diff != "" {
		t.Errorf("UpdatePortfolio(description) mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(&want, getPortfolio(t, s, o, p.ID), ignoreVersion); diff != "" {
		t.Errorf("Portfolio after updates mismatch (-want +got):\n%s", diff)
	}

	_, err = s.UpdatePortfolio(ctx, o, p.ID+1000, coinpulse.PortfolioPatch{Name: ptr("x")}, t2)
	wantCode(t, err, coinpulse.CodeNotFound)
}

func testDeletePortfolio(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "ivan@example.com")
	o := live(u)
	p := newPortfolio(t, s, o, "Doomed")
	keep := newPortfolio(t, s, o, "Kept")
	h, _ := trade(t, s, o, p.ID, "bitcoin", t0, ledger.BuyFunc(lot("1", "100")))
	kh, _ := trade(t, s, o, keep.ID, "bitcoin", t0, ledger.BuyFunc(lot("2", "100")))
	if err := s.RecordValue(ctx, o, p.ID, 0, coinpulse.ValuePoint{At: t0, TotalValue: d("1"), TotalCost: d("1")}); err != nil {
		t.Fatalf("RecordValue: %v", err)
	}

	if err := s.DeletePortfolio(ctx, o, p.ID); err != nil {
		t.Fatalf("DeletePortfolio: %v", err)
	}
	_, err := s.Portfolio(ctx, o, p.ID)
	wantCode(t, err, coinpulse.CodeNotFound)
	wantCode(t, s.DeletePortfolio(ctx, o, p.ID), coinpulse.CodeNotFound)
	// Its holdings went with it.
	wantCode(t, s.DeleteHolding(ctx, o, h.ID), coinpulse.CodeNotFound)
	_, _, err = s.Trade(ctx, o, coinpulse.Trade{HoldingID: h.ID, Now: t0}, ledger.BuyFunc(lot("1", "1")))
	wantCode(t, err, coinpulse.CodeNotFound)
	_, _, err = s.Trade(ctx, o, coinTrade(p.ID, "bitcoin", t0), ledger.BuyFunc(lot("1", "1")))
	wantCode(t, err, coinpulse.CodeNotFound)
	_, _, err = s.Transactions(ctx, o, p.ID, coinpulse.TxPage{Limit: 10})
	wantCode(t, err, coinpulse.CodeNotFound)
	_, err = s.ValueHistory(ctx, o, p.ID, t0.Add(-time.Hour))
	wantCode(t, err, coinpulse.CodeNotFound)

	// The other portfolio is whole.
	list, _, err := s.Portfolios(ctx, o, coinpulse.AllPortfolios)
	if err != nil {
		t.Fatalf("Portfolios: %v", err)
	}
	if len(list) != 1 || list[0].ID != keep.ID {
		t.Fatalf("Portfolios = %v, want only %d", list, keep.ID)
	}
	if diff := cmp.Diff([]coinpulse.Holding{kh}, list[0].Holdings); diff != "" {
		t.Errorf("holdings of the kept portfolio mismatch (-want +got):\n%s", diff)
	}
	if n := len(transactions(t, s, o, keep.ID)); n != 1 {
		t.Errorf("kept portfolio has %d transactions, want 1", n)
	}
}

func testTradeBuy(t *testing.T, s coinpulse.Store) {
	u := newUser(t, s, "judy@example.com")
	o := live(u)
	p := newPortfolio(t, s, o, "Main")

	t1 := t0.Add(time.Hour)
	buy := lot("0.1", "100")
	buy.Notes = "first"
	buy.ExecutedAt = t0.Add(-24 * time.Hour)
	h1, tx1 := trade(t, s, o, p.ID, "bitcoin", t1, ledger.BuyFunc(buy))
	if h1.ID == 0 {
		t.Fatal("Trade left the new holding's ID 0")
	}
	wantH := coinpulse.Holding{
		ID: h1.ID, PortfolioID: p.ID, CoinID: "bitcoin", CoinSymbol: "BIT", CoinName: "Bitcoin",
		Quantity: d("0.1"), TotalCost: d("10"), Notes: "first", CreatedAt: us(t1), UpdatedAt: us(t1),
	}
	if diff := cmp.Diff(wantH, h1); diff != "" {
		t.Errorf("holding after the first buy mismatch (-want +got):\n%s", diff)
	}
	wantTx := coinpulse.Transaction{
		ID: tx1.ID, PortfolioID: p.ID, HoldingID: h1.ID, CoinID: "bitcoin", CoinSymbol: "BIT", Type: coinpulse.Buy,
		Quantity: d("0.1"), Price: d("100"), Total: d("10"), Notes: "first",
		ExecutedAt: us(buy.ExecutedAt), CreatedAt: us(t1),
	}
	if diff := cmp.Diff(wantTx, tx1); diff != "" {
		t.Errorf("transaction of the first buy mismatch (-want +got):\n%s", diff)
	}
	wantUTC(t, "Trade", &h1.CreatedAt, &h1.UpdatedAt, &tx1.ExecutedAt, &tx1.CreatedAt)

	// The second buy adds to the same holding; without ExecutedAt it is
	// executed now.
	t2 := t1.Add(time.Minute)
	h2, tx2 := trade(t, s, o, p.ID, "bitcoin", t2, ledger.BuyFunc(lot("0.2", "100")))
	if h2.ID != h1.ID {
		t.Errorf("second buy made holding %d, want %d", h2.ID, h1.ID)
	}
	wantDec(t, "quantity", h2.Quantity, "0.3")
	wantDec(t, "total cost", h2.TotalCost, "30")
	if !h2.CreatedAt.Equal(us(t1)) || !h2.UpdatedAt.Equal(us(t2)) {
		t.Errorf("holding times = %v, %v; want %v, %v", h2.CreatedAt, h2.UpdatedAt, us(t1), us(t2))
	}
	if !tx2.ExecutedAt.Equal(us(t2)) || tx2.HoldingID != h1.ID || tx2.ID == tx1.ID {
		t.Errorf("second transaction = %+v, want a new one on holding %d executed at %v", tx2, h1.ID, us(t2))
	}

	// A buy by holding id.
	t3 := t2.Add(time.Minute)
	h3, tx3, err := s.Trade(t.Context(), o, coinpulse.Trade{HoldingID: h1.ID, PortfolioID: p.ID, Now: t3}, ledger.BuyFunc(lot("0.7", "200")))
	if err != nil {
		t.Fatalf("Trade by holding id: %v", err)
	}
	wantDec(t, "quantity", h3.Quantity, "1")
	wantDec(t, "total cost", h3.TotalCost, "170")
	if tx3.HoldingID != h1.ID || tx3.CoinID != "bitcoin" || tx3.CoinSymbol != "BIT" {
		t.Errorf("transaction by holding id = %+v", tx3)
	}

	got := getPortfolio(t, s, o, p.ID)
	if diff := cmp.Diff([]coinpulse.Holding{h3}, got.Holdings); diff != "" {
		t.Errorf("stored holdings mismatch (-want +got):\n%s", diff)
	}
	wantDec(t, "realized P/L after buys", got.RealizedPL, "0")
	if !got.UpdatedAt.Equal(us(t3)) {
		t.Errorf("portfolio UpdatedAt = %v, want %v", got.UpdatedAt, us(t3))
	}
	if diff := cmp.Diff([]coinpulse.Transaction{tx3, tx2, tx1}, transactions(t, s, o, p.ID)); diff != "" {
		t.Errorf("stored transactions mismatch (-want +got):\n%s", diff)
	}
}

func testTradeSell(t *testing.T, s coinpulse.Store) {
	u := newUser(t, s, "ken@example.com")
	o := live(u)
	p := newPortfolio(t, s, o, "Main")
	h, tx0 := trade(t, s, o, p.ID, "ethereum", t0, ledger.BuyFunc(lot("3", "1000")))
	if tx0.RealizedPL.Valid {
		t.Errorf("buy carries realised P/L %v, want none", tx0.RealizedPL)
	}

	// A partial sell takes a third of the cost.
	t1 := t0.Add(time.Hour)
	h1, tx1, err := s.Trade(t.Context(), o, coinpulse.Trade{HoldingID: h.ID, Now: t1}, ledger.SellFunc(lot("1", "1500")))
	if err != nil {
		t.Fatalf("sell: %v", err)
	}
	wantDec(t, "quantity", h1.Quantity, "2")
	wantDec(t, "total cost", h1.TotalCost, "2000")
	if tx1.Type != coinpulse.Sell || !tx1.RealizedPL.Valid {
		t.Fatalf("sell transaction = %+v, want a sell with realised P/L", tx1)
	}
	wantDec(t, "realised P/L", tx1.RealizedPL.Decimal, "500")
	wantDec(t, "total", tx1.Total, "1500")

	// Selling the rest leaves exactly zero, and the holding stays.
	t2 := t1.Add(time.Hour)
	h2, tx2 := trade(t, s, o, p.ID, "ethereum", t2, ledger.SellFunc(lot("2", "900")))
	if h2.ID != h.ID {
		t.Errorf("sell acted on holding %d, want %d", h2.ID, h.ID)
	}
	wantDec(t, "quantity", h2.Quantity, "0")
	wantDec(t, "total cost", h2.TotalCost, "0")
	wantDec(t, "realised P/L", tx2.RealizedPL.Decimal, "-200")

	got := getPortfolio(t, s, o, p.ID)
	if len(got.Holdings) != 1 {
		t.Fatalf("holdings = %v, want the sold-out one", got.Holdings)
	}
	wantDec(t, "stored quantity", got.Holdings[0].Quantity, "0")
	wantDec(t, "stored total cost", got.Holdings[0].TotalCost, "0")
	wantDec(t, "portfolio realised P/L", got.RealizedPL, "300")

	// Stored as returned: sells with their P/L, the buy with none.
	if diff := cmp.Diff([]coinpulse.Transaction{tx2, tx1, tx0}, transactions(t, s, o, p.ID)); diff != "" {
		t.Errorf("stored transactions (newest first) mismatch (-want +got):\n%s", diff)
	}

	// Buying into a sold-out holding starts a new average.
	h3, _ := trade(t, s, o, p.ID, "ethereum", t2.Add(time.Hour), ledger.BuyFunc(lot("1", "4000")))
	if h3.ID != h.ID {
		t.Errorf("buy after selling out made holding %d, want %d", h3.ID, h.ID)
	}
	wantDec(t, "quantity", h3.Quantity, "1")
	wantDec(t, "total cost", h3.TotalCost, "4000")
}

func testTradeFailure(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "leo@example.com")
	o := live(u)
	p := newPortfolio(t, s, o, "Main")
	h, _ := trade(t, s, o, p.ID, "bitcoin", t0, ledger.BuyFunc(lot("1", "100")))
	trade(t, s, o, p.ID, "bitcoin", t0.Add(time.Minute), ledger.SellFunc(lot("0.5", "300")))
	before := getPortfolio(t, s, o, p.ID)
	beforeTx := transactions(t, s, o, p.ID)

	later := t0.Add(time.Hour)
	_, _, err := s.Trade(ctx, o, coinpulse.Trade{HoldingID: h.ID, Now: later}, ledger.SellFunc(lot("0.6", "100")))
	wantCode(t, err, coinpulse.CodeValidation)
	_, _, err = s.Trade(ctx, o, coinTrade(p.ID, "bitcoin", later), ledger.SellFunc(lot("2", "100")))
	wantCode(t, err, coinpulse.CodeValidation)
	// Selling a coin the portfolio does not hold creates no holding.
	_, _, err = s.Trade(ctx, o, coinTrade(p.ID, "dogecoin", later), ledger.SellFunc(lot("1", "1")))
	wantCode(t, err, coinpulse.CodeValidation)
	_, _, err = s.Trade(ctx, o, coinTrade(p.ID, "dogecoin", later), ledger.BuyFunc(lot("0", "1")))
	wantCode(t, err, coinpulse.CodeValidation)
	// Any error from apply comes back as it is.
	boom := errors.New("boom")
	_, _, err = s.Trade(ctx, o, coinTrade(p.ID, "bitcoin", later), func(h coinpulse.Holding) (coinpulse.Holding, coinpulse.Transaction, error) {
		h.Quantity = d("1000")
		return h, coinpulse.Transaction{Type: coinpulse.Buy}, boom
	})
	if err != boom {
		t.Errorf("Trade with a failing apply = %v, want its error unchanged", err)
	}

	if diff := cmp.Diff(before, getPortfolio(t, s, o, p.ID)); diff != "" {
		t.Errorf("failed trades changed the portfolio (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(beforeTx, transactions(t, s, o, p.ID)); diff != "" {
		t.Errorf("failed trades changed the transactions (-before +after):\n%s", diff)
	}
	wantDec(t, "realised P/L", before.RealizedPL, "100")
}

// testTradeBeforeLatest: a sell dated before any later trade of its
// holding, and a buy dated before a later sell, are refused, changing
// nothing, since a holding's cost and each sell's realised profit are
// those of its trades in date order. A buy dated before later buys only,
// a trade at the same instant, one without a date, and one of another
// holding are taken.
func testTradeBeforeLatest(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	o := live(newUser(t, s, "nina@example.com"))
	p := newPortfolio(t, s, o, "Main")
	dated := func(l ledger.Lot, at time.Time) ledger.Lot { l.ExecutedAt = at; return l }
	d1, d2, d3 := t0.AddDate(0, 0, -40), t0.AddDate(0, 0, -30), t0.AddDate(0, 0, -20)
	h, _ := trade(t, s, o, p.ID, "solana", t0, ledger.BuyFunc(dated(lot("1", "100"), d2)))
	trade(t, s, o, p.ID, "solana", t0, ledger.BuyFunc(dated(lot("1", "200"), d1))) // before a buy only
	_, sold := trade(t, s, o, p.ID, "solana", t0, ledger.SellFunc(dated(lot("1", "250"), d3)))
	wantDec(t, "realised P/L of the sell", sold.RealizedPL.Decimal, "100") // 250 − 300/2
	before := getPortfolio(t, s, o, p.ID)
	beforeTx := transactions(t, s, o, p.ID)

	for name, tr := range map[string]struct {
		t     coinpulse.Trade
		apply coinpulse.TradeFunc
		typ   string
	}{
		"buy by coin":       {coinTrade(p.ID, "solana", t0), ledger.BuyFunc(dated(lot("1", "200"), d2)), "sell"},
		"buy by holding id": {coinpulse.Trade{HoldingID: h.ID, Now: t0}, ledger.BuyFunc(dated(lot("1", "1"), d1)), "sell"},
		"sell by coin":      {coinTrade(p.ID, "solana", t0), ledger.SellFunc(dated(lot("0.5", "250"), d2)), "latest trade"},
		"sell by holding":   {coinpulse.Trade{HoldingID: h.ID, Now: t0}, ledger.SellFunc(dated(lot("0.5", "250"), d3.Add(-time.Microsecond))), "latest trade"},
	} {
		_, _, err := s.Trade(ctx, o, tr.t, tr.apply)
		var e *coinpulse.Error
		if !errors.As(err, &e) || e.Code != coinpulse.CodeValidation || len(e.Details) != 1 || e.Details[0].Field != "executed_at" ||
			!strings.Contains(e.Details[0].Message, tr.typ+" at "+d3.UTC().Format("2006-01-02T15:04:05.000000Z")) {
			t.Errorf("%s dated before the holding's %s: %v, want VALIDATION_ERROR on executed_at naming %v", name, tr.typ, err, d3)
		}
	}
	if diff := cmp.Diff(before, getPortfolio(t, s, o, p.ID)); diff != "" {
		t.Errorf("refused trades changed the portfolio (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(beforeTx, transactions(t, s, o, p.ID)); diff != "" {
		t.Errorf("refused trades changed the transactions (-before +after):\n%s", diff)
	}

	// At the same instant, without a date (now), and another coin's
	// holding dated earlier: taken.
	trade(t, s, o, p.ID, "solana", t0, ledger.SellFunc(dated(lot("0.5", "250"), d3)))
	trade(t, s, o, p.ID, "solana", t0, ledger.BuyFunc(lot("1", "300")))
	trade(t, s, o, p.ID, "bitcoin", t0, ledger.BuyFunc(dated(lot("1", "10"), d1)))
	wantDec(t, "realised P/L", getPortfolio(t, s, o, p.ID).RealizedPL, "150") // 100, then 0.5 × 250 − 150/2
	if n := len(transactions(t, s, o, p.ID)); n != 6 {
		t.Errorf("%d transactions, want 6", n)
	}
	// A trade without a date comes after a trade dated ahead of now (up
	// to 5 minutes ahead, or another node's clock): dated at it.
	ahead := t0.Add(4 * time.Minute)
	trade(t, s, o, p.ID, "solana", t0, ledger.BuyFunc(dated(lot("1", "1"), ahead)))
	_, undated := trade(t, s, o, p.ID, "solana", t0, ledger.SellFunc(lot("0.5", "1")))
	if !undated.ExecutedAt.Equal(ahead.Truncate(time.Microsecond)) {
		t.Errorf("an undated sell after a trade dated %v is dated %v, want the same", ahead, undated.ExecutedAt)
	}
	// A holding deleted and bought again starts a new run of dates.
	if err := s.DeleteHolding(ctx, o, h.ID); err != nil {
		t.Fatal(err)
	}
	trade(t, s, o, p.ID, "solana", t0, ledger.BuyFunc(dated(lot("1", "1"), d1)))
	trade(t, s, o, p.ID, "solana", t0, ledger.SellFunc(dated(lot("1", "1"), d2)))
}

func testTradeWrongHolding(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "mia@example.com")
	o := live(u)
	p := newPortfolio(t, s, o, "A")
	q := newPortfolio(t, s, o, "B")
	h, _ := trade(t, s, o, p.ID, "bitcoin", t0, ledger.BuyFunc(lot("1", "100")))
	// A holding named together with another portfolio of the owner's is
	// not found there.
	_, _, err := s.Trade(ctx, o, coinpulse.Trade{HoldingID: h.ID, PortfolioID: q.ID, Now: t0}, ledger.SellFunc(lot("1", "100")))
	wantCode(t, err, coinpulse.CodeNotFound)
	if !strings.Contains(coinpulse.ErrorMessage(err), "holding") {
		t.Errorf("message = %q, want it to be about the holding", coinpulse.ErrorMessage(err))
	}
	if got := getPortfolio(t, s, o, p.ID); !got.Holdings[0].Quantity.Equal(d("1")) {
		t.Errorf("holding changed: %+v", got.Holdings[0])
	}
}

func testRealizedPL(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "nina@example.com")
	o := live(u)
	p := newPortfolio(t, s, o, "Main")
	btc, _ := trade(t, s, o, p.ID, "bitcoin", t0, ledger.BuyFunc(lot("3", "10")))
	trade(t, s, o, p.ID, "ethereum", t0, ledger.BuyFunc(lot("1", "5")))
	trade(t, s, o, p.ID, "bitcoin", t0.Add(1*time.Minute), ledger.SellFunc(lot("1", "12.5")))     // +2.5
	trade(t, s, o, p.ID, "ethereum", t0.Add(2*time.Minute), ledger.SellFunc(lot("0.25", "4")))    // -0.25
	trade(t, s, o, p.ID, "bitcoin", t0.Add(3*time.Minute), ledger.SellFunc(lot("0.5", "10.001"))) // +0.0005
	wantDec(t, "realised P/L", getPortfolio(t, s, o, p.ID).RealizedPL, "2.2505")

	// Deleting a holding keeps the P/L and the transactions, and changes
	// the portfolio (its totals): updated_at moves.
	before := getPortfolio(t, s, o, p.ID).UpdatedAt
	time.Sleep(2 * time.Millisecond) // updated_at keeps microseconds
	if err := s.DeleteHolding(ctx, o, btc.ID); err != nil {
		t.Fatalf("DeleteHolding: %v", err)
	}
	if after := getPortfolio(t, s, o, p.ID).UpdatedAt; !after.After(before) {
		t.Errorf("updated_at after DeleteHolding %v, before %v", after, before)
	}
	wantCode(t, s.DeleteHolding(ctx, o, btc.ID), coinpulse.CodeNotFound)
	got := getPortfolio(t, s, o, p.ID)
	wantDec(t, "realised P/L after DeleteHolding", got.RealizedPL, "2.2505")
	if len(got.Holdings) != 1 || got.Holdings[0].CoinID != "ethereum" {
		t.Errorf("holdings after DeleteHolding = %v, want only ethereum", got.Holdings)
	}
	txns := transactions(t, s, o, p.ID)
	if len(txns) != 5 {
		t.Fatalf("%d transactions after DeleteHolding, want 5", len(txns))
	}
	var sum decimal.Decimal
	for _, tx := range txns {
		if tx.RealizedPL.Valid {
			sum = sum.Add(tx.RealizedPL.Decimal)
		}
	}
	wantDec(t, "sum of the transactions' realised P/L", sum, "2.2505")

	// Buying the coin again starts a new holding; selling adds to the same
	// P/L.
	nb, _ := trade(t, s, o, p.ID, "bitcoin", t0.Add(time.Hour), ledger.BuyFunc(lot("1", "1")))
	if nb.ID == btc.ID {
		t.Errorf("new holding reuses deleted id %d", btc.ID)
	}
	trade(t, s, o, p.ID, "bitcoin", t0.Add(2*time.Hour), ledger.SellFunc(lot("1", "0.5"))) // -0.5
	wantDec(t, "realised P/L", getPortfolio(t, s, o, p.ID).RealizedPL, "1.7505")
}

func testTransactionsPaging(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "oscar@example.com")
	o := live(u)
	p := newPortfolio(t, s, o, "Main")
	other := newPortfolio(t, s, o, "Other")
	trade(t, s, o, other.ID, "bitcoin", t0, ledger.BuyFunc(lot("1", "1")))

	// Executed at: 0h, 2h, 1h, 1h, 3h, 1h (ties broken by id, newest
	// first); each of another coin, since a holding's trades come in the
	// order of their dates (Portfolios/TradeBeforeLatest).
	var all []coinpulse.Transaction
	coins := []string{"bitcoin", "ethereum", "solana", "cardano", "dogecoin", "tron"}
	for i, h := range []int{0, 2, 1, 1, 3, 1} {
		buy := lot(fmt.Sprint(i+1), "10")
		buy.ExecutedAt = t0.Add(time.Duration(h) * time.Hour)
		_, tx := trade(t, s, o, p.ID, coins[i], t0.Add(10*time.Hour), ledger.BuyFunc(buy))
		all = append(all, tx)
	}
	want := []coinpulse.Transaction{all[4], all[1], all[5], all[3], all[2], all[0]}
	if diff := cmp.Diff(want, transactions(t, s, o, p.ID)); diff != "" {
		t.Errorf("Transactions mismatch (-want +got):\n%s", diff)
	}
	page := func(pg coinpulse.TxPage, want []coinpulse.Transaction, total int) {
		t.Helper()
		got, n, err := s.Transactions(ctx, o, p.ID, pg)
		if err != nil {
			t.Fatalf("Transactions(%+v): %v", pg, err)
		}
		if n != total {
			t.Errorf("Transactions(%+v) total = %d, want %d", pg, n, total)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Transactions(%+v) mismatch (-want +got):\n%s", pg, diff)
		}
	}
	for _, tt := range []struct {
		offset, limit int
		want          []coinpulse.Transaction
	}{
		{0, 2, want[0:2]},
		{2, 2, want[2:4]},
		{4, 2, want[4:6]},
		{5, 10, want[5:]},
		{6, 10, []coinpulse.Transaction{}},
		{100, 10, []coinpulse.Transaction{}},
		{0, 0, []coinpulse.Transaction{}},
	} {
		page(coinpulse.TxPage{Offset: tt.offset, Limit: tt.limit}, tt.want, 6)
	}

	// From a cursor: the transactions after it in the list's order, ties
	// on executed_at included; a transaction recorded since, newest of
	// all, does not move the page as it moves an offset.
	late := lot("7", "10")
	late.ExecutedAt = t0.Add(5 * time.Hour)
	_, newest := trade(t, s, o, p.ID, "bitcoin", t0.Add(10*time.Hour), ledger.BuyFunc(late))
	for _, tt := range []struct {
		after int64
		limit int
		want  []coinpulse.Transaction
	}{
		{want[0].ID, 2, want[1:3]},
		{want[2].ID, 2, want[3:5]}, // all[5], then its tie all[3]
		{want[3].ID, -1, want[4:]},
		{want[4].ID, 10, want[5:]},
		{want[5].ID, 10, []coinpulse.Transaction{}},
		{newest.ID, 1, want[0:1]},
		{want[0].ID, 0, []coinpulse.Transaction{}},
	} {
		page(coinpulse.TxPage{StartingAfter: tt.after, Limit: tt.limit}, tt.want, 7)
	}
	// A cursor from another portfolio, or no transaction at all, is a
	// validation error naming starting_after; another owner's portfolio
	// is not found, cursor or not.
	otherTxs := transactions(t, s, o, other.ID)
	for _, after := range []int64{otherTxs[0].ID, 1 << 50} {
		_, _, err := s.Transactions(ctx, o, p.ID, coinpulse.TxPage{StartingAfter: after, Limit: 10})
		var e *coinpulse.Error
		if !errors.As(err, &e) || e.Code != coinpulse.CodeValidation || len(e.Details) != 1 || e.Details[0].Field != "starting_after" {
			t.Errorf("Transactions(after %d) of another portfolio's transaction: %v, want VALIDATION_ERROR on starting_after", after, err)
		}
	}
	stranger := live(newUser(t, s, "oscar-stranger@example.com"))
	if _, _, err := s.Transactions(ctx, stranger, p.ID, coinpulse.TxPage{StartingAfter: want[0].ID, Limit: 10}); coinpulse.ErrorCode(err) != coinpulse.CodeNotFound {
		t.Errorf("Transactions of another owner's portfolio from a cursor: %v, want RESOURCE_NOT_FOUND", err)
	}

	// A portfolio with none.
	empty := newPortfolio(t, s, o, "Empty")
	got, total, err := s.Transactions(ctx, o, empty.ID, coinpulse.TxPage{Limit: 10})
	if err != nil || total != 0 || got == nil || len(got) != 0 {
		t.Errorf("Transactions of an empty portfolio = %v, %d, %v; want an empty slice, 0", got, total, err)
	}
}

func testValueHistory(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "peggy@example.com")
	o := live(u)
	p := newPortfolio(t, s, o, "Main")
	other := newPortfolio(t, s, o, "Other")
	if p.SyncedAt != nil {
		t.Errorf("SyncedAt of a new portfolio = %v, want nil", p.SyncedAt)
	}
	points, err := s.ValueHistory(ctx, o, p.ID, t0.Add(-time.Hour))
	if err != nil || points == nil || len(points) != 0 {
		t.Errorf("ValueHistory before any sync = %v, %v; want an empty slice", points, err)
	}

	var recorded []coinpulse.ValuePoint
	for i := range 4 {
		v := coinpulse.ValuePoint{
			At:         t0.Add(time.Duration(i) * time.Hour).In(time.FixedZone("Y", -3600)),
			TotalValue: d(fmt.Sprintf("%d.123456789012345678", 1000+i)),
			TotalCost:  d("1000"),
		}
		if err := s.RecordValue(ctx, o, p.ID, 0, v); err != nil {
			t.Fatalf("RecordValue: %v", err)
		}
		v.At = us(v.At)
		recorded = append(recorded, v)
	}
	if err := s.RecordValue(ctx, o, other.ID, 0, coinpulse.ValuePoint{At: t0, TotalValue: d("5"), TotalCost: d("5")}); err != nil {
		t.Fatalf("RecordValue: %v", err)
	}
	got := getPortfolio(t, s, o, p.ID)
	if want := us(t0.Add(3 * time.Hour)); got.SyncedAt == nil || !got.SyncedAt.Equal(want) {
		t.Errorf("SyncedAt = %v, want %v", got.SyncedAt, want)
	}
	if !got.UpdatedAt.Equal(p.UpdatedAt) {
		t.Errorf("RecordValue changed UpdatedAt from %v to %v", p.UpdatedAt, got.UpdatedAt)
	}

	for _, tt := range []struct {
		from time.Time
		want []coinpulse.ValuePoint
	}{
		{time.Time{}, recorded},
		{t0.Add(-time.Hour), recorded},
		{us(t0), recorded},
		{t0.Add(time.Nanosecond), recorded[1:]}, // t0 has nanoseconds: past the stored point
		{t0.Add(time.Hour), recorded[2:]},
		{us(t0.Add(time.Hour)), recorded[1:]},
		{t0.Add(3 * time.Hour), []coinpulse.ValuePoint{}},
		{us(t0.Add(3 * time.Hour)), recorded[3:]},
		{t0.Add(4 * time.Hour), []coinpulse.ValuePoint{}},
	} {
		got, err := s.ValueHistory(ctx, o, p.ID, tt.from)
		if err != nil {
			t.Fatalf("ValueHistory(%v): %v", tt.from, err)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("ValueHistory(%v) mismatch (-want +got):\n%s", tt.from, diff)
		}
		for i := range got {
			wantUTC(t, "ValueHistory", &got[i].At)
		}
	}

	// With a version, a point is recorded only while the portfolio is as
	// it was at that version: after a trade it is ErrPortfolioChanged, and
	// nothing is recorded.
	cur := getPortfolio(t, s, o, p.ID)
	trade(t, s, o, p.ID, "ethereum", t0, ledger.BuyFunc(lot("1", "1")))
	stale := coinpulse.ValuePoint{At: t0.Add(time.Hour), TotalValue: d("1"), TotalCost: d("1")}
	if err := s.RecordValue(ctx, o, p.ID, cur.Version, stale); !errors.Is(err, coinpulse.ErrPortfolioChanged) {
		t.Fatalf("RecordValue at a version before a trade: %v, want ErrPortfolioChanged", err)
	}
	cur = getPortfolio(t, s, o, p.ID)
	if err := s.RecordValue(ctx, o, p.ID, cur.Version, stale); err != nil {
		t.Fatalf("RecordValue at the current version: %v", err)
	}
	if err := s.RecordValue(ctx, o, 1<<40, cur.Version, stale); !coinpulse.IsNotFound(err) {
		t.Errorf("RecordValue of no portfolio, with a version: %v, want RESOURCE_NOT_FOUND", err)
	}

	// A point at a time already recorded replaces it; SyncedAt follows the
	// latest call.
	again := coinpulse.ValuePoint{At: recorded[1].At, TotalValue: d("7"), TotalCost: d("8")}
	if err := s.RecordValue(ctx, o, p.ID, 0, again); err != nil {
		t.Fatalf("RecordValue again: %v", err)
	}
	points, err = s.ValueHistory(ctx, o, p.ID, recorded[1].At)
	if err != nil {
		t.Fatalf("ValueHistory: %v", err)
	}
	if diff := cmp.Diff(append([]coinpulse.ValuePoint{again}, recorded[2:]...), points); diff != "" {
		t.Errorf("ValueHistory after re-recording mismatch (-want +got):\n%s", diff)
	}
	if got := getPortfolio(t, s, o, p.ID); got.SyncedAt == nil || !got.SyncedAt.Equal(again.At) {
		t.Errorf("SyncedAt = %v, want %v", got.SyncedAt, again.At)
	}
}

func testPortfolioDecimals(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "quentin@example.com")
	o := live(u)
	p := newPortfolio(t, s, o, "Big")

	// The largest amounts a client may send: their product has 30 integer
	// digits and 36 decimal places.
	const most = "999999999999999.999999999999999999"
	const product = "999999999999999999999999999999.998000000000000000000000000000000001"
	h, tx := trade(t, s, o, p.ID, "bitcoin", t0, ledger.BuyFunc(lot(most, most)))
	wantDec(t, "quantity", h.Quantity, most)
	wantDec(t, "total cost", h.TotalCost, product)
	wantDec(t, "total", tx.Total, product)
	got := getPortfolio(t, s, o, p.ID)
	wantDec(t, "stored quantity", got.Holdings[0].Quantity, most)
	wantDec(t, "stored total cost", got.Holdings[0].TotalCost, product)
	txns := transactions(t, s, o, p.ID)
	wantDec(t, "stored quantity", txns[0].Quantity, most)
	wantDec(t, "stored price", txns[0].Price, most)
	wantDec(t, "stored total", txns[0].Total, product)

	// Eighteen decimal places, and a sell whose cost share is rounded.
	tiny := "0.000000000000000001"
	h2, _ := trade(t, s, o, p.ID, "ethereum", t0, ledger.BuyFunc(lot("3", "0.333333333333333333")))
	wantDec(t, "total cost", h2.TotalCost, "0.999999999999999999")
	_, sell := trade(t, s, o, p.ID, "ethereum", t0.Add(time.Minute), ledger.SellFunc(lot("1", tiny)))
	// The share is 0.999999999999999999/3 = 0.333333333333333333.
	wantDec(t, "realised P/L", sell.RealizedPL.Decimal, "-0.333333333333333332")
	got = getPortfolio(t, s, o, p.ID)
	wantDec(t, "stored total cost", got.Holdings[1].TotalCost, "0.666666666666666666")
	wantDec(t, "portfolio realised P/L", got.RealizedPL, "-0.333333333333333332")
	txns = transactions(t, s, o, p.ID)
	wantDec(t, "stored price", txns[0].Price, tiny)
	wantDec(t, "stored realised P/L", txns[0].RealizedPL.Decimal, "-0.333333333333333332")

	// A sell of the huge holding: P/L far above 10^19.
	_, big := trade(t, s, o, p.ID, "bitcoin", t0.Add(2*time.Minute), ledger.SellFunc(lot(most, "0")))
	wantDec(t, "realised P/L", big.RealizedPL.Decimal, "-"+product)
	wantDec(t, "portfolio realised P/L", getPortfolio(t, s, o, p.ID).RealizedPL, "-1000000000000000000000000000000.331333333333333332000000000000000001")

	// Value points too.
	v := coinpulse.ValuePoint{At: t0, TotalValue: d(product), TotalCost: d("12345678901234567890.123456789012345678")}
	if err := s.RecordValue(ctx, o, p.ID, 0, v); err != nil {
		t.Fatalf("RecordValue: %v", err)
	}
	points, err := s.ValueHistory(ctx, o, p.ID, t0.Add(-time.Hour))
	if err != nil || len(points) != 1 {
		t.Fatalf("ValueHistory = %v, %v; want one point", points, err)
	}
	wantDec(t, "total value", points[0].TotalValue, product)
	wantDec(t, "total cost", points[0].TotalCost, "12345678901234567890.123456789012345678")
}

func testPortfolioTimes(t *testing.T, s coinpulse.Store) {
	u := newUser(t, s, "rupert@example.com")
	o := live(u)
	zone := time.FixedZone("Z", 5*3600+1800)
	p := &coinpulse.Portfolio{Owner: o, Name: "Zoned", CreatedAt: t0.In(zone)}
	if err := s.CreatePortfolio(t.Context(), p, coinpulse.Unlimited); err != nil {
		t.Fatalf("CreatePortfolio: %v", err)
	}
	now := t0.Add(time.Hour).In(zone)
	buy := lot("1", "1")
	buy.ExecutedAt = t0.Add(-time.Hour).In(zone)
	h, tx := trade(t, s, o, p.ID, "bitcoin", now, ledger.BuyFunc(buy))
	got := getPortfolio(t, s, o, p.ID)
	txns := transactions(t, s, o, p.ID)
	for _, c := range []struct {
		what      string
		got, want time.Time
	}{
		{"portfolio CreatedAt", p.CreatedAt, us(t0)},
		{"stored portfolio CreatedAt", got.CreatedAt, us(t0)},
		{"stored portfolio UpdatedAt", got.UpdatedAt, us(now)},
		{"holding CreatedAt", h.CreatedAt, us(now)},
		{"stored holding UpdatedAt", got.Holdings[0].UpdatedAt, us(now)},
		{"transaction ExecutedAt", tx.ExecutedAt, us(buy.ExecutedAt)},
		{"transaction CreatedAt", tx.CreatedAt, us(now)},
		{"stored ExecutedAt", txns[0].ExecutedAt, us(buy.ExecutedAt)},
		{"stored CreatedAt", txns[0].CreatedAt, us(now)},
	} {
		if !c.got.Equal(c.want) || c.got.Location() != time.UTC || c.got.Nanosecond()%1000 != 0 {
			t.Errorf("%s = %v, want %v (UTC, whole microseconds)", c.what, c.got, c.want)
		}
	}
}

func testConcurrentSells(t *testing.T, s coinpulse.Store) {
	u := newUser(t, s, "sybil@example.com")
	o := live(u)
	p := newPortfolio(t, s, o, "Main")
	// A cost that 50 does not divide: partial sells round their share.
	h, _ := trade(t, s, o, p.ID, "bitcoin", t0, ledger.BuyFunc(lot("50", "0.333333333333333333")))
	cost := h.TotalCost
	warmUp(t, s, 20)

	// 60 sellers of 1 unit each, at distinct prices, half naming the
	// holding by id and half by coin.
	const held, sellers = 50, 60
	price := func(i int) decimal.Decimal { return decimal.New(int64(200+i), -2) }
	errs := make([]error, sellers)
	txns := make([]coinpulse.Transaction, sellers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range sellers {
		tr := coinTrade(p.ID, "bitcoin", t0.Add(time.Hour))
		if i%2 == 0 {
			tr = coinpulse.Trade{HoldingID: h.ID, Now: t0.Add(time.Hour)}
		}
		wg.Go(func() {
			<-start
			_, txns[i], errs[i] = s.Trade(t.Context(), o, tr, ledger.SellFunc(ledger.Lot{Quantity: decimal.New(1, 0), Price: price(i)}))
		})
	}
	close(start)
	wg.Wait()

	sold := 0
	proceeds := decimal.Zero
	var txSum decimal.Decimal
	for i, err := range errs {
		switch coinpulse.ErrorCode(err) {
		case "":
			sold++
			proceeds = proceeds.Add(price(i))
			txSum = txSum.Add(txns[i].RealizedPL.Decimal)
		case coinpulse.CodeValidation:
		default:
			t.Errorf("seller %d: %v, want success or VALIDATION_ERROR", i, err)
		}
	}
	if sold != held {
		t.Errorf("%d of %d concurrent sells succeeded, want %d", sold, sellers, held)
	}
	got := getPortfolio(t, s, o, p.ID)
	if len(got.Holdings) != 1 {
		t.Fatalf("holdings = %v, want one", got.Holdings)
	}
	wantDec(t, "quantity", got.Holdings[0].Quantity, "0")
	wantDec(t, "total cost", got.Holdings[0].TotalCost, "0")
	// Every share of the cost was taken once: the P/L is exactly the
	// proceeds less the cost.
	want := proceeds.Sub(cost).String()
	wantDec(t, "realised P/L", got.RealizedPL, want)
	wantDec(t, "sum of the sells' realised P/L", txSum, want)
	sells := 0
	var stored decimal.Decimal
	for _, tx := range transactions(t, s, o, p.ID) {
		if tx.Type == coinpulse.Sell {
			sells++
			stored = stored.Add(tx.RealizedPL.Decimal)
		}
	}
	if sells != held {
		t.Errorf("%d sell transactions stored, want %d", sells, held)
	}
	wantDec(t, "sum of the stored sells' realised P/L", stored, want)
}

func testConcurrentBuys(t *testing.T, s coinpulse.Store) {
	u := newUser(t, s, "trent@example.com")
	o := live(u)
	p := newPortfolio(t, s, o, "Main")
	const buyers = 30
	// Rounds of first buys of a new coin each: after the first, the
	// store's connections are open and the buyers truly race.
	coins := []string{"cardano", "polkadot", "tron", "stellar", "monero"}
	for _, coin := range coins {
		errs := make([]error, buyers)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range buyers {
			wg.Go(func() {
				<-start
				_, _, errs[i] = s.Trade(t.Context(), o, coinTrade(p.ID, coin, t0), ledger.BuyFunc(lot("0.1", "0.5")))
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("%s buyer %d: %v", coin, i, err)
			}
		}
	}
	got := getPortfolio(t, s, o, p.ID)
	if len(got.Holdings) != len(coins) {
		t.Fatalf("holdings = %+v, want one per coin", got.Holdings)
	}
	ids := map[string]int64{}
	for i, h := range got.Holdings {
		if h.CoinID != coins[i] {
			t.Errorf("holding %d is of %s, want %s", i, h.CoinID, coins[i])
		}
		wantDec(t, h.CoinID+" quantity", h.Quantity, "3")
		wantDec(t, h.CoinID+" total cost", h.TotalCost, "1.5")
		ids[h.CoinID] = h.ID
	}
	txns := transactions(t, s, o, p.ID)
	if len(txns) != buyers*len(coins) {
		t.Errorf("%d transactions, want %d", len(txns), buyers*len(coins))
	}
	for _, tx := range txns {
		if tx.HoldingID != ids[tx.CoinID] {
			t.Errorf("transaction %d of %s is on holding %d, want %d", tx.ID, tx.CoinID, tx.HoldingID, ids[tx.CoinID])
		}
	}
}

// Every change to a portfolio or its holdings moves its version, and
// PortfolioVersion agrees with Portfolio; a failed trade does not.
func testPortfolioVersion(t *testing.T, s coinpulse.Store) {
	u := newUser(t, s, "version@example.com")
	o := live(u)
	p := newPortfolio(t, s, o, "versioned")
	ctx := t.Context()
	last := int64(0)
	check := func(step string, moved bool) {
		t.Helper()
		v, err := s.PortfolioVersion(ctx, o, p.ID)
		if err != nil {
			t.Fatalf("%s: PortfolioVersion: %v", step, err)
		}
		if got := getPortfolio(t, s, o, p.ID).Version; got != v {
			t.Errorf("%s: Portfolio().Version %d, PortfolioVersion %d", step, got, v)
		}
		if moved && v <= last || !moved && v != last {
			t.Errorf("%s: version %d after %d; want it moved=%v", step, v, last, moved)
		}
		last = v
	}
	check("created", true)
	h, _ := trade(t, s, o, p.ID, "bitcoin", t0, ledger.BuyFunc(lot("1", "10")))
	check("bought", true)
	if _, _, err := s.Trade(ctx, o, coinpulse.Trade{HoldingID: h.ID, Now: t0}, ledger.SellFunc(lot("2", "10"))); err == nil {
		t.Fatal("oversell succeeded")
	}
	check("failed sell", false)
	trade(t, s, o, p.ID, "bitcoin", t0, ledger.SellFunc(lot("0.5", "10")))
	check("sold", true)
	name := "renamed"
	if _, err := s.UpdatePortfolio(ctx, o, p.ID, coinpulse.PortfolioPatch{Name: &name}, t0); err != nil {
		t.Fatal(err)
	}
	check("renamed", true)
	if err := s.RecordValue(ctx, o, p.ID, 0, coinpulse.ValuePoint{At: t0, TotalValue: d("5"), TotalCost: d("5")}); err != nil {
		t.Fatal(err)
	}
	check("synced", true)
	if err := s.DeleteHolding(ctx, o, h.ID); err != nil {
		t.Fatal(err)
	}
	check("holding deleted", true)
	if _, err := s.PortfolioVersion(ctx, sandbox(u), p.ID); coinpulse.ErrorCode(err) != coinpulse.CodeNotFound {
		t.Errorf("PortfolioVersion of another owner: %v, want RESOURCE_NOT_FOUND", err)
	}
}

// A trade without a time takes its clock's once it holds the portfolio's
// lock: concurrent trades on one portfolio, on different holdings too, are
// listed in the order they were applied (ids and times agree), and a
// transaction's ExecutedAt is its CreatedAt.
func testConcurrentTradeTimes(t *testing.T, s coinpulse.Store) {
	u := newUser(t, s, "ursula@example.com")
	o := live(u)
	p := newPortfolio(t, s, o, "Main")
	coins := []string{"bitcoin", "ethereum", "cardano", "polkadot"}
	const traders = 24
	errs := make([]error, traders)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range traders {
		wg.Go(func() {
			<-start
			tr := coinTrade(p.ID, coins[i%len(coins)], time.Time{})
			tr.Clock = time.Now
			_, _, errs[i] = s.Trade(t.Context(), o, tr, ledger.BuyFunc(lot("1", "1")))
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("trader %d: %v", i, err)
		}
	}
	txns := transactions(t, s, o, p.ID)
	if len(txns) != traders {
		t.Fatalf("%d transactions, want %d", len(txns), traders)
	}
	for i, tx := range txns {
		if !tx.ExecutedAt.Equal(tx.CreatedAt) {
			t.Errorf("transaction %d: executed at %s, created at %s; want the same time", tx.ID, tx.ExecutedAt, tx.CreatedAt)
		}
		if i > 0 && txns[i-1].ID < tx.ID {
			t.Errorf("transaction %d (%s) is listed after %d (%s): the later trade has the earlier time",
				tx.ID, tx.ExecutedAt.Format(time.RFC3339Nano), txns[i-1].ID, txns[i-1].ExecutedAt.Format(time.RFC3339Nano))
		}
	}
}

// A holding deleted while trades on it run: every call succeeds or finds
// the holding gone, and none fails otherwise (an audit: on PostgreSQL the
// delete locked the holding and then the portfolio, a trade the other
// way round, and the two deadlocked).
func testDeleteHoldingWhileTrading(t *testing.T, s coinpulse.Store) {
	u := newUser(t, s, "delete-while-trading@example.com")
	o := live(u)
	p := newPortfolio(t, s, o, "Main")
	for round := range 10 {
		h, _ := trade(t, s, o, p.ID, "solana", time.Time{}, ledger.BuyFunc(lot("100", "2")))
		const traders = 12
		errs := make([]error, traders+1)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range traders {
			wg.Go(func() {
				<-start
				tr := coinpulse.Trade{HoldingID: h.ID}
				apply := ledger.SellFunc(lot("1", "2"))
				if i%2 == 0 { // a buy of the coin: the same holding, by coin
					tr, apply = coinTrade(p.ID, "solana", time.Time{}), ledger.BuyFunc(lot("1", "2"))
				}
				_, _, errs[i] = s.Trade(t.Context(), o, tr, apply)
			})
		}
		wg.Go(func() {
			<-start
			errs[traders] = s.DeleteHolding(t.Context(), o, h.ID)
		})
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil && !coinpulse.IsNotFound(err) {
				t.Fatalf("round %d, call %d: %v", round, i, err)
			}
		}
		if errs[traders] != nil {
			t.Fatalf("round %d: the delete: %v", round, errs[traders])
		}
		// A buy after the delete may have made the coin's holding again.
		if got, err := s.Portfolio(t.Context(), o, p.ID); err == nil {
			for _, h2 := range got.Holdings {
				if h2.ID == h.ID {
					t.Fatalf("round %d: holding %d is still there", round, h.ID)
				}
				if err := s.DeleteHolding(t.Context(), o, h2.ID); err != nil {
					t.Fatal(err)
				}
			}
		} else {
			t.Fatal(err)
		}
	}
}

// An owner's portfolios page by cursor, oldest first (all created at t0
// here: by id), each with all its holdings: the limit counts portfolios,
// not the rows the join makes of their holdings.
func testPortfoliosPaging(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "portfolio-paging@example.com")
	o := live(u)
	var ps []*coinpulse.Portfolio
	for i := range 4 {
		ps = append(ps, newPortfolio(t, s, o, fmt.Sprint("P", i)))
	}
	for _, coin := range []string{"bitcoin", "ethereum", "cardano"} {
		trade(t, s, o, ps[1].ID, coin, t0, ledger.BuyFunc(lot("1", "1")))
	}
	summary := func(list []coinpulse.Portfolio) string {
		var b strings.Builder
		for _, p := range list {
			fmt.Fprintf(&b, "%s:%d ", p.Name, len(p.Holdings))
		}
		return b.String()
	}
	for _, tt := range []struct {
		name string
		pg   coinpulse.PortfolioPage
		want string
	}{
		{"all", coinpulse.AllPortfolios, "P0:0 P1:3 P2:0 P3:0 "},
		{"first two", coinpulse.PortfolioPage{Limit: 2}, "P0:0 P1:3 "},
		{"after the first", coinpulse.PortfolioPage{StartingAfter: ps[0].ID, Limit: 1}, "P1:3 "},
		{"after the second", coinpulse.PortfolioPage{StartingAfter: ps[1].ID, Limit: -1}, "P2:0 P3:0 "},
		{"after the last", coinpulse.PortfolioPage{StartingAfter: ps[3].ID, Limit: 5}, ""},
		{"none", coinpulse.PortfolioPage{Limit: 0}, ""},
	} {
		got, total, err := s.Portfolios(ctx, o, tt.pg)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got == nil || total != 4 || summary(got) != tt.want {
			t.Errorf("%s: %q (total %d), want %q (total 4)", tt.name, summary(got), total, tt.want)
		}
	}
	other := newPortfolio(t, s, sandbox(u), "other")
	for _, after := range []int64{other.ID, 1 << 50} {
		_, _, err := s.Portfolios(ctx, o, coinpulse.PortfolioPage{StartingAfter: after, Limit: 10})
		var e *coinpulse.Error
		if !errors.As(err, &e) || e.Code != coinpulse.CodeValidation || len(e.Details) != 1 || e.Details[0].Field != "starting_after" {
			t.Errorf("a cursor %d not of the owner's portfolios: %v, want VALIDATION_ERROR on starting_after", after, err)
		}
	}
}
