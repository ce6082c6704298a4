package ratelimit

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	neturl "net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"coinpulse"
)

//go:embed limit.lua
var limitLua string

var limitScript = redis.NewScript(limitLua)

// DefaultPrefix starts every key the Redis limiter writes.
const DefaultPrefix = "cp:rl:"

// monthKeyGrace is how long a month key outlives its month.
const monthKeyGrace = 24 * time.Hour

// Redis is the Limiter for several nodes: its state lives in Redis and
// each check is decided inside one atomic Lua script run, exact across
// every client of the server. Create it with NewRedis.
type Redis struct {
	client Client
	// cluster: keys of different accounts may live on different shards,
	// so a script run holds the checks of one account only.
	cluster bool
	seed    Seed
	prefix  string
	// clock, when set (tests only), replaces the server's TIME.
	clock coinpulse.Clock
	// nodeClock is this node's clock, used only to guess the month key.
	nodeClock coinpulse.Clock
	// ttlPad lengthens the rolling keys' lives; withClock sets it, since
	// the server expires keys on its own clock, not the test's.
	ttlPad time.Duration
	// settle is how long a seed of a month under way waits for the
	// nodes' meters before it reads the count again (see WithSettle).
	settle time.Duration
	// seen tells a month seeded before from a new one (see WithSeen).
	seen Seen
	// timeout bounds how long a check waits for its reply, from when it
	// is queued (pipelineTimeout but in tests).
	timeout time.Duration
	// offset is Redis's clock less this node's, in µs, as the last reply
	// measured it (see runDeadline); unknownOffset before the first. On
	// a cluster, whose servers' clocks may differ, each account's keys
	// keep their own (accountKeys.offset).
	offset atomic.Int64

	// seeding holds the Seed calls in flight, by account and month, so
	// that concurrent calls in this process share one.
	mu      sync.Mutex
	seeding map[string]*redisSeed

	// keyCache holds each account's *accountKeys; see keys.
	keyCache sync.Map

	// calls are the checks waiting for a pipeline; see pipeline. Every
	// check that gets into calls is answered: by a pipeline, or by Close,
	// which empties calls once no check is on its way in (senders counts
	// those) and isClosed turns the later ones away.
	calls     chan *scriptCall
	senders   atomic.Int64
	isClosed  atomic.Bool
	closed    chan struct{} // stops the pipelines
	startOnce sync.Once
	closeOnce sync.Once
}

// Client is what the limiter needs of a go-redis client: scripts, and
// pipelines. *redis.Client and *redis.ClusterClient are Clients.
type Client interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
	Exists(ctx context.Context, keys ...string) *redis.IntCmd
}

// replyInts is the number of integers limit.lua answers a check with.
const replyInts = 10

// scriptCall is one check waiting for its pipeline.
type scriptCall struct {
	// group: checks of one group may share a script run (same test
	// clock reading, and on a cluster the same account).
	group  string
	now    string // ARGV[1] of limit.lua
	keys   *accountKeys
	mode   any // argCommit or argPeek
	seed   string
	params params
	// deadline is when the check is given up: the limiter's timeout after
	// it was queued, however long it waited behind another trip.
	deadline time.Time
	done     chan scriptReply // buffered: the pipeline never waits on it
}

// callPool recycles scriptCalls, with their reply channels: a check
// takes one and puts it back once run has returned, when neither a
// pipeline nor Close holds it any more.
var callPool = sync.Pool{New: func() any { return &scriptCall{done: make(chan scriptReply, 1)} }}

// The mode argument of limit.lua: count the call, or only look.
var argCommit, argPeek any = "1", "0"

// params is a parameter set of limit.lua: the month's bounds, the rolling
// windows' T and τ, and the monthly limit. The checks of one plan in one
// month share it, so a run sends it once.
type params [7]int64

type scriptReply struct {
	res []int64
	err error
}

// The pipeline: concurrent checks of a node travel to Redis together, up
// to maxBatch checks in one write and one read, and on one Redis server in
// one run of limit.lua, which decides them one after another. A check
// waits for no timer: the pipeline sends whatever is waiting as soon as it
// is free (after letting the goroutines ready to run queue their checks),
// so the busier the node, the more checks share a trip and a run
// (about 21 under bench/limits.sh's 64 connections). Running a check costs
// Redis far less than starting a script does, so sharing the run is what
// keeps Redis's CPU per call low; each check is still decided atomically,
// with all its windows, on the server's clock. bench/limits.sh measured
// 0.39x of limits off with a round trip per check, 0.53x with one
// pipeline of a script per check, and 0.51x with four such pipelines.
const (
	pipelines = 1
	maxBatch  = 256
)

