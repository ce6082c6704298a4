package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"coinpulse"
)

// runID keeps this run's keys apart from other runs'.
var runID = strconv.FormatInt(time.Now().UnixNano(), 36)

// testPrefix is the key prefix of the test t: the same for every limiter
// of one test, different across tests and runs. The keys are deleted when
// the test ends.
func testPrefix(t testing.TB) string {
	p := "cptest:" + runID + ":" + strings.NewReplacer("{", "(", "}", ")", " ", "_").Replace(t.Name()) + ":"
	return p
}

// newTestClient returns a client of its own (a pool of its own) for the
// server in COINPULSE_TEST_REDIS, closed and with the test's keys deleted
// when the test ends; it skips the test when the variable is unset.
func newTestClient(t testing.TB) *redis.Client {
	t.Helper()
	opt, err := ClientOptions(RedisURL(t))
	if err != nil {
		t.Fatalf("%s: %v", RedisEnv, err)
	}
	c := redis.NewClient(opt)
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("Redis at %s: %v", opt.Addr, err)
	}
	prefix := testPrefix(t)
	t.Cleanup(func() {
		defer c.Close()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if len(keys) > 0 {
			c.Del(ctx, keys...)
		}
	})
	return c
}

// With the server's clock: the keys, their expiries, and times near now.
func TestRedisKeysAndExpiries(t *testing.T) {
	c := newTestClient(t)
	prefix := testPrefix(t)
	lim := NewRedis(c, nil, WithPrefix(prefix))
	ctx := context.Background()
	l := coinpulse.Limits{PerSecond: 10, PerMinute: 100, Monthly: 1000}
	before := time.Now()
	v, err := lim.Allow(ctx, "acct-9", l)
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	if !v.Allowed || v.Windows[0].Remaining != 9 || v.Windows[1].Remaining != 99 || v.Windows[2].Remaining != 999 {
		t.Fatalf("verdict %+v", v)
	}
	// The server's clock and this one are the same machine's here.
	slack := 50 * time.Millisecond
	if r := v.Windows[0].Reset; r.Before(before.Add(100*time.Millisecond-slack)) || r.After(after.Add(100*time.Millisecond+slack)) {
		t.Errorf("second window Reset %v, want about %v", r, before.Add(100*time.Millisecond))
	}
	if r := v.Windows[1].Reset; r.Before(before.Add(600*time.Millisecond-slack)) || r.After(after.Add(600*time.Millisecond+slack)) {
		t.Errorf("minute window Reset %v, want about %v", r, before.Add(600*time.Millisecond))
	}
	month := coinpulse.MonthStart(before)
	next := month.AddDate(0, 1, 0)
	if !v.Windows[2].Reset.Equal(next) {
		t.Errorf("month Reset %v, want %v", v.Windows[2].Reset, next)
	}

	base := prefix + "{acct-9}:"
	for _, k := range []struct {
		key      string
		min, max time.Duration
	}{
		{base + "s", 1 * time.Millisecond, 101 * time.Millisecond},
		{base + "m", 500 * time.Millisecond, 601 * time.Millisecond},
		{base + "mo:" + month.Format("200601"), time.Until(next) + 23*time.Hour, time.Until(next) + 24*time.Hour + time.Second},
	} {
		ttl, err := c.PTTL(ctx, k.key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl < k.min || ttl > k.max {
			t.Errorf("PTTL %s = %v, want in [%v, %v]", k.key, ttl, k.min, k.max)
		}
	}
	if n, err := c.Get(ctx, base+"mo:"+month.Format("200601")).Int64(); err != nil || n != 1 {
		t.Errorf("month count = %d, %v; want 1", n, err)
	}
	// The rolling keys vanish when idle.
	time.Sleep(700 * time.Millisecond)
	if n, err := c.Exists(ctx, base+"s", base+"m").Result(); err != nil || n != 0 {
		t.Errorf("%d rolling keys left after their TAT (%v)", n, err)
	}
	v, err = lim.Peek(ctx, "acct-9", l)
	if err != nil {
		t.Fatal(err)
	}
	if !v.Allowed || v.Windows[0].Remaining != 10 || v.Windows[1].Remaining != 100 || v.Windows[2].Remaining != 999 {
		t.Fatalf("Peek after idling: %+v", v)
	}
}

// A node whose clock is a month off still uses the server's month.
func TestRedisNodeClockOff(t *testing.T) {
	c := newTestClient(t)
	prefix := testPrefix(t)
	var seeded []time.Time
	seed := func(_ context.Context, _ string, m time.Time) (int64, error) {
		seeded = append(seeded, m)
		return 5, nil
	}
	for _, off := range []time.Duration{-40 * 24 * time.Hour, 40 * 24 * time.Hour} {
		lim := NewRedis(c, seed, WithPrefix(prefix))
		lim.nodeClock = func() time.Time { return time.Now().Add(off) }
		v, err := lim.Allow(context.Background(), "a", coinpulse.Limits{Monthly: 10})
		if err != nil {
			t.Fatal(err)
		}
		next := coinpulse.MonthStart(time.Now()).AddDate(0, 1, 0)
		if !v.Allowed || !v.Windows[2].Reset.Equal(next) {
			t.Errorf("clock off by %v: %+v, want the month ending %v", off, v, next)
		}
	}
	month := coinpulse.MonthStart(time.Now())
	if len(seeded) != 1 || !seeded[0].Equal(month) {
		t.Errorf("seeded for %v, want once for %v", seeded, month)
	}
	if n, _ := c.Get(context.Background(), prefix+"{a}:mo:"+month.Format("200601")).Int64(); n != 7 {
		t.Errorf("month count %d, want 7", n)
	}
}

// A month under way that Redis has no count of (it lost its state) is
// seeded after the meters had time to write: the second reading, which
// has the calls written meanwhile, is the one used, and every call waits
// for it. A month with nothing written yet is seeded at once.
func TestRedisSettlesAMonthUnderWay(t *testing.T) {
	c := newTestClient(t)
	prefix := testPrefix(t)
	month := coinpulse.MonthStart(time.Now())
	const settle = 300 * time.Millisecond
	var mu sync.Mutex
	reads := map[string][]time.Time{}
	written := map[string][]int64{"busy": {5, 7}, "new": {0}}
	seed := func(_ context.Context, account string, m time.Time) (int64, error) {
		mu.Lock()
		defer mu.Unlock()
		if !m.Equal(month) {
			return 0, fmt.Errorf("seed of %v, want %v", m, month)
		}
		n := len(reads[account])
		reads[account] = append(reads[account], time.Now())
		return written[account][min(n, len(written[account])-1)], nil
	}
	lim := NewRedis(c, seed, WithPrefix(prefix), WithSettle(settle))
	limits := coinpulse.Limits{PerSecond: 100, PerMinute: 1000, Monthly: 10}

	// Three concurrent calls of the busy account: one seed, read twice.
	start := time.Now()
	got := monthCounts(t, lim, "busy", limits, 3)
	if took := time.Since(start); took < settle {
		t.Errorf("the calls were answered after %v, before the seed settled (%v)", took, settle)
	}
	if want := []int64{8, 9, 10}; !slices.Equal(got, want) {
		t.Errorf("busy: month counts %v after the calls, want %v (seeded with the second reading, 7)", got, want)
	}
	if r := reads["busy"]; len(r) != 2 || r[1].Sub(r[0]) < settle {
		t.Errorf("busy: seed read at %v, want twice, %v apart", r, settle)
	}

	// The call that started the seed hangs up during the wait: the others
	// still get the count read after it, not one read at once.
	var firstRead time.Time
	lagging := func(_ context.Context, account string, m time.Time) (int64, error) {
		mu.Lock()
		defer mu.Unlock()
		if firstRead.IsZero() {
			firstRead = time.Now()
		}
		if time.Since(firstRead) < settle {
			return 5, nil // the meters have not written the last two calls yet
		}
		return 7, nil
	}
	lim2 := NewRedis(c, lagging, WithPrefix(prefix+"h:"), WithSettle(settle))
	hangup, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	var hung sync.WaitGroup
	hung.Go(func() { lim2.Allow(hangup, "hangup", limits) }) // starts the seed, then its client goes
	time.Sleep(30 * time.Millisecond)
	waiting := monthCounts(t, lim2, "hangup", limits, 2) // these wait for that seed
	hung.Wait()
	for _, n := range waiting {
		if n < 8 {
			t.Errorf("a call waiting on a seed whose starter hung up: month count %d, want 8 or more (seeded with the count read after the wait, 7)", n)
		}
	}

	// A new month's first call is not held.
	start = time.Now()
	if v, err := lim.Allow(context.Background(), "new", limits); err != nil || !v.Allowed || v.Windows[2].Remaining != 9 {
		t.Errorf("new: %+v, %v; want admitted with 9 left", v, err)
	}
	if took := time.Since(start); took >= settle {
		t.Errorf("new: answered after %v, held for a settle", took)
	}
	if n := len(reads["new"]); n != 1 {
		t.Errorf("new: seed read %d times, want once", n)
	}
}

// A month that Redis loses the count of before its first calls are
// written is seeded again after the meters had time to write, not as a
// new month: Seen says it was seeded before. That holds also within
// seedRecent of the first seed, when the calls of this process that find
// the key absent could have been handed the first seed (0) again.
func TestRedisSettlesAMonthSeenBefore(t *testing.T) {
	c := newTestClient(t)
	prefix := testPrefix(t)
	month := coinpulse.MonthStart(time.Now())
	moKey := prefix + "{early}:mo:" + month.Format("200601")
	const settle = 300 * time.Millisecond
	var mu sync.Mutex
	var lost time.Time  // when the test deleted the month key
	written := int64(0) // the calls the meters have written
	seed := func(_ context.Context, account string, m time.Time) (int64, error) {
		mu.Lock()
		defer mu.Unlock()
		if account == "early" && !lost.IsZero() && time.Since(lost) >= settle/2 {
			return written, nil // the meters wrote the month's first calls
		}
		return 0, nil
	}
	seen := map[string]int{}
	var seenErr error
	mark := func(_ context.Context, account string, m time.Time) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		if seenErr != nil {
			return false, seenErr
		}
		seen[account]++
		return seen[account] > 1, nil
	}
	lim := NewRedis(c, seed, WithPrefix(prefix), WithSettle(settle), WithSeen(mark))
	limits := coinpulse.Limits{PerSecond: 100, PerMinute: 1000, Monthly: 10}

	// The month's first calls are not held: Seen has not seen it.
	start := time.Now()
	if got := monthCounts(t, lim, "early", limits, 3); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("first calls: month counts %v, want [1 2 3]", got)
	}
	if took := time.Since(start); took >= settle {
		t.Errorf("a new month's first calls were answered after %v, held for a settle", took)
	}

	// Redis loses the count at once, before the meters wrote those three.
	mu.Lock()
	lost, written = time.Now(), 3
	mu.Unlock()
	if err := c.Del(context.Background(), moKey).Err(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if got := monthCounts(t, lim, "early", limits, 2); !slices.Equal(got, []int64{4, 5}) {
		t.Errorf("after the loss: month counts %v, want [4 5] (seeded again with the 3 calls written)", got)
	}
	if took := time.Since(start); took < settle {
		t.Errorf("after the loss, the calls were answered after %v, before the seed settled (%v)", took, settle)
	}
	if n, _ := c.Get(context.Background(), moKey).Int64(); n != 5 {
		t.Errorf("month count %d in Redis, want 5", n)
	}

	// A Seen that fails fails the call, which counts nowhere.
	mu.Lock()
	seenErr = errors.New("database down")
	mu.Unlock()
	if _, err := lim.Allow(context.Background(), "other", limits); err == nil || !strings.Contains(err.Error(), "database down") {
		t.Errorf("Allow with Seen failing: %v, want its error", err)
	}
	if n, err := c.Exists(context.Background(), prefix+"{other}:mo:"+month.Format("200601")).Result(); err != nil || n != 0 {
		t.Errorf("a call whose Seen failed left a month count (%d, %v)", n, err)
	}
}

