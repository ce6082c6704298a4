package coinpulse

import (
	"os"
	"strings"
	"testing"
)

// The shipped default is the SPEC §3 table.
func TestDefaultPlans(t *testing.T) {
	want := map[Tier]Plan{
		TierFree:       {Tier: TierFree, MonthlyCalls: 1000, PerMinute: 60, PerSecond: 5, Endpoints: EndpointsBasic},
		TierPremium:    {Tier: TierPremium, MonthlyCalls: 10000, PerMinute: 60, PerSecond: 5, Endpoints: EndpointsAll, Webhooks: true, MaxPortfolios: 10, MaxActiveAlerts: 100},
		TierPro:        {Tier: TierPro, MonthlyCalls: Unlimited, PerMinute: 60, PerSecond: 5, Endpoints: EndpointsAll, Webhooks: true, MaxPortfolios: 50, MaxActiveAlerts: 1000},
		TierEnterprise: {Tier: TierEnterprise, MonthlyCalls: Unlimited, PerMinute: 600, PerSecond: 50, Endpoints: EndpointsAll, Webhooks: true, MaxPortfolios: Unlimited, MaxActiveAlerts: Unlimited},
		TierBusiness:   {Tier: TierBusiness, MonthlyCalls: Unlimited, PerMinute: 600, PerSecond: 50, Endpoints: EndpointsAll, Webhooks: true, MaxPortfolios: Unlimited, MaxActiveAlerts: Unlimited},
	}
	got := DefaultPlans()
	for tier, w := range want {
		if got[tier] != w {
			t.Errorf("%s: %+v, want %+v", tier, got[tier], w)
		}
	}
}

// The second variant: only Pro has API access, at 10,000 calls a month.
func TestProOnlyPlans(t *testing.T) {
	plans, err := LoadPlansFile("plans/pro-only.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, tier := range Tiers {
		p := plans[tier]
		if (tier == TierPro) != (p.Endpoints == EndpointsAll) || (tier != TierPro && p.Endpoints != EndpointsNone) {
			t.Errorf("%s: endpoints %s", tier, p.Endpoints)
		}
	}
	if p := plans[TierPro]; p.MonthlyCalls != 10000 || p.PerMinute != 60 {
		t.Errorf("pro: %+v, want 10,000 a month and 60 a minute", p)
	}
}

