// Package meter takes metering off the request's hot path: handlers Record
// each admitted call into a bounded in-memory queue, and a batcher (Run)
// writes them to the store in bulk, one transaction a batch.
//
// Run polls the queue (every Interval/10, 1 to 20 ms) rather than waiting
// on it, so that recording a call never wakes the batcher. A batch is
// written when MaxBatch calls are waiting, or at most Interval after the
// first of them was queued, whichever comes first. A failed
// write is retried, the same batch, with exponential backoff (50 ms
// doubling to 5 s, with jitter) until it succeeds or the meter stops:
// a transient store error loses nothing. Meanwhile calls go on waiting:
// in the queue, then, once it is full, in an overflow list that takes
// memory only while it is in use; past the overflow's size Record drops
// calls (counted by Dropped) rather than blocking requests.
//
// Admitted counts, per user and month, the calls admitted to a plan (and
// given back), which Run adds to the store (AddAdmitted) with the next
// batch, before its calls: the store's count of a month's admitted calls
// is then never behind its metered calls, and is behind the calls
// admitted by at most Interval. A Redis limiter that lost its count
// seeds it from there after waiting an Interval, so that the calls still
// being answered, which no batch holds yet, are counted too.
//
// Shutdown: stop serving requests, then call Close, which drains: every
// call Recorded, and every admission counted, before Close began is
// written before it returns nil. So a graceful shutdown loses nothing, a
// crash at most the calls of the last Interval while a write takes less
// than a poll: a batch's timer counts from when the queue was last seen
// empty, so calls queued during a write do not wait for it and then a
// whole Interval more. (A slower write adds what it takes beyond a poll.)
package meter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"coinpulse"
)

// Options tune a Meter; zero values take the defaults.
type Options struct {
	// Interval is the longest a call waits in a batch before the batch is
	// written (default 1 s).
	Interval time.Duration
	// MaxBatch is the most calls a batch holds; a full batch is written at
	// once (default 8,192).
	MaxBatch int
	// QueueSize is how many calls may wait to be batched in the queue
	// (default 8,192).
	QueueSize int
	// Overflow is how many more calls may wait, beyond a full queue, while
	// the store is slow or down; beyond that Record drops calls (default
	// 262,144: about 45 MB, taken only while in use; negative: none).
	Overflow int
}

// The defaults of Options.
const (
	DefaultInterval = time.Second
	// DefaultMaxBatch: a write costs about the same for 50 calls of an
	// account as for 8,000 (only the last 50 are kept, the rest only
	// counted), so a busy node writes a few times a second, not 35 times
	// (bench/limits.sh: the writes' share of serve's CPU went from 8 %
	// to under 1 % at 70,000 calls a second).
	DefaultMaxBatch = 8192
	// DefaultQueueSize holds a quarter second of calls at 30,000 a
	// second, ten polls' worth. It is kept small on purpose: the queue is
	// one block of memory full of pointers, which the garbage collector
	// scans whole at every cycle.
	DefaultQueueSize = 1 << 13
	// DefaultOverflow holds 9 seconds of calls at 30,000 a second, 4
	// minutes at 1,000: a store's stall or failover, not an outage.
	DefaultOverflow = 1 << 18
)

// Retry backoff of a failed write.
const (
	retryMin = 50 * time.Millisecond
	retryMax = 5 * time.Second
)

// errStopped reports that Close stopped a write's retries.
var errStopped = errors.New("meter: stopped")

// Meter batches calls into a coinpulse.UsageStore. Its methods are safe for
// concurrent use.
type Meter struct {
	store coinpulse.UsageStore
	log   *slog.Logger
	opts  Options
	queue chan coinpulse.Call

	dropped     atomic.Uint64
	lastDropLog atomic.Int64 // Unix nanoseconds of the last "queue full" log
	held        atomic.Int64 // calls taken from the queue and not yet written

	// overflow holds the calls Recorded while the queue was full, up to
	// opts.Overflow; nil when empty, so that its memory is given back.
	overMu   sync.Mutex
	overflow []coinpulse.Call
	overLen  atomic.Int64 // len(overflow), for Pending

	// admits holds the counts of Admitted not yet taken for a write, by
	// user and month, sharded by user so that concurrent calls seldom
	// wait on one lock; admitDirty is set once a count is added.
	admits     [admitShards]admitShard
	admitDirty atomic.Bool

	closeMu sync.Mutex // serializes Close

	mu       sync.Mutex
	stopping bool
	stop     chan struct{}    // closed by Close
	runDone  chan struct{}    // closed when the running Run returns; nil when none runs
	leftover []coinpulse.Call // the batch Run had in hand when it returned
	// leftAdmits are the counts Run had in hand when it returned.
	leftAdmits []coinpulse.Admitted
}

