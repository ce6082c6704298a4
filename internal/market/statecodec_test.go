package market

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"coinpulse"
)

func sampleState() (*savedState, []string) {
	t0 := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	a := newCoinState(coinpulse.CoinInfo{ID: "alpha"})
	a.apply(coinpulse.Quote{CoinID: "alpha", Price: 1.5, TotalVolume: 99, MarketCap: 1234.5, Time: t0})
	for i := range 30 {
		a.addPoint(coinpulse.Hourly, coinpulse.HistoryPoint{Timestamp: t0.Add(time.Duration(i-30) * time.Hour), Price: float64(i) + 0.25, MarketCap: float64(i) * 10})
	}
	for i := range 400 {
		a.addPoint(coinpulse.Daily, coinpulse.HistoryPoint{Timestamp: t0.Truncate(24*time.Hour).AddDate(0, 0, i-400), Price: float64(i) + 0.5})
	}
	b := newCoinState(coinpulse.CoinInfo{ID: "béta"}) // never quoted
	c := newCoinState(coinpulse.CoinInfo{ID: "gamma"})
	c.apply(coinpulse.Quote{CoinID: "gamma", Price: 2, NoVolume: true, Time: t0})
	return &savedState{Fingerprint: "sim/v3(seed=1)", LastHour: t0, LastDay: t0.Truncate(24 * time.Hour),
		Coins: map[string]*coinState{"alpha": a, "béta": b, "gamma": c}}, []string{"alpha", "béta", "gamma"}
}

func TestStateRoundTrip(t *testing.T) {
	s, order := sampleState()
	got, err := decodeState(encodeState(s, order))
	if err != nil {
		t.Fatal(err)
	}
	// Info is not saved: it comes from the feed.
	if diff := cmp.Diff(*s, got, cmp.AllowUnexported(savedState{}), cmpopts.IgnoreFields(coinState{}, "Info"), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if got.Coins["alpha"].Hourly.Keep != keepHourly || len(got.Coins["alpha"].Daily.Price) != keepDaily {
		t.Errorf("rings lost their shape: %+v", got.Coins["alpha"].Daily.Keep)
	}
}

func TestStateRejectsCorruption(t *testing.T) {
	s, order := sampleState()
	blob := encodeState(s, order)
	for name, b := range map[string][]byte{
		"empty":     nil,
		"magic":     append([]byte("XXXX"), blob[4:]...),
		"truncated": blob[:len(blob)-1],
		"trailing":  append(append([]byte{}, blob...), 0),
		"half":      blob[:len(blob)/2],
	} {
		if _, err := decodeState(b); err == nil {
			t.Errorf("%s: decoded a corrupt state", name)
		}
	}
}

// FuzzDecodeState: any bytes decode or fail cleanly, never panic or
// allocate without bound.
func FuzzDecodeState(f *testing.F) {
	s, order := sampleState()
	f.Add(encodeState(s, order))
	f.Add([]byte(stateMagic))
	f.Add([]byte("CPS1\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff\x0f"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeState(b)
		if err == nil {
			for _, c := range got.Coins {
				if len(c.Hourly.Price) > c.Hourly.Keep || len(c.Daily.Price) > c.Daily.Keep {
					t.Fatal("a ring holds more than it keeps")
				}
			}
		}
	})
}
