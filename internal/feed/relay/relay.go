// Package relay lets the nodes that share a store take a live feed's
// quotes from the upstream once a refresh, rather than once a node: the
// first node to claim a refresh instant in the store fetches its quotes
// and stores them, and the others read them there. So N nodes cost the
// upstream (and its key's rate) what one does, and serve the same
// figures, snapshot ids and ETags, as sim's nodes do.
//
// Only nodes with the same coin set share: the store keys hold the feed's
// fingerprint and a hash of the universe's ids (sorted). So that a node
// started another day, with another CoinGecko top list, serves the same
// coins, the node that chooses a set stores it, and a node that starts
// within a day of the choice, or while another node serves it, serves it
// too (see Feed.Universe). serve relays only on
// PostgreSQL: a SQLite file has one node.
//
// History is not relayed: the nodes take turns at it (the market
// engine's Config.Turn), and a node loads what another stored.
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
	"slices"
	"strconv"
	"strings"
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
	// Host, when set, names where the node runs (serve: its host name
	// and address), the same across its restarts: Node is then Host, "#"
	// and a random part, and the quotes of this node's run before a
	// restart are not taken for another node's (see Universe).
	Host string
	// Wait is how long a claim holds without news from its node: past
	// it, another node takes the refresh over (default 30 s). The node
	// that holds a claim renews it every Wait/3 while it fetches, for
	// Hold at most: a call held longer (a 429's wait, a ban, a hang) is
	// taken over by another node Wait later.
	Wait time.Duration
	// Hold is the longest a node renews a claim (default 2 minutes: the
	// quotes of 5,000 CoinGecko coins take 20 calls, 48 s on a free key).
	Hold time.Duration
	// Poll is how often a node waiting for another's quotes reads the
	// store (default 100 ms).
	Poll time.Duration
	// Refresh is the nodes' refresh interval (default a minute): a coin
	// set whose quotes were stored within two of them, and 30 s more, is
	// served by a node now.
	Refresh time.Duration
	// Fresh is how long after it was chosen a coin set is served by the
	// nodes that start, even when no node serves it now (default 24
	// hours). Past it, a node that starts while none serves it chooses
	// again.
	Fresh time.Duration

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

// DefaultFresh is Config.Fresh's default.
const DefaultFresh = 24 * time.Hour