func TestLoadPlansRejects(t *testing.T) {
	row := func(tier, extra string) string {
		return `{"tier":"` + tier + `","monthly_calls":10,"per_minute":60,"per_second":5,"endpoints":"all","webhooks":true,"max_portfolios":1,"max_active_alerts":1` + extra + `}`
	}
	all := func(first string) string {
		rows := []string{first}
		for _, tier := range []string{"premium", "pro", "enterprise", "business"} {
			rows = append(rows, row(tier, ""))
		}
		return `{"plans":[` + strings.Join(rows, ",") + `]}`
	}
	if _, err := LoadPlans(strings.NewReader(all(row("free", "")))); err != nil {
		t.Fatalf("a valid file: %v", err)
	}
	fastest := strings.Replace(all(strings.Replace(strings.Replace(row("free", ""), `"per_minute":60`, `"per_minute":1000000000`, 1), `"per_second":5`, `"per_second":1000000000`, 1)),
		`{"plans":`, `{"_comment":"x","plans":`, 1) + "\n"
	if plans, err := LoadPlans(strings.NewReader(fastest)); err != nil || plans[TierFree].PerSecond != MaxRate {
		t.Fatalf("per_second of MaxRate, a trailing newline: %v", err)
	}
	for name, file := range map[string]string{
		"unknown field":     all(row("free", `,"per_hour":3`)),
		"unknown tier":      all(row("gold", "")),
		"missing tier":      `{"plans":[` + row("free", "") + `]}`,
		"twice":             all(row("premium", "")),
		"negative":          all(strings.Replace(row("free", ""), `"monthly_calls":10`, `"monthly_calls":-5`, 1)),
		"missing figure":    all(strings.Replace(row("free", ""), `"per_second":5,`, ``, 1)),
		"zero per second":   all(strings.Replace(row("free", ""), `"per_second":5`, `"per_second":0`, 1)),
		"bad endpoints":     all(strings.Replace(row("free", ""), `"all"`, `"some"`, 1)),
		"zero monthly":      all(strings.Replace(row("free", ""), `"monthly_calls":10`, `"monthly_calls":0`, 1)),
		"unlimited per min": all(strings.Replace(row("free", ""), `"per_minute":60`, `"per_minute":"unlimited"`, 1)),
		"not json":          `plans: []`,
		"trailing data":     all(row("free", "")) + ` garbage`,
		"a second object":   all(row("free", "")) + `{"plans":[]}`,
		"field twice":       all(row("free", `,"monthly_calls":5`)),
		"plans twice":       strings.Replace(all(row("free", "")), `{"plans":`, `{"plans":[],"plans":`, 1),
		"field name case":   all(strings.Replace(row("free", ""), `"per_second"`, `"Per_Second"`, 1)),
		"folded field name": all(row("free", `,"per_ſecond":1000`)),
		"missing webhooks":  all(strings.Replace(row("free", ""), `"webhooks":true,`, ``, 1)),
		"per second huge":   all(strings.Replace(row("free", ""), `"per_second":5`, `"per_second":1000000001`, 1)),
		"per minute huge":   all(strings.Replace(row("free", ""), `"per_minute":60`, `"per_minute":99999999999999999`, 1)),
		"monthly huge":      all(strings.Replace(row("free", ""), `"monthly_calls":10`, `"monthly_calls":9000000000000000000`, 1)),
		"webhooks null":     all(strings.Replace(row("free", ""), `"webhooks":true`, `"webhooks":null`, 1)),
	} {
		if _, err := LoadPlans(strings.NewReader(file)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// Each error says where it is and what is wanted, in the file's words.
	for file, want := range map[string]string{
		all(strings.Replace(row("free", ""), `"per_second":5`, `"per_second":5.5`, 1)):                                                                                                                                 `plan file: plans[0] ("free"): per_second must be a whole number from 1 to 1000000000, got 5.5`,
		all(strings.Replace(row("free", ""), `"per_minute":60`, `"per_minute":"60"`, 1)):                                                                                                                               `plan file: plans[0] ("free"): per_minute must be a whole number from 1 to 1000000000, got "60"`,
		all(strings.Replace(row("free", ""), `"max_portfolios":1`, `"max_portfolios":1.5`, 1)):                                                                                                                         `plan file: plans[0] ("free"): max_portfolios: want a whole number >= 0 or "unlimited", got 1.5`,
		all(strings.Replace(row("free", ""), `"monthly_calls":10`, `"monthly_calls":1000000000000000`, 1)):                                                                                                             `plan file: plans[0] ("free"): monthly_calls must be at most 999999999999999 (15 digits, what the RateLimit headers carry) or "unlimited", got 1000000000000000`,
		all(strings.Replace(row("free", ""), `"webhooks":true`, `"webhooks":null`, 1)):                                                                                                                                 `plan file: plans[0] ("free"): webhooks must be true or false, got null`,
		all(strings.Replace(row("free", ""), `"endpoints":"all"`, `"endpoints":"basic"`, 1)):                                                                                                                           `plan file: plans[0] ("free"): webhooks is true but endpoints is "basic": webhooks and streams need endpoints "all"`,
		all(strings.Replace(strings.Replace(row("free", ""), `"endpoints":"all"`, `"endpoints":"basic"`, 1), `"webhooks":true`, `"webhooks":false`, 1)):                                                                `plan file: plans[0] ("free"): max_portfolios is not 0 but endpoints is "basic": portfolios need endpoints "all"`,
		all(strings.Replace(strings.Replace(strings.Replace(row("free", ""), `"endpoints":"all"`, `"endpoints":"none"`, 1), `"webhooks":true`, `"webhooks":false`, 1), `"max_portfolios":1`, `"max_portfolios":0`, 1)): `plan file: plans[0] ("free"): max_active_alerts is not 0 but endpoints is "none": alerts need endpoints "all"`,
		"{\"plans\": [\n" + row("free", `,"monthly_calls":5`) + "]}":                                                                                                                                                   `plan file: line 2: field "monthly_calls" is given twice in one object`,
		"{\"plans\": [\n" + strings.Replace(row("free", ""), `"per_second"`, `"Per_Second"`, 1) + "]}":                                                                                                                 `plan file: line 2: field "Per_Second": field names are spelt in a-z, 0-9 and _`,
		all(strings.Replace(row("free", ""), `"per_minute":60`, `"per_minute":0`, 1)):                                                                                                                                  `plan file: plans[0] ("free"): per_minute must be a whole number from 1 to 1000000000, got 0`,
		all(strings.Replace(row("free", ""), `"webhooks":true`, `"webhooks":"yes"`, 1)):                                                                                                                                `plan file: plans[0] ("free"): webhooks must be true or false, got "yes"`,
		all(strings.Replace(row("free", ""), `"per_second":5`, `"per_second":61`, 1)):                                                                                                                                  `plan file: plans[0] ("free"): per_second (61) is above per_minute (60): the minute would always bind first; swapped?`,
		all(strings.Replace(row("free", ""), `"all"`, `["all"]`, 1)):                                                                                                                                                   `plan file: plans[0] ("free"): endpoints must be none, basic or all, got ["all"]`,
		all(strings.Replace(strings.Replace(strings.Replace(strings.Replace(row("free", ""), `"endpoints":"all"`, `"endpoints":"none"`, 1), `"webhooks":true`, `"webhooks":false`, 1), `"max_portfolios":1`, `"max_portfolios":0`, 1), `"max_active_alerts":1`, `"max_active_alerts":0`, 1)): `plan file: plans[0] ("free"): monthly_calls is not 0 but endpoints is "none": a plan without API access makes no calls to count; give 0, or endpoints "basic" or "all"`,
		all(row("free", `,"per_hour":3`)): `plan file: plans[0] ("free"): unknown field "per_hour" (a plan has tier, monthly_calls, per_minute, per_second, endpoints, webhooks, max_portfolios, max_active_alerts)`,
		all(`{"tier":5}`):                 `plan file: plans[0]: tier must be one of free, premium, pro, enterprise, business, got 5`,
		all(`[]`):                         `plan file: plans[0]: a plan must be an object, as in plans/default.json`,
		`{"plans":{}}`:                    `plan file: "plans" must be an array of plans, one an object for each tier`,
		`[]`:                              `plan file: want an object with a "plans" array, as plans/default.json`,
		`{"_comment":1,"plans":[]}`:       `plan file: _comment must be a string`,
		`{"plan":[]}`:                     `plan file: unknown field "plan" (a plan file has "plans" and "_comment")`,
		`{"_comment":"no plans yet"}`:     `plan file: "plans" is missing`,
	} {
		if _, err := LoadPlans(strings.NewReader(file)); err == nil || err.Error() != want {
			t.Errorf("%s:\n got %v\nwant %s", file, err, want)
		}
	}
	// "unlimited" spelt with JSON escapes is "unlimited".
	plans, err := LoadPlans(strings.NewReader(all(strings.Replace(row("free", ""), `"monthly_calls":10`, `"monthly_calls":"\u0075nlimited"`, 1))))
	if err != nil || plans[TierFree].MonthlyCalls != Unlimited {
		t.Errorf(`monthly_calls "\u0075nlimited": %v, %v; want unlimited`, plans[TierFree].MonthlyCalls, err)
	}
	// A byte order mark, which some editors write first, is skipped.
	if _, err := LoadPlans(strings.NewReader("\ufeff" + all(row("free", "")))); err != nil {
		t.Errorf("a file starting with a byte order mark: %v", err)
	}
	// A file in another format is told it must be JSON, where it stops.
	_, err = LoadPlans(strings.NewReader("# plans\n[[plans]]\ntier = \"free\"\n"))
	if want := "plan file: not JSON (line 1: invalid character '#' looking for beginning of value); a plan file is JSON, as plans/default.json (TOML and YAML are not read)"; err == nil || err.Error() != want {
		t.Errorf("a TOML file: %v\nwant %s", err, want)
	}
	_, err = LoadPlans(strings.NewReader("{\"plans\": [\n  {\"tier\": \"free\",}\n]}"))
	if err == nil || !strings.Contains(err.Error(), "not JSON (line 2: ") {
		t.Errorf("a trailing comma on line 2: %v", err)
	}
}

// FuzzLoadPlans: whatever the file, LoadPlans errs or returns a plan for
// every tier, each with rates from 1 to MaxRate (per second at most per
// minute) and allowances that are Unlimited or above 0 (0 monthly calls
// only without API access).
func FuzzLoadPlans(f *testing.F) {
	for _, path := range []string{"plans/default.json", "plans/pro-only.json"} {
		b, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"plans":[]}`))
	f.Add([]byte("tier = \"free\"\n"))
	f.Add([]byte(`{"plans":[{"tier":"free","monthly_calls":"unlimited","per_minute":1,"per_second":1}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		plans, err := LoadPlans(strings.NewReader(string(data)))
		if err != nil {
			if plans != nil {
				t.Fatalf("plans %v with error %v", plans, err)
			}
			return
		}
		if len(plans) != len(Tiers) {
			t.Fatalf("%d plans, want one a tier", len(plans))
		}
		for _, tier := range Tiers {
			p, ok := plans[tier]
			if !ok || p.Tier != tier {
				t.Fatalf("tier %s: %+v", tier, p)
			}
			if p.PerSecond < 1 || p.PerSecond > MaxRate || p.PerMinute < 1 || p.PerMinute > MaxRate || p.PerSecond > p.PerMinute {
				t.Fatalf("%s: rates %d/s %d/min", tier, p.PerSecond, p.PerMinute)
			}
			if p.MonthlyCalls != Unlimited && (p.MonthlyCalls < 0 || p.MonthlyCalls > MaxMonthlyCalls) || p.MonthlyCalls == 0 && p.Endpoints != EndpointsNone {
				t.Fatalf("%s: monthly calls %d with endpoints %s", tier, p.MonthlyCalls, p.Endpoints)
			}
			if p.MaxPortfolios != Unlimited && p.MaxPortfolios < 0 || p.MaxActiveAlerts != Unlimited && p.MaxActiveAlerts < 0 {
				t.Fatalf("%s: %d portfolios, %d alerts", tier, p.MaxPortfolios, p.MaxActiveAlerts)
			}
			if p.Endpoints != EndpointsAll && (p.Webhooks || p.MaxPortfolios != 0 || p.MaxActiveAlerts != 0) {
				t.Fatalf("%s: endpoints %s with webhooks %v, %d portfolios, %d alerts", tier, p.Endpoints, p.Webhooks, p.MaxPortfolios, p.MaxActiveAlerts)
			}
		}
	})
}

func TestCount(t *testing.T) {
	for n, want := range map[int]string{0: "0 portfolios", 1: "1 portfolio", 2: "2 portfolios", 1000: "1000 portfolios"} {
		if got := Count(n, "portfolio", "portfolios"); got != want {
			t.Errorf("Count(%d) = %q, want %q", n, got, want)
		}
	}
}