// admitShards is the number of shards of the admission counts.
const admitShards = 16

type admitShard struct {
	mu sync.Mutex
	n  map[admitKey]int64
	_  [48]byte // a shard to a cache line: shards do not share one
}

// admitKey is a user and a month (its first instant, Unix seconds).
type admitKey struct{ user, month int64 }

// New returns a Meter writing to store and logging to log (slog.Default()
// when nil). Start its batcher with Run.
func New(store coinpulse.UsageStore, log *slog.Logger, opts Options) *Meter {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = DefaultMaxBatch
	}
	if opts.QueueSize <= 0 {
		opts.QueueSize = DefaultQueueSize
	}
	switch {
	case opts.Overflow == 0:
		opts.Overflow = DefaultOverflow
	case opts.Overflow < 0:
		opts.Overflow = 0
	}
	if log == nil {
		log = slog.Default()
	}
	return &Meter{
		store: store,
		log:   log,
		opts:  opts,
		queue: make(chan coinpulse.Call, opts.QueueSize),
		stop:  make(chan struct{}),
	}
}

// Record enqueues c for writing. It never blocks, and does not allocate
// while the queue has room: when the queue is full it adds c to the
// overflow, and when that is full too it drops c, counts it in Dropped,
// and logs (at most once an Interval). Calls Recorded after Close has
// begun are not written unless Close is called again.
func (m *Meter) Record(c coinpulse.Call) {
	select {
	case m.queue <- c:
		return
	default:
	}
	m.overMu.Lock()
	if len(m.overflow) < m.opts.Overflow {
		m.overflow = append(m.overflow, c)
		m.overLen.Store(int64(len(m.overflow)))
		m.overMu.Unlock()
		return
	}
	m.overMu.Unlock()
	m.drop(1, "meter: queue and overflow full, dropping calls")
}

// Admitted counts delta calls (1 for a call admitted, −1 for one given
// back) to userID's month starting at month, for the next write. It
// never blocks on the store, and allocates only for a user and month new
// since the last write.
func (m *Meter) Admitted(userID int64, month time.Time, delta int64) {
	sh := &m.admits[uint64(userID)%admitShards]
	k := admitKey{userID, month.Unix()}
	sh.mu.Lock()
	if sh.n == nil {
		sh.n = make(map[admitKey]int64)
	}
	sh.n[k] += delta
	sh.mu.Unlock()
	// After the count: a write that finds the flag set, and clears it,
	// takes the count (see takeAdmitted).
	if !m.admitDirty.Load() {
		m.admitDirty.Store(true)
	}
}

// takeAdmitted appends the counts of Admitted to adm and resets them.
// The flag is cleared first: a count added after a shard was read sets
// it again, for the next write.
func (m *Meter) takeAdmitted(adm []coinpulse.Admitted) []coinpulse.Admitted {
	if !m.admitDirty.Swap(false) {
		return adm
	}
	for i := range m.admits {
		sh := &m.admits[i]
		sh.mu.Lock()
		for k, n := range sh.n {
			if n != 0 {
				adm = append(adm, coinpulse.Admitted{UserID: k.user, Month: time.Unix(k.month, 0).UTC(), Calls: n})
			}
		}
		clear(sh.n)
		sh.mu.Unlock()
	}
	return adm
}

// takeOverflow moves up to n calls from the overflow to batch.
func (m *Meter) takeOverflow(batch []coinpulse.Call, n int) []coinpulse.Call {
	if n <= 0 || m.overLen.Load() == 0 {
		return batch
	}
	m.overMu.Lock()
	defer m.overMu.Unlock()
	n = min(n, len(m.overflow))
	m.held.Add(int64(n)) // before they leave the overflow, as in Run
	batch = append(batch, m.overflow[:n]...)
	clear(m.overflow[:n]) // the strings they hold are not kept alive
	m.overflow = m.overflow[n:]
	if len(m.overflow) == 0 {
		m.overflow = nil
	}
	m.overLen.Store(int64(len(m.overflow)))
	return batch
}