// New wraps cfg.Feed.
func New(cfg Config) *Feed {
	if cfg.Node == "" {
		var b [6]byte
		rand.Read(b[:])
		cfg.Node = hex.EncodeToString(b[:])
		if cfg.Host != "" {
			cfg.Node = cfg.Host + "#" + cfg.Node
		}
	}
	if cfg.Wait <= 0 {
		cfg.Wait = 30 * time.Second
	}
	if cfg.Hold <= 0 {
		cfg.Hold = 2 * time.Minute
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 100 * time.Millisecond
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = time.Minute
	}
	if cfg.Fresh <= 0 {
		cfg.Fresh = DefaultFresh
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

// Universe is the coin set the node serves, which names the store keys
// the nodes serving it share. An upstream whose set is a choice of the
// moment (coinpulse.UniverseAdopter: CoinGecko's top list) serves the
// set stored by the node that chose it, when it was chosen within Fresh
// or another node serves it now; else the node chooses one and stores
// it. See adopt.
func (f *Feed) Universe(ctx context.Context) ([]coinpulse.CoinInfo, error) {
	u, err := f.universe(ctx)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.key = f.keyOf(u)
	f.mu.Unlock()
	return u, nil
}

// keyOf is the start of the store keys of the nodes serving coins:
// "relay:<fingerprint>:<hash of the ids>". The set of coins, not their
// order: CoinGecko lists them by market cap, which moves.
func (f *Feed) keyOf(coins []coinpulse.CoinInfo) string {
	ids := make([]string, len(coins))
	for i, c := range coins {
		ids[i] = c.ID
	}
	slices.Sort(ids)
	h := fnv.New64a()
	for _, id := range ids {
		h.Write([]byte(id))
		h.Write([]byte{0})
	}
	return "relay:" + f.String() + ":" + strconv.FormatUint(h.Sum64(), 36)
}

// chosen is a coin set as the node that chose it stored it, under
// "relay:<universe key>:universe".
type chosen struct {
	At    int64        `json:"at"` // when, Unix milliseconds
	Node  string       `json:"node"`
	Coins []storedCoin `json:"coins"`
}

// storedCoin is a coin of a chosen set. (Where its history begins is
// each node's own: see coinpulse.UniverseAdopter.)
type storedCoin struct {
	ID                string   `json:"id"`
	Symbol            string   `json:"symbol"`
	Name              string   `json:"name"`
	CirculatingSupply float64  `json:"circulating_supply,omitempty"`
	TotalSupply       *float64 `json:"total_supply,omitempty"`
	MaxSupply         *float64 `json:"max_supply,omitempty"`
}

// universe returns the upstream's set, or the set another node chose.
func (f *Feed) universe(ctx context.Context) ([]coinpulse.CoinInfo, error) {
	ad, ok := f.cfg.Feed.(coinpulse.UniverseAdopter)
	if !ok {
		return f.cfg.Feed.Universe(ctx)
	}
	key := "relay:" + ad.UniverseKey() + ":universe"
	raw, err := f.get(ctx, key)
	if err != nil {
		f.cfg.Log.Warn("relay: cannot read the coin set the other nodes serve; this node chooses its own", "err", err)
		return f.cfg.Feed.Universe(ctx)
	}
	if u := f.adopt(ctx, ad, raw); u != nil {
		return u, nil
	}
	u, err := f.cfg.Feed.Universe(ctx)
	if err != nil {
		return nil, err
	}
	c := chosen{At: f.cfg.Clock().UnixMilli(), Node: f.cfg.Node, Coins: make([]storedCoin, len(u))}
	for i, x := range u {
		c.Coins[i] = storedCoin{ID: x.ID, Symbol: x.Symbol, Name: x.Name, CirculatingSupply: x.CirculatingSupply, TotalSupply: x.TotalSupply, MaxSupply: x.MaxSupply}
	}
	b, err := json.Marshal(c)
	if err != nil {
		f.cfg.Log.Warn("relay: cannot store the coin set this node chose for the others", "err", err)
		return u, nil
	}
	switch stored, err := f.swap(ctx, key, raw, b); {
	case err != nil:
		f.cfg.Log.Warn("relay: cannot store the coin set this node chose for the others", "err", err)
	case !stored:
		// Another node chose one at the same moment: serve its.
		if raw, err := f.get(ctx, key); err == nil {
			if other := f.adopt(ctx, ad, raw); other != nil {
				return other, nil
			}
		}
		f.cfg.Log.Warn("relay: another node stored a coin set at the same moment, which this node cannot serve; it serves its own")
	}
	return u, nil
}

// adopt returns the coin set stored as raw, adopted by the upstream, when
// it is to be served: it was chosen within Fresh (a restart, or the nodes
// of a deployment started one after another), or another node serves it
// now (it claimed or stored quotes of it in the last two refreshes and
// 30 s; or the store could not say). Nil when there is none, it is not to
// be served (the set is chosen again), or the upstream refuses it.
func (f *Feed) adopt(ctx context.Context, ad coinpulse.UniverseAdopter, raw []byte) []coinpulse.CoinInfo {
	var c chosen
	if raw == nil || json.Unmarshal(raw, &c) != nil || len(c.Coins) == 0 {
		return nil
	}
	coins := make([]coinpulse.CoinInfo, len(c.Coins))
	for i, x := range c.Coins {
		coins[i] = coinpulse.CoinInfo{ID: x.ID, Symbol: x.Symbol, Name: x.Name, CirculatingSupply: x.CirculatingSupply, TotalSupply: x.TotalSupply, MaxSupply: x.MaxSupply}
	}
	// A set from a clock ahead of this one counts as just chosen, but
	// for one further ahead than Fresh: a clock gone wrong.
	age := max(f.cfg.Clock().Sub(time.UnixMilli(c.At)), 0)
	if f.cfg.Clock().Sub(time.UnixMilli(c.At)) < -f.cfg.Fresh {
		return nil
	}
	served := false
	if age >= f.cfg.Fresh {
		served = f.served(ctx, f.keyOf(coins))
		if !served {
			return nil
		}
	}
	u, err := ad.Adopt(coins)
	if err != nil {
		f.cfg.Log.Warn("relay: the stored coin set cannot be served here; this node chooses its own", "err", err)
		return nil
	}
	f.cfg.Log.Info("relay: serving the coin set chosen before", "coins", len(u), "chosen", time.UnixMilli(c.At).UTC(), "by", c.Node, "served_by_another_node", served)
	return u
}

// served reports whether a node other than this one serves the coins
// under key now: it claimed a refresh of them, or stored their quotes,
// within the last two refreshes and 30 s. A store that cannot say counts
// as served, so that a failed read never replaces the set the others
// serve.
func (f *Feed) served(ctx context.Context, key string) bool {
	since := f.cfg.Clock().Add(-2*f.cfg.Refresh - 30*time.Second).UnixMilli()
	raw, err := f.get(ctx, key+":claim")
	if err != nil {
		return true
	}
	var c claim
	if raw != nil && json.Unmarshal(raw, &c) == nil && f.other(c.Node) && c.At > since {
		return true
	}
	b, err := f.get(ctx, key+":quotes")
	if err != nil {
		return true
	}
	var rec record
	return b != nil && json.Unmarshal(b, &rec) == nil && f.other(rec.Node) && rec.At > since
}

// other reports whether node is another node than this one, and not this
// one's run before a restart (Config.Host).
func (f *Feed) other(node string) bool {
	if f.cfg.Host != "" {
		host, _, _ := strings.Cut(node, "#")
		return host != f.cfg.Host
	}
	return node != f.cfg.Node
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
// when it last said so; Stored, that they are in the quotes record. The
// nodes waiting poll this small row, not the record.
type claim struct {
	At     int64  `json:"at"`
	Node   string `json:"node"`
	Since  int64  `json:"since"` // Unix milliseconds
	Stored bool   `json:"stored,omitempty"`
}

// skew is how far another node's clock may run ahead of this one's: a
// record or a claim of an instant later than this node's clock by more
// is a clock gone wrong, and is not taken, so that it cannot freeze every
// node's quotes.
const skew = 10 * time.Second

// storeTimeout bounds each of the relay's reads and writes: the quotes do
// not wait on a database that hangs.
const storeTimeout = 10 * time.Second

// Quotes returns the quotes of the refresh instant now: another node's,
// when one has fetched or is fetching them; else this node claims the
// instant, fetches them from the upstream and stores them for the others.
// A node whose claim goes Wait without renewal (a crash; a call held past
// Hold) is taken over, and one whose call or store fails lets go at once.
// Quotes stored for a later instant (a node ahead of this one, whose
// clock is not ahead of this one's by more than skew) are taken as they
// are. When the store fails, the node fetches its quotes itself.
func (f *Feed) Quotes(ctx context.Context, now time.Time) ([]coinpulse.Quote, error) {
	f.mu.Lock()
	key := f.key
	f.mu.Unlock()
	if key == "" {
		return nil, errors.New("relay: Quotes before Universe")
	}
	at := now.UnixMilli()
	for {
		latest := f.cfg.Clock().Add(skew).UnixMilli()
		// The claim before the record: a claim read as stored had its
		// record stored before, so the record read after it is there.
		raw, err := f.get(ctx, key+":claim")
		if err != nil {
			return f.direct(ctx, now, err)
		}
		rec, err := f.read(ctx, key+":quotes")
		if err != nil {
			return f.direct(ctx, now, err)
		}
		if rec != nil && rec.At >= at && rec.At <= latest {
			return f.take(rec, false), nil
		}
		var c claim
		if raw != nil && json.Unmarshal(raw, &c) != nil {
			c = claim{} // unreadable: taken over
		}
		if c.At >= at && c.At <= latest && c.Node != f.cfg.Node && !c.Stored && f.live(c) {
			// Another node is fetching them: wait on its claim until it
			// says they are stored (or lapses), then read them. (A claim
			// that says so when they are not there is taken over.)
			if err := f.await(ctx, key, at, latest); err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				return f.direct(ctx, now, err)
			}
			continue
		}
		mine, _ := json.Marshal(claim{At: at, Node: f.cfg.Node, Since: f.cfg.Clock().UnixMilli()})
		swapped, err := f.swap(ctx, key+":claim", raw, mine)
		if err != nil {
			return f.direct(ctx, now, err)
		}
		if !swapped {
			continue // another node claimed it first
		}
		return f.fetch(ctx, key, at, now)
	}
}

// own rewrites this node's claim of the instant at as next (renewed,
// stored or let go), finding it by its node and instant rather than by its
// bytes, so that a write the database applied but reported failed does
// not lose it. It reports whether it did: not when the claim is no longer
// this node's (another took the refresh over).
func (f *Feed) own(ctx context.Context, key string, at int64, next claim) bool {
	b, _ := json.Marshal(next)
	for range 3 {
		raw, err := f.get(ctx, key)
		if err != nil {
			continue
		}
		var c claim
		if raw == nil || json.Unmarshal(raw, &c) != nil || c.Node != f.cfg.Node || c.At != at {
			return false
		}
		if ok, err := f.swap(ctx, key, raw, b); err == nil && ok {
			return true
		}
	}
	return false
}

// live reports whether claim c is within Wait of its last renewal.
func (f *Feed) live(c claim) bool {
	age := f.cfg.Clock().Sub(time.UnixMilli(c.Since))
	return age < f.cfg.Wait && age > -skew
}

// await polls the claim under key+":claim" every Poll until it says the
// quotes of an instant from at to latest are stored, or names another
// instant, or lapses: the caller then reads the record, or claims the
// refresh. Every tenth poll it looks at the record too, in case the
// fetching node stored the quotes but could not mark its claim.
func (f *Feed) await(ctx context.Context, key string, at, latest int64) error {
	for i := 1; ; i++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(f.cfg.Poll):
		}
		raw, err := f.get(ctx, key+":claim")
		if err != nil {
			return err
		}
		var c claim
		if raw == nil || json.Unmarshal(raw, &c) != nil || c.At < at || c.At > latest || c.Stored || !f.live(c) {
			return nil
		}
		if i%10 == 0 {
			if rec, err := f.read(ctx, key+":quotes"); err != nil || rec != nil && rec.At >= at && rec.At <= latest {
				return err
			}
		}
	}
}

