package sim

import (
	"strings"
	"testing"
)

const header = "id,symbol,name,price_usd,circulating_supply,total_supply,max_supply,annual_volatility,listed,listing_price_usd,turnover"

func TestParseUniverse(t *testing.T) {
	const good = "bitcoin,BTC,Bitcoin,92000,19955000,19955000,21000000,0.5,2013-04-28,135.3,0.035"
	const other = "ethereum,eth,Ethereum,3100,120700000,120700000,,0.7,2015-08-07,2.83,0.07"
	tests := []struct {
		name    string
		text    string
		wantErr string // substring; "" means success
	}{
		{"valid", header + "\n" + good + "\n" + other + "\n", ""},
		{"wrong header", strings.Replace(header, "price_usd", "price", 1) + "\n" + good + "\n", "header must be"},
		{"missing column", strings.TrimSuffix(header, ",turnover") + "\n" + strings.TrimSuffix(good, ",0.035") + "\n", "header must be"},
		{"header only", header + "\n", "header must be"},
		{"empty", "", "header must be"},
		{"duplicate id", header + "\n" + good + "\n" + other + "\n" + good + "\n", `line 4: empty or duplicate id "bitcoin"`},
		{"empty id", header + "\n" + "," + strings.SplitN(good, ",", 2)[1] + "\n", "empty or duplicate id"},
		{"non-numeric price", header + "\n" + strings.Replace(good, "92000", "lots", 1) + "\n", `line 2: price_usd "lots" is not a positive number`},
		{"negative supply", header + "\n" + strings.Replace(good, ",19955000,19955000,", ",-1,19955000,", 1) + "\n", `circulating_supply "-1" is not a positive number`},
		{"infinite volatility", header + "\n" + strings.Replace(good, ",0.5,", ",Inf,", 1) + "\n", `annual_volatility "Inf" is not a positive number`},
		{"NaN turnover", header + "\n" + strings.Replace(good, ",0.035", ",NaN", 1) + "\n", `turnover "NaN" is not a positive number`},
		{"missing listing price", header + "\n" + strings.Replace(good, ",135.3,", ",,", 1) + "\n", `listing_price_usd "" is not a positive number`},
		{"bad date", header + "\n" + strings.Replace(good, "2013-04-28", "28/04/2013", 1) + "\n", "line 2: listed:"},
		{"impossible date", header + "\n" + other + "\n" + strings.Replace(good, "2013-04-28", "2013-02-30", 1) + "\n", "line 3: listed:"},
		{"ragged row", header + "\n" + good + ",extra\n", "universe.csv"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			coins, err := parseUniverse(tt.text)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("parseUniverse: %v", err)
				}
				if got, want := len(coins), 2; got != want {
					t.Fatalf("got %d coins, want %d", got, want)
				}
				btc, eth := coins[0], coins[1]
				if btc.info.ID != "bitcoin" || btc.info.Symbol != "btc" || btc.info.Name != "Bitcoin" {
					t.Errorf("coin 0 = %q %q %q, want bitcoin btc Bitcoin", btc.info.ID, btc.info.Symbol, btc.info.Name)
				}
				if btc.ref != 92000 || btc.listPrice != 135.3 || btc.turnover != 0.035 || btc.info.CirculatingSupply != 19955000 {
					t.Errorf("bitcoin figures = ref %v list %v turnover %v supply %v", btc.ref, btc.listPrice, btc.turnover, btc.info.CirculatingSupply)
				}
				if btc.info.MaxSupply == nil || *btc.info.MaxSupply != 21000000 {
					t.Errorf("bitcoin max supply = %v, want 21000000", btc.info.MaxSupply)
				}
				if eth.info.MaxSupply != nil {
					t.Errorf("ethereum max supply = %v, want nil (empty column)", *eth.info.MaxSupply)
				}
				if got, want := btc.info.ListedAt.Format("2006-01-02T15:04:05Z07:00"), "2013-04-28T00:00:00Z"; got != want {
					t.Errorf("bitcoin ListedAt = %s, want %s", got, want)
				}
				if btc.sigmaD <= 0 || btc.sigmaH <= 0 || btc.sigmaH >= btc.sigmaD || btc.key == 0 || btc.key == eth.key {
					t.Errorf("bitcoin path parameters: sigmaD %v sigmaH %v key %x (eth key %x)", btc.sigmaD, btc.sigmaH, btc.key, eth.key)
				}
				return
			}
			if err == nil {
				t.Fatalf("parseUniverse succeeded with %d coins, want an error containing %q", len(coins), tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error = %q, want it to contain %q", err, tt.wantErr)
			}
			if coins != nil {
				t.Errorf("coins = %d on error, want nil", len(coins))
			}
		})
	}
}

func TestParseEmbeddedUniverse(t *testing.T) {
	coins, err := parseUniverse(universeCSV)
	if err != nil {
		t.Fatalf("parseUniverse(universe.csv): %v", err)
	}
	ref := readCSV(t)
	if got, want := len(coins), len(ref); got != want {
		t.Fatalf("got %d coins, want %d (rows of universe.csv)", got, want)
	}
	for i, c := range coins {
		if c.info.ID != ref[i].id || c.ref != ref[i].price || c.listPrice != ref[i].listPrice {
			t.Errorf("coin %d = %s ref %v list %v, want %s ref %v list %v", i, c.info.ID, c.ref, c.listPrice, ref[i].id, ref[i].price, ref[i].listPrice)
		}
		if c.info.TotalSupply != nil && *c.info.TotalSupply < c.info.CirculatingSupply*0.999 {
			t.Errorf("%s: total supply %v below circulating %v", c.info.ID, *c.info.TotalSupply, c.info.CirculatingSupply)
		}
		if c.info.MaxSupply != nil && c.info.TotalSupply != nil && *c.info.MaxSupply < *c.info.TotalSupply*0.999 {
			t.Errorf("%s: max supply %v below total %v", c.info.ID, *c.info.MaxSupply, *c.info.TotalSupply)
		}
	}
}