// Nodes seeding an account's new month at the same instant: all but the
// first find the month marked, and wait for the settle. A count the first
// one writes meanwhile ends their wait: they use it, and do not read the
// database again.
func TestRedisSettleEndsWhenAnotherNodeSeeds(t *testing.T) {
	c := newTestClient(t)
	prefix := testPrefix(t)
	const settle = 3 * time.Second
	var reads atomic.Int64
	seed := func(context.Context, string, time.Time) (int64, error) {
		reads.Add(1)
		return 0, nil
	}
	marked := func(context.Context, string, time.Time) (bool, error) { return true, nil }
	late := NewRedis(c, seed, WithPrefix(prefix), WithSettle(settle), WithSeen(marked))
	first := NewRedis(c, nil, WithPrefix(prefix))
	limits := coinpulse.Limits{PerSecond: 100, PerMinute: 1000, Monthly: 10}

	done := make(chan coinpulse.Verdict, 1)
	go func() {
		v, err := late.Allow(context.Background(), "acct", limits)
		if err != nil {
			t.Error(err)
		}
		done <- v
	}()
	for reads.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	// The late node has read 0 and found the month marked: it waits.
	if v, err := first.Allow(context.Background(), "acct", limits); err != nil || !v.Allowed || v.Windows[2].Remaining != 9 {
		t.Fatalf("the first node's call: %+v, %v; want admitted with 9 left", v, err)
	}
	v := <-done
	if !v.Allowed || v.Windows[2].Remaining != 8 {
		t.Errorf("the late node's call: %+v; want admitted with 8 left (counted on the first node's seed)", v)
	}
	if n := reads.Load(); n != 1 {
		t.Errorf("the late node read the database %d times, want once (the first node's count ended its wait)", n)
	}
}

