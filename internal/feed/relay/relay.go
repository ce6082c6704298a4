// Package relay lets the nodes that share a store take a live feed's
// quotes from the upstream once a refresh, rather than once a node: the
// first node to claim a refresh instant in the store fetches its quotes
// and stores them, and the others read them there. So N nodes cost the
// upstream (and its key's rate) what one does, and serve the same
// figures, snapshot ids and ETags, as sim's nodes do.
//
// Only nodes with the same coin set share: the store keys hold the feed's
// fingerprint and a hash of the universe's ids, so a node whose CoinGecko
// top list differs (started another day) takes its own quotes, as before.
// History is not relayed: a node's first start backfills from the
// upstream (a later node finds the saved state in the shared store and
// starts warm).
package relay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"coinpulse"
)

// Config configures a Feed.
type Config struct {
	// Feed is the upstream feed whose quotes are relayed.
	Feed coinpulse.Feed
	// KV is the store the nodes share.
	KV coinpulse.KVStore
	// Node names this node in claims (default: random).
	Node string
	// Wait is how long a claim holds without news from its node: past
	// it, another node takes the refresh over (default 30 s). The node
	// that holds a claim renews it every Wait/3 while it fetches.
	Wait time.Duration
	// Poll is how often a node waiting for another's quotes reads the
	// store (default 100 ms).
	Poll time.Duration
	// Clock tells the time of claims (default time.Now).
	Clock func() time.Time
	// Log receives the relay's warnings (default slog.Default()).
	Log *slog.Logger
}

// Feed is a coinpulse.Feed whose Quotes go through the store. Its other
// methods are the upstream's.
type Feed struct {
	cfg Config

	mu        sync.Mutex
	key       string // "relay:<fingerprint>:<universe hash>", set by Universe
	markets   int
	marketsOK bool
	fetched   int // refreshes this node fetched from the upstream
	relayed   int // refreshes it read from another node's
}

var (
	_ coinpulse.Feed          = (*Feed)(nil)
	_ coinpulse.MarketCounter = (*Feed)(nil)
	_ coinpulse.QuotedRollup  = (*Feed)(nil)
	_ fmt.Stringer            = (*Feed)(nil)
)