type redisSeed struct {
	wait chan struct{} // closed when Seed (and the settle) is over, or failed
	// written is closed once the run that writes the seed has returned,
	// or when there is nothing to write; done says it is, under Redis.mu
	// (see seedWritten).
	written chan struct{}
	done    bool
	n       int64
	err     error
	// found: another node wrote the month's count during the settle
	// wait; the calls run again without a seed (see awaitSettle).
	found bool
}

// Option configures a Redis limiter.
type Option func(*Redis)

// WithPrefix makes the limiter's keys start with prefix instead of
// DefaultPrefix, e.g. to keep separate deployments or tests apart on one
// server. The prefix must not contain '{' or '}', which would change the
// keys' hash slot.
func WithPrefix(prefix string) Option {
	return func(r *Redis) { r.prefix = prefix }
}

// WithSettle makes a seed wait d and read the count again when Redis has
// no count of a month the main database says is under way (a count above
// 0): Redis lost its state (a restart, a failover, an eviction) while the
// nodes were serving, and each node's meter may still hold calls it
// admitted but has not written. d should be the meters' batch interval
// and a margin. The account's calls wait for the seed meanwhile, on every
// node, so none is admitted on a short count. A month with no call
// written yet is seeded at once, unless WithSeen says it was seeded
// before; such a month's wait ends early when another node writes its
// count (see awaitSettle).
func WithSettle(d time.Duration) Option {
	return func(r *Redis) { r.settle = d }
}

// WithSeen makes a seed that finds no call of the month written ask seen
// whether the month was seeded before, and settle (see WithSettle) when
// it was: Redis lost the count of a month whose first calls the meters
// have not written yet. Without it such a month is taken as new, and the
// calls of its first meter interval could be admitted again.
func WithSeen(seen Seen) Option {
	return func(r *Redis) { r.seen = seen }
}

// withClock makes the script use clock's time instead of the server's
// TIME; for tests that need to control time.
func withClock(clock coinpulse.Clock) Option {
	return func(r *Redis) { r.clock, r.ttlPad = clock, time.Hour }
}

// withTimeout makes a check wait at most d for its reply instead of
// pipelineTimeout; for tests of stalls.
func withTimeout(d time.Duration) Option {
	return func(r *Redis) { r.timeout = d }
}

// badRedisURL refuses a URL redis.ParseURL cannot read.
const badRedisURL = "not a URL of the form redis://[user:password@]host[:port][/db][?option=value] (or rediss://), with the password percent-encoded; it is not quoted here, as it may hold a password"

// redisURLOptions are the options go-redis reads from a URL's query.
var redisURLOptions = []string{
	"db", "protocol", "client_name", "max_retries", "min_retry_backoff", "max_retry_backoff",
	"dial_timeout", "read_timeout", "write_timeout", "pool_fifo", "pool_size", "pool_timeout",
	"min_idle_conns", "max_idle_conns", "max_active_conns", "max_concurrent_dials",
	"pipeline_pool_size", "pipeline_read_buffer_size", "pipeline_write_buffer_size",
	"conn_max_idle_time", "idle_timeout", "conn_max_lifetime", "max_conn_age",
	"conn_max_lifetime_jitter", "skip_verify",
}

// badRedisOptions says what is wrong with a URL redis.ParseURL refused:
// when the URL reads without its query, which of its options go-redis
// knows but cannot read the value of, or that it has one go-redis does
// not know. It names options go-redis knows only: the name of another
// could be a part of a password (after an unescaped ?).
func badRedisOptions(raw string) string {
	u, err := neturl.Parse(raw)
	if err != nil || u.RawQuery == "" {
		return badRedisURL
	}
	base := *u
	base.RawQuery = ""
	if _, err := redis.ParseURL(base.String()); err != nil {
		return badRedisURL
	}
	var bad []string
	unknown, verify := false, false
	for k, v := range u.Query() {
		if !slices.Contains(redisURLOptions, k) {
			unknown = true
			continue
		}
		if k == "skip_verify" && !strings.EqualFold(u.Scheme, "rediss") {
			verify = true // go-redis takes it with TLS only
			continue
		}
		one := base
		one.RawQuery = neturl.Values{k: v}.Encode()
		if _, err := redis.ParseURL(one.String()); err != nil {
			bad = append(bad, k)
		}
	}
	slices.Sort(bad)
	var why []string
	if len(bad) > 0 {
		why = append(why, "the value of its option "+strings.Join(bad, ", ")+" does not read (a number, a duration such as 2s, or true or false, as the option takes)")
	}
	if verify {
		why = append(why, "it has skip_verify, which go-redis takes with rediss:// (TLS) only")
	}
	if unknown {
		// Less the two ClientOptions refuses.
		takes := slices.DeleteFunc(slices.Clone(redisURLOptions), func(o string) bool { return o == "read_timeout" || o == "write_timeout" })
		why = append(why, "it has an option go-redis does not take (it takes "+strings.Join(takes, ", ")+")")
	}
	if len(why) == 0 {
		return badRedisURL
	}
	return "a redis:// URL, but " + strings.Join(why, ", and ") + "; the URL is not quoted here, as it may hold a password"
}

