package coinpulse

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Unlimited marks a plan figure with no cap.
const Unlimited = -1

// Endpoints says which API endpoints a plan reaches.
type Endpoints string

// The endpoint sets a plan can give.
const (
	// EndpointsNone: no API access; /usage still answers.
	EndpointsNone Endpoints = "none"
	// EndpointsBasic: /markets, /markets/search, /markets/global,
	// /coins/{id} (and /markets/{id}), /usage.
	EndpointsBasic Endpoints = "basic"
	// EndpointsAll: every endpoint.
	EndpointsAll Endpoints = "all"
)

// Plan is what a tier allows.
type Plan struct {
	Tier         Tier
	MonthlyCalls int64 // Unlimited or a count
	PerMinute    int
	PerSecond    int
	Endpoints    Endpoints
	Webhooks     bool // webhooks and WebSocket
	// MaxPortfolios and MaxActiveAlerts: 0 none, Unlimited, or a count.
	MaxPortfolios   int
	MaxActiveAlerts int
}

// Limits returns the plan's rate limits.
func (p Plan) Limits() Limits {
	return Limits{PerSecond: p.PerSecond, PerMinute: p.PerMinute, Monthly: p.MonthlyCalls}
}

//go:embed plans/default.json
var defaultPlansJSON []byte

// DefaultPlans is the SPEC's shipped plan table, plans/default.json.
func DefaultPlans() map[Tier]Plan {
	plans, err := LoadPlans(bytes.NewReader(defaultPlansJSON))
	if err != nil {
		panic("plans/default.json: " + err.Error())
	}
	return plans
}

// parseFigure reads a plan number of a plan file: a count, or
// "unlimited".
func parseFigure(raw json.RawMessage) (int64, error) {
	var word string
	if len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &word) == nil && word == "unlimited" {
		return Unlimited, nil // also spelled with escapes, as JSON allows
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf(`want a whole number >= 0 or "unlimited", got %s`, raw)
	}
	return n, nil
}

// MaxRate is the most calls a plan's per_second or per_minute may allow:
// a billion, far above what a server answers, and low enough that the
// limiters' arithmetic (in nanoseconds, or microseconds in Redis) cannot
// overflow.
const MaxRate = 1_000_000_000

// MaxMonthlyCalls is the largest monthly allowance a plan file may give
// short of "unlimited": the most the RateLimit headers' Structured Field
// integers can carry (15 digits, RFC 9651).
const MaxMonthlyCalls = 999_999_999_999_999

// planFields are the fields of a plan in a plan file, in the order they
// are checked; the figures among them are read by parseFigure.
var planFields = []string{"tier", "monthly_calls", "per_minute", "per_second", "endpoints", "webhooks", "max_portfolios", "max_active_alerts"}

// utf8BOM starts the files some editors save; it is skipped.
var utf8BOM = []byte("\xef\xbb\xbf")

