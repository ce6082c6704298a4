package coinpulse

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// figure is a plan number in a plan file: a count, or "unlimited".
type figure int64

func (f *figure) UnmarshalJSON(b []byte) error {
	if string(b) == `"unlimited"` {
		*f = Unlimited
		return nil
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || n < 0 {
		return fmt.Errorf(`want a whole number >= 0 or "unlimited", got %s`, b)
	}
	*f = figure(n)
	return nil
}

type planFile struct {
	Comment string `json:"_comment"`
	Plans   []struct {
		Tier            Tier      `json:"tier"`
		MonthlyCalls    *figure   `json:"monthly_calls"`
		PerMinute       *figure   `json:"per_minute"`
		PerSecond       *figure   `json:"per_second"`
		Endpoints       Endpoints `json:"endpoints"`
		Webhooks        *bool     `json:"webhooks"`
		MaxPortfolios   *figure   `json:"max_portfolios"`
		MaxActiveAlerts *figure   `json:"max_active_alerts"`
	} `json:"plans"`
}

// MaxRate is the most calls a plan's per_second or per_minute may allow:
// a billion, far above what a server answers, and low enough that the
// limiters' arithmetic (in nanoseconds, or microseconds in Redis) cannot
// overflow.
const MaxRate = 1_000_000_000

// LoadPlans reads a plan file (JSON, the format of plans/default.json):
// every tier exactly once, every figure given. It is strict, so that a
// mistake is not silently ignored: unknown fields, field names not spelt
// exactly (encoding/json would match them whatever their case), a field
// given twice in an object (encoding/json would keep the last) and
// anything after the file's object are errors.
func LoadPlans(r io.Reader) (map[Tier]Plan, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("plan file: %w", err)
	}
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
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f planFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("plan file: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("plan file: something follows the file's object")
	}
	plans := make(map[Tier]Plan, len(Tiers))
	for i, p := range f.Plans {
		where := fmt.Sprintf("plan file: plans[%d] (%q)", i, p.Tier)
		if _, err := ParseTier(string(p.Tier)); err != nil {
			return nil, fmt.Errorf("%s: tier must be one of free, premium, pro, enterprise, business", where)
		}
		if _, dup := plans[p.Tier]; dup {
			return nil, fmt.Errorf("%s: tier given twice", where)
		}
		for name, v := range map[string]*figure{"monthly_calls": p.MonthlyCalls, "per_minute": p.PerMinute, "per_second": p.PerSecond,
			"max_portfolios": p.MaxPortfolios, "max_active_alerts": p.MaxActiveAlerts} {
			if v == nil {
				return nil, fmt.Errorf("%s: %s is missing", where, name)
			}
		}
		if p.Webhooks == nil {
			return nil, fmt.Errorf("%s: webhooks is missing", where)
		}
		for _, v := range []figure{*p.PerMinute, *p.PerSecond} {
			if v == Unlimited || v == 0 || v > MaxRate {
				return nil, fmt.Errorf("%s: per_minute and per_second must be whole numbers from 1 to %d", where, MaxRate)
			}
		}
		switch p.Endpoints {
		case EndpointsNone, EndpointsBasic, EndpointsAll:
		default:
			return nil, fmt.Errorf("%s: endpoints must be none, basic or all", where)
		}
		if *p.MonthlyCalls == 0 && p.Endpoints != EndpointsNone {
			return nil, fmt.Errorf(`%s: monthly_calls is 0 but endpoints is %q: give a number above 0, "unlimited", or endpoints "none"`, where, p.Endpoints)
		}
		plans[p.Tier] = Plan{
			Tier: p.Tier, MonthlyCalls: int64(*p.MonthlyCalls), PerMinute: int(*p.PerMinute), PerSecond: int(*p.PerSecond),
			Endpoints: p.Endpoints, Webhooks: *p.Webhooks, MaxPortfolios: int(*p.MaxPortfolios), MaxActiveAlerts: int(*p.MaxActiveAlerts),
		}
	}
	for _, t := range Tiers {
		if _, ok := plans[t]; !ok {
			return nil, fmt.Errorf("plan file: no plan for tier %q", t)
		}
	}
	return plans, nil
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
			if strings.ContainsFunc(k, func(r rune) bool { return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') }) {
				return fmt.Errorf("field %q: field names are spelt in a-z, 0-9 and _", k)
			}
			if in.keys[k] {
				return fmt.Errorf("field %q is given twice in one object", k)
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
