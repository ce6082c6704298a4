package market

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"sync/atomic"
	"time"

	"coinpulse"
)

// The nodes that share a store take turns at a costly feed's history (a
// call a coin at the upstream's rate: CoinGecko's, Binance's): while one
// node backfills or fills a gap, the others serve the feed's quotes and
// wait for it, then load what it stored, so that N nodes started at once
// cost the upstream the history of one. A turn is a row swapped in the
// store's key-value table, renewed every third of Config.Turn while its
// node works; a node that dies loses it Config.Turn after its last
// renewal, and the next node goes on from the progress it saved. A node
// that finds its turn lost (not renewed in time, taken over) stops its
// work and waits for the other's.

// turn is the row that says which node is at the feed's history.
type turn struct {
	Node  string `json:"node,omitempty"` // empty: nobody
	Since int64  `json:"since"`          // its last renewal, Unix ms
	// Ended, on a turn given up, is when (Unix ns): every release
	// writes other bytes, so that a node comparing the row with what it
	// read before its saved state sees that a turn came and went.
	Ended int64 `json:"ended,omitempty"`
}

// turnSkew is how far a node's clock may run ahead of another's: a turn
// renewed later than that past this node's clock is a clock gone wrong,
// and lapses.
const turnSkew = 10 * time.Second

// turnKey is where the turn at the feed's history is kept: one for the
// nodes of one feed's configuration (its fingerprint).
func (e *Engine) turnKey() string { return "market:history-turn:" + e.fingerprint() }

// newNode names an engine in turns.
func newNode() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// readTurn reads the turn row as it is before the saved state is read
// (nil: none).
func (e *Engine) readTurn(ctx context.Context) ([]byte, error) {
	raw, err := e.cfg.Store.GetKV(ctx, e.turnKey())
	if coinpulse.IsNotFound(err) {
		return nil, nil
	}
	return raw, err
}

// heldTurn is this node's turn at the feed's history.
type heldTurn struct {
	// ctx is cancelled when the turn is lost: not renewed in time, or
	// taken over by another node.
	ctx  context.Context
	lost atomic.Bool
	// release gives the turn up.
	release func()
}

// historyTurn takes this node's turn at the feed's history; before is
// the row as read before the saved state. While another node holds it,
// historyTurn serves the feed's quotes (warm) and waits, then reports
// waited, without taking it: the caller loads again, from what the other
// node stored. So it does when the row changed since before (a turn came
// and went while the saved state was read). A store that fails before
// any wait is logged, and the node goes on alone (nil turn); one that
// fails during a wait ends it.
func (e *Engine) historyTurn(ctx context.Context, before []byte) (t *heldTurn, waited bool, err error) {
	key := e.turnKey()
	poll := min(max(e.cfg.Refresh, 100*time.Millisecond), 5*time.Second)
	pause := func() error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
		e.warm(ctx)
		return nil
	}
	for {
		raw, err := e.readTurn(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, false, ctx.Err()
			}
			if waited {
				return nil, true, pause()
			}
			e.cfg.Log.Warn("cannot read whether another node is at the feed's history; this node goes on alone", "err", err)
			return nil, false, nil
		}
		var cur turn
		if raw != nil && json.Unmarshal(raw, &cur) != nil {
			cur = turn{} // unreadable: taken over
		}
		age := time.Since(time.UnixMilli(cur.Since))
		if cur.Node != "" && cur.Node != e.node && age < e.cfg.Turn && age > -turnSkew {
			if !waited {
				e.cfg.Log.Info("another node is at this feed's history; serving quotes and waiting for it", "feed", e.cfg.Feed.Name(), "node", cur.Node)
			}
			waited = true
			if err := pause(); err != nil {
				return nil, false, err
			}
			continue
		}
		if waited || !bytes.Equal(raw, before) {
			return nil, true, nil // the other node is done, or gone: load what it stored
		}
		mine, _ := json.Marshal(turn{Node: e.node, Since: time.Now().UnixMilli()})
		ok, err := e.cfg.Store.SwapKV(ctx, key, raw, mine)
		if err != nil {
			if ctx.Err() != nil {
				return nil, false, ctx.Err()
			}
			// The swap may have been applied: give up what may be ours.
			e.ownTurn(context.WithoutCancel(ctx), key, turn{Ended: time.Now().UnixNano()}, time.Now().Add(e.cfg.Turn))
			e.cfg.Log.Warn("cannot take a turn at the feed's history; this node goes on alone", "err", err)
			return nil, false, nil
		}
		if !ok {
			return nil, true, nil // another node took it at the same moment
		}
		return e.holdTurn(ctx, key), false, nil
	}
}

// holdTurn renews this node's turn every third of Config.Turn until its
// release, which gives it up. A renewal that finds the turn another's, or
// cannot renew it before it lapses, loses it.
func (e *Engine) holdTurn(parent context.Context, key string) *heldTurn {
	ctx, cancel := context.WithCancel(parent)
	t := &heldTurn{ctx: ctx}
	done := make(chan struct{})
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		tick := time.NewTicker(e.cfg.Turn / 3)
		defer tick.Stop()
		lapses := time.Now().Add(e.cfg.Turn)
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			now := time.Now()
			if e.ownTurn(context.WithoutCancel(parent), key, turn{Node: e.node, Since: now.UnixMilli()}, lapses) {
				lapses = now.Add(e.cfg.Turn)
				continue
			}
			e.cfg.Log.Warn("this node lost its turn at the feed's history; it stops and waits for the node that took it")
			t.lost.Store(true)
			cancel()
			return
		}
	}()
	t.release = func() {
		close(done)
		<-renewed
		cancel()
		if !t.lost.Load() {
			e.ownTurn(context.WithoutCancel(parent), key, turn{Ended: time.Now().UnixNano()}, time.Now().Add(10*time.Second))
		}
	}
	return t
}

// ownTurn rewrites this node's turn as next, if it is still this node's
// (found by its node, so that a write the store applied but reported
// failed does not lose it), trying until by: it reports whether it did.
func (e *Engine) ownTurn(ctx context.Context, key string, next turn, by time.Time) bool {
	b, _ := json.Marshal(next)
	ctx, cancel := context.WithDeadline(ctx, by)
	defer cancel()
	for ctx.Err() == nil {
		raw, err := e.cfg.Store.GetKV(ctx, key)
		var t turn
		if coinpulse.IsNotFound(err) || err == nil && (json.Unmarshal(raw, &t) != nil || t.Node != e.node) {
			return false // another node's now
		}
		if err == nil {
			if ok, err := e.cfg.Store.SwapKV(ctx, key, raw, b); err == nil && ok {
				return true
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	return false
}