// LoadPlansFile loads the plan file at path (see LoadPlans); its errors
// name the file.
func LoadPlansFile(path string) (map[Tier]Plan, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	plans, err := LoadPlans(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return plans, nil
}

// LoadPlans reads a plan file (JSON, the format of plans/default.json):
// every tier exactly once, every figure given. It is strict, so that a
// mistake is not silently ignored: unknown fields, field names not spelt
// exactly (encoding/json would match them whatever their case), a field
// given twice in an object (encoding/json would keep the last) and
// anything after the file's object are errors. Each error says where in
// the file it is (plans[i], the tier, the field) and what is wanted.
func LoadPlans(r io.Reader) (map[Tier]Plan, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("plan file: %w", err)
	}
	data = bytes.TrimPrefix(data, utf8BOM)
	if err := json.Unmarshal(data, new(any)); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			line := 1 + bytes.Count(data[:syn.Offset], []byte("\n"))
			return nil, fmt.Errorf("plan file: not JSON (line %d: %v); a plan file is JSON, as plans/default.json (TOML and YAML are not read)", line, syn)
		}
		return nil, fmt.Errorf("plan file: not JSON: %w", err)
	}
	if err := checkKeys(data); err != nil {
		return nil, fmt.Errorf("plan file: %w", err)
	}
	// json.Unmarshal has checked that data is one value and nothing after
	// it; the rest is read field by field, so that every error can say
	// where it is in words, not in Go types.
	var top map[string]json.RawMessage
	if json.Unmarshal(data, &top) != nil || top == nil {
		return nil, errors.New(`plan file: want an object with a "plans" array, as plans/default.json`)
	}
	for k, v := range top {
		switch k {
		case "plans":
		case "_comment":
			if json.Unmarshal(v, new(string)) != nil {
				return nil, errors.New("plan file: _comment must be a string")
			}
		default:
			return nil, fmt.Errorf(`plan file: unknown field %q (a plan file has "plans" and "_comment")`, k)
		}
	}
	var rows []json.RawMessage
	if raw, ok := top["plans"]; !ok {
		return nil, errors.New(`plan file: "plans" is missing`)
	} else if json.Unmarshal(raw, &rows) != nil || rows == nil {
		return nil, errors.New(`plan file: "plans" must be an array of plans, one an object for each tier`)
	}
	plans := make(map[Tier]Plan, len(Tiers))
	for i, row := range rows {
		p, err := parsePlan(row)
		if err != nil {
			return nil, fmt.Errorf("plan file: plans[%d]%s", i, err)
		}
		if _, dup := plans[p.Tier]; dup {
			return nil, fmt.Errorf("plan file: plans[%d] (%q): tier given twice", i, p.Tier)
		}
		plans[p.Tier] = p
	}
	for _, t := range Tiers {
		if _, ok := plans[t]; !ok {
			return nil, fmt.Errorf("plan file: no plan for tier %q", t)
		}
	}
	return plans, nil
}

