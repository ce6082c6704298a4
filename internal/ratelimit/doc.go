// Package ratelimit implements coinpulse.Limiter twice: Memory, for a
// single node, and Redis, for several nodes sharing one Redis server.
// Both give the same answers to the same calls, and both are exact under
// concurrency: with K calls left in a window, N concurrent Allows admit
// exactly min(N, K) (on Redis also across processes and connection pools).
//
// # Windows
//
// Every account is limited by three windows at once, with the figures of
// its coinpulse.Limits:
//
//   - second and minute are rolling windows kept with GCRA, the generic
//     cell rate algorithm. For a limit of L calls per window W, the
//     emission interval is T = W/L and the burst tolerance τ = W − T. The
//     only state is the TAT, the theoretical arrival time: a call at now is
//     admitted iff now >= max(TAT, now) − τ, and admitting it sets
//     TAT = max(TAT, now) + T. So "burst" means this: an idle account may
//     spend a whole window's allowance at once (L calls in the same
//     instant), and after that its calls are spaced T apart; the full burst
//     is back once the account has been idle until TAT. A span of W just
//     after an idle spell thus holds up to 2L − 1 calls; longer spans
//     average L per W. Remaining is
//     ⌊(W − (TAT − now)) / T⌋, Reset is TAT (or now when TAT has passed),
//     and a refusal's RetryAfter is (TAT − τ) − now rounded up to a whole
//     millisecond (at least 1 ms).
//     T is W/L rounded down to the store's time unit (a nanosecond in
//     Memory, a microsecond in Redis) and W is taken as L·T, so that a
//     burst is exactly L calls whatever L; a limit above one call per unit
//     behaves as one call per unit with a burst of L.
//     Limits may change between checks (a plan reload, a tier change): the
//     state keeps, with the TAT, the interval U its calls were charged at.
//     Under limits of another T, the backlog TAT − now stands for
//     (TAT − now)/U calls, which count against the new L as calls
//     (admitted iff TAT − now <= (L−1)·U; Remaining is L less their
//     number rounded up) and age at the pace U until a call is admitted,
//     which re-expresses the backlog in T (rounded up) before adding T. So
//     no sequence of changes forgets or adds a call.
//   - month is a counter per account and calendar month (UTC, from 00:00
//     on the 1st): a call is admitted iff count < Monthly; Reset is the
//     first instant of the next month and a refusal's RetryAfter is
//     Reset − now. The counter counts every admitted call, also while the
//     monthly figure does not limit, so that a plan change in the middle of
//     a month starts from the true count.
//
// A figure of 0 or coinpulse.Unlimited (any figure <= 0) does not limit:
// that window reports Limit and Remaining Unlimited, a zero Reset, and
// never refuses.
//
// # All or nothing
//
// A call is counted in every window only if every window admits it; if one
// refuses, no window changes (a refusal by the minute window does not use
// up the second window's allowance, and vice versa). Verdict.Exceeded
// names the refusing window — when several refuse, the one with the
// longest RetryAfter (the earlier in second, minute, month order on a
// tie) — and Verdict.RetryAfter is that window's. Peek answers the same
// Verdict as Allow would without counting: Allowed says whether a call
// would be admitted now, and Remaining is what is left now.
//
// Refund gives an admitted call back, for a call that failed with a 5xx,
// which does not count. Each rolling window gets back what is left of the
// call's slot (its TAT moves back by up to one emission interval: the
// part of [end−T, end) still ahead, where end is the TAT the call left;
// under limits changed since, at most the U the window is charged at:
// one call; and nothing when a call re-expressed the window after the
// refunded one was admitted, or at the same instant, since end is then
// on another scale),
// so a refund never frees room the window has already moved past, as
// after an idle gap; the month the call was admitted in gets its count
// down one, never below zero, and a month begun since gets nothing.
//
// # Seed
//
// A month's counter that has no state yet (the first call of the month, or
// the first since the process or Redis restarted, or since Redis evicted
// the key) is seeded once from the Seed given to the constructor: the main
// database's count of the account's calls this month, so that a restart
// does not hand anyone a fresh quota. (serve's Seed reads the calls the
// meters counted when the limiter admitted them, which include calls
// still being answered, or the metered calls if more; see
// internal/meter.) A nil Seed means 0. A Seed error is
// returned by the Allow or Peek that needed it, and nothing is counted.
// Within one process the calls that need the same seed at the same time
// share one Seed call; on Redis, nodes that seed the same month at once
// each call Seed, and the first seed written wins (it is written only
// while the key is absent, so nothing is counted twice). On Redis only
// the call that ran a seed writes it, in one run: the calls that waited
// for it, or find the key absent just after, wait for that run and run
// again without a seed, and seed anew if the key is still absent; so a
// count Redis lost again is not replaced by an old seed. On Redis the
// Seed of a month under way waits for the nodes' meters, then is read
// again (see WithSettle): a month is under way when Seed counts calls,
// or when Seen says it was seeded before (see WithSeen). When Seed counts
// none, a count another node writes meanwhile ends the wait, and is
// used.
//
// # Clocks
//
// Memory reads the coinpulse.Clock given to NewMemory (tests inject their
// own) under the account's shard lock. Redis reads the clock of the Redis
// server, redis.call('TIME') inside the script, so that every node agrees
// on the time whatever its own clock says; the node's clock is only used
// to guess which month key to pass, and the script sends the call back
// with its own time when the guess is wrong.
//
// # Memory
//
// NewMemory keeps per-account state in 64 shards (by FNV-1a hash of the
// account), each a map under a mutex. Allow and Peek on an account that
// has state for the current month take one lock and allocate nothing.
// Seeding runs outside the lock, one Seed call per account at a time
// (concurrent calls for the same account wait for it), so a slow Seed
// stalls nobody else. A month's state is replaced by the next month's when
// the month turns. State is kept for every account seen (a few dozen bytes
// each); it is not evicted while the month lasts, because a re-seed could
// lag behind calls not yet written to the database.
//
// # Redis
//
// Every Allow and Peek is decided inside one run of a Lua script,
// limit.lua (EVALSHA, loading the script again after a NOSCRIPT), which
// reads the time, checks the three windows and updates them atomically,
// and returns all the Verdict needs. The checks a node has waiting at the
// same moment share one pipeline and, on one server, one run: the script
// decides them one after another, as if each had run alone, reading each
// key once and writing each changed key once at the end. A run's checks
// that share a plan and month send its figures once. On a cluster a run
// holds the checks of one account only (their keys share a slot). The keys,
// with the account in a hash tag so that a cluster keeps them on one slot
// ("cp:rl:" is the default prefix, see WithPrefix):
//
//	cp:rl:{<account>}:s            second window: "<TAT> <U>[ <M>]", µs
//	cp:rl:{<account>}:m            minute window: "<TAT> <U>[ <M>]", µs
//	cp:rl:{<account>}:mo:<YYYYMM>  the month's call count
//
// The TAT is in µs since the epoch, U the interval its calls were charged
// at, M when a call last re-expressed the window (absent: never). A bare
// TAT, as versions before U was kept wrote, is read as one charged at the
// T of the limits in force. Those versions read the new form as an
// absent key and fail to refund on it, so while nodes of both share a
// Redis the older ones hold calls to the month alone and keep their 5xx
// calls counted.
// Tests may pass the script a time of their own instead of TIME (an
// unexported option). The TAT keys expire at their TAT (an expired TAT and an absent one mean
// the same: idle); a month key expires a day after its month ends. When
// the month key is absent the script answers so without changing anything;
// the Go side then calls Seed and runs the script again with the seed,
// which the script writes only if the key is still absent, so a seed is
// never counted twice. A run also carries a deadline on Redis's clock
// (from the offset of that clock the node measured in its last reply),
// a little before its checks give up waiting: a run that Redis starts
// past it, after a stall, decides nothing, so a check answered as failed
// is not counted later (see runDeadline). The scripts rely on effects
// replication (the default since Redis 5), since TIME is not
// deterministic.
//
// # Connection slots
//
// RedisSlots implements coinpulse.Slots for the nodes sharing a Redis:
// the cap on an account's open WebSocket connections, counted across
// them (slots.lua; see RedisSlots). It keeps its keys next to the
// account's limiter keys, under the same prefix and hash tag.
package ratelimit