// ClientOptions parses a redis:// URL into the options of a client fit
// for NewRedis: it never retries a command (a script retried after its
// reply was lost would run twice and count its calls twice), and its
// reads and writes end at a check's deadline, never at a socket timeout
// of the client's own: a check answered 503 at a shorter timeout could
// still run, and count, if Redis resumed before the deadline the script
// carries. So a URL's read_timeout or write_timeout is refused. An error
// never quotes the URL, nor any part of it: it may hold a password.
func ClientOptions(url string) (*redis.Options, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		// Neither net/url's error nor go-redis's is passed on: both quote
		// the URL or a part of it, and a password with an unescaped /, ?
		// or # puts a part of itself where the port or the database
		// number is read.
		return nil, errors.New(badRedisOptions(url))
	}
	if opts.ReadTimeout != 0 || opts.WriteTimeout != 0 {
		return nil, fmt.Errorf("read_timeout and write_timeout are not taken: each check's trip to Redis is bounded by its own deadline (%s from when it is queued), which a shorter socket timeout would undercut", pipelineTimeout)
	}
	opts.MaxRetries = -1
	opts.ContextTimeoutEnabled = true
	opts.ReadTimeout, opts.WriteTimeout = -1, -1 // the context's deadline alone
	if opts.PoolTimeout == 0 {
		opts.PoolTimeout = pipelineTimeout + time.Second // go-redis's default with its 5 s reads
	}
	return opts, nil
}

// NewRedis returns a limiter keeping its state in the Redis server (or
// cluster) behind client, seeding each account's month from seed (nil:
// from 0). A *redis.Client, *redis.ClusterClient or any
// redis.UniversalClient will do, with the settings of ClientOptions.
func NewRedis(client Client, seed Seed, opts ...Option) *Redis {
	r := &Redis{client: client, seed: seed, prefix: DefaultPrefix, nodeClock: time.Now, timeout: pipelineTimeout,
		seeding: make(map[string]*redisSeed), calls: make(chan *scriptCall, pipelines*maxBatch),
		closed: make(chan struct{})}
	r.offset.Store(unknownOffset)
	_, r.cluster = client.(*redis.ClusterClient)
	for _, o := range opts {
		o(r)
	}
	return r
}

// Allow implements coinpulse.Limiter.
func (r *Redis) Allow(ctx context.Context, account string, l coinpulse.Limits) (coinpulse.Verdict, error) {
	return r.check(ctx, account, l, true)
}

// Peek implements coinpulse.Limiter.
func (r *Redis) Peek(ctx context.Context, account string, l coinpulse.Limits) (coinpulse.Verdict, error) {
	return r.check(ctx, account, l, false)
}

// accountKeys are an account's keys for one month, also as the script's
// arguments (a string put in an interface is an allocation).
type accountKeys struct {
	month int64 // the month's start, Unix seconds
	keys  []string
	args  [3]any
	// offset is the clock offset of the server holding the keys, on a
	// cluster (see Redis.offset).
	offset atomic.Int64
}

// keys returns the keys of account's windows for the month starting at
// monthStart. They are kept per account (one entry per account checked,
// as the in-process limiter keeps), since building them costs more than
// the rest of a check on this side; callers only read them.
func (r *Redis) keys(account string, monthStart time.Time) *accountKeys {
	month := monthStart.Unix()
	if v, ok := r.keyCache.Load(account); ok {
		if k := v.(*accountKeys); k.month == month {
			return k
		}
	}
	base := r.prefix + "{" + account + "}:"
	k := &accountKeys{month: month, keys: []string{
		base + "s",
		base + "m",
		base + "mo:" + monthStart.Format("200601"),
	}}
	k.args = [3]any{k.keys[0], k.keys[1], k.keys[2]}
	k.offset.Store(unknownOffset)
	r.keyCache.Store(account, k)
	return k
}

