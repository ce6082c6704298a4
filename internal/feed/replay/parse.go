package replay

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"coinpulse"
)

// Row is one line of a coin's price file: the coin's figures at Time, all
// in USD. A figure is 0 when it is unknown: left empty or 0 (CoinGecko's
// daily data has market caps of 0 for coins whose supply it did not know
// that day), or beyond what it can be (see coinpulse.MinPrice): a glitch of the
// recording, such as veritaseum's price of 1e-35 for three days of 2021.
type Row struct {
	Time        time.Time
	Price       float64
	MarketCap   float64
	TotalVolume float64
}

// coinHeader is the header line of a coin's price file (the layout of
// CoinGecko's market_chart export in hathix/historical-crypto-data).
var coinHeader = []string{"timestamp", "readableTimestamp", "coinId", "price", "marketCap", "totalVolume"}

// maxRows bounds a coin's file: a century of hourly rows.
const maxRows = 100 * 366 * 24

// ParseCoin reads a coin's price file: the header line, then one row a
// point, oldest first, each naming the coin id. Timestamps are Unix
// milliseconds, strictly increasing; the price is a finite number, 0 or
// more; the market cap and the volume too, or empty. Figures that cannot
// be are read as unknown (see Row). The error names the line.
func ParseCoin(r io.Reader, id string) ([]Row, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = len(coinHeader)
	cr.ReuseRecord = true
	head, err := cr.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty file: want a header line and at least one row")
		}
		return nil, fmt.Errorf("header: %w", err)
	}
	head[0] = strings.TrimPrefix(head[0], "\ufeff") // a byte order mark
	for i, want := range coinHeader {
		if head[i] != want {
			return nil, fmt.Errorf("line 1: header is %q, want %q", strings.Join(head, ","), strings.Join(coinHeader, ","))
		}
	}
	var rows []Row
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err // csv's errors name the line
		}
		line, _ := cr.FieldPos(0)
		if len(rows) == maxRows {
			return nil, fmt.Errorf("line %d: more than %d rows", line, maxRows)
		}
		row, err := parseRow(rec, id)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if n := len(rows); n > 0 && !row.Time.After(rows[n-1].Time) {
			return nil, fmt.Errorf("line %d: timestamp %d is not after the previous row's (%d): rows go oldest first, one per instant", line, row.Time.UnixMilli(), rows[n-1].Time.UnixMilli())
		}
		rows = append(rows, row)
	}
	if len(rows) == 0 {
		return nil, errors.New("no rows after the header")
	}
	return rows, nil
}

// Timestamps must fall between 1970 and 9999: time.UnixMilli and the
// stores take anything in that range.
const maxMillis = 253402300799999 // 9999-12-31T23:59:59.999Z

func parseRow(rec []string, id string) (Row, error) {
	ms, err := strconv.ParseInt(rec[0], 10, 64)
	if err != nil || ms < 0 || ms > maxMillis {
		return Row{}, fmt.Errorf("timestamp %q: want Unix milliseconds from 1970 to 9999", rec[0])
	}
	if rec[2] != id {
		return Row{}, fmt.Errorf("coinId %q: the file is %s's", rec[2], id)
	}
	row := Row{Time: time.UnixMilli(ms).UTC()}
	if row.Price, err = price(rec[3]); err != nil {
		return Row{}, err
	}
	if row.MarketCap, err = amount("marketCap", rec[4]); err != nil {
		return Row{}, err
	}
	if row.TotalVolume, err = amount("totalVolume", rec[5]); err != nil {
		return Row{}, err
	}
	return row, nil
}

// number parses a number.
//
// A number beyond float64's range (1e400) is ±Inf or 0, as out of bounds
// as it is, for price and amount to read as unknown or refuse when
// negative; the words Inf and NaN are refused.
func number(name, s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) || err == nil && (math.IsNaN(v) || math.IsInf(v, 0)) {
		return 0, fmt.Errorf("%s %q: want a finite number", name, s)
	}
	return v, nil
}

// price parses a price: a number, 0 or more; 0 (unknown) when it is not
// from coinpulse.MinPrice to coinpulse.MaxPrice.
func price(s string) (float64, error) {
	v, err := number("price", s)
	switch {
	case err != nil:
		return 0, err
	case v < 0:
		return 0, fmt.Errorf("price %q: want a number, 0 or more", s)
	case v < coinpulse.MinPrice || v > coinpulse.MaxPrice:
		return 0, nil
	}
	return v, nil
}

// amount parses an optional amount: empty, or a number, 0 or more; 0
// (unknown) when it is empty or more than coinpulse.MaxAmount.
func amount(name, s string) (float64, error) {
	if s == "" {
		return 0, nil
	}
	v, err := number(name, s)
	switch {
	case err != nil:
		return 0, err
	case v < 0:
		return 0, fmt.Errorf("%s %q: want a number, 0 or more, or nothing", name, s)
	case v > coinpulse.MaxAmount:
		return 0, nil
	}
	return v, nil
}

// CoinList is one line of coinlist.csv.
type CoinList struct{ ID, Symbol, Name string }

// ParseCoinList reads coinlist.csv: a header "id,symbol,name", then one
// coin a line, ids unique and usable as file names.
func ParseCoinList(r io.Reader) ([]CoinList, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = 3
	head, err := cr.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty file: want the header id,symbol,name and a coin a line")
		}
		return nil, fmt.Errorf("header: %w", err)
	}
	if strings.TrimPrefix(head[0], "\ufeff") != "id" || head[1] != "symbol" || head[2] != "name" {
		return nil, fmt.Errorf("line 1: header is %q, want \"id,symbol,name\"", strings.Join(head, ","))
	}
	var out []CoinList
	seen := map[string]int{}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		line, _ := cr.FieldPos(0)
		c := CoinList{ID: rec[0], Symbol: strings.ToLower(strings.TrimSpace(rec[1])), Name: strings.TrimSpace(rec[2])}
		switch {
		case !validID(c.ID):
			return nil, fmt.Errorf("line %d: id %q: want 1 to 100 of a-z, 0-9, '-', '_' and '.', not starting with '.'", line, c.ID)
		case c.Symbol == "" || len(c.Symbol) > 50 || !printable(c.Symbol):
			return nil, fmt.Errorf("line %d: symbol %q: want 1 to 50 printable characters", line, rec[1])
		case c.Name == "" || len(c.Name) > 200 || !printable(c.Name):
			return nil, fmt.Errorf("line %d: name %q: want 1 to 200 printable characters", line, rec[2])
		case seen[c.ID] > 0:
			return nil, fmt.Errorf("line %d: id %q is listed already on line %d", line, c.ID, seen[c.ID])
		}
		seen[c.ID] = line
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("no coins after the header")
	}
	return out, nil
}

// printable reports whether s is valid UTF-8 without control characters.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// validID accepts CoinGecko-style ids, which name the coin's file: lower
// case letters, digits, '-', '_' and '.', not starting with a '.'.
func validID(id string) bool {
	if id == "" || len(id) > 100 || id[0] == '.' {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}