// New wraps cfg.Feed.
func New(cfg Config) *Feed {
	if cfg.Node == "" {
		var b [6]byte
		rand.Read(b[:])
		cfg.Node = hex.EncodeToString(b[:])
	}
	if cfg.Wait <= 0 {
		cfg.Wait = 30 * time.Second
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 100 * time.Millisecond
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Feed{cfg: cfg}
}

// Name, Simulated and History are the upstream's.
func (f *Feed) Name() string    { return f.cfg.Feed.Name() }
func (f *Feed) Simulated() bool { return f.cfg.Feed.Simulated() }
func (f *Feed) History(ctx context.Context, info coinpulse.CoinInfo, interval coinpulse.Interval, from, to time.Time) ([]coinpulse.HistoryPoint, error) {
	return f.cfg.Feed.History(ctx, info, interval, from, to)
}

// String is the upstream's fingerprint, so that a saved state is the
// same whether the feed is relayed or not.
func (f *Feed) String() string {
	if s, ok := f.cfg.Feed.(fmt.Stringer); ok {
		return s.String()
	}
	return f.cfg.Feed.Name()
}

// RollupFromQuotes is the upstream's (coinpulse.QuotedRollup).
func (f *Feed) RollupFromQuotes() bool {
	q, ok := f.cfg.Feed.(coinpulse.QuotedRollup)
	return ok && q.RollupFromQuotes()
}

// Markets is the count of markets the last quotes came with: the
// upstream's, as the node that fetched them knew it.
func (f *Feed) Markets() (int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.markets, f.marketsOK
}

// Counts returns how many refreshes this node fetched from the upstream,
// and how many it read from another node's.
func (f *Feed) Counts() (fetched, relayed int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fetched, f.relayed
}

// Universe is the upstream's; it names the store keys the nodes with the
// same coin set share.
func (f *Feed) Universe(ctx context.Context) ([]coinpulse.CoinInfo, error) {
	u, err := f.cfg.Feed.Universe(ctx)
	if err != nil {
		return nil, err
	}
	h := fnv.New64a()
	for _, c := range u {
		h.Write([]byte(c.ID))
		h.Write([]byte{0})
	}
	f.mu.Lock()
	f.key = "relay:" + f.String() + ":" + strconv.FormatUint(h.Sum64(), 36)
	f.mu.Unlock()
	return u, nil
}

// record is the quotes of one refresh instant, as stored.
type record struct {
	At      int64        `json:"at"` // the refresh instant, Unix milliseconds
	Node    string       `json:"node"`
	Markets *int         `json:"markets,omitempty"`
	Quotes  []quoteEntry `json:"quotes"`
}

type quoteEntry struct {
	ID        string   `json:"i"`
	Price     float64  `json:"p"`
	Volume    *float64 `json:"v,omitempty"` // nil: unknown
	MarketCap float64  `json:"m,omitempty"`
	Time      int64    `json:"t"` // Unix nanoseconds
}

// claim says which node fetches the quotes of a refresh instant, and
// when it last said so.
type claim struct {
	At    int64  `json:"at"`
	Node  string `json:"node"`
	Since int64  `json:"since"` // Unix milliseconds
}

// ahead is how far past this node's instant another node's quotes or
// claim may be and still be taken as the same or a newer refresh: further
// is a clock gone wrong, which must not freeze every node's quotes.
const ahead = 5 * time.Minute

// Quotes returns the quotes of the refresh instant now: another node's,
// when one has fetched or is fetching them; else this node claims the
// instant, fetches them from the upstream and stores them for the others.
// A node whose claim goes Wait without renewal (a crash, a hung call) is
// taken over. Quotes stored for a later instant (a node ahead of this
// one, by up to ahead) are taken as they are.
func (f *Feed) Quotes(ctx context.Context, now time.Time) ([]coinpulse.Quote, error) {
	f.mu.Lock()
	key := f.key
	f.mu.Unlock()
	if key == "" {
		return nil, errors.New("relay: Quotes before Universe")
	}
	at := now.UnixMilli()
	for {
		rec, err := f.read(ctx, key+":quotes")
		if err != nil {
			return nil, err
		}
		if rec != nil && rec.At >= at && rec.At-at <= ahead.Milliseconds() {
			return f.take(rec, false), nil
		}
		raw, err := f.cfg.KV.GetKV(ctx, key+":claim")
		if err != nil && !coinpulse.IsNotFound(err) {
			return nil, fmt.Errorf("relay: read the claim: %w", err)
		}
		var c claim
		if raw != nil && json.Unmarshal(raw, &c) != nil {
			c = claim{} // unreadable: taken over
		}
		if age := f.cfg.Clock().Sub(time.UnixMilli(c.Since)); c.At >= at && c.At-at <= ahead.Milliseconds() && c.Node != f.cfg.Node && age < f.cfg.Wait && age > -f.cfg.Wait {
			// Another node is fetching them: wait for its record.
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(f.cfg.Poll):
			}
			continue
		}
		mine, _ := json.Marshal(claim{At: at, Node: f.cfg.Node, Since: f.cfg.Clock().UnixMilli()})
		swapped, err := f.cfg.KV.SwapKV(ctx, key+":claim", raw, mine)
		if err != nil {
			return nil, fmt.Errorf("relay: claim the refresh: %w", err)
		}
		if !swapped {
			continue // another node claimed it first
		}
		return f.fetch(ctx, key, at, now, mine)
	}
}