func (r *Redis) check(ctx context.Context, account string, l coinpulse.Limits, commit bool) (coinpulse.Verdict, error) {
	// The script decides with the server's time; this node's clock only
	// guesses the month key, and the script corrects a wrong guess.
	var now time.Time
	nowArg := ""
	if r.clock != nil {
		now = r.clock()
		nowArg = strconv.FormatInt(now.UnixMicro(), 10)
	} else {
		now = r.nodeClock()
	}
	const unit = int64(time.Microsecond)
	sec := newRate(int64(l.PerSecond), secondNS, unit)
	minute := newRate(int64(l.PerMinute), minuteNS, unit)
	mode := argPeek
	if commit {
		mode = argCommit
	}
	start, end := monthBounds(now)
	seed, fresh := "", false
	// sown is the seed this call ran, if any: once the run that writes it
	// has returned, the calls that find the key absent run again rather
	// than take it (see seedMonth).
	var sown *redisSeed
	defer func() { r.seedWritten(sown) }()
	for attempt := 0; ; attempt++ {
		if attempt == maxRuns {
			return coinpulse.Verdict{}, errNoVerdict(account)
		}
		c := callPool.Get().(*scriptCall)
		c.now, c.keys, c.mode, c.seed = nowArg, r.keys(account, start), mode, seed
		c.params = params{start.UnixMicro(), end.UnixMicro(), sec.t / unit, sec.tau / unit, minute.t / unit, minute.tau / unit, l.Monthly}
		res, err := r.run(ctx, c, account)
		callPool.Put(c) // run returns once nothing else holds c
		r.seedWritten(sown)
		sown = nil
		if err != nil {
			return coinpulse.Verdict{}, fmt.Errorf("ratelimit: redis: %w", err)
		}
		switch {
		case len(res) == replyInts && res[0] == -3: // the run started past its deadline
			return coinpulse.Verdict{}, errLateRun
		case len(res) == replyInts && res[0] == -2: // another month on the server's clock
			start, end = monthBounds(time.UnixMicro(res[1]))
			seed, fresh = "", false
			continue
		case len(res) == replyInts && res[0] == -1: // no state for this month yet
			if attempt == maxRuns-1 {
				return coinpulse.Verdict{}, errNoVerdict(account) // no run left for a seed
			}
			n, written, own, err := r.seedMonth(ctx, account, start, fresh)
			if err != nil {
				return coinpulse.Verdict{}, err
			}
			if written {
				// A seed was written just now (by another call of this
				// process, or by another node during the settle), most
				// likely after this run: run again without one, and seed
				// anew if the key is still absent (Redis lost it again).
				fresh, seed = true, ""
				continue
			}
			seed, sown = strconv.FormatInt(n, 10), own
			continue
		case len(res) != replyInts:
			return coinpulse.Verdict{}, fmt.Errorf("ratelimit: redis: unexpected reply %v", res)
		}
		rs := result{
			now:      res[7] * unit,
			sec:      sec,
			min:      minute,
			secTAT:   res[2] * unit,
			minTAT:   res[4] * unit,
			secFrom:  res[8] * unit,
			minFrom:  res[9] * unit,
			monthly:  l.Monthly,
			count:    res[6],
			monthEnd: end.UnixNano(),
			secOK:    res[1] == 1,
			minOK:    res[3] == 1,
			monthOK:  res[5] == 1,
			allowed:  res[0] == 1,
		}
		return rs.verdict(), nil
	}
}

// maxRuns bounds the script runs of one check. One that has no state
// for its month takes two (the answer -1, then a run with its own seed,
// or without one once another call's seed is written), three when that
// seed was lost again at once; a correction of the month (-2) adds one.
const maxRuns = 5

// errNoVerdict is a check's error when maxRuns runs gave no verdict: the
// month kept changing, or its count kept vanishing from Redis.
func errNoVerdict(account string) error {
	return fmt.Errorf("ratelimit: %s: no verdict after %d runs: the month changed, or Redis lost its count, again and again", account, maxRuns)
}

// seedRecent is how long after a seed is over the calls of this process
// that find the month key absent wait for the seeder's run and run again,
// rather than seed: their run most likely came before the seed was
// written.
const seedRecent = time.Second

