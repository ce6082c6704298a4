package ratelimit

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"coinpulse"
)

//go:embed slots.lua
var slotsLua string

var takeSlotScript = redis.NewScript(slotsLua)

// renewSlotsScript extends the leases of one node's open slots of one
// account (KEYS[1]; ARGV[1] the lease in ms, ARGV[2..] the slots), adding
// back any that Redis lost (a restart): they are open, so they count.
var renewSlotsScript = redis.NewScript(`
local t = redis.call('TIME')
local ends = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
for i = 2, #ARGV do
  redis.call('ZADD', KEYS[1], ends, ARGV[i])
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return #ARGV - 1
`)

// DefaultSlotLease is how long a slot outlives its node's last renewal:
// a node that dies with connections open frees their slots after it.
const DefaultSlotLease = time.Minute

// slotTimeout bounds each of the slots' trips to Redis.
const slotTimeout = 2 * time.Second

// SlotsClient is what RedisSlots needs of a go-redis client.
// *redis.Client and *redis.ClusterClient are SlotsClients.
type SlotsClient interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
	ZRem(ctx context.Context, key string, members ...any) *redis.IntCmd
}

// SlotsConfig configures NewRedisSlots.
type SlotsConfig struct {
	// Prefix starts every key (DefaultPrefix when empty); the limiter's
	// prefix, so that deployments sharing a Redis stay apart.
	Prefix string
	// Lease is DefaultSlotLease when zero; each node renews its slots
	// every third of it.
	Lease time.Duration
	// Log takes the renewals' failures (slog.Default() when nil).
	Log *slog.Logger
}

// RedisSlots is the coinpulse.Slots of several nodes: an account's slots
// are a sorted set in Redis of every node's, each with the end of its
// lease on Redis's clock, so the cap holds across the nodes sharing the
// Redis. A slot is taken by one atomic script (slots.lua) that drops the
// lapsed slots, counts the others and adds the new one only below the
// cap: of any number of takes at once, exactly as many as the cap
// leaves succeed. Its node gives it back when the connection ends, and
// renews the leases of all its open slots every third of the lease, so
// that the slots of a node that died lapse within a lease. Create it
// with NewRedisSlots and Close it once its connections have ended.
type RedisSlots struct {
	client SlotsClient
	prefix string
	lease  time.Duration
	log    *slog.Logger
	// node starts the name of every slot this node takes.
	node string

	// mu guards seq and open, the node's slots not yet given back: their
	// members by key.
	mu   sync.Mutex
	seq  uint64
	open map[string]map[string]struct{}

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

var _ coinpulse.Slots = (*RedisSlots)(nil)

// NewRedisSlots returns slots kept in client's Redis, and starts their
// renewals.
func NewRedisSlots(client SlotsClient, cfg SlotsConfig) *RedisSlots {
	var b [8]byte
	rand.Read(b[:])
	s := &RedisSlots{client: client, prefix: cfg.Prefix, lease: cfg.Lease, log: cfg.Log, node: hex.EncodeToString(b[:]),
		open: map[string]map[string]struct{}{}, stop: make(chan struct{}), done: make(chan struct{})}
	if s.prefix == "" {
		s.prefix = DefaultPrefix
	}
	if s.lease <= 0 {
		s.lease = DefaultSlotLease
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	go s.renewals()
	return s
}

// key is where account's slots are kept: next to its limiter keys (the
// same hash tag, so the same shard of a cluster).
func (s *RedisSlots) key(account int64) string {
	return s.prefix + "{" + coinpulse.LiveAccount(account) + "}:ws"
}

// Take takes one of account's slots on every node's count; see
// coinpulse.Slots.
func (s *RedisSlots) Take(ctx context.Context, account int64, max int) (func(), bool, error) {
	if max < 0 {
		return func() {}, true, nil
	}
	key := s.key(account)
	s.mu.Lock()
	s.seq++
	member := s.node + ":" + strconv.FormatUint(s.seq, 36)
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, slotTimeout)
	defer cancel()
	n, err := takeSlotScript.Run(ctx, s.client, []string{key}, member, max, s.lease.Milliseconds()).Int()
	if err != nil {
		// The script may have run all the same: give back what it may
		// have taken (or it lapses with its lease).
		s.remove(key, member)
		return nil, false, err
	}
	if n == 0 {
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

// release gives back a slot Take took.
func (s *RedisSlots) release(key, member string) {
	s.mu.Lock()
	delete(s.open[key], member)
	if len(s.open[key]) == 0 {
		delete(s.open, key)
	}
	s.mu.Unlock()
	s.remove(key, member)
}

// remove deletes a slot from Redis; one it fails to delete lapses with
// its lease.
func (s *RedisSlots) remove(key, member string) {
	ctx, cancel := context.WithTimeout(context.Background(), slotTimeout)
	defer cancel()
	if err := s.client.ZRem(ctx, key, member).Err(); err != nil {
		s.log.Warn("cannot give a WebSocket slot back in Redis; it lapses with its lease", "lease", s.lease, "err", err)
	}
}

// renewals renews the node's open slots every third of the lease until
// Close.
func (s *RedisSlots) renewals() {
	defer close(s.done)
	tick := time.NewTicker(s.lease / 3)
	defer tick.Stop()
	failing := false
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		err := s.renew()
		switch {
		case err != nil && !failing:
			s.log.Warn("cannot renew the WebSocket slots in Redis; another node may take them once they lapse", "lease", s.lease, "err", err)
		case err == nil && failing:
			s.log.Info("WebSocket slots renewed in Redis again")
		}
		failing = err != nil
	}
}

// renew extends the leases of the node's open slots, in one pipeline.
// A slot given back while the renewal was on its way may have been added
// back by it: it is deleted again after.
func (s *RedisSlots) renew() error {
	s.mu.Lock()
	sent := make(map[string][]any, len(s.open))
	for key, members := range s.open {
		args := make([]any, 0, len(members)+1)
		args = append(args, s.lease.Milliseconds())
		for m := range members {
			args = append(args, m)
		}
		sent[key] = args
	}
	s.mu.Unlock()
	if len(sent) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), slotTimeout)
	defer cancel()
	pipe := s.client.Pipeline()
	for key, args := range sent {
		renewSlotsScript.Eval(ctx, pipe, []string{key}, args...)
	}
	_, err := pipe.Exec(ctx)
	// Whether or not the renewal ran, no slot given back since may stay.
	s.mu.Lock()
	var gone [][2]string
	for key, args := range sent {
		for _, m := range args[1:] {
			if _, ok := s.open[key][m.(string)]; !ok {
				gone = append(gone, [2]string{key, m.(string)})
			}
		}
	}
	s.mu.Unlock()
	for _, g := range gone {
		s.remove(g[0], g[1])
	}
	return err
}

// Close stops the renewals. The slots still open lapse with their lease;
// close the connections first, which gives theirs back.
func (s *RedisSlots) Close() {
	s.closeOnce.Do(func() {
		close(s.stop)
		<-s.done
	})
}
