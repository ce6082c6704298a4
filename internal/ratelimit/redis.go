package ratelimit

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"sync"
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
// each check is one Lua script, exact across every client of the server.
// Create it with NewRedis.
type Redis struct {
	client redis.Scripter
	seed   Seed
	prefix string
	// clock, when set (tests only), replaces the server's TIME.
	clock coinpulse.Clock
	// nodeClock is this node's clock, used only to guess the month key.
	nodeClock coinpulse.Clock
	// ttlPad lengthens the rolling keys' lives; withClock sets it, since
	// the server expires keys on its own clock, not the test's.
	ttlPad time.Duration

	// seeding holds the Seed calls in flight, by account and month, so
	// that concurrent calls in this process share one.
	mu      sync.Mutex
	seeding map[string]*redisSeed
}

type redisSeed struct {
	done chan struct{}
	n    int64
	err  error
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

// withClock makes the script use clock's time instead of the server's
// TIME; for tests that need to control time.
func withClock(clock coinpulse.Clock) Option {
	return func(r *Redis) { r.clock, r.ttlPad = clock, time.Hour }
}

// NewRedis returns a limiter keeping its state in the Redis server (or
// cluster) behind client, seeding each account's month from seed (nil:
// from 0). A *redis.Client, *redis.ClusterClient or any
// redis.UniversalClient will do.
func NewRedis(client redis.Scripter, seed Seed, opts ...Option) *Redis {
	r := &Redis{client: client, seed: seed, prefix: DefaultPrefix, nodeClock: time.Now,
		seeding: make(map[string]*redisSeed)}
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

// keys returns the keys of account's windows for the month starting at
// monthStart.
func (r *Redis) keys(account string, monthStart time.Time) []string {
	base := r.prefix + "{" + account + "}:"
	return []string{
		base + "s",
		base + "m",
		base + "mo:" + monthStart.Format("200601"),
	}
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
	mode := "0"
	if commit {
		mode = "1"
	}
	start, end := monthBounds(now)
	seed := ""
	for attempt := 0; ; attempt++ {
		if attempt == 4 {
			return coinpulse.Verdict{}, fmt.Errorf("ratelimit: %s: the month keeps changing under the check", account)
		}
		res, err := limitScript.Run(ctx, r.client, r.keys(account, start),
			mode, nowArg, start.UnixMicro(), end.UnixMicro(), seed,
			sec.t/unit, sec.tau/unit, minute.t/unit, minute.tau/unit, l.Monthly,
			monthKeyGrace.Milliseconds(), r.ttlPad.Milliseconds(),
		).Int64Slice()
		if err != nil {
			return coinpulse.Verdict{}, fmt.Errorf("ratelimit: redis: %w", err)
		}
		switch {
		case len(res) == 2 && res[0] == -2: // another month on the server's clock
			start, end = monthBounds(time.UnixMicro(res[1]))
			seed = ""
			continue
		case len(res) == 2 && res[0] == -1: // no state for this month yet
			n, err := r.seedMonth(ctx, account, start)
			if err != nil {
				return coinpulse.Verdict{}, err
			}
			seed = strconv.FormatInt(n, 10)
			continue
		case len(res) != 8:
			return coinpulse.Verdict{}, fmt.Errorf("ratelimit: redis: unexpected reply %v", res)
		}
		rs := result{
			now:      res[7] * unit,
			sec:      sec,
			min:      minute,
			secTAT:   res[2] * unit,
			minTAT:   res[4] * unit,
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

// seedReuse is how long a seed is handed to the calls of this process
// that find the month key still absent. The seed is written only if the
// key is absent, so a seed this old could only miss the calls of that
// moment, and only if the key vanished meanwhile.
const seedReuse = time.Second

// seedMonth calls Seed for account's month, sharing the call with the
// other calls of this process that want the same seed meanwhile (or just
// before, see seedReuse). A waiter
// whose seeder failed (perhaps because the seeder's context ended) tries
// once itself.
func (r *Redis) seedMonth(ctx context.Context, account string, start time.Time) (int64, error) {
	if r.seed == nil {
		return 0, nil
	}
	key := start.Format("200601") + ":" + account
	r.mu.Lock()
	if c := r.seeding[key]; c != nil {
		r.mu.Unlock()
		select {
		case <-c.done:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		if c.err == nil {
			return c.n, nil
		}
		return r.seed(ctx, account, start)
	}
	c := &redisSeed{done: make(chan struct{})}
	r.seeding[key] = c
	r.mu.Unlock()
	forget := func() {
		r.mu.Lock()
		if r.seeding[key] == c {
			delete(r.seeding, key)
		}
		r.mu.Unlock()
	}
	defer func() {
		// A success is kept a little while for the calls whose script
		// ran before the seed was written; a failure is not.
		if c.err == nil {
			time.AfterFunc(seedReuse, forget)
		} else {
			forget()
		}
		close(c.done)
	}()
	c.err = errSeedPanicked // until Seed returns
	c.n, c.err = r.seed(ctx, account, start)
	return c.n, c.err
}

// refundScript moves the rolling windows' TATs back one emission interval
// (keeping their expiries) and the month's count down one, where they
// exist. KEYS as limit.lua's; ARGV: 1, 2 the second and minute windows' T
// in µs (0: does not limit).
var refundScript = redis.NewScript(`
local function back(key, t)
  if t <= 0 then
    return
  end
  local tat = redis.call('GET', key)
  if tat then
    redis.call('SET', key, string.format('%.0f', tonumber(tat) - t), 'KEEPTTL')
  end
end
back(KEYS[1], tonumber(ARGV[1]))
back(KEYS[2], tonumber(ARGV[2]))
local count = redis.call('GET', KEYS[3])
if count and tonumber(count) > 0 then
  redis.call('DECR', KEYS[3])
end
return 1
`)

// Refund implements coinpulse.Limiter, in one script.
func (r *Redis) Refund(ctx context.Context, account string, l coinpulse.Limits) error {
	now := r.nodeClock()
	if r.clock != nil {
		now = r.clock()
	}
	const unit = int64(time.Microsecond)
	start, _ := monthBounds(now)
	sec := newRate(int64(l.PerSecond), secondNS, unit)
	minute := newRate(int64(l.PerMinute), minuteNS, unit)
	if err := refundScript.Run(ctx, r.client, r.keys(account, start), sec.t/unit, minute.t/unit).Err(); err != nil {
		return fmt.Errorf("ratelimit: redis refund: %w", err)
	}
	return nil
}
