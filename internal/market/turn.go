package market

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
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
// renewal, and the next node goes on from the progress it saved.

// turn is the row that says which node is at the feed's history.
type turn struct {
	Node  string `json:"node,omitempty"` // empty: nobody
	Since int64  `json:"since"`          // its last renewal, Unix ms
}

// turnSkew is how far a node's clock may run ahead of another's: a turn
// renewed later than that past this node's clock is a clock gone wrong,
// and lapses.
const turnSkew = 10 * time.Second

// turnKey is where the turn at the feed's history is kept.
func (e *Engine) turnKey() string { return "market:history-turn:" + e.cfg.Feed.Name() }

// newNode names an engine in turns.
func newNode() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// historyTurn takes this node's turn at the feed's history, renewed until
// release is called. While another node holds it, historyTurn serves the
// feed's quotes (warm) and waits, then reports waited, without taking
// it: the caller loads again, from what the other node stored. A store
// that fails is logged, and the node goes on without a turn.
func (e *Engine) historyTurn(ctx context.Context) (release func(), waited bool, err error) {
	key := e.turnKey()
	poll := min(max(e.cfg.Refresh, 100*time.Millisecond), 5*time.Second)
	for {
		raw, err := e.cfg.Store.GetKV(ctx, key)
		if coinpulse.IsNotFound(err) {
			raw, err = nil, nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, false, ctx.Err()
			}
			e.cfg.Log.Warn("cannot read whether another node is at the feed's history; this node goes on alone", "err", err)
			return func() {}, false, nil
		}
		var t turn
		if raw != nil && json.Unmarshal(raw, &t) != nil {
			t = turn{} // unreadable: taken over
		}
		age := time.Since(time.UnixMilli(t.Since))
		if t.Node != "" && t.Node != e.node && age < e.cfg.Turn && age > -turnSkew {
			if !waited {
				e.cfg.Log.Info("another node is at this feed's history; serving quotes and waiting for it", "feed", e.cfg.Feed.Name(), "node", t.Node)
			}
			waited = true
			select {
			case <-ctx.Done():
				return nil, false, ctx.Err()
			case <-time.After(poll):
			}
			e.warm(ctx)
			continue
		}
		if waited {
			return nil, true, nil // the other node is done, or gone
		}
		mine, _ := json.Marshal(turn{Node: e.node, Since: time.Now().UnixMilli()})
		ok, err := e.cfg.Store.SwapKV(ctx, key, raw, mine)
		if err != nil {
			if ctx.Err() != nil {
				return nil, false, ctx.Err()
			}
			e.cfg.Log.Warn("cannot take a turn at the feed's history; this node goes on alone", "err", err)
			return func() {}, false, nil
		}
		if ok {
			return e.holdTurn(context.WithoutCancel(ctx), key), false, nil
		}
		// Another node took it at the same moment: look again.
	}
}

// holdTurn renews this node's turn every third of Config.Turn until the
// returned release, which gives it up.
func (e *Engine) holdTurn(ctx context.Context, key string) func() {
	done := make(chan struct{})
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		t := time.NewTicker(e.cfg.Turn / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				e.ownTurn(ctx, key, turn{Node: e.node, Since: time.Now().UnixMilli()})
			}
		}
	}()
	return func() {
		close(done)
		<-renewed
		e.ownTurn(ctx, key, turn{})
	}
}

// ownTurn rewrites this node's turn as next, if it is still this node's
// (found by its node, so that a write the store applied but reported
// failed does not lose it), each read and write bounded by 10 s.
func (e *Engine) ownTurn(ctx context.Context, key string, next turn) {
	b, _ := json.Marshal(next)
	for range 3 {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		raw, err := e.cfg.Store.GetKV(rctx, key)
		var t turn
		if coinpulse.IsNotFound(err) || err == nil && (json.Unmarshal(raw, &t) != nil || t.Node != e.node) {
			cancel()
			return // another node's now (this one's lapsed)
		}
		if err == nil {
			if ok, err := e.cfg.Store.SwapKV(rctx, key, raw, b); err == nil && ok {
				cancel()
				return
			}
		}
		cancel()
	}
	e.cfg.Log.Warn("cannot renew or give up this node's turn at the feed's history; it lapses", "after", e.cfg.Turn)
}
