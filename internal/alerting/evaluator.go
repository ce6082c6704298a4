package alerting

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"time"

	"github.com/shopspring/decimal"

	"coinpulse"
	"coinpulse/internal/market"
)

// Evaluator fires the alerts each market snapshot crosses. It keeps the
// node's Index in step with the store: everything armed at start, then
// each tick the armings of the last PollMargin (so that alerts created or
// re-enabled on another node, or by a transaction that committed late,
// are found), plus what this node's API tells it at once (Armed,
// Disarmed). The store decides: FireAlerts ends an arming once, whatever
// the number of nodes that saw it crossed, so every node may evaluate.
type Evaluator struct {
	store coinpulse.AlertStore
	index *Index
	event coinpulse.EventFunc
	// onFire receives, after each tick, the alerts whose armings the tick
	// saw fired (by this node or another).
	onFire func(fired []coinpulse.Alert)
	// entitled, when set, says whose alerts may fire: those of an account
	// whose plan or subscription no longer allows alerts stay armed.
	entitled coinpulse.EntitlementFunc
	log      *slog.Logger
	margin   time.Duration

	polled time.Time // when the last poll of new armings started
	loaded bool
	// started is when the evaluator was made: firings before it are not
	// announced.
	started time.Time
	// prevAsOf is the time of the last snapshot whose recent firings were
	// read.
	prevAsOf time.Time
	// announced holds the armings announced to OnFire, with their firing
	// times, so that a firing seen twice (fired here, then read back from
	// the store) is announced once; kept for twice the margin.
	announced map[announcedKey]time.Time
	crossed   []Entry
	held      map[int64]bool // a tick's look-ups of entitled
	prices    []Price
	nodeTime  func() time.Time
}

// EvaluatorConfig configures an Evaluator.
type EvaluatorConfig struct {
	Store coinpulse.AlertStore
	// Event builds a firing's event (the webhook payload).
	Event coinpulse.EventFunc
	// OnFire is called after each tick with the alerts it saw fired.
	OnFire func(fired []coinpulse.Alert)
	// Entitled says whose alerts may fire (nil: everyone's). A crossed
	// alert of an account that is not entitled to alerts stays armed, and
	// fires at a later crossing once the account is entitled again.
	Entitled coinpulse.EntitlementFunc
	Log      *slog.Logger
	// PollMargin is how far back each poll for new armings reaches
	// (default 30 s): more than any clock skew between nodes plus the
	// longest a creating transaction takes to commit.
	PollMargin time.Duration
	// Clock is the node's clock (default time.Now).
	Clock coinpulse.Clock
}

// pageSize is how many armed alerts one store read returns.
const pageSize = 10_000

// NewEvaluator returns an evaluator with an empty index; the first
// Evaluate loads it.
func NewEvaluator(cfg EvaluatorConfig) *Evaluator {
	ev := &Evaluator{store: cfg.Store, index: NewIndex(), event: cfg.Event, onFire: cfg.OnFire, entitled: cfg.Entitled,
		log: cfg.Log, margin: cfg.PollMargin, nodeTime: cfg.Clock, announced: map[announcedKey]time.Time{}}
	if ev.log == nil {
		ev.log = slog.Default()
	}
	if ev.margin <= 0 {
		ev.margin = 30 * time.Second
	}
	if ev.nodeTime == nil {
		ev.nodeTime = time.Now
	}
	ev.started = ev.nodeTime()
	return ev
}

type announcedKey struct{ id, armedSeq int64 }

// SetOnFire sets the function called after each tick with the alerts it
// saw fired; call it before Run.
func (ev *Evaluator) SetOnFire(f func(fired []coinpulse.Alert)) { ev.onFire = f }

// SetEntitled sets the function that says whose alerts may fire (see
// EvaluatorConfig.Entitled); call it before Run.
func (ev *Evaluator) SetEntitled(f coinpulse.EntitlementFunc) { ev.entitled = f }

// Index returns the evaluator's index.
func (ev *Evaluator) Index() *Index { return ev.index }

// Armed adds an armed alert to the index (the API calls it on create and
// re-enable).
func (ev *Evaluator) Armed(a *coinpulse.Alert) {
	if a.IsActive {
		ev.index.Add(EntryOf(a))
	}
}

// Disarmed drops an alert from the index (disabled or deleted).
func (ev *Evaluator) Disarmed(id int64) { ev.index.Remove(id) }