// lossClient runs onExec after each pipeline a Redis limiter sends.
type lossClient struct {
	*redis.Client
	onExec func()
}

type lossPipe struct {
	redis.Pipeliner
	onExec func()
}

func (c *lossClient) Pipeline() redis.Pipeliner { return &lossPipe{c.Client.Pipeline(), c.onExec} }

func (p *lossPipe) Exec(ctx context.Context) ([]redis.Cmder, error) {
	cmds, err := p.Pipeliner.Exec(ctx)
	p.onExec()
	return cmds, err
}

// Only the call that ran a seed writes it. The calls that waited for it,
// more than one trip to Redis holds, do not carry it in their own runs: a
// key Redis loses again between two of those trips, with calls counted on
// it, is seeded anew, not rewritten from the old seed.
func TestRedisWaitersDoNotWriteTheSeed(t *testing.T) {
	base := newTestClient(t)
	prefix := testPrefix(t)
	month := coinpulse.MonthStart(time.Now())
	moKey := prefix + "{acct}:mo:" + month.Format("200601")
	var armed atomic.Bool
	var lostAt atomic.Int64 // the count Redis lost
	c := &lossClient{Client: base}
	c.onExec = func() {
		if armed.Load() {
			if n, _ := base.Get(context.Background(), moKey).Int64(); n > 0 {
				armed.Store(false)
				lostAt.Store(n)
				base.Del(context.Background(), moKey)
			}
		}
	}
	release := make(chan struct{})
	var reads atomic.Int64
	seed := func(context.Context, string, time.Time) (int64, error) {
		if reads.Add(1) == 1 {
			<-release
			armed.Store(true)
			return 0, nil
		}
		return lostAt.Load(), nil // the meters wrote the calls Redis lost
	}
	var marks atomic.Int64
	seen := func(context.Context, string, time.Time) (bool, error) { return marks.Add(1) > 1, nil }
	lim := NewRedis(c, seed, WithPrefix(prefix), WithSettle(100*time.Millisecond), WithSeen(seen))
	limits := coinpulse.Limits{Monthly: 100_000}
	const n = 3 * maxBatch / 2 // the waiters take two trips
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for range n {
		wg.Go(func() {
			v, err := lim.Allow(context.Background(), "acct", limits)
			if err != nil {
				t.Error(err)
				return
			}
			if v.Allowed {
				admitted.Add(1)
			}
		})
	}
	for reads.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // the other calls wait for the seed
	close(release)
	wg.Wait()
	if lostAt.Load() == 0 {
		t.Fatal("the month key was never lost")
	}
	final, err := base.Get(context.Background(), moKey).Int64()
	if err != nil {
		t.Fatal(err)
	}
	if final != admitted.Load() || admitted.Load() != n {
		t.Errorf("Redis lost a count of %d; after the calls it holds %d, for %d admitted of %d (want all, each counted once)",
			lostAt.Load(), final, admitted.Load(), n)
	}
}