// direct fetches the quotes from the upstream without the other nodes:
// the store failed (err), and the quotes must not wait on it.
func (f *Feed) direct(ctx context.Context, now time.Time, err error) ([]coinpulse.Quote, error) {
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	f.cfg.Log.Warn("relay: the database failed; this refresh's quotes are fetched by this node alone", "err", err)
	qs, err := f.cfg.Feed.Quotes(ctx, now)
	if err != nil {
		return nil, err
	}
	return f.take(f.record(now.UnixMilli(), qs), true), nil
}

// fetch takes the quotes of at from the upstream, renewing this node's
// claim every Wait/3 for Hold at most, stores them for the other nodes and
// marks the claim stored, which the waiting nodes poll for (should the
// mark fail, they read the quotes when the claim lapses). When the call or
// the store fails, it lets the claim go, so that another node takes the
// refresh over at once; a failed store is logged, the quotes being this
// node's all the same.
func (f *Feed) fetch(ctx context.Context, key string, at int64, now time.Time) ([]coinpulse.Quote, error) {
	renewed := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(renewed)
		t := time.NewTicker(f.cfg.Wait / 3)
		defer t.Stop()
		for until := time.Now().Add(f.cfg.Hold); ; {
			select {
			case <-done:
				return
			case <-t.C:
				if time.Now().After(until) {
					return // held too long: the others take over
				}
				f.own(context.WithoutCancel(ctx), key+":claim", at, claim{At: at, Node: f.cfg.Node, Since: f.cfg.Clock().UnixMilli()})
			}
		}
	}()
	qs, err := f.cfg.Feed.Quotes(ctx, now)
	close(done)
	<-renewed
	bg := context.WithoutCancel(ctx)
	if err != nil {
		f.own(bg, key+":claim", at, claim{At: at, Node: f.cfg.Node}) // let go
		return nil, err
	}
	rec := f.record(at, qs)
	switch stored, err := f.store(bg, key+":quotes", rec); {
	case err != nil || !stored:
		f.own(bg, key+":claim", at, claim{At: at, Node: f.cfg.Node})
		f.cfg.Log.Warn("relay: storing the quotes for the other nodes failed; they take the refresh over", "err", err)
	default:
		f.own(bg, key+":claim", at, claim{At: at, Node: f.cfg.Node, Since: f.cfg.Clock().UnixMilli(), Stored: true})
	}
	return f.take(rec, true), nil
}

