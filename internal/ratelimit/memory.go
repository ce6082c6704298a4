package ratelimit

import (
	"context"
	"sync"

	"coinpulse"
)

const shardCount = 64 // a power of two

// Memory is the in-process Limiter: exact within one process. Create it
// with NewMemory.
type Memory struct {
	clock  coinpulse.Clock
	seed   Seed
	shards [shardCount]shard
}

type shard struct {
	mu       sync.Mutex
	accounts map[string]*accountState
	// seeding holds the Seed call in flight for an account, if any.
	seeding map[string]*seedCall
	_       [64]byte // keeps neighbouring shards' mutexes off one cache line
}

// accountState is one account's windows; times in ns since the epoch.
type accountState struct {
	sec, min int64 // TATs; 0 when never used
	// secUnit and minUnit are the intervals the calls of sec and min
	// were charged at (0: none yet): see rate.unit.
	secUnit, minUnit int64
	// secMoved and minMoved are when a call last re-expressed sec and min
	// in another interval (0: never), which a refund of a call admitted
	// before, or at the same instant, cannot place (see rate.held).
	secMoved, minMoved   int64
	monthStart, monthEnd int64 // the month count is for
	count                int64
}

type seedCall struct{ done chan struct{} }

// NewMemory returns an in-process limiter that tells the time with clock
// and seeds each account's month from seed (nil: from 0).
func NewMemory(clock coinpulse.Clock, seed Seed) *Memory {
	m := &Memory{clock: clock, seed: seed}
	for i := range m.shards {
		m.shards[i].accounts = make(map[string]*accountState)
		m.shards[i].seeding = make(map[string]*seedCall)
	}
	return m
}

// Allow implements coinpulse.Limiter.
func (m *Memory) Allow(ctx context.Context, account string, l coinpulse.Limits) (coinpulse.Verdict, error) {
	return m.check(ctx, account, &l, true)
}

// Peek implements coinpulse.Limiter.
func (m *Memory) Peek(ctx context.Context, account string, l coinpulse.Limits) (coinpulse.Verdict, error) {
	return m.check(ctx, account, &l, false)
}

// shardOf hashes account with 32-bit FNV-1a.
func shardOf(account string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(account); i++ {
		h ^= uint32(account[i])
		h *= 16777619
	}
	return h & (shardCount - 1)
}

func (m *Memory) check(ctx context.Context, account string, l *coinpulse.Limits, commit bool) (coinpulse.Verdict, error) {
	sh := &m.shards[shardOf(account)]
	for {
		sh.mu.Lock()
		now := m.clock().UnixNano()
		if a := sh.accounts[account]; a != nil && now >= a.monthStart && now < a.monthEnd {
			v := a.check(now, l, commit)
			sh.mu.Unlock()
			return v, nil
		}
		// No state for this month yet: seed it outside the lock, one
		// Seed call per account at a time, then look again.
		if c := sh.seeding[account]; c != nil {
			sh.mu.Unlock()
			select {
			case <-c.done:
				continue
			case <-ctx.Done():
				return coinpulse.Verdict{}, ctx.Err()
			}
		}
		c := &seedCall{done: make(chan struct{})}
		sh.seeding[account] = c
		sh.mu.Unlock()
		if err := m.seedMonth(ctx, sh, c, account, now); err != nil {
			return coinpulse.Verdict{}, err
		}
	}
}

// seedMonth calls Seed for the month of now (ns) without holding sh's lock
// and installs the count unless state for that month appeared meanwhile.
// It releases c whatever happens.
func (m *Memory) seedMonth(ctx context.Context, sh *shard, c *seedCall, account string, now int64) (err error) {
	start, end := monthBounds(timeUnix(now))
	var n int64
	defer func() {
		sh.mu.Lock()
		delete(sh.seeding, account)
		if err == nil {
			a := sh.accounts[account]
			if a == nil {
				a = &accountState{}
				sh.accounts[account] = a
			}
			if a.monthStart != start.UnixNano() {
				a.monthStart, a.monthEnd, a.count = start.UnixNano(), end.UnixNano(), n
			}
		}
		sh.mu.Unlock()
		close(c.done)
	}()
	if m.seed == nil {
		return nil
	}
	err = errSeedPanicked // until Seed returns
	n, err = m.seed(ctx, account, start)
	return err
}

// check applies a call at now (ns) to a, counting it if commit and every
// window admits it.
func (a *accountState) check(now int64, l *coinpulse.Limits, commit bool) coinpulse.Verdict {
	r := result{
		now:      now,
		sec:      newRate(int64(l.PerSecond), secondNS, 1),
		min:      newRate(int64(l.PerMinute), minuteNS, 1),
		secFrom:  a.secUnit,
		minFrom:  a.minUnit,
		monthly:  l.Monthly,
		count:    a.count,
		monthEnd: a.monthEnd,
	}
	r.secTAT, r.secOK = r.sec.check(a.sec, now, a.secUnit)
	r.minTAT, r.minOK = r.min.check(a.min, now, a.minUnit)
	r.monthOK = r.monthly <= 0 || a.count < r.monthly
	r.allowed = r.secOK && r.minOK && r.monthOK
	if r.allowed && commit {
		if r.sec.limit > 0 {
			if a.secUnit > 0 && a.secUnit != r.sec.t {
				a.secMoved = now
			}
			r.secTAT = r.sec.next(r.secTAT, now, a.secUnit)
			a.sec, a.secUnit = r.secTAT, r.sec.t
			r.secFrom = r.sec.t
		}
		if r.min.limit > 0 {
			if a.minUnit > 0 && a.minUnit != r.min.t {
				a.minMoved = now
			}
			r.minTAT = r.min.next(r.minTAT, now, a.minUnit)
			a.min, a.minUnit = r.minTAT, r.min.t
			r.minFrom = r.min.t
		}
		a.count++
		r.count = a.count
	}
	return r.verdict()
}

// Refund implements coinpulse.Limiter: each TAT moves back by what is
// left of the call's slot (see rate.held), and the count of the month the
// call was admitted in down one, if that month's state is the account's.
func (m *Memory) Refund(ctx context.Context, account string, l coinpulse.Limits, adm coinpulse.Admission) error {
	sh := &m.shards[shardOf(account)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	a := sh.accounts[account]
	if a == nil {
		return nil
	}
	now := m.clock().UnixNano()
	at := now
	if !adm.At.IsZero() {
		at = adm.At.UnixNano()
	}
	a.sec -= newRate(int64(l.PerSecond), secondNS, 1).held(adm.Second, now, a.secUnit, a.secMoved >= at)
	a.min -= newRate(int64(l.PerMinute), minuteNS, 1).held(adm.Minute, now, a.minUnit, a.minMoved >= at)
	if at >= a.monthStart && at < a.monthEnd && a.count > 0 {
		a.count--
	}
	return nil
}