// seedTimeout bounds a seed's database reads, beyond the settle wait.
const seedTimeout = 10 * time.Second

// seedMonth calls Seed for account's month, sharing the call with the
// other calls of this process that want the same seed meanwhile. The seed
// runs apart from the context of the call that started it: a client
// hanging up must not end the seed every other call waits for, nor let
// them seed without the settle wait. Only the call that ran the seed
// writes it, in one run: own is the seed then, and the caller passes it
// to seedWritten once that run has returned. Every other call that finds
// the seed under way, or over less than seedRecent before, waits for
// that run and gets written: the month's count is most likely in Redis
// now, and the caller runs again without a seed. So no seed is written
// after the key could have vanished again with calls counted on it. A
// caller whose run without a seed still finds the key absent asks again
// with fresh, which seeds anew in place of a seed already written.
// written is also reported when another node wrote the count during the
// settle wait. A waiter whose seeder failed seeds again itself, the same
// way, once.
func (r *Redis) seedMonth(ctx context.Context, account string, start time.Time, fresh bool) (n int64, written bool, own *redisSeed, err error) {
	return r.seedMonthTry(ctx, account, start, fresh, true)
}

// seedWritten records that the run writing c's seed has returned (c nil:
// nothing to record).
func (r *Redis) seedWritten(c *redisSeed) {
	if c == nil {
		return
	}
	r.mu.Lock()
	if !c.done {
		c.done = true
		close(c.written)
	}
	r.mu.Unlock()
}

func (r *Redis) seedMonthTry(ctx context.Context, account string, start time.Time, fresh, retry bool) (int64, bool, *redisSeed, error) {
	if r.seed == nil {
		return 0, false, nil, nil
	}
	key := start.Format("200601") + ":" + account
	r.mu.Lock()
	c := r.seeding[key]
	if c != nil && c.done && fresh {
		c = nil // the key vanished after that seed was written: seed anew
	}
	if c != nil {
		r.mu.Unlock()
		select {
		case <-c.wait:
		case <-ctx.Done():
			return 0, false, nil, ctx.Err()
		}
		if c.err != nil {
			if err := ctx.Err(); err != nil || !retry {
				return 0, false, nil, cmp.Or(err, c.err)
			}
			return r.seedMonthTry(ctx, account, start, fresh, false)
		}
		select {
		case <-c.written:
		case <-ctx.Done():
			return 0, false, nil, ctx.Err()
		}
		return 0, true, nil, nil
	}
	c = &redisSeed{wait: make(chan struct{}), written: make(chan struct{})}
	r.seeding[key] = c
	r.mu.Unlock()
	forget := func() {
		r.mu.Lock()
		if r.seeding[key] == c {
			delete(r.seeding, key)
		}
		r.mu.Unlock()
	}
	over := false // Seed, Seen and the settle returned: no panic
	defer func() {
		if !over {
			c.err = errSeedPanicked
		}
		// A success is kept a little while for the calls whose run came
		// before the seed was written; a failure is not, and has nothing
		// to write.
		if c.err == nil {
			if c.found {
				r.seedWritten(c)
			}
			time.AfterFunc(seedRecent, forget)
		} else {
			forget()
			r.seedWritten(c)
		}
		close(c.wait)
	}()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.settle+seedTimeout)
	defer cancel()
	n, err := r.seed(sctx, account, start)
	found := false
	if err == nil && r.settle > 0 {
		again := n > 0
		if !again && r.seen != nil {
			again, err = r.seen(sctx, account, start)
		}
		if err == nil && again {
			// A month Seen marked with no call written is most likely one
			// another node is seeding at this instant: look for its count.
			if found = r.awaitSettle(sctx, r.keys(account, start).keys[2], n == 0); !found {
				n, err = r.seed(sctx, account, start)
			}
		}
	}
	c.n, c.found, c.err = n, found, err
	over = true
	if err != nil || found {
		return 0, found, nil, err
	}
	return n, false, c, nil
}

// settlePoll is how often a settle wait looks for a count another node
// wrote.
const settlePoll = 50 * time.Millisecond