// record is the quotes qs of the instant at, with the upstream's count of
// markets, or, while it knows none, the last this node had.
func (f *Feed) record(at int64, qs []coinpulse.Quote) *record {
	rec := &record{At: at, Node: f.cfg.Node, Quotes: make([]quoteEntry, len(qs))}
	if mc, ok := f.cfg.Feed.(coinpulse.MarketCounter); ok {
		if n, ok := mc.Markets(); ok {
			rec.Markets = &n
		}
	}
	if n, ok := f.Markets(); rec.Markets == nil && ok {
		rec.Markets = &n
	}
	for i, q := range qs {
		e := quoteEntry{ID: q.CoinID, Price: q.Price, MarketCap: q.MarketCap, Time: q.Time.UnixNano()}
		if !q.NoVolume {
			v := q.TotalVolume
			e.Volume = &v
		}
		rec.Quotes[i] = e
	}
	return rec
}

// store stores rec under key unless the record there is of its instant
// or a later one (another node took the refresh over, or the next): it
// reports whether the record there serves rec's instant now, rec or that
// one.
func (f *Feed) store(ctx context.Context, key string, rec *record) (bool, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return false, err
	}
	for range 3 {
		old, err := f.get(ctx, key)
		if err != nil {
			return false, err
		}
		var cur record
		if old != nil && json.Unmarshal(old, &cur) == nil && cur.At >= rec.At && cur.At <= f.cfg.Clock().Add(skew).UnixMilli() {
			return true, nil
		}
		ok, err := f.swap(ctx, key, old, b)
		if err != nil || ok {
			return ok, err
		}
		// Another node's record came in between: look again.
	}
	return false, nil
}

// get reads key, nil when it holds nothing.
func (f *Feed) get(ctx context.Context, key string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	b, err := f.cfg.KV.GetKV(ctx, key)
	if coinpulse.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("relay: read %s: %w", key, err)
	}
	return b, nil
}

func (f *Feed) swap(ctx context.Context, key string, old, value []byte) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	ok, err := f.cfg.KV.SwapKV(ctx, key, old, value)
	if err != nil {
		return false, fmt.Errorf("relay: write %s: %w", key, err)
	}
	return ok, nil
}

// read returns the stored record under key, nil when there is none or it
// cannot be read (a node then fetches anew).
func (f *Feed) read(ctx context.Context, key string) (*record, error) {
	b, err := f.get(ctx, key)
	if err != nil || b == nil {
		return nil, err
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
	switch {
	case fetched:
		f.fetched++
	case rec.Node != f.cfg.Node: // (not this node's own, read again)
		if f.relayed == 0 {
			f.cfg.Log.Info("relay: quotes relayed from another node through the database, rather than fetched again", "feed", f.cfg.Feed.Name(), "from", rec.Node)
		}
		f.relayed++
	}
	return out
}
