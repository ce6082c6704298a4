package coingecko

import (
	"math"
	"testing"
	"time"

	"coinpulse"
	"coinpulse/internal/feed/upstream"
)

// FuzzParseMarkets: an answer of /coins/markets either parses into coins
// the service can serve (ids fit a path segment, figures within their
// bounds or unknown) or is refused with a message, never a panic. The
// corpus is in testdata/fuzz/FuzzParseMarkets.
func FuzzParseMarkets(f *testing.F) {
	f.Add(`[{"id":"bitcoin","symbol":"btc","name":"Bitcoin","current_price":77671,"market_cap":1555886872303,"total_volume":33235034316,"circulating_supply":20030493.0,"total_supply":20030843.0,"max_supply":21000000.0,"roi":null,"last_updated":"2026-05-18T12:49:21.599Z"}]`)
	f.Add(`[{"id":"a","symbol":"A","name":"A","current_price":null},{"id":"a","symbol":"a","name":"b"}]`)
	f.Add(`[{"id":"x/y","symbol":"","name":"\u0000"},3,"s",null,{"current_price":1e400}]`)
	f.Add(`{"error":"coin not found"}`)
	f.Add(`[{"id":"dead","symbol":"dd","name":"Dead","current_price":1e-35,"market_cap":-4,"last_updated":"0001-01-01T00:00:00Z"}]`)
	f.Fuzz(func(t *testing.T, in string) {
		ms, skipped, err := ParseMarkets([]byte(in))
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an empty message")
			}
			return
		}
		seen := map[string]bool{}
		for _, m := range ms {
			if !validID(m.ID) || seen[m.ID] || !validText(m.Symbol, 64) || !validText(m.Name, 200) {
				t.Fatalf("%+v", m)
			}
			seen[m.ID] = true
			if p := m.CurrentPrice; p != nil && !(*p >= coinpulse.MinPrice && *p <= coinpulse.MaxPrice) {
				t.Fatalf("price %v", *p)
			}
			for _, a := range []*float64{m.MarketCap, m.TotalVolume, m.CirculatingSupply, m.TotalSupply, m.MaxSupply} {
				if a != nil && !(*a >= 0 && *a <= coinpulse.MaxAmount) {
					t.Fatalf("amount %v", *a)
				}
			}
			if !m.LastUpdated.IsZero() && (m.LastUpdated.Year() < 2009 || m.LastUpdated.Year() > 9999) {
				t.Fatalf("last updated %v", m.LastUpdated)
			}
		}
		for _, s := range skipped {
			if s == "" {
				t.Fatal("a coin skipped without a word")
			}
		}
	})
}

// FuzzParseChart: an answer of /coins/{id}/market_chart/range either
// parses into samples ordered by time with figures within their bounds,
// which Resample maps onto the grid within the asked span, or is refused
// with a message, never a panic. The corpus is in
// testdata/fuzz/FuzzParseChart.
func FuzzParseGlobal(f *testing.F) {
	f.Add(`{"data":{"active_cryptocurrencies":17397,"markets":1476,"total_market_cap":{"usd":2621040321355.0405}}}`)
	f.Add(`{"data":{"markets":1.5}}`)
	f.Add(`{"data":{"markets":-1e400}}`)
	f.Add(`{"data":null}`)
	f.Fuzz(func(t *testing.T, in string) {
		n, err := ParseGlobal([]byte(in))
		if err != nil {
			if err.Error() == "" || n != 0 {
				t.Fatalf("%d, %q", n, err)
			}
			return
		}
		if n < 1 || n > 1_000_000 {
			t.Fatalf("markets %d", n)
		}
	})
}

func FuzzParseChart(f *testing.F) {
	f.Add(`{"prices":[[1779027899041,77953.82550382407],[1779028199661,78052.87543398788]],"market_caps":[[1779027899041,1560631481361.8042],[1779028199661,1562027330524.267]],"total_volumes":[[1779027899041,18688431751.857048],[1779028199661,18974828816.446976]]}`)
	f.Add(`{"prices":[[1779027899041,null],[null,1],[1779028199661],[1779028199661.5,2],[1779028199662,3,4]],"market_caps":{}}`)
	f.Add(`{"prices":[]}`)
	f.Add(`{"prices":[[1779027899041,1],[1779027899041,2]],"total_volumes":[[1779027899041,-1]]}`)
	f.Fuzz(func(t *testing.T, in string) {
		s, err := ParseChart([]byte(in))
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an empty message")
			}
			return
		}
		for i, x := range s {
			if i > 0 && x.T <= s[i-1].T || x.T < minMillis || x.T > maxMillis {
				t.Fatalf("sample %d at %d after %+v", i, x.T, s[max(i-1, 0)])
			}
			if !(x.Price >= coinpulse.MinPrice && x.Price <= coinpulse.MaxPrice) || !(x.MarketCap >= 0 && x.MarketCap <= coinpulse.MaxAmount) || !(x.Volume >= 0 && x.Volume <= coinpulse.MaxAmount) {
				t.Fatalf("sample %+v", x)
			}
		}
		if len(s) == 0 {
			return
		}
		from := time.UnixMilli(s[0].T).Add(-3 * time.Hour)
		to := time.UnixMilli(s[len(s)-1].T).Add(3 * time.Hour)
		if to.Sub(from) > 400*24*time.Hour {
			to = from.Add(400 * 24 * time.Hour)
		}
		for _, step := range []time.Duration{time.Hour, 24 * time.Hour} {
			pts := upstream.Resample(s, step, from, to)
			for i, p := range pts {
				if p.Timestamp.Before(from) || p.Timestamp.After(to) || !p.Timestamp.Equal(p.Timestamp.Truncate(step)) || i > 0 && !p.Timestamp.After(pts[i-1].Timestamp) {
					t.Fatalf("point %d at %s", i, p.Timestamp)
				}
				if math.IsNaN(p.Price) || p.Price < coinpulse.MinPrice || p.Price > coinpulse.MaxPrice {
					t.Fatalf("point %+v", p)
				}
			}
		}
	})
}