// EntryOf is an alert's index entry.
func EntryOf(a *coinpulse.Alert) Entry {
	return Entry{ID: a.ID, ArmedSeq: a.ArmedSeq, UserID: a.Owner.UserID, CoinID: a.CoinID, Target: floatTarget(a.TargetPrice, a.Condition), Cond: a.Condition}
}

// floatTarget is the float64 the index compares prices with in place of
// the exact target t (up to 18 decimal places). A price is a float64, and
// it is past t when the decimal it stands for, the one the API shows
// (shortest), is: 0.1 is not past a target of 0.1, and 1 is past one of
// 0.999999999999999999. The nearest float64 to t gets both right only
// when t is one (0.999999999999999999 rounds to 1). shortest grows with
// the float, so for Above the index is given the largest float whose
// decimal is at or under t (a price p crosses when p > f), and for Below
// the smallest whose decimal is at or over t (p < f): a step or two from
// the nearest.
func floatTarget(t decimal.Decimal, c coinpulse.Condition) float64 {
	up, down := math.Inf(1), math.Inf(-1)
	f := t.InexactFloat64() // the nearest; targets are under 10^15
	if t.NumDigits() <= 15 {
		// Every decimal of 15 significant digits or fewer reads back from
		// its nearest float64: shortest(f) is t, and the floats on either
		// side stand for other decimals.
		return f
	}
	if c == coinpulse.Above {
		for shortest(f).GreaterThan(t) {
			f = math.Nextafter(f, down)
		}
		for g := math.Nextafter(f, up); !shortest(g).GreaterThan(t); g = math.Nextafter(g, up) {
			f = g
		}
		return f
	}
	for shortest(f).LessThan(t) {
		f = math.Nextafter(f, up)
	}
	for g := math.Nextafter(f, down); !shortest(g).LessThan(t); g = math.Nextafter(g, down) {
		f = g
	}
	return f
}

// shortest is the decimal a price stands for: the shortest that reads back
// as it, as the API's JSON shows it.
func shortest(p float64) decimal.Decimal {
	return decimal.RequireFromString(strconv.FormatFloat(p, 'f', -1, 64))
}

// Run evaluates every snapshot snaps delivers until ctx ends. A failed
// tick is logged; its crossings are put back and tried at the next one.
func (ev *Evaluator) Run(ctx context.Context, snaps <-chan *market.Snapshot) {
	for {
		select {
		case <-ctx.Done():
			return
		case snap := <-snaps:
			if _, err := ev.Evaluate(ctx, snap); err != nil && ctx.Err() == nil {
				ev.log.Error("alert evaluation failed; retrying at the next tick", "err", err, "snapshot", snap.ID)
			}
		}
	}
}

// Evaluate follows new armings, then fires what snap crosses, then reads
// back the firings of the last PollMargin (this node's and the others').
// It returns the firings not announced before, which it hands to OnFire:
// so every node tells its own WebSocket clients of every firing, once,
// whichever node made it.
func (ev *Evaluator) Evaluate(ctx context.Context, snap *market.Snapshot) ([]coinpulse.Alert, error) {
	if err := ev.follow(ctx, ev.nodeTime()); err != nil {
		return nil, err
	}
	ev.prices = ev.prices[:0]
	for _, c := range snap.Coins() {
		ev.prices = append(ev.prices, Price{CoinID: c.ID, Price: c.CurrentPrice})
	}
	ev.crossed = ev.index.Tick(ev.crossed[:0], ev.prices)
	ev.hold(ctx)
	var fired []coinpulse.Alert
	if len(ev.crossed) > 0 {
		at := snap.AsOf.UTC()
		fs := make([]coinpulse.Firing, len(ev.crossed))
		for i, e := range ev.crossed {
			p := snap.Coin(e.CoinID).CurrentPrice
			fs[i] = coinpulse.Firing{AlertID: e.ID, ArmedSeq: e.ArmedSeq, Price: decimal.NewFromFloat(p), At: at}
		}
		var err error
		fired, err = ev.store.FireAlerts(ctx, fs, ev.event)
		if err != nil {
			for _, e := range ev.crossed { // not lost: the next tick tries again
				ev.index.Add(e)
			}
			return nil, fmt.Errorf("fire %d alerts: %w", len(fs), err)
		}
	}
	recent, err := ev.recentFirings(ctx, snap.AsOf)
	if err != nil {
		ev.log.Warn("read recent firings", "err", err) // this tick's own are still announced
	}
	news := ev.unannounced(append(fired, recent...))
	if len(news) > 0 && ev.onFire != nil {
		ev.onFire(news)
	}
	return news, nil
}

