package ratelimit

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"coinpulse"
)

//go:embed slots.lua
var slotsLua string

var takeSlotScript = redis.NewScript(slotsLua)

// renewSlotsScript extends the leases of one node's open slots of one
// account (KEYS[1]; ARGV[1] the lease in ms, ARGV[2] the deadline as in
// slots.lua, ARGV[3..] the slots), adding back any that Redis lost (a
// restart): they are open, so they count. It answers Redis's clock in ms,
// negated past the deadline, when it changes nothing.
var renewSlotsScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local deadline = tonumber(ARGV[2])
if deadline > 0 and now > deadline then
  return -now
end
for i = 3, #ARGV do
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]), ARGV[i])
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return now
`)

// timeScript reads Redis's clock, in ms.
var timeScript = redis.NewScript(`local t = redis.call('TIME') return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)`)

// DefaultSlotLease is how long a slot outlives its node's last renewal:
// a node that dies with connections open frees their slots after it.
const DefaultSlotLease = time.Minute

const (
	// slotTimeout bounds each of the slots' trips to Redis.
	slotTimeout = 2 * time.Second
	// slotMargin: a script's deadline is slotMargin before the node
	// stops waiting for it, for the error of the clocks' offset.
	slotMargin = 500 * time.Millisecond
	// renewChunk is how many accounts one pipeline of a renewal holds.
	renewChunk = 500
	// closeWait bounds Close.
	closeWait = 2 * slotTimeout
	// removeQueue bounds the slots waiting to be deleted; past it a
	// slot given back lapses with its lease.
	removeQueue = 1 << 14
)

// errLate is a script that reached Redis past its deadline.
var errLate = errors.New("redis: the script reached Redis after the node stopped waiting for it")

// SlotsClient is what RedisSlots needs of a go-redis client.
// *redis.Client and *redis.ClusterClient are SlotsClients. Its trips are
// bounded by their contexts only if the client was made from
// ClientOptions (ContextTimeoutEnabled).
type SlotsClient interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
}

// SlotsConfig configures NewRedisSlots.
type SlotsConfig struct {
	// Prefix starts every key (DefaultPrefix when empty); the limiter's
	// prefix, so that deployments sharing a Redis stay apart.
	Prefix string
	// Lease is DefaultSlotLease when zero, and 30 ms at least; each node
	// renews its slots every third of it.
	Lease time.Duration
	// Log takes the failures (slog.Default() when nil).
	Log *slog.Logger
}

// RedisSlots is the coinpulse.Slots of several nodes: an account's slots
// are a sorted set in Redis of every node's, each with the end of its
// lease on Redis's clock, so the cap holds across the nodes sharing the
// Redis. A slot is taken by one atomic script (slots.lua) that drops the
// lapsed slots, counts the others and adds the new one only below the
// cap: of any number of takes at once, exactly as many as the cap
// leaves succeed. Its node deletes it when the connection ends, and
// renews the leases of all its open slots every third of the lease, so
// that the slots of a node that died lapse within a lease.
//
// Every script carries a deadline on Redis's clock, before the node stops
// waiting for its reply: one that reaches Redis later (a stalled
// connection) changes nothing, so that a take the node reported failed,
// or a renewal overtaken by a slot's deletion, cannot leave a slot that no
// connection holds. Deletions go through one goroutine, in order, after
// whatever took or renewed the slot. Create RedisSlots with NewRedisSlots
// and Close it once its connections have ended.
type RedisSlots struct {
	client SlotsClient
	prefix string
	lease  time.Duration
	log    *slog.Logger
	// node starts the name of every slot this node takes.
	node string
	// offset is Redis's clock less this node's, in ms, as the last reply
	// measured it; known once one did.
	offset atomic.Int64
	known  atomic.Bool

	// mu guards seq and open, the node's slots not yet given back: their
	// members by key.
	mu   sync.Mutex
	seq  uint64
	open map[string]map[string]struct{}

	removals  chan [2]string // key, member
	removing  atomic.Bool    // the last deletions failed (for the log)
	renewing  atomic.Bool    // the last renewal failed (for the log)
	stop      chan struct{}  // closed by Close: the renewals end
	drain     chan struct{}  // closed by Close once they have: the remover ends
	renewed   chan struct{}  // closed when renewals has returned
	removed   chan struct{}  // closed when remover has returned
	closeOnce sync.Once
}

var _ coinpulse.Slots = (*RedisSlots)(nil)

// NewRedisSlots returns slots kept in client's Redis, reads Redis's clock
// (for the scripts' deadlines) and starts the renewals.
func NewRedisSlots(client SlotsClient, cfg SlotsConfig) *RedisSlots {
	var b [8]byte
	rand.Read(b[:])
	s := &RedisSlots{client: client, prefix: cfg.Prefix, lease: cfg.Lease, log: cfg.Log, node: hex.EncodeToString(b[:]),
		open: map[string]map[string]struct{}{}, removals: make(chan [2]string, removeQueue),
		stop: make(chan struct{}), drain: make(chan struct{}), renewed: make(chan struct{}), removed: make(chan struct{})}
	if s.prefix == "" {
		s.prefix = DefaultPrefix
	}
	if s.lease == 0 {
		s.lease = DefaultSlotLease
	}
	s.lease = max(s.lease, 30*time.Millisecond)
	if s.log == nil {
		s.log = slog.Default()
	}
	ctx, cancel := context.WithTimeout(context.Background(), slotTimeout)
	sent := time.Now()
	if now, err := timeScript.Run(ctx, client, nil).Int64(); err == nil {
		s.measured(now, sent)
	}
	cancel()
	go s.renewals()
	go s.remover()
	return s
}

// measured takes Redis's clock now (ms) from a reply to a script sent at
// sent: the offset is taken at half the round trip.
func (s *RedisSlots) measured(now int64, sent time.Time) {
	mid := sent.Add(time.Since(sent) / 2)
	s.offset.Store(now - mid.UnixMilli())
	s.known.Store(true)
}

// deadline is the deadline, on Redis's clock, of a script sent at sent
// (0, none, before Redis's clock is known).
func (s *RedisSlots) deadline(sent time.Time) int64 {
	if !s.known.Load() {
		return 0
	}
	return sent.Add(slotTimeout-slotMargin).UnixMilli() + s.offset.Load()
}

// key is where account's slots are kept: next to its limiter keys (the
// same hash tag, so the same shard of a cluster).
func (s *RedisSlots) key(account int64) string {
	return s.prefix + "{" + coinpulse.LiveAccount(account) + "}:ws"
}

// Take takes one of account's slots on every node's count; see
// coinpulse.Slots. It waits for Redis for 2 s at most, whatever ctx.
func (s *RedisSlots) Take(ctx context.Context, account int64, max int) (func(), bool, error) {
	if max < 0 {
		return func() {}, true, nil
	}
	key := s.key(account)
	s.mu.Lock()
	s.seq++
	member := s.node + ":" + strconv.FormatUint(s.seq, 36)
	s.mu.Unlock()
	// Not cut short by the request: a script sent is either answered or
	// past its deadline when the node stops waiting.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), slotTimeout)
	defer cancel()
	sent := time.Now()
	res, err := takeSlotScript.Run(ctx, s.client, []string{key}, member, max, s.lease.Milliseconds(), s.deadline(sent)).Int64Slice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("redis: slots.lua answered %v", res)
	}
	if err == nil {
		s.measured(res[1], sent)
		if res[0] < 0 {
			err = errLate
		}
	}
	if err != nil {
		// The script may have run before its deadline: delete what it
		// may have taken (after it, since the deadline has passed).
		s.removeLater(key, member)
		return nil, false, err
	}
	if res[0] == 0 {
		return nil, false, nil
	}
	s.mu.Lock()
	if s.open[key] == nil {
		s.open[key] = map[string]struct{}{}
	}
	s.open[key][member] = struct{}{}
	s.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { s.release(key, member) }) }, true, nil
}

// release gives back a slot Take took: no renewal sends it any more, and
// it is deleted from Redis.
func (s *RedisSlots) release(key, member string) {
	s.mu.Lock()
	delete(s.open[key], member)
	if len(s.open[key]) == 0 {
		delete(s.open, key)
	}
	s.mu.Unlock()
	s.removeLater(key, member)
}

// removeLater queues a slot's deletion; one the queue has no room for
// lapses with its lease.
func (s *RedisSlots) removeLater(key, member string) {
	select {
	case s.removals <- [2]string{key, member}:
	default:
	}
}

// remover deletes the queued slots, in batches of one pipeline, until
// Close; then it deletes those still queued, in one last batch.
func (s *RedisSlots) remover() {
	defer close(s.removed)
	for {
		select {
		case <-s.drain:
			if batch := s.queued(nil); len(batch) > 0 {
				s.remove(batch)
			}
			return
		default:
		}
		select {
		case r := <-s.removals:
			s.remove(s.queued([][2]string{r}))
		case <-s.drain: // (above)
		}
	}
}

// queued adds to batch the deletions queued, up to renewChunk of them.
func (s *RedisSlots) queued(batch [][2]string) [][2]string {
	for len(batch) < renewChunk {
		select {
		case r := <-s.removals:
			batch = append(batch, r)
		default:
			return batch
		}
	}
	return batch
}

// remove deletes batch from Redis in one pipeline; what it fails to delete
// lapses with its lease.
func (s *RedisSlots) remove(batch [][2]string) {
	ctx, cancel := context.WithTimeout(context.Background(), slotTimeout)
	defer cancel()
	pipe := s.client.Pipeline()
	for _, r := range batch {
		pipe.ZRem(ctx, r[0], r[1])
	}
	_, err := pipe.Exec(ctx)
	switch failed := err != nil; {
	case failed && !s.removing.Swap(true):
		s.log.Warn("cannot give WebSocket slots back in Redis; they lapse with their lease", "slots", len(batch), "lease", s.lease, "err", err)
	case !failed && s.removing.Swap(false):
		s.log.Info("WebSocket slots given back in Redis again")
	}
}

// renewals renews the node's open slots every third of the lease until
// Close.
func (s *RedisSlots) renewals() {
	defer close(s.renewed)
	tick := time.NewTicker(s.lease / 3)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		s.renew()
	}
}

// renew extends the leases of the node's open slots, a pipeline of up to
// renewChunk accounts at a time. A slot given back while the renewal was
// on its way may have been added back by it (before its deadline): it
// is deleted again after.
func (s *RedisSlots) renew() {
	s.mu.Lock()
	keys := make([]string, 0, len(s.open))
	sent := make(map[string][]any, len(s.open))
	for key, members := range s.open {
		args := make([]any, 0, len(members)+2)
		args = append(args, s.lease.Milliseconds(), int64(0))
		for m := range members {
			args = append(args, m)
		}
		keys = append(keys, key)
		sent[key] = args
	}
	s.mu.Unlock()
	var failed error
	for i := 0; i < len(keys); i += renewChunk {
		select {
		case <-s.stop:
			return // Close: the slots lapse with their lease
		default:
		}
		if err := s.renewChunk(keys[i:min(i+renewChunk, len(keys))], sent); err != nil {
			failed = err
		}
	}
	// Whether or not the renewal ran, no slot given back since may stay.
	s.mu.Lock()
	var gone [][2]string
	for key, args := range sent {
		for _, m := range args[2:] {
			if _, ok := s.open[key][m.(string)]; !ok {
				gone = append(gone, [2]string{key, m.(string)})
			}
		}
	}
	s.mu.Unlock()
	for _, g := range gone {
		s.removeLater(g[0], g[1])
	}
	switch {
	case failed != nil && !s.renewing.Swap(true):
		s.log.Warn("cannot renew the WebSocket slots in Redis; another node may take them once they lapse", "lease", s.lease, "err", failed)
	case failed == nil && len(keys) > 0 && s.renewing.Swap(false):
		s.log.Info("WebSocket slots renewed in Redis again")
	}
}

// renewChunk renews the slots of keys (their script arguments in args) in
// one pipeline, by the script's hash, loading it once if Redis lacks it.
func (s *RedisSlots) renewChunk(keys []string, args map[string][]any) error {
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), slotTimeout)
		sentAt := time.Now()
		deadline := s.deadline(sentAt)
		pipe := s.client.Pipeline()
		cmds := make([]*redis.Cmd, len(keys))
		for i, key := range keys {
			a := args[key]
			a[1] = deadline
			cmds[i] = renewSlotsScript.EvalSha(ctx, pipe, []string{key}, a...)
		}
		_, err := pipe.Exec(ctx)
		if err != nil && attempt == 0 && redis.HasErrorPrefix(err, "NOSCRIPT") {
			err = renewSlotsScript.Load(ctx, s.client).Err()
			cancel()
			if err != nil {
				return err
			}
			continue
		}
		cancel()
		if err != nil {
			return err
		}
		for _, c := range cmds {
			now, err := c.Int64()
			if err != nil {
				return err
			}
			if now < 0 {
				return errLate
			}
			s.measured(now, sentAt)
		}
		return nil
	}
}

// Close stops the renewals, and deletes the slots given back and not
// deleted yet, waiting closeWait at most for both (a Redis that stalls);
// what is left then ends with the client's Close. The slots still open lapse
// with their lease: close the connections first, which gives them back.
func (s *RedisSlots) Close() {
	s.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), closeWait)
		defer cancel()
		close(s.stop)
		select {
		case <-s.renewed:
		case <-ctx.Done():
		}
		close(s.drain)
		select {
		case <-s.removed:
		case <-ctx.Done():
		}
	})
}
