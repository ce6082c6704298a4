package ledger

import (
	"strings"
	"testing"

	"github.com/shopspring/decimal"

	"coinpulse"
)

func dec(s string) decimal.Decimal { return decimal.RequireFromString(s) }

func TestParse(t *testing.T) {
	good := map[string]string{
		"0": "0", "1": "1", "0.1": "0.1", "0.30": "0.3", "100.000": "100", "1e2": "100", "1E-8": "0.00000001",
		"2.5e+3": "2500", "-0": "0", "999999999999999.999999999999999999": "999999999999999.999999999999999999",
		"0.000000000000000001": "0.000000000000000001",
		// Zeros after the last significant digit do not count.
		"1.0000000000000000000": "1", "0.0000000000000000010": "0.000000000000000001",
	}
	for in, want := range good {
		d, err := Parse(in)
		if err != nil || d.String() != want {
			t.Errorf("Parse(%q) = %s, %v; want %s", in, d, err, want)
		}
	}
	bad := map[string]string{
		"": "number", "abc": "number", "1.": "number", ".5": "number", "01": "number", "1e": "number",
		"1e1000": "exponent of at most 3 digits", "1e999999999": "exponent of at most 3 digits", "0e100000": "exponent of at most 3 digits",
		"1e-1000": "exponent of at most 3 digits", "0x10": "number", " 1": "number", "1 ": "number",
		"NaN": "number", "Infinity": "number", "-1": "negative", "-0.5": "negative",
		"1000000000000000": "less than", "1e15": "less than",
		"0.0000000000000000001": "decimal places", "1.1234567890123456789": "decimal places",
		strings.Repeat("1", 65): "characters",
	}
	for in, want := range bad {
		if d, err := Parse(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %s, %v; want an error about %q", in, d, err, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"0", "0.1", "1e2", "-0", "1e-18", "999999999999999.999999999999999999", "1e999", "abc", "1.e5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := Parse(s)
		if err != nil {
			return
		}
		if d.IsNegative() || d.Cmp(maxAmount) >= 0 || !d.Truncate(MaxScale).Equal(d) {
			t.Fatalf("Parse(%q) = %s: out of bounds", s, d)
		}
		// What it accepts prints back as itself.
		again, err := Parse(d.String())
		if err != nil || !again.Equal(d) || again.String() != d.String() {
			t.Fatalf("Parse(%q) = %s, which parses back as %s, %v", s, d, again, err)
		}
	})
}

func lot(q, p string) Lot { return Lot{Quantity: dec(q), Price: dec(p)} }

func TestBuySellAverageCost(t *testing.T) {
	h := coinpulse.Holding{ID: 1, CoinID: "bitcoin"}
	steps := []struct {
		buy                 bool
		q, p                string
		qty, cost, realized string // after; realized of a sell
	}{
		{true, "0.1", "100", "0.1", "10", ""},
		{true, "0.2", "100", "0.3", "30", ""},
		{true, "0.7", "130", "1", "121", ""},
		// A third of the position: its share of the cost is 121 × 0.333…3
		// = 40.333333333333333293; proceeds 66.6666666666666666.
		{false, "0.333333333333333333", "200", "0.666666666666666667", "80.666666666666666707", "26.333333333333333307"},
		{false, "0.666666666666666667", "50", "0", "0", "-47.333333333333333357"},
	}
	total := decimal.Zero
	for i, s := range steps {
		var tx coinpulse.Transaction
		var err error
		if s.buy {
			h, tx, err = Buy(h, lot(s.q, s.p))
		} else {
			h, tx, err = Sell(h, lot(s.q, s.p))
		}
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if h.Quantity.String() != s.qty || h.TotalCost.String() != s.cost {
			t.Errorf("step %d: quantity %s cost %s, want %s and %s", i, h.Quantity, h.TotalCost, s.qty, s.cost)
		}
		if !tx.Total.Equal(dec(s.q).Mul(dec(s.p))) {
			t.Errorf("step %d: total %s, want %s × %s", i, tx.Total, s.q, s.p)
		}
		if s.buy != !tx.RealizedPL.Valid {
			t.Errorf("step %d: realized set %v on a buy=%v", i, tx.RealizedPL.Valid, s.buy)
		}
		if !s.buy {
			if tx.RealizedPL.Decimal.String() != s.realized {
				t.Errorf("step %d: realized %s, want %s", i, tx.RealizedPL.Decimal, s.realized)
			}
			total = total.Add(tx.RealizedPL.Decimal)
		}
	}
	// Everything bought for 121 was sold for 0.333..×200 + 0.666..×50: the
	// realised total is exactly proceeds minus cost, rounding included.
	proceeds := dec("0.333333333333333333").Mul(dec("200")).Add(dec("0.666666666666666667").Mul(dec("50")))
	if !total.Equal(proceeds.Sub(dec("121"))) {
		t.Errorf("realized total %s, want proceeds %s - 121", total, proceeds)
	}
}