// drop counts n dropped calls and logs why, at most once an Interval.
func (m *Meter) drop(n int, msg string) {
	total := m.dropped.Add(uint64(n))
	now := time.Now().UnixNano()
	last := m.lastDropLog.Load()
	if now-last >= int64(m.opts.Interval) && m.lastDropLog.CompareAndSwap(last, now) {
		m.log.Warn(msg, "dropped_total", total, "queue_size", m.opts.QueueSize)
	}
}

// Dropped returns how many calls the meter has dropped: Recorded while the
// queue and the overflow were full, or rejected as invalid (an unknown
// mode).
func (m *Meter) Dropped() uint64 { return m.dropped.Load() }

// Pending returns how many Recorded calls are not yet written: waiting in
// the queue or the overflow, or in a batch being (or failing to be)
// written.
func (m *Meter) Pending() int { return len(m.queue) + int(m.overLen.Load()) + int(m.held.Load()) }

// Run writes batches until ctx is done or Close is called, and returns
// ctx's error or nil. It does not drain: calls still queued, and a batch
// whose write ctx interrupted, are kept for Close (or a later Run). Run
// returns at once, with nil, once Close has been called, and with an error
// when another Run is running.
func (m *Meter) Run(ctx context.Context) error {
	m.mu.Lock()
	if m.stopping {
		m.mu.Unlock()
		return nil
	}
	if m.runDone != nil {
		m.mu.Unlock()
		return errors.New("meter: Run is already running")
	}
	done := make(chan struct{})
	m.runDone = done
	batch, adm := m.leftover, m.leftAdmits
	m.leftover, m.leftAdmits = nil, nil
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.leftover, m.leftAdmits = batch, adm
		m.runDone = nil
		m.mu.Unlock()
		close(done)
	}()
	if batch == nil {
		batch = make([]coinpulse.Call, 0, m.opts.MaxBatch)
	}

	// The queue is polled, not waited on: a Record then never wakes this
	// goroutine, which under load would cost a scheduler round trip a call.
	// A call waits at most a poll before it is seen, so the batch timer
	// runs a poll short of Interval.
	every := pollEvery(m.opts.Interval)
	poll := time.NewTicker(every)
	defer poll.Stop()
	wait := max(m.opts.Interval-every, time.Millisecond)
	timer := time.NewTimer(wait)
	timer.Stop()
	defer timer.Stop()
	var due <-chan time.Time // the running timer's channel, nil when none runs
	if len(batch) > 0 || len(adm) > 0 {
		timer.Reset(wait)
		due = timer.C
	}
	// drained is when the queue was last seen empty: every call waiting
	// was queued after it, so a batch's timer counts from it, not from
	// the poll that found the calls (which may come after a write, the
	// calls having waited through it).
	drained := time.Now()
	flush := false
	for {
		if flush || len(batch) >= m.opts.MaxBatch {
			batch = m.valid(batch)
			m.held.Store(int64(len(batch)))
			// Taken after the batch's calls: each was admitted before
			// it was Recorded, so its admission is in adm or written.
			adm = m.takeAdmitted(adm)
			switch err := m.write(ctx, batch, &adm, m.stop); {
			case errors.Is(err, errStopped):
				return nil
			case err != nil:
				return err
			}
			batch = batch[:0]
			m.held.Store(0)
			timer.Stop()
			due, flush = nil, false
		}
		select {
		case <-poll.C:
			at, emptied := time.Now(), false
		fill:
			for len(batch) < m.opts.MaxBatch {
				// A call is held before it leaves the queue, so that
				// Pending never reads 0 while a call is unwritten.
				m.held.Add(1)
				select {
				case c := <-m.queue:
					batch = append(batch, c)
				default:
					m.held.Add(-1)
					emptied = true
					break fill
				}
			}
			batch = m.takeOverflow(batch, m.opts.MaxBatch-len(batch))
			if (len(batch) > 0 || m.admitDirty.Load()) && due == nil {
				timer.Reset(max(time.Until(drained.Add(wait)), 0))
				due = timer.C
			}
			if emptied && m.overLen.Load() == 0 {
				drained = at
			}
			m.held.Store(int64(len(batch)))
		case <-due:
			due, flush = nil, true
		case <-m.stop:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close stops Run (waiting for it to return) and writes every call still
// waiting, in batches, retrying failed writes until ctx is done. It returns
// nil when every call Recorded before Close began is written; otherwise,
// when ctx ends first, an error saying how many were not: those are kept,
// and a later Close may write them. Close may be called without Run.
func (m *Meter) Close(ctx context.Context) error {
	m.closeMu.Lock()
	defer m.closeMu.Unlock()
	m.mu.Lock()
	if !m.stopping {
		m.stopping = true
		close(m.stop)
	}
	done := m.runDone
	m.mu.Unlock()
	if done != nil {
		select {
		case <-done:
		case <-ctx.Done():
			err := fmt.Errorf("meter: close: waiting for a write: %w", ctx.Err())
			m.log.Error("meter: calls not written", "calls", m.Pending(), "err", err)
			return err
		}
	}

	m.mu.Lock()
	batch, adm := m.leftover, m.leftAdmits
	m.leftover, m.leftAdmits = nil, nil
	m.mu.Unlock()
	// Every call Recorded before Close began is in batch, among the n
	// first queued or the over first in the overflow; nothing but Close
	// takes from them now. Every admission counted before is in adm or
	// the counts, taken once, after n and over were read (a call is
	// admitted before it is Recorded): the calls and counts that come
	// after Close began are left for a later Close, so that a stream of
	// them cannot keep it going, and no call is written before its
	// admission.
	n, over := len(m.queue), int(m.overLen.Load())
	adm = m.takeAdmitted(adm)
	for {
		for n > 0 && len(batch) < m.opts.MaxBatch {
			batch = append(batch, <-m.queue)
			n--
		}
		had := len(batch)
		batch = m.takeOverflow(batch, min(over, m.opts.MaxBatch-len(batch)))
		over -= len(batch) - had
		batch = m.valid(batch)
		m.held.Store(int64(len(batch)))
		if len(batch) == 0 && len(adm) == 0 && n == 0 && over == 0 {
			return nil
		}
		if err := m.write(ctx, batch, &adm, nil); err != nil {
			m.mu.Lock()
			m.leftover, m.leftAdmits = batch, adm
			m.mu.Unlock()
			err = fmt.Errorf("meter: close: %d calls not written: %w", len(batch)+n+over, err)
			m.log.Error("meter: calls not written", "calls", len(batch)+n+over, "err", err)
			return err
		}
		batch = batch[:0]
	}
}

// valid returns batch without its calls of an unknown mode, which it
// counts as dropped: the store would reject the whole batch for them.
func (m *Meter) valid(batch []coinpulse.Call) []coinpulse.Call {
	valid := batch[:0]
	for _, c := range batch {
		if c.Mode.Valid() {
			valid = append(valid, c)
		}
	}
	if bad := len(batch) - len(valid); bad > 0 {
		clear(batch[len(valid):])
		m.drop(bad, "meter: dropping calls with an unknown mode")
	}
	return valid
}

// write stores the counts *adm, then batch, retrying with backoff until
// both are written, ctx is done (ctx's error) or stop is closed
// (errStopped; Run passes the meter's, Close nil); what is unwritten is
// then still in *adm (emptied once written) and batch. A batch the store
// rejects as invalid is dropped (counted and logged), for retrying it
// could never succeed.
func (m *Meter) write(ctx context.Context, batch []coinpulse.Call, adm *[]coinpulse.Admitted, stop <-chan struct{}) error {
	if len(batch) == 0 && len(*adm) == 0 {
		return nil
	}
	delay := retryMin
	for attempt := 1; ; attempt++ {
		var err error
		if len(*adm) > 0 {
			if err = m.store.AddAdmitted(ctx, *adm); err == nil {
				*adm = (*adm)[:0]
			}
		}
		if err == nil {
			err = m.store.RecordCalls(ctx, batch)
		}
		if err == nil {
			if attempt > 1 {
				m.log.Info("meter: calls written after retrying", "calls", len(batch), "attempts", attempt)
			}
			return nil
		}
		if coinpulse.ErrorCode(err) == coinpulse.CodeValidation {
			m.dropped.Add(uint64(len(batch)))
			m.log.Error("meter: store rejected a batch, dropping it", "calls", len(batch), "err", err)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		wait := delay/2 + rand.N(delay) // delay ± 50 %
		m.log.Warn("meter: writing calls failed, retrying", "calls", len(batch), "attempt", attempt, "retry_in", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-stop:
			t.Stop()
			return errStopped
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		delay = min(2*delay, retryMax)
	}
}

// pollEvery is how often Run looks at the queue: a tenth of the interval,
// from 1 ms to 20 ms.
func pollEvery(interval time.Duration) time.Duration {
	return min(max(interval/10, time.Millisecond), 20*time.Millisecond)
}