// A Seen or a second Seed that panics fails the seed: its waiters seed
// again themselves, with the settle, rather than take the first read.
func TestRedisSeedThatPanicsIsNotHandedOn(t *testing.T) {
	c := newTestClient(t)
	prefix := testPrefix(t)
	release := make(chan struct{})
	var reads, marks atomic.Int64
	seed := func(context.Context, string, time.Time) (int64, error) {
		switch reads.Add(1) {
		case 1:
			<-release
			return 0, nil
		case 2:
			return 0, nil // the waiter's own first read
		}
		return 3, nil // after its settle: the meters wrote 3 calls
	}
	seen := func(context.Context, string, time.Time) (bool, error) {
		if marks.Add(1) == 1 {
			panic("driver bug")
		}
		return true, nil
	}
	lim := NewRedis(c, seed, WithPrefix(prefix), WithSettle(100*time.Millisecond), WithSeen(seen))
	limits := coinpulse.Limits{PerSecond: 100, PerMinute: 1000, Monthly: 10}
	seeder := make(chan any, 1)
	go func() {
		defer func() { seeder <- recover() }()
		lim.Allow(context.Background(), "acct", limits)
	}()
	for reads.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	type result struct {
		v   coinpulse.Verdict
		err error
	}
	waiter := make(chan result, 1)
	go func() {
		v, err := lim.Allow(context.Background(), "acct", limits)
		waiter <- result{v, err}
	}()
	time.Sleep(50 * time.Millisecond) // the waiter waits for the seed
	close(release)
	if p := <-seeder; p == nil {
		t.Error("the seeder's Allow did not panic")
	}
	w := <-waiter
	if w.err != nil || !w.v.Allowed || w.v.Windows[2].Remaining != 6 {
		t.Errorf("the waiter: %+v, %v; want admitted with 6 left (seeded with the 3 calls read after its own settle)", w.v, w.err)
	}
}

// monthCounts makes n concurrent calls of account, each of which must be
// admitted, and returns the month counts they saw, in order.
func monthCounts(t *testing.T, lim *Redis, account string, limits coinpulse.Limits, n int) []int64 {
	t.Helper()
	var wg sync.WaitGroup
	counts := make(chan int64, n)
	for range n {
		wg.Go(func() {
			v, err := lim.Allow(context.Background(), account, limits)
			if err != nil || !v.Allowed {
				t.Errorf("%s: %+v, %v", account, v, err)
				return
			}
			counts <- v.Windows[2].Limit - v.Windows[2].Remaining
		})
	}
	wg.Wait()
	close(counts)
	var got []int64
	for c := range counts {
		got = append(got, c)
	}
	slices.Sort(got)
	return got
}