// awaitSettle waits out the settle and reports whether monthKey was
// written meanwhile, looking every settlePoll when look is set, else not
// at all. A count another node wrote is as good as this node's seed
// would be: that node waited too, or its seed was the month's first
// (Seen had no mark). So the nodes that seed an account's new month at
// the same instant, all but the first of which Seen tells it was seeded
// before, wait for the first one's count, not the settle. A month with
// calls written does not look: after a Redis restart most accounts are
// in that case, and their looks together would flood Redis.
func (r *Redis) awaitSettle(ctx context.Context, monthKey string, look bool) bool {
	end := time.Now().Add(r.settle)
	if !look {
		time.Sleep(r.settle) // ctx outlasts the settle: it needs no watching
		return false
	}
	for {
		wait := min(settlePoll, time.Until(end))
		if wait <= 0 {
			return false
		}
		time.Sleep(wait)
		lctx, cancel := context.WithDeadline(ctx, end)
		n, err := r.client.Exists(lctx, monthKey).Result()
		cancel()
		if err == nil && n > 0 {
			return true
		}
	}
}

// refundScript gives back an admitted call: each rolling window's TAT
// moves back by what is left of the call's slot at the server's time (see
// rate.held; a slot of the interval the window's calls are charged at,
// and nothing when a call re-expressed the window after this one was
// admitted), keeping its expiry, and the count of the month the call was
// admitted in goes down one, where they exist. KEYS as limit.lua's, with
// the month of the admission; ARGV: 1 now in µs, or empty to read TIME;
// 2, 3 the second window's T and the TAT the call left, in µs (T 0: does
// not limit); 4, 5 the same for the minute window; 6 when the call was
// admitted, µs.
var refundScript = redis.NewScript(`
local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local at = tonumber(ARGV[6])
local function back(key, t, tat)
  if t <= 0 then
    return
  end
  local cur = redis.call('GET', key)
  if not cur then
    return
  end
  local v, unit, rest = cur, t, ''
  local i = string.find(cur, ' ', 1, true)
  if i then
    v = string.sub(cur, 1, i - 1)
    local j = string.find(cur, ' ', i + 1, true)
    if j then
      if (tonumber(string.sub(cur, j + 1)) or 0) >= at then
        return -- re-expressed since the call: its slot cannot be placed
      end
      unit, rest = tonumber(string.sub(cur, i + 1, j - 1)) or t, string.sub(cur, j)
    else
      unit = tonumber(string.sub(cur, i + 1)) or t
    end
  end
  v = tonumber(v)
  local held = math.min(unit, tat - now)
  if not v or held <= 0 then
    return
  end
  redis.call('SET', key, string.format('%.0f %.0f', v - held, unit) .. rest, 'KEEPTTL')
end
back(KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[3]))
back(KEYS[2], tonumber(ARGV[4]), tonumber(ARGV[5]))
local count = redis.call('GET', KEYS[3])
if count and tonumber(count) > 0 then
  redis.call('DECR', KEYS[3])
end
return 1
`)

// Refund implements coinpulse.Limiter, in one script.
func (r *Redis) Refund(ctx context.Context, account string, l coinpulse.Limits, a coinpulse.Admission) error {
	const unit = int64(time.Microsecond)
	nowArg := ""
	if r.clock != nil {
		nowArg = strconv.FormatInt(r.clock().UnixMicro(), 10)
	}
	at := a.At
	if at.IsZero() {
		at = r.nodeClock()
		if r.clock != nil {
			at = r.clock()
		}
	}
	start, _ := monthBounds(at)
	sec := newRate(int64(l.PerSecond), secondNS, unit)
	minute := newRate(int64(l.PerMinute), minuteNS, unit)
	// Bounded like a check's round trip: the failed call's answer waits.
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	if err := refundScript.Run(ctx, r.client, r.keys(account, start).keys, nowArg,
		sec.t/unit, slotEnd(sec, a.Second), minute.t/unit, slotEnd(minute, a.Minute), at.UnixMicro()).Err(); err != nil {
		return fmt.Errorf("ratelimit: redis refund: %w", err)
	}
	return nil
}

// slotEnd is the TAT a call left in a window of rate r, in µs for
// refundScript: 0 when the window does not limit.
func slotEnd(r rate, end time.Time) int64 {
	if r.limit == 0 || end.IsZero() {
		return 0
	}
	return end.UnixMicro()
}

// errClosed is what checks get after Close.
var errClosed = fmt.Errorf("limiter closed")

