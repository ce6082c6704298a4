package alerting

import (
	"context"
	"fmt"
	"log/slog"
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
	log    *slog.Logger
	margin time.Duration

	polled   time.Time // when the last poll of new armings started
	loaded   bool
	crossed  []Entry
	prices   []Price
	nodeTime func() time.Time
}

// EvaluatorConfig configures an Evaluator.
type EvaluatorConfig struct {
	Store coinpulse.AlertStore
	// Event builds a firing's event (the webhook payload).
	Event coinpulse.EventFunc
	// OnFire is called after each tick with the alerts it saw fired.
	OnFire func(fired []coinpulse.Alert)
	Log    *slog.Logger
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
	ev := &Evaluator{store: cfg.Store, index: NewIndex(), event: cfg.Event, onFire: cfg.OnFire,
		log: cfg.Log, margin: cfg.PollMargin, nodeTime: cfg.Clock}
	if ev.log == nil {
		ev.log = slog.Default()
	}
	if ev.margin <= 0 {
		ev.margin = 30 * time.Second
	}
	if ev.nodeTime == nil {
		ev.nodeTime = time.Now
	}
	return ev
}

// SetOnFire sets the function called after each tick with the alerts it
// saw fired; call it before Run.
func (ev *Evaluator) SetOnFire(f func(fired []coinpulse.Alert)) { ev.onFire = f }

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
	return Entry{ID: a.ID, ArmedSeq: a.ArmedSeq, CoinID: a.CoinID, Target: a.TargetPrice.InexactFloat64(), Cond: a.Condition}
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

// Evaluate follows new armings, then fires what snap crosses. It returns
// the alerts seen fired (also handed to OnFire).
func (ev *Evaluator) Evaluate(ctx context.Context, snap *market.Snapshot) ([]coinpulse.Alert, error) {
	if err := ev.follow(ctx); err != nil {
		return nil, err
	}
	ev.prices = ev.prices[:0]
	for _, c := range snap.Coins() {
		ev.prices = append(ev.prices, Price{CoinID: c.ID, Price: c.CurrentPrice})
	}
	ev.crossed = ev.index.Tick(ev.crossed[:0], ev.prices)
	if len(ev.crossed) == 0 {
		return nil, nil
	}
	at := snap.AsOf.UTC()
	fs := make([]coinpulse.Firing, len(ev.crossed))
	for i, e := range ev.crossed {
		p := snap.Coin(e.CoinID).CurrentPrice
		fs[i] = coinpulse.Firing{AlertID: e.ID, ArmedSeq: e.ArmedSeq, Price: decimal.NewFromFloat(p), At: at}
	}
	fired, err := ev.store.FireAlerts(ctx, fs, ev.event)
	if err != nil {
		for _, e := range ev.crossed { // not lost: the next tick tries again
			ev.index.Add(e)
		}
		return nil, fmt.Errorf("fire %d alerts: %w", len(fs), err)
	}
	if len(fired) > 0 && ev.onFire != nil {
		ev.onFire(fired)
	}
	return fired, nil
}

// follow loads the index at the first call, then adds the armings since
// the last poll, less the margin.
func (ev *Evaluator) follow(ctx context.Context) error {
	start := ev.nodeTime()
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