// hold puts back in the index, armed, the crossed alerts of accounts not
// entitled to alerts now (a lower plan, an expired subscription), so that
// they neither fire nor send anything until the account is entitled again.
// An account whose entitlement cannot be read has its alerts held too,
// for this tick; the others' fire. It costs one look-up per account with
// a crossing (Entitled is expected to cache its answers), and the held
// alerts' removal from the index and return to it.
func (ev *Evaluator) hold(ctx context.Context) {
	if ev.entitled == nil || len(ev.crossed) == 0 {
		return
	}
	clear(ev.held)
	if ev.held == nil {
		ev.held = map[int64]bool{}
	}
	var failed int
	var lastErr error
	kept := ev.crossed[:0]
	for _, e := range ev.crossed {
		held, seen := ev.held[e.UserID]
		if !seen {
			en, err := ev.entitled(ctx, e.UserID)
			if err != nil {
				failed++
				lastErr = err
			}
			held = err != nil || !en.Alerts
			ev.held[e.UserID] = held
		}
		if held {
			ev.index.Add(e)
			continue
		}
		kept = append(kept, e)
	}
	ev.crossed = kept
	if failed > 0 && ctx.Err() == nil {
		ev.log.Warn("read accounts' entitlement to alerts; their crossed alerts wait for the next tick", "accounts", failed, "err", lastErr)
	}
}

// recentFirings reads the firings since the previous snapshot's time,
// less recentSlack (since the evaluator started, at first): firings carry
// their snapshot's as_of, the same on every node, so this covers the
// previous tick's firings that another node committed after this node
// read them, and the current tick's.
func (ev *Evaluator) recentFirings(ctx context.Context, asOf time.Time) ([]coinpulse.Alert, error) {
	since := ev.prevAsOf.Add(-recentSlack)
	if since.Before(ev.started.Add(-recentSlack)) {
		since = ev.started.Add(-recentSlack)
	}
	var (
		out   []coinpulse.Alert
		after int64
	)
	for {
		page, err := ev.store.FiredAlerts(ctx, since, after, pageSize)
		if err != nil {
			return out, err
		}
		out = append(out, page...)
		if len(page) < pageSize {
			ev.prevAsOf = asOf
			return out, nil
		}
		after = page[len(page)-1].ID
	}
}

// recentSlack widens each read of recent firings.
const recentSlack = 5 * time.Second

// unannounced returns the alerts of as not announced before, once each,
// records them, and forgets records older than twice the margin.
func (ev *Evaluator) unannounced(as []coinpulse.Alert) []coinpulse.Alert {
	var news []coinpulse.Alert
	for _, a := range as {
		if a.TriggeredAt == nil {
			continue
		}
		k := announcedKey{a.ID, a.ArmedSeq}
		if _, ok := ev.announced[k]; ok {
			continue
		}
		ev.announced[k] = *a.TriggeredAt
		news = append(news, a)
	}
	cut := ev.nodeTime().Add(-2*ev.margin - recentSlack)
	for k, t := range ev.announced {
		if t.Before(cut) {
			delete(ev.announced, k)
		}
	}
	return news
}

// follow loads the index at the first call, then adds the armings since
// the last poll, less the margin.
func (ev *Evaluator) follow(ctx context.Context, start time.Time) error {
	since := time.Time{}
	if ev.loaded {
		since = ev.polled.Add(-ev.margin)
	}
	var after int64
	n := 0
	for {
		page, err := ev.store.ArmedAlerts(ctx, since, after, pageSize)
		if err != nil {
			return fmt.Errorf("read armed alerts: %w", err)
		}
		for i := range page {
			e := EntryOf(&page[i])
			if old, ok := ev.index.Get(e.ID); ok && old.ArmedSeq == e.ArmedSeq {
				continue
			}
			ev.index.Add(e)
			n++
		}
		if len(page) < pageSize {
			break
		}
		after = page[len(page)-1].ID
	}
	if !ev.loaded {
		ev.log.Info("alert index loaded", "armed", ev.index.Len())
	} else if n > 0 {
		ev.log.Debug("alert index followed new armings", "added", n)
	}
	ev.loaded, ev.polled = true, start
	return nil
}