func TestSellRefusals(t *testing.T) {
	h := coinpulse.Holding{ID: 7, CoinID: "bitcoin", Quantity: dec("1"), TotalCost: dec("10")}
	for _, tt := range []struct {
		name  string
		h     coinpulse.Holding
		lot   Lot
		field string
	}{
		{"more than held", h, lot("1.000000000000000001", "1"), "quantity"},
		{"zero", h, lot("0", "1"), "quantity"},
		{"negative price", h, lot("1", "-1"), "price"},
		{"not held", coinpulse.Holding{CoinID: "ethereum"}, lot("1", "1"), "coin_id"},
	} {
		got, _, err := Sell(tt.h, tt.lot)
		e, ok := err.(*coinpulse.Error)
		if !ok || e.Code != coinpulse.CodeValidation || e.Details[0].Field != tt.field {
			t.Errorf("%s: err %v, want VALIDATION_ERROR on %s", tt.name, err, tt.field)
		}
		if !got.Quantity.Equal(tt.h.Quantity) || !got.TotalCost.Equal(tt.h.TotalCost) {
			t.Errorf("%s: holding changed to %+v", tt.name, got)
		}
	}
}

// A holding holds less than 10^15, as each amount sent is: a buy that
// would take it there is refused and changes nothing.
func TestBuyBound(t *testing.T) {
	h := coinpulse.Holding{ID: 7, CoinID: "bitcoin", Quantity: dec("999999999999999"), TotalCost: dec("10")}
	got, _, err := Buy(h, lot("0.999999999999999999", "1"))
	if err != nil || got.Quantity.String() != "999999999999999.999999999999999999" {
		t.Fatalf("a buy to just under 10^15: %v, %s", err, got.Quantity)
	}
	for _, q := range []string{"1", "0.000000000000000001"} {
		after, _, err := Buy(got, lot(q, "1"))
		e, ok := err.(*coinpulse.Error)
		if !ok || e.Code != coinpulse.CodeValidation || e.Details[0].Field != "quantity" {
			t.Errorf("a buy of %s past 10^15: err %v, want VALIDATION_ERROR on quantity", q, err)
		}
		if !after.Quantity.Equal(got.Quantity) || !after.TotalCost.Equal(got.TotalCost) {
			t.Errorf("a refused buy of %s changed the holding to %+v", q, after)
		}
	}
}

// A cost finer than CostScale never rounds into a negative remainder.
func TestSellTinyCost(t *testing.T) {
	h := coinpulse.Holding{ID: 1, Quantity: dec("1"), TotalCost: dec("0.000000000000000000999")}
	h, tx, err := Sell(h, lot("0.999999999999999999", "0"))
	if err != nil {
		t.Fatal(err)
	}
	if h.TotalCost.IsNegative() || !tx.RealizedPL.Decimal.Add(h.TotalCost).Equal(dec("-0.000000000000000000999")) {
		t.Errorf("remaining cost %s, realized %s: want a non-negative cost and the two summing to -cost", h.TotalCost, tx.RealizedPL.Decimal)
	}
}

func TestAverageAndPercent(t *testing.T) {
	if _, ok := AverageBuyPrice(coinpulse.Holding{}); ok {
		t.Error("AverageBuyPrice of nothing held is known")
	}
	if a, _ := AverageBuyPrice(coinpulse.Holding{Quantity: dec("3"), TotalCost: dec("10")}); a.String() != "3.333333333333333333" {
		t.Errorf("AverageBuyPrice(10/3) = %s", a)
	}
	if p := Percent(dec("1"), dec("3")); p.String() != "33.33333333" {
		t.Errorf("Percent(1, 3) = %s", p)
	}
	if p := Percent(dec("5"), decimal.Zero); !p.IsZero() {
		t.Errorf("Percent(5, 0) = %s, want 0", p)
	}
}