// run runs one check of limit.lua through the pipeline (see pipelines)
// and returns its reply.
func (r *Redis) run(ctx context.Context, c *scriptCall, account string) ([]int64, error) {
	r.startOnce.Do(func() {
		for range pipelines {
			go r.pipeline()
		}
	})
	c.group = c.now
	if r.cluster {
		c.group += "/" + account
	}
	c.deadline = time.Now().Add(r.timeout)
	r.senders.Add(1)
	if r.isClosed.Load() {
		r.senders.Add(-1)
		return nil, errClosed
	}
	// A select costs a lock per channel it names, and asking an HTTP
	// request's context for Done makes it a channel to close: so a check
	// queues at once when there is room, whatever ctx says, and ctx bounds
	// only a wait for room (which Close ends by emptying the queue).
	select {
	case r.calls <- c:
	default:
		select {
		case r.calls <- c:
		case <-ctx.Done():
			r.senders.Add(-1)
			return nil, ctx.Err()
		}
	}
	r.senders.Add(-1)
	// Once queued, the check waits for its reply whatever ctx says: a
	// pipeline answers every check it takes within r.timeout, and
	// Close every check it takes from the queue at once. Waiting on one
	// channel, the check's own, costs one lock no other check contends.
	rep := <-c.done
	return rep.res, rep.err
}

// pipeline sends the waiting checks together until Close.
func (r *Redis) pipeline() {
	batch := make([]*scriptCall, 0, maxBatch)
	for {
		select {
		case <-r.closed:
			return
		case first := <-r.calls:
			batch = append(batch[:0], first)
		}
		// Let the goroutines that are ready to run do so before the
		// batch is closed: those about to check join this trip rather
		// than wait for the next. It costs nothing when none is ready;
		// under load it doubles the checks a trip carries (about 10 to
		// 21 at 64 connections) and takes a quarter off Redis's CPU, at
		// the same throughput and latency (bench/limits.sh's load), and two
		// callers at once share a trip instead of taking turns
		// (BenchmarkRedisAllowParallel: 108 to 61 µs).
		runtime.Gosched()
	fill:
		for len(batch) < maxBatch {
			select {
			case c := <-r.calls:
				batch = append(batch, c)
			default:
				break fill
			}
		}
		r.send(batch)
	}
}

// pipelineTimeout bounds how long a check waits for its reply, from when
// it is queued: a trip carries the checks that can still make it, and
// ends by the earliest of their deadlines.
const pipelineTimeout = 5 * time.Second

// errCheckTimeout answers a check whose deadline passed before its trip.
var errCheckTimeout = errors.New("no reply in time")

// errLateRun answers a check whose script run started past the run's
// deadline, when Redis had stalled: the run decided nothing.
var errLateRun = errors.New("ratelimit: redis: the check reached Redis too late and was not decided")

// unknownOffset marks a clock offset not measured yet.
const unknownOffset = math.MinInt64

// A check that fails is answered as failed (a 503 for its call), so it
// must not be counted. A check lost before Redis ran it is not; one that
// Redis ran before the reply was lost is, and nothing can tell (see
// ClientOptions). What is left is a run that Redis starts after the
// check gave up: Redis stalled (a slow command, a fork, a paused VM)
// with the trip unread in its socket, and runs it when it comes back.
// So a run carries a deadline on Redis's own clock and, past it, decides
// nothing. The deadline is the trip's, less a tenth of the timeout,
// shifted by the offset of Redis's clock from this node's that the last
// reply measured: Redis's time in the reply, less the time it arrived.
// That measure is below the true offset by the reply's transit, so a run
// that starts after the check gave up is always past its deadline, also
// when the node's clock has since stepped forward by less than the
// tenth. The cost: a run that starts in the last tenth of its trip's
// time, after a stall of four seconds and more, decides nothing though
// its reply might still have arrived in time. Without a measure (a
// node's first trip, on a cluster an account's first of the month; a
// test clock) a run has no deadline.
func (r *Redis) runDeadline(g []*scriptCall, trip time.Time) string {
	if g[0].now != "" {
		return ""
	}
	off := r.offsetOf(g).Load()
	if off == unknownOffset {
		return ""
	}
	return strconv.FormatInt(trip.Add(-r.timeout/10).UnixMicro()+off, 10)
}

// offsetOf is where the clock offset of g's server is kept.
func (r *Redis) offsetOf(g []*scriptCall) *atomic.Int64 {
	if r.cluster {
		return &g[0].keys.offset
	}
	return &r.offset
}