// A reply lost after Redis ran the script fails the check (a 503 for the
// call) rather than running the script again: a retry would count the
// call twice (ClientOptions' MaxRetries -1).
func TestRedisLostReplyIsNotRetried(t *testing.T) {
	opt, err := ClientOptions(RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := newFaultProxy(t, opt.Addr, nil)
	opt.Addr = proxy.ln.Addr().String()
	c := redis.NewClient(opt)
	defer c.Close()
	newTestClient(t) // deletes the prefix's keys at the end
	lim := NewRedis(c, nil, WithPrefix(testPrefix(t)))
	defer lim.Close()
	limits := coinpulse.Limits{PerSecond: 1000, PerMinute: 10000, Monthly: 100}
	if v, err := lim.Allow(context.Background(), "a", limits); err != nil || !v.Allowed {
		t.Fatalf("first call: %+v, %v", v, err)
	}
	proxy.dropReply.Store(true)
	if _, err := lim.Allow(context.Background(), "a", limits); err == nil {
		t.Error("the call whose reply was lost was answered")
	}
	v, err := lim.Peek(context.Background(), "a", limits)
	if err != nil {
		t.Fatal(err)
	}
	if used := v.Windows[2].Limit - v.Windows[2].Remaining; used != 2 {
		t.Errorf("month count %d after two calls, the second's reply lost; want 2 (3: the script ran again)", used)
	}
	// The same for a refund: given back once, not twice. (A first refund
	// loads its script, so that the lost reply is the script's.)
	var adm [2]coinpulse.Admission
	for i := range adm {
		v, err := lim.Allow(context.Background(), "a", limits)
		if err != nil || !v.Allowed {
			t.Fatalf("call %d: %+v, %v", i+3, v, err)
		}
		adm[i] = v.Admission()
	}
	if err := lim.Refund(context.Background(), "a", limits, adm[0]); err != nil {
		t.Fatal(err)
	}
	v = coinpulse.Verdict{}
	proxy.dropReply.Store(true)
	if err := lim.Refund(context.Background(), "a", limits, adm[1]); err == nil {
		t.Error("the refund whose reply was lost succeeded")
	}
	if v, err = lim.Peek(context.Background(), "a", limits); err != nil {
		t.Fatal(err)
	}
	if used := v.Windows[2].Limit - v.Windows[2].Remaining; used != 2 {
		t.Errorf("month count %d after two more calls given back, the second refund's reply lost; want 2 (1: refunded twice)", used)
	}
}

// A check whose time ran out while it waited behind a stalled trip is
// answered at once, and not sent: it is not counted.
func TestRedisExpiredCheckIsNotSent(t *testing.T) {
	c := newTestClient(t)
	lim := NewRedis(c, nil, WithPrefix(testPrefix(t)))
	defer lim.Close()
	limits := coinpulse.Limits{PerSecond: 1000, PerMinute: 10000, Monthly: 100}
	if _, err := lim.Allow(context.Background(), "a", limits); err != nil {
		t.Fatal(err)
	}
	start, end := monthBounds(time.Now())
	sec, minute := newRate(1000, secondNS, int64(time.Microsecond)), newRate(10000, minuteNS, int64(time.Microsecond))
	late := &scriptCall{group: "", keys: lim.keys("a", start), mode: argCommit, done: make(chan scriptReply, 1),
		params:   params{start.UnixMicro(), end.UnixMicro(), sec.t / 1000, sec.tau / 1000, minute.t / 1000, minute.tau / 1000, 100},
		deadline: time.Now().Add(-time.Millisecond)}
	lim.send([]*scriptCall{late})
	if rep := <-late.done; !errors.Is(rep.err, errCheckTimeout) {
		t.Errorf("an expired check: %v, want errCheckTimeout", rep.err)
	}
	v, err := lim.Peek(context.Background(), "a", limits)
	if err != nil {
		t.Fatal(err)
	}
	if used := v.Windows[2].Limit - v.Windows[2].Remaining; used != 1 {
		t.Errorf("month count %d, want 1: the expired check was sent", used)
	}
}

// The Redis store with real time: a burst, a refusal, and the refill.
func TestRedisServerTime(t *testing.T) {
	lim := NewRedis(newTestClient(t), nil, WithPrefix(testPrefix(t)))
	ctx := context.Background()
	l := coinpulse.Limits{PerSecond: 20} // T = 50ms
	var v coinpulse.Verdict
	n := 0
	for ; n < 1000; n++ {
		var err error
		if v, err = lim.Allow(ctx, "a", l); err != nil {
			t.Fatal(err)
		}
		if !v.Allowed {
			break
		}
	}
	// At least the burst, and more only if the calls took T each.
	if n < 20 {
		t.Fatalf("call %d of the burst refused: %+v", n+1, v)
	}
	if v.Allowed || v.Exceeded != coinpulse.WindowSecond || v.RetryAfter <= 0 || v.RetryAfter > 50*time.Millisecond {
		t.Fatalf("after %d calls: %+v, want refused for at most 50ms", n, v)
	}
	var err error
	time.Sleep(v.RetryAfter)
	if v, err = lim.Allow(ctx, "a", l); err != nil || !v.Allowed {
		t.Fatalf("after RetryAfter: %+v, %v", v, err)
	}
}

func TestRedisError(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer c.Close()
	if _, err := NewRedis(c, nil).Allow(context.Background(), "a", coinpulse.Limits{}); err == nil {
		t.Fatal("Allow with no server: no error")
	}
}

type recorder struct {
	fatal, skip string
}

func (r *recorder) Helper()           {}
func (r *recorder) Fatal(args ...any) { r.fatal = fmt.Sprint(args...) }
func (r *recorder) Skip(args ...any)  { r.skip = fmt.Sprint(args...) }

func TestRedisURL(t *testing.T) {
	const url = "redis://127.0.0.1:6379/0"
	tests := []struct {
		name, url, require string
		want               string
		fatal, skip        bool
	}{
		{name: "set", url: url, want: url},
		{name: "set and required", url: url, require: "1", want: url},
		{name: "unset", skip: true},
		{name: "unset but required", require: "1", fatal: true},
		{name: "unset, required is not 1", require: "yes", skip: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(RedisEnv, tt.url)
			t.Setenv(RequireServicesEnv, tt.require)
			r := &recorder{}
			if got := RedisURL(r); got != tt.want {
				t.Errorf("RedisURL = %q, want %q", got, tt.want)
			}
			if (r.fatal != "") != tt.fatal {
				t.Errorf("Fatal called: %q, want called: %v", r.fatal, tt.fatal)
			}
			if (r.skip != "") != tt.skip {
				t.Errorf("Skip called: %q, want called: %v", r.skip, tt.skip)
			}
			if tt.fatal && r.fatal != "COINPULSE_TEST_REDIS is not set but COINPULSE_REQUIRE_SERVICES=1" {
				t.Errorf("Fatal message = %q", r.fatal)
			}
		})
	}
}