// parsePlan reads one plan of a plan file. Its errors start with the
// plan's tier, when known, and name the field: ` ("free"): per_second:
// want …`.
func parsePlan(row json.RawMessage) (Plan, error) {
	var fields map[string]json.RawMessage
	if json.Unmarshal(row, &fields) != nil || fields == nil {
		return Plan{}, errors.New(": a plan must be an object, as in plans/default.json")
	}
	var p Plan
	var tier string
	if raw, ok := fields["tier"]; !ok {
		return Plan{}, errors.New(": tier is missing")
	} else if json.Unmarshal(raw, &tier) != nil {
		return Plan{}, fmt.Errorf(": tier must be one of free, premium, pro, enterprise, business, got %s", raw)
	}
	where := fmt.Sprintf(" (%q)", tier)
	t, err := ParseTier(tier)
	if err != nil || string(t) != tier {
		return Plan{}, fmt.Errorf("%s: tier must be one of free, premium, pro, enterprise, business", where)
	}
	p.Tier = t
	for k := range fields {
		if !slices.Contains(planFields, k) {
			return Plan{}, fmt.Errorf("%s: unknown field %q (a plan has %s)", where, k, strings.Join(planFields, ", "))
		}
	}
	for _, name := range planFields[1:] {
		raw, ok := fields[name]
		if !ok {
			return Plan{}, fmt.Errorf("%s: %s is missing", where, name)
		}
		switch name {
		case "endpoints":
			if json.Unmarshal(raw, &p.Endpoints) != nil {
				return Plan{}, fmt.Errorf("%s: endpoints must be none, basic or all, got %s", where, raw)
			}
			switch p.Endpoints {
			case EndpointsNone, EndpointsBasic, EndpointsAll:
			default:
				return Plan{}, fmt.Errorf("%s: endpoints must be none, basic or all, got %s", where, raw)
			}
		case "webhooks":
			// Not json.Unmarshal: it takes null for false.
			if string(raw) != "true" && string(raw) != "false" {
				return Plan{}, fmt.Errorf("%s: webhooks must be true or false, got %s", where, raw)
			}
			p.Webhooks = string(raw) == "true"
		default:
			n, err := parseFigure(raw)
			rate := name == "per_minute" || name == "per_second"
			if rate && (err != nil || n == Unlimited || n == 0 || n > MaxRate) {
				return Plan{}, fmt.Errorf("%s: %s must be a whole number from 1 to %d, got %s", where, name, MaxRate, raw)
			}
			if err != nil {
				return Plan{}, fmt.Errorf("%s: %s: %w", where, name, err)
			}
			switch name {
			case "monthly_calls":
				if n > MaxMonthlyCalls {
					return Plan{}, fmt.Errorf(`%s: monthly_calls must be at most %d (15 digits, what the RateLimit headers carry) or "unlimited", got %s`, where, MaxMonthlyCalls, raw)
				}
				p.MonthlyCalls = n
			case "per_minute", "per_second":
				if name == "per_minute" {
					p.PerMinute = int(n)
				} else {
					p.PerSecond = int(n)
				}
			case "max_portfolios":
				p.MaxPortfolios = int(n)
			case "max_active_alerts":
				p.MaxActiveAlerts = int(n)
			}
		}
	}
	if p.PerSecond > p.PerMinute {
		return Plan{}, fmt.Errorf("%s: per_second (%d) is above per_minute (%d): the minute would always bind first; swapped?", where, p.PerSecond, p.PerMinute)
	}
	if p.Endpoints != EndpointsAll {
		// The portfolio, alert, webhook and stream endpoints need "all":
		// an allowance for them here would never be used, and the
		// dashboard would show it.
		switch {
		case p.Webhooks:
			return Plan{}, fmt.Errorf(`%s: webhooks is true but endpoints is %q: webhooks and streams need endpoints "all"`, where, p.Endpoints)
		case p.MaxPortfolios != 0:
			return Plan{}, fmt.Errorf(`%s: max_portfolios is not 0 but endpoints is %q: portfolios need endpoints "all"`, where, p.Endpoints)
		case p.MaxActiveAlerts != 0:
			return Plan{}, fmt.Errorf(`%s: max_active_alerts is not 0 but endpoints is %q: alerts need endpoints "all"`, where, p.Endpoints)
		}
	}
	if p.MonthlyCalls != 0 && p.Endpoints == EndpointsNone {
		return Plan{}, fmt.Errorf(`%s: monthly_calls is not 0 but endpoints is "none": a plan without API access makes no calls to count; give 0, or endpoints "basic" or "all"`, where)
	}
	if p.MonthlyCalls == 0 && p.Endpoints != EndpointsNone {
		return Plan{}, fmt.Errorf(`%s: monthly_calls is 0 but endpoints is %q: give a number above 0, "unlimited", or endpoints "none"`, where, p.Endpoints)
	}
	return p, nil
}

// checkKeys reports a field name that is given twice in one object of
// data, or not spelt in a-z, 0-9 and _ as every field of a plan file is
// (encoding/json would match "Per_Second", or "per_ſecond" with a long s,
// to per_second).
func checkKeys(data []byte) error {
	type object struct {
		keys    map[string]bool
		wantKey bool // whether the next string is a field name
	}
	var stack []*object // the objects and arrays (nil) data is in
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		var in *object
		if len(stack) > 0 {
			in = stack[len(stack)-1]
		}
		if k, ok := tok.(string); ok && in != nil && in.wantKey {
			line := func() int { return 1 + bytes.Count(data[:dec.InputOffset()], []byte("\n")) }
			if strings.ContainsFunc(k, func(r rune) bool { return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') }) {
				return fmt.Errorf("line %d: field %q: field names are spelt in a-z, 0-9 and _", line(), k)
			}
			if in.keys[k] {
				return fmt.Errorf("line %d: field %q is given twice in one object", line(), k)
			}
			in.keys[k] = true
			in.wantKey = false
			continue
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
			continue
		}
		if in != nil {
			in.wantKey = true // a value: a name comes next (or the end)
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &object{keys: make(map[string]bool), wantKey: true})
		case json.Delim('['):
			stack = append(stack, nil)
		}
	}
}