// send runs batch's checks in one pipeline, a script run per group, and
// hands each check its reply. The script goes by SHA; if the server does
// not know it (a restart, a SCRIPT FLUSH), it is loaded and the refused
// runs are sent again.
func (r *Redis) send(batch []*scriptCall) {
	// Checks that waited out their time behind a stalled trip are answered
	// without being sent (so never counted); the rest bound the trip.
	now, deadline, live := time.Now(), time.Time{}, batch[:0]
	for _, c := range batch {
		switch {
		case !now.Before(c.deadline):
			c.done <- scriptReply{err: errCheckTimeout}
		default:
			if deadline.IsZero() || c.deadline.Before(deadline) {
				deadline = c.deadline
			}
			live = append(live, c)
		}
	}
	if batch = live; len(batch) == 0 {
		return
	}
	// The groups, in order of their first check.
	var groups [][]*scriptCall
	if allOneGroup(batch) {
		groups = [][]*scriptCall{batch}
	} else {
		at := make(map[string]int)
		for _, c := range batch {
			i, ok := at[c.group]
			if !ok {
				i = len(groups)
				at[c.group] = i
				groups = append(groups, nil)
			}
			groups[i] = append(groups[i], c)
		}
	}

	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	cmds := make([]*redis.IntSliceCmd, len(groups))
	var arrived time.Time
	exec := func(which []int) {
		pipe := r.client.Pipeline()
		for _, i := range which {
			cmds[i] = r.evalSha(groups[i], r.runDeadline(groups[i], deadline))
			_ = pipe.Process(ctx, cmds[i])
		}
		_, _ = pipe.Exec(ctx) // each command carries its own error
		arrived = time.Now()
	}
	all := make([]int, len(groups))
	for i := range all {
		all[i] = i
	}
	exec(all)
	var again []int
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) > 0 && limitScript.Load(ctx, r.client).Err() == nil {
		exec(again)
	}
	for i, g := range groups {
		res, err := cmds[i].Result()
		if err == nil && len(res) != replyInts*len(g) {
			err = fmt.Errorf("%d integers in the reply to %d checks", len(res), len(g))
		}
		if err == nil && g[0].now == "" {
			r.offsetOf(g).Store(replyNow(res) - arrived.UnixMicro())
		}
		for j, c := range g {
			if err != nil {
				c.done <- scriptReply{err: err}
				continue
			}
			c.done <- scriptReply{res: res[replyInts*j : replyInts*(j+1) : replyInts*(j+1)]}
		}
	}
}

// replyNow is the server's time in the reply to a check, in µs.
func replyNow(res []int64) int64 {
	if res[0] < 0 {
		return res[1]
	}
	return res[7]
}

// evalSha returns the EVALSHA of limit.lua that runs the checks of g,
// with the run's deadline (see runDeadline). The reply is read as
// integers straight away.
func (r *Redis) evalSha(g []*scriptCall, deadline string) *redis.IntSliceCmd {
	sets := make([]params, 0, 1)
	index := make([]int, len(g)) // of each check's set, from 1
	for j, c := range g {
		k := slices.Index(sets, c.params)
		if k < 0 {
			k = len(sets)
			sets = append(sets, c.params)
		}
		index[j] = k + 1
	}
	args := make([]any, 0, 8+6*len(g)+7*len(sets))
	args = append(args, "evalsha", limitScript.Hash(), 3*len(g))
	for _, c := range g {
		args = append(args, c.keys.args[:]...)
	}
	args = append(args, g[0].now, deadline, monthKeyGrace.Milliseconds(), r.ttlPad.Milliseconds(), len(sets))
	for _, p := range sets {
		for _, x := range p {
			args = append(args, x)
		}
	}
	for j, c := range g {
		args = append(args, c.mode, c.seed, index[j])
	}
	return redis.NewIntSliceCmd(context.Background(), args...)
}

// allOneGroup reports whether every check of batch is in the same group.
func allOneGroup(batch []*scriptCall) bool {
	for _, c := range batch[1:] {
		if c.group != batch[0].group {
			return false
		}
	}
	return true
}

// Close stops the limiter's pipelines: checks still queued and checks
// after it fail, checks on their way to Redis get their verdict. It does
// not close the client.
func (r *Redis) Close() {
	r.closeOnce.Do(func() {
		r.isClosed.Store(true)
		close(r.closed)
		// A check counted in senders saw isClosed false and is queueing:
		// answer the queue until none is left on its way in, then once
		// more for those that queued last. A pipeline may take some
		// meanwhile; it answers them too.
		for {
			r.failQueued()
			if r.senders.Load() == 0 {
				r.failQueued()
				return
			}
			runtime.Gosched()
		}
	})
}

// failQueued answers errClosed to every check in the queue.
func (r *Redis) failQueued() {
	for {
		select {
		case c := <-r.calls:
			c.done <- scriptReply{err: errClosed}
		default:
			return
		}
	}
}
