package replay

import (
	"strings"
	"testing"

	"coinpulse"
)

// FuzzParseCoin: a price file either parses into rows that keep the
// feed's invariants (timestamps increasing, figures within their bounds, or 0 for unknown)
// or is refused with a message, never a panic. The corpus is in
// testdata/fuzz/FuzzParseCoin.
func FuzzParseCoin(f *testing.F) {
	const head = "timestamp,readableTimestamp,coinId,price,marketCap,totalVolume\n"
	f.Add(head + `1609459200000,"1/1/2021, 12:00:00 AM",bitcoin,29022.41839530417,539438036435.6701,43503516563.294876` + "\n")
	f.Add(head + "1609459200000,x,bitcoin,1,,\n1609545600000,x,bitcoin,2e-9,0,0\n")
	f.Add("\ufeff" + head + "1609459200000,x,bitcoin,1,2,3")
	f.Add(head + "1609459200000,x,bitcoin,0x1p-3,2,3\n")
	f.Add(head + "1609459200000,x,bitcoin,1,2,3\n1609459200000,x,bitcoin,1,2,3\n")
	f.Add(head + `1609459200000,"x` + "\n")
	f.Fuzz(func(t *testing.T, in string) {
		rows, err := ParseCoin(strings.NewReader(in), "bitcoin")
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an empty message")
			}
			return
		}
		if len(rows) == 0 {
			t.Fatal("no rows and no error")
		}
		for i, r := range rows {
			if !(r.Price == 0 || coinpulse.MinPrice <= r.Price && r.Price <= coinpulse.MaxPrice) || !(0 <= r.MarketCap && r.MarketCap <= coinpulse.MaxAmount) || !(0 <= r.TotalVolume && r.TotalVolume <= coinpulse.MaxAmount) {
				t.Fatalf("row %d: %+v", i, r)
			}
			if r.Time.Year() < 1970 || r.Time.Year() > 9999 || i > 0 && !r.Time.After(rows[i-1].Time) {
				t.Fatalf("row %d at %s after %v", i, r.Time, rows[max(i-1, 0)].Time)
			}
		}
	})
}

// FuzzParseCoinList: a coin list parses into unique ids usable as file
// names, lower-case symbols and names, or is refused.
func FuzzParseCoinList(f *testing.F) {
	f.Add("id,symbol,name\nbitcoin,btc,Bitcoin\nethereum,eth,Ethereum\n")
	f.Add("id,symbol,name\nthorchain,RUNE, THORChain \n")
	f.Add("id,symbol,name\n../x,a,b\n")
	f.Add("id,symbol,name\na,b,c\na,b,c\n")
	f.Add(`id,symbol,name` + "\n" + `"a,b",c,d` + "\n")
	f.Fuzz(func(t *testing.T, in string) {
		list, err := ParseCoinList(strings.NewReader(in))
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, c := range list {
			if !validID(c.ID) || strings.ContainsAny(c.ID, "/\\") || c.ID == ".." || seen[c.ID] {
				t.Fatalf("id %q", c.ID)
			}
			seen[c.ID] = true
			if c.Symbol == "" || c.Symbol != strings.ToLower(c.Symbol) || c.Name == "" || !printable(c.Symbol) || !printable(c.Name) {
				t.Fatalf("%+v", c)
			}
		}
	})
}