// A server that forgot the script (restart, SCRIPT FLUSH) gets it again
// and every check of the pipeline is answered; after Close, checks fail
// instead of hanging.
func TestRedisScriptFlushedAndClose(t *testing.T) {
	c := newTestClient(t)
	lim := NewRedis(c, nil, WithPrefix(testPrefix(t)))
	ctx := context.Background()
	l := coinpulse.Limits{PerSecond: 1000, PerMinute: 10000, Monthly: 100000}
	if _, err := lim.Allow(ctx, "acct-1", l); err != nil {
		t.Fatal(err)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	const n = 50
	admitAll(t, n, "after SCRIPT FLUSH", func() (coinpulse.Verdict, error) {
		return lim.Allow(ctx, "acct-1", l)
	})
	v, err := lim.Peek(ctx, "acct-1", l)
	if err != nil {
		t.Fatal(err)
	}
	if got := v.Windows[2].Remaining; got != 100000-1-n {
		t.Fatalf("month remaining %d, want %d", got, 100000-1-n)
	}

	lim.Close()
	lim.Close() // twice is fine
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := lim.Allow(tctx, "acct-1", l); err == nil || tctx.Err() != nil {
		t.Fatalf("Allow after Close: %v (context %v), want an immediate error", err, tctx.Err())
	}
}

// Concurrent checks of many accounts share script runs (one run per trip
// on one server, one per account and trip on a cluster) and stay exact
// per account: each of 20 accounts with K monthly calls left admits
// exactly K of its 4K interleaved calls, with peeks mixed in.
func TestRedisSharedRunsManyAccounts(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		t.Run(fmt.Sprintf("cluster=%v", cluster), func(t *testing.T) {
			c := newTestClient(t)
			lim := NewRedis(c, nil, WithPrefix(testPrefix(t)))
			lim.cluster = cluster // a single server takes cross-slot runs too; this only groups
			defer lim.Close()
			const accounts, k = 20, 25
			l := coinpulse.Limits{PerSecond: 1000000, PerMinute: 10000000, Monthly: k}
			ctx := context.Background()
			type res struct {
				account int
				allowed bool
				err     error
			}
			out := make(chan res, accounts*4*k)
			for i := range accounts * 4 * k {
				a := i % accounts
				go func() {
					if i%7 == 0 {
						if _, err := lim.Peek(ctx, fmt.Sprint("acct-", a), l); err != nil {
							out <- res{a, false, err}
							return
						}
					}
					v, err := lim.Allow(ctx, fmt.Sprint("acct-", a), l)
					out <- res{a, v.Allowed, err}
				}()
			}
			admitted := make([]int, accounts)
			for range accounts * 4 * k {
				r := <-out
				if r.err != nil {
					t.Fatal(r.err)
				}
				if r.allowed {
					admitted[r.account]++
				}
			}
			for a, n := range admitted {
				if n != k {
					t.Errorf("account %d: %d of %d calls admitted, want %d", a, n, 4*k, k)
				}
			}
		})
	}
}

// A check the queue has room for is decided and answered even when its
// context has ended (here before the call; in the server, when the client
// hangs up during the check): the caller never gets an error for a call
// Redis counted.
func TestRedisCancelledContextGetsItsVerdict(t *testing.T) {
	lim := NewRedis(newTestClient(t), nil, WithPrefix(testPrefix(t)))
	defer lim.Close()
	l := coinpulse.Limits{PerSecond: 1000000, PerMinute: 10000000, Monthly: 1000}
	if _, err := lim.Allow(context.Background(), "acct-1", l); err != nil {
		t.Fatal(err)
	}
	const n = 100
	admitAll(t, n, "Allow with a cancelled context", func() (coinpulse.Verdict, error) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // as when the client hangs up while the check is under way
		return lim.Allow(ctx, "acct-1", l)
	})
	v, err := lim.Peek(context.Background(), "acct-1", l)
	if err != nil {
		t.Fatal(err)
	}
	if got := v.Windows[2].Remaining; got != 1000-1-n {
		t.Fatalf("month remaining %d, want %d: every call answered was counted, and no other", got, 1000-1-n)
	}
}

