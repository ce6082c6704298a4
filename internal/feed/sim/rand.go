package sim

import "math"

// The simulation draws every random number from a hash of (seed, coin,
// stream, index) rather than from a stateful generator, so the price of a
// coin at a time is a pure function: restarts, backfills and several nodes
// all see the same path without sharing any state.

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Streams keep the draws of different purposes independent.
const (
	streamHourly uint64 = iota + 1
	streamDaily
	streamTick
	streamVolume
	streamParams
	streamBlock
	streamPeg
)

func mix(seed, coin, stream uint64, idx int64) uint64 {
	return splitmix(splitmix(splitmix(seed^coin)^stream*0x632be59bd9b4e019) ^ uint64(idx))
}

// uniform returns a float in (0, 1).
func uniform(h uint64) float64 {
	return (float64(h>>11) + 0.5) / (1 << 53)
}

// normal returns a standard normal draw (Box-Muller) for the given key.
func normal(seed, coin, stream uint64, idx int64) float64 {
	h := mix(seed, coin, stream, idx)
	u1 := uniform(h)
	u2 := uniform(splitmix(h))
	return math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
}

// hashString is FNV-1a, for turning coin ids into stream keys.
func hashString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}