// fetch takes the quotes of at from the upstream, renewing the claim mine
// while it waits, and stores them for the other nodes. A failure to store
// them is logged: the quotes are this node's all the same, and the
// others take the refresh over when the claim lapses.
func (f *Feed) fetch(ctx context.Context, key string, at int64, now time.Time, mine []byte) ([]coinpulse.Quote, error) {
	renewed := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(renewed)
		t := time.NewTicker(f.cfg.Wait / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				next, _ := json.Marshal(claim{At: at, Node: f.cfg.Node, Since: f.cfg.Clock().UnixMilli()})
				if ok, err := f.cfg.KV.SwapKV(context.WithoutCancel(ctx), key+":claim", mine, next); err == nil && ok {
					mine = next
				}
			}
		}
	}()
	qs, err := f.cfg.Feed.Quotes(ctx, now)
	close(done)
	<-renewed
	if err != nil {
		// Let the others try at once, rather than after Wait.
		lapsed, _ := json.Marshal(claim{At: at, Node: f.cfg.Node})
		f.cfg.KV.SwapKV(context.WithoutCancel(ctx), key+":claim", mine, lapsed)
		return nil, err
	}
	rec := &record{At: at, Node: f.cfg.Node, Quotes: make([]quoteEntry, len(qs))}
	if mc, ok := f.cfg.Feed.(coinpulse.MarketCounter); ok {
		if n, ok := mc.Markets(); ok {
			rec.Markets = &n
		}
	}
	for i, q := range qs {
		e := quoteEntry{ID: q.CoinID, Price: q.Price, MarketCap: q.MarketCap, Time: q.Time.UnixNano()}
		if !q.NoVolume {
			v := q.TotalVolume
			e.Volume = &v
		}
		rec.Quotes[i] = e
	}
	if err := f.store(context.WithoutCancel(ctx), key+":quotes", rec); err != nil {
		f.cfg.Log.Warn("relay: storing the quotes for the other nodes failed; they will take the refresh over", "err", err)
	}
	return f.take(rec, true), nil
}

// store stores rec under key unless the record there is of a later
// instant (this node was slow, and another took the refresh over, then
// the next).
func (f *Feed) store(ctx context.Context, key string, rec *record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	old, err := f.cfg.KV.GetKV(ctx, key)
	switch {
	case coinpulse.IsNotFound(err):
		old = nil
	case err != nil:
		return err
	default:
		var cur record
		if json.Unmarshal(old, &cur) == nil && cur.At > rec.At && cur.At-rec.At <= ahead.Milliseconds() {
			return nil
		}
	}
	_, err = f.cfg.KV.SwapKV(ctx, key, old, b) // lost to another node's: theirs stands
	return err
}

// read returns the stored record under key, nil when there is none or it
// cannot be read (a node then fetches anew).
func (f *Feed) read(ctx context.Context, key string) (*record, error) {
	b, err := f.cfg.KV.GetKV(ctx, key)
	if coinpulse.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("relay: read the quotes: %w", err)
	}
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil {
		f.cfg.Log.Warn("relay: stored quotes unreadable; fetching anew", "err", err)
		return nil, nil
	}
	return &rec, nil
}

// take returns rec's quotes and keeps its count of markets.
func (f *Feed) take(rec *record, fetched bool) []coinpulse.Quote {
	out := make([]coinpulse.Quote, len(rec.Quotes))
	for i, e := range rec.Quotes {
		out[i] = coinpulse.Quote{CoinID: e.ID, Price: e.Price, MarketCap: e.MarketCap, Time: time.Unix(0, e.Time).UTC(), NoVolume: e.Volume == nil}
		if e.Volume != nil {
			out[i].TotalVolume = *e.Volume
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if rec.Markets != nil {
		f.markets, f.marketsOK = *rec.Markets, true
	}
	if fetched {
		f.fetched++
	} else {
		if f.relayed == 0 {
			f.cfg.Log.Info("relay: quotes relayed from another node through the database, rather than fetched again", "feed", f.cfg.Feed.Name(), "from", rec.Node)
		}
		f.relayed++
	}
	return out
}