// admitAll runs allow n times at once and fails t, saying what, unless
// every call is admitted without an error.
func admitAll(t *testing.T, n int, what string, allow func() (coinpulse.Verdict, error)) {
	t.Helper()
	errs := make(chan error, n)
	for range n {
		go func() {
			v, err := allow()
			if err == nil && !v.Allowed {
				err = fmt.Errorf("refused: %+v", v)
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
}

// Close while checks are queueing: every check returns, with its verdict
// or with errClosed, none is left waiting.
func TestRedisCloseUnderLoad(t *testing.T) {
	lim := NewRedis(newTestClient(t), nil, WithPrefix(testPrefix(t)))
	l := coinpulse.Limits{PerSecond: 1000000, PerMinute: 10000000, Monthly: coinpulse.Unlimited}
	ctx := context.Background()
	var answered, refused atomic.Int64
	var wg sync.WaitGroup
	for i := range 300 {
		wg.Go(func() {
			for {
				_, err := lim.Allow(ctx, fmt.Sprint("acct-", i%7), l)
				if err != nil {
					if !errors.Is(err, errClosed) {
						t.Errorf("Allow: %v, want a verdict or errClosed", err)
					}
					refused.Add(1)
					return
				}
				answered.Add(1)
			}
		})
	}
	for answered.Load() < 500 {
		time.Sleep(time.Millisecond)
	}
	lim.Close()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("checks still waiting 10 s after Close (%d answered, %d refused)", answered.Load(), refused.Load())
	}
	if refused.Load() != 300 {
		t.Errorf("%d checkers saw errClosed, want 300", refused.Load())
	}
}

// A check whose trip Redis reads only after the check gave up (Redis
// stalled, here behind a script that runs a second and a half) fails
// and is not counted when Redis comes back: the run is past its
// deadline and decides nothing.
func TestRedisStallPastTheDeadlineCountsNothing(t *testing.T) {
	c := newTestClient(t)
	lim := NewRedis(c, nil, WithPrefix(testPrefix(t)), withTimeout(400*time.Millisecond))
	defer lim.Close()
	ctx := context.Background()
	limits := coinpulse.Limits{PerSecond: 1000, PerMinute: 10000, Monthly: 100}
	// The first trip measures Redis's clock; it has no deadline.
	if v, err := lim.Allow(ctx, "a", limits); err != nil || !v.Allowed {
		t.Fatalf("first call: %+v, %v", v, err)
	}
	if lim.offset.Load() == unknownOffset {
		t.Fatal("the first reply measured no clock offset")
	}

	stall := redis.NewClient(c.Options())
	defer stall.Close()
	stalled := make(chan error, 1)
	go func() {
		stalled <- stall.Eval(ctx, `local t = redis.call('TIME')
local start = t[1] * 1000000 + t[2]
repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - start >= 1500000
return 1`, nil).Err()
	}()
	time.Sleep(200 * time.Millisecond) // the stall runs
	start := time.Now()
	_, err := lim.Allow(ctx, "a", limits)
	if err == nil {
		t.Fatal("a call checked while Redis stalled past its deadline was answered")
	}
	if waited := time.Since(start); waited > time.Second {
		t.Errorf("the check failed after %v; want about its timeout, 400ms", waited)
	}
	if err := <-stalled; err != nil {
		t.Fatalf("the stalling script: %v", err)
	}
	// Redis has now read the trip, and run it.
	v, err := lim.Peek(ctx, "a", limits)
	if err != nil {
		t.Fatal(err)
	}
	if used := v.Windows[2].Limit - v.Windows[2].Remaining; used != 1 {
		t.Errorf("month count %d after one call answered and one failed in a stall; want 1 (2: the failed call was counted when Redis came back)", used)
	}
	if v, err := lim.Allow(ctx, "a", limits); err != nil || !v.Allowed {
		t.Errorf("a call after the stall: %+v, %v", v, err)
	}
}

// A run past its deadline decides nothing and says so, for every check
// it holds; one in time decides as usual.
func TestRedisRunDeadline(t *testing.T) {
	c := newTestClient(t)
	lim := NewRedis(c, nil, WithPrefix(testPrefix(t)))
	defer lim.Close()
	ctx := context.Background()
	limits := coinpulse.Limits{PerSecond: 1000, PerMinute: 10000, Monthly: 100}
	if _, err := lim.Allow(ctx, "a", limits); err != nil {
		t.Fatal(err)
	}
	start, end := monthBounds(time.Now())
	sec, minute := newRate(1000, secondNS, int64(time.Microsecond)), newRate(10000, minuteNS, int64(time.Microsecond))
	call := func(account string) *scriptCall {
		return &scriptCall{keys: lim.keys(account, start), mode: argCommit, seed: "0",
			params: params{start.UnixMicro(), end.UnixMicro(), sec.t / 1000, sec.tau / 1000, minute.t / 1000, minute.tau / 1000, 100}}
	}
	for _, tt := range []struct {
		name     string
		deadline time.Duration // from now, on Redis's clock
		want     int64         // the first integer of each check's reply
	}{
		{"past", -time.Second, -3},
		{"in time", time.Minute, 1},
	} {
		g := []*scriptCall{call("a"), call("b")}
		dl := strconv.FormatInt(time.Now().Add(tt.deadline).UnixMicro()+lim.offset.Load(), 10)
		cmd := lim.evalSha(g, dl)
		if err := c.Process(ctx, cmd); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if res := cmd.Val(); len(res) != 2*replyInts || res[0] != tt.want || res[replyInts] != tt.want {
			t.Errorf("%s: reply %v; want %d integers, each check's first %d", tt.name, res, 2*replyInts, tt.want)
		}
	}
	for account, want := range map[string]int64{"a": 2, "b": 1} {
		v, err := lim.Peek(ctx, account, limits)
		if err != nil {
			t.Fatal(err)
		}
		if used := v.Windows[2].Limit - v.Windows[2].Remaining; used != want {
			t.Errorf("account %s: month count %d, want %d (the run past its deadline counted)", account, used, want)
		}
	}
}

// TestClientOptionsLeaveTimeoutsToTheCheck: a check's trip ends at its
// own deadline only. A socket timeout of the client's own, shorter than
// the deadline the script carries, answered a check 503 that Redis,
// resuming before that deadline, still ran and counted (an audit's
// redis://…?read_timeout=1s: 6 calls during a 2.5 s stall, one 503, all
// 6 counted). So the URL's timeouts are refused, and the client's are
// off.
func TestClientOptionsLeaveTimeoutsToTheCheck(t *testing.T) {
	opts, err := ClientOptions("redis://127.0.0.1:6379/0")
	if err != nil {
		t.Fatal(err)
	}
	if opts.ReadTimeout != -1 || opts.WriteTimeout != -1 || !opts.ContextTimeoutEnabled || opts.MaxRetries != -1 || opts.PoolTimeout < pipelineTimeout {
		t.Errorf("read %v, write %v, context timeouts %v, retries %d, pool %v; want -1, -1, true, -1 and at least %v",
			opts.ReadTimeout, opts.WriteTimeout, opts.ContextTimeoutEnabled, opts.MaxRetries, opts.PoolTimeout, pipelineTimeout)
	}
	for _, q := range []string{"read_timeout=1s", "write_timeout=200ms", "read_timeout=-1"} {
		if _, err := ClientOptions("redis://127.0.0.1:6379/0?" + q); err == nil || !strings.Contains(err.Error(), "read_timeout and write_timeout are not taken") {
			t.Errorf("?%s: %v, want it refused", q, err)
		}
	}
	if _, err := ClientOptions("redis://127.0.0.1:6379/0?dial_timeout=2s&pool_size=20"); err != nil {
		t.Errorf("other options: %v", err)
	}
}

// A URL whose options go-redis does not read says which of the options
// it knows has a bad value, or that one is unknown, without naming that
// one (it could be a part of a password after an unescaped ?) or quoting
// the URL (an audit: every such URL was "not a URL of the form …").
func TestClientOptionsNameBadOptions(t *testing.T) {
	for u, want := range map[string][]string{
		"redis://:s3cret@127.0.0.1:6379/7?pool_size=abc":                {"the value of its option pool_size does not read"},
		"redis://:s3cret@127.0.0.1:6379/7?pool_size=abc&dial_timeout=x": {"option dial_timeout, pool_size does not read"},
		"redis://:s3cret@127.0.0.1:6379/7?bogus_opt=1":                  {"it has an option go-redis does not take (it takes db, "},
		"redis://:s3cret@127.0.0.1:6379/7?db=x&bogus=1":                 {"option db does not read", ", and it has an option go-redis does not take"},
		"redis://:s3cret@127.0.0.1:6379/7?skip_verify=true":             {"it has skip_verify, which go-redis takes with rediss:// (TLS) only"},
	} {
		_, err := ClientOptions(u)
		if err == nil {
			t.Errorf("%s: taken", u)
			continue
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q, want it to say %q", u, err, w)
			}
		}
		if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "bogus") || strings.Contains(err.Error(), "abc") {
			t.Errorf("%s: %q quotes the URL", u, err)
		}
	}
}

// A URL that does not parse is refused without a part of it: a password
// with an unescaped /, ? or # puts a part of itself where the port or the
// database number is read, and net/url's and go-redis's errors quote
// those (a review).
func TestClientOptionsQuoteNoPassword(t *testing.T) {
	for _, u := range []string{
		"redis://user:s3cr/et@host:6379",
		"redis://:ab?s3cret@host:6379",
		"redis://:123/s3cret@host:6379",
		"redis://user:s3cret@[::1",
		"redis://:s3cret#x@host:6379",
		"http://user:s3cret@host:6379",
	} {
		_, err := ClientOptions(u)
		if err == nil || err.Error() != badRedisURL {
			t.Errorf("%s: %v, want %q", u, err, badRedisURL)
		}
	}
}
