package notify

import (
	"math/rand/v2"
	"time"
)

// MaxAttempts is how many attempts a webhook delivery gets: the first and
// ten retries. After the last one fails, the delivery fails for good.
const MaxAttempts = 11

// Jitter is the spread of each retry delay: a delay d of the schedule
// becomes a delay between d·(1−Jitter) and d·(1+Jitter).
const Jitter = 0.2

// retryDelays[i] is the nominal wait after the (i+1)th attempt failed.
var retryDelays = [MaxAttempts - 1]time.Duration{
	5 * time.Second,
	30 * time.Second,
	2 * time.Minute,
	10 * time.Minute,
	30 * time.Minute,
	1 * time.Hour,
	2 * time.Hour,
	4 * time.Hour,
	8 * time.Hour,
	16 * time.Hour,
}

// NextAttempt says when to retry a webhook delivery whose latest attempt
// just failed. attempts is the number of attempts made so far, the failed
// one included (1 after the first attempt); a value below 1 is taken as 1.
// The schedule is exponential, each nominal delay below being multiplied
// by 0.8 + 0.4·rnd() (±20 % jitter, so that endpoints that failed together
// are not retried together):
//
//	attempts  next attempt in  nominal time since the first attempt
//	       1  5 s              5 s
//	       2  30 s             35 s
//	       3  2 min            2 min 35 s
//	       4  10 min           12 min 35 s
//	       5  30 min           42 min 35 s
//	       6  1 h              1 h 42 min 35 s
//	       7  2 h              3 h 42 min 35 s
//	       8  4 h              7 h 42 min 35 s
//	       9  8 h              15 h 42 min 35 s
//	      10  16 h             31 h 42 min 35 s (about 1.3 days)
//	     11+  give up
//
// With attempts >= MaxAttempts it returns giveUp true and a zero time.
// Otherwise next is now plus the jittered delay, rounded to the
// millisecond. rnd returns a number in [0, 1) (values outside are clamped);
// nil means math/rand/v2's Float64.
func NextAttempt(attempts int, now time.Time, rnd func() float64) (next time.Time, giveUp bool) {
	if attempts >= MaxAttempts {
		return time.Time{}, true
	}
	if attempts < 1 {
		attempts = 1
	}
	if rnd == nil {
		rnd = rand.Float64
	}
	r := rnd()
	if !(r >= 0) { // also NaN
		r = 0
	}
	if r > 1 {
		r = 1
	}
	d := retryDelays[attempts-1]
	f := 1 - Jitter + 2*Jitter*r
	return now.Add(time.Duration(float64(d) * f).Round(time.Millisecond)), false
}

// nominalSpan is the nominal time from the first attempt of a delivery to
// its attempts-th attempt: the sum of the schedule's first attempts-1
// delays, without jitter.
func nominalSpan(attempts int) time.Duration {
	var total time.Duration
	for i := 0; i < attempts-1 && i < len(retryDelays); i++ {
		total += retryDelays[i]
	}
	return total
}
