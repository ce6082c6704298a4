package dashboard

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"coinpulse"
)

// dashView is the dashboard page's content.
type dashView struct {
	Tier    string
	Expires string
	Expired bool
	Plan    planView
	// Limited, when the plan does not reach every endpoint, says what it
	// reaches, in the upgrade prompt that links to UpgradeURL.
	Limited    string
	UpgradeURL string
	// Billing is true when UpgradeURL is the operator's billing page, not
	// the documentation.
	Billing bool

	Keys    []keyView
	Active  int
	Max     int
	AtLimit bool
	Form    keyForm

	MonthCalls string
	Allowance  string
	Left       string
	Recent     []callView
	KeyStats   []keyStatView
	Chart      dailyChart
	Latency    latencyView
	// Days are the charts' figures as text, newest first.
	Days []dayView
}

// dayView is one UTC day's counted calls and response times.
type dayView struct {
	Day, Calls, P50, P95 string
}

// planView is a plan's figures, worded.
type planView struct {
	MonthlyCalls, PerMinute, PerSecond, Endpoints, Webhooks, Portfolios, Alerts string
}

// keyView is one key in a listing.
type keyView struct {
	ID          int64
	Name        string
	Display     string
	Mode        string
	Permissions string
	Created     string
	LastUsed    string
	Expires     string
	State       string // active, expired or revoked
}

// callView is one recent call.
type callView struct {
	Time, Key, Method, Path, Duration, RequestID string
	Status                                       int
	Error                                        bool
}

// keyStatView is one key's usage figures: calls today, this month and
// all time, and the error rate and response times of this month's calls.
type keyStatView struct {
	ID                            int64
	Name, Display, State          string
	Today, Month, Total           string
	ErrorRate, P50, P95, LastCall string
}

// latencyView are the response-time figures and their chart.
type latencyView struct {
	P50, P95, P99 string
	Chart         latencyChart
}

func formatInt(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func figure(n int64, zero string) string {
	switch n {
	case coinpulse.Unlimited:
		return "unlimited"
	case 0:
		return zero
	}
	return formatInt(n)
}

func formatDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "–"
	case d < time.Millisecond:
		return fmt.Sprintf("%d µs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

func planOf(p coinpulse.Plan) planView {
	v := planView{
		MonthlyCalls: figure(p.MonthlyCalls, "none"),
		PerMinute:    formatInt(int64(p.PerMinute)),
		PerSecond:    formatInt(int64(p.PerSecond)),
		Webhooks:     "no",
		Portfolios:   figure(int64(p.MaxPortfolios), "none"),
		Alerts:       figure(int64(p.MaxActiveAlerts), "none"),
	}
	switch p.Endpoints {
	case coinpulse.EndpointsNone:
		v.Endpoints, v.MonthlyCalls = "no API access (only /usage)", "none"
	case coinpulse.EndpointsBasic:
		v.Endpoints = "basic: markets, search, global, coin details, usage"
	default:
		v.Endpoints = "all endpoints"
	}
	if p.Webhooks {
		v.Webhooks = "yes"
	}
	return v
}

// limitedPlan is the upgrade prompt's opening for a plan that does not
// reach every endpoint, from the plans in force (the free plan of the
// default file; every plan but pro's of pro-only.json): "" for one that
// does.
func limitedPlan(tier coinpulse.Tier, p coinpulse.Plan) string {
	switch p.Endpoints {
	case coinpulse.EndpointsBasic:
		return "You are on the " + string(tier) + " plan: basic endpoints, " + figure(p.MonthlyCalls, "no") + " calls a month."
	case coinpulse.EndpointsNone:
		return "You are on the " + string(tier) + " plan: no API access (only /usage)."
	}
	return ""
}

func (d *Dashboard) keyView(k *coinpulse.APIKey, now time.Time) keyView {
	v := keyView{
		ID: k.ID, Name: k.Name, Display: k.Display(), Mode: string(k.Mode), Permissions: k.Permissions.String(),
		Created: k.CreatedAt.UTC().Format("2006-01-02 15:04 UTC"), LastUsed: "never", Expires: "never", State: "active",
	}
	if k.LastUsedAt != nil {
		v.LastUsed = k.LastUsedAt.UTC().Format("2006-01-02 15:04 UTC")
	}
	if k.ExpiresAt != nil {
		v.Expires = k.ExpiresAt.UTC().Format("2006-01-02 15:04 UTC")
	}
	switch {
	case k.RevokedAt != nil:
		v.State = "revoked"
	case !k.Active(now):
		v.State = "expired"
	}
	return v
}

// remaining is what is left of the plan's monthly allowance: nil when
// unlimited.
func remaining(p coinpulse.Plan, used int64) *int64 {
	limit := p.MonthlyCalls
	if p.Endpoints == coinpulse.EndpointsNone {
		limit = 0
	}
	if limit == coinpulse.Unlimited {
		return nil
	}
	left := max(0, limit-used)
	return &left
}

// accountData is everything the dashboard shows, read once.
type accountData struct {
	now   time.Time
	plan  coinpulse.Plan
	keys  []*coinpulse.APIKey
	usage *coinpulse.Usage
	stats []keyStat
	left  *int64 // what is left of the month; nil when unlimited
}

func (d *Dashboard) load(ctx context.Context, u *coinpulse.User) (*accountData, error) {
	a := &accountData{now: d.now(), plan: d.plan(u.Tier)}
	var err error
	if a.keys, err = d.store.KeysByUser(ctx, u.ID); err != nil {
		return nil, err
	}
	// The month and the day of the figures are the limiter's, when there
	// is one, as the meter's and GET /usage's are: on a node whose clock
	// is off from Redis's, they describe the month the limiter counts in.
	standing := d.standing(ctx, u, a.plan)
	at := a.now
	if standing != nil && !standing.Now.IsZero() {
		at = standing.Now.UTC()
	}
	if a.usage, err = d.store.Usage(ctx, u.ID, at); err != nil {
		return nil, err
	}
	a.stats = keyStats(a.keys, a.usage)
	a.left = monthLeft(a.plan, a.usage.MonthCalls, standing)
	if u.SubscriptionExpired(a.now) {
		var none int64 // every call is refused until it is renewed
		a.left = &none
	}
	return a, nil
}

// standing is where the account's live calls stand in the limiter: nil
// without one, or when it cannot be read (logged).
func (d *Dashboard) standing(ctx context.Context, u *coinpulse.User, p coinpulse.Plan) *coinpulse.Verdict {
	if d.limiter == nil {
		return nil
	}
	v, err := d.limiter.Peek(ctx, coinpulse.LiveAccount(u.ID), p.Limits())
	if err != nil {
		d.log.Warn("dashboard: rate limiter unreachable; month left from metering", "err", err)
		return nil
	}
	return &v
}

// monthLeft is what is left of the plan's monthly allowance (nil when
// unlimited): the limiter's count, which admits or refuses the calls,
// when standing has it; else the plan less the metered calls, which lag
// it by the calls not yet written (and after a crash, by those lost).
func monthLeft(p coinpulse.Plan, used int64, standing *coinpulse.Verdict) *int64 {
	left := remaining(p, used)
	if left == nil || standing == nil || p.Endpoints == coinpulse.EndpointsNone {
		return left
	}
	for _, w := range standing.Windows {
		if w.Window == coinpulse.WindowMonth && w.Limit > 0 {
			n := w.Remaining
			return &n
		}
	}
	return left
}

func (d *Dashboard) dashboard(ctx context.Context, u *coinpulse.User, form keyForm) (*dashView, error) {
	a, err := d.load(ctx, u)
	if err != nil {
		return nil, err
	}
	v := &dashView{
		Tier: string(u.Tier), Expires: "never", Expired: u.SubscriptionExpired(a.now), Plan: planOf(a.plan),
		Limited: limitedPlan(u.Tier, a.plan), Max: coinpulse.MaxActiveKeys, Form: form,
		MonthCalls: formatInt(a.usage.MonthCalls), Allowance: figure(a.plan.MonthlyCalls, "none"),
	}
	if u.TierExpiresAt != nil {
		v.Expires = u.TierExpiresAt.UTC().Format("2006-01-02 15:04 UTC")
	}
	if a.plan.Endpoints == coinpulse.EndpointsNone {
		v.Allowance = "none"
	}
	v.UpgradeURL, v.Billing = "/docs", false
	if d.billingURL != "" {
		v.UpgradeURL, v.Billing = d.billingURL, true
	}
	if left := a.left; left != nil {
		v.Left = formatInt(*left)
	} else {
		v.Left = "unlimited"
	}
	names := map[int64]string{}
	for _, k := range a.keys {
		names[k.ID] = k.Name + " (" + k.Display() + ")"
		if k.RevokedAt != nil {
			continue
		}
		kv := d.keyView(k, a.now)
		// Last-used times reach the store every few seconds; metering may
		// already know a later call.
		for _, u := range a.usage.Keys {
			if u.KeyID == k.ID && !u.LastCall.IsZero() && (k.LastUsedAt == nil || u.LastCall.After(*k.LastUsedAt)) {
				kv.LastUsed = u.LastCall.UTC().Format("2006-01-02 15:04 UTC")
			}
		}
		if kv.State == "active" {
			v.Active++
		}
		v.Keys = append(v.Keys, kv)
	}
	v.AtLimit = v.Active >= coinpulse.MaxActiveKeys
	for _, c := range a.usage.Recent {
		name, ok := names[c.KeyID]
		if !ok {
			name = fmt.Sprintf("key #%d", c.KeyID)
		}
		v.Recent = append(v.Recent, callView{
			Time: c.Time.UTC().Format("2006-01-02 15:04:05"), Key: name, Method: c.Method, Path: c.Route,
			Status: c.Status, Error: c.Status >= 400, Duration: formatDuration(c.Duration), RequestID: c.RequestID,
		})
	}
	for _, s := range a.stats {
		v.KeyStats = append(v.KeyStats, keyStatView{
			ID: s.id, Name: s.name, Display: s.display, State: s.state,
			Today: formatInt(s.usage.CallsToday), Month: formatInt(s.usage.CallsMonth), Total: formatInt(s.usage.Calls),
			ErrorRate: s.errorRate(), P50: formatDuration(s.usage.P50), P95: formatDuration(s.usage.P95), LastCall: s.lastCall,
		})
	}
	v.Chart = newDailyChart(a.usage.Daily)
	for _, d := range slices.Backward(a.usage.Daily) {
		v.Days = append(v.Days, dayView{Day: d.Day.Format("2006-01-02"), Calls: formatInt(d.Calls), P50: formatDuration(d.P50), P95: formatDuration(d.P95)})
	}
	v.Latency = latencyView{P50: formatDuration(a.usage.P50), P95: formatDuration(a.usage.P95), P99: formatDuration(a.usage.P99),
		Chart: newLatencyChart(a.usage.Daily)}
	return v, nil
}

// keyStat is one key's figures, as the store keeps them (see
// coinpulse.KeyUsage): its all-time total and last call, its calls of
// today and this month (UTC), and the error rate and percentiles of this
// month's calls.
type keyStat struct {
	id                   int64
	name, display, state string
	mode                 coinpulse.Mode
	usage                coinpulse.KeyUsage // zero but for KeyID when it has no calls
	lastCall             string
	lastCallTime         *time.Time
}

// errorRate is the share of this month's calls answered 400 or above, as
// a percentage ("–" without calls this month).
func (s keyStat) errorRate() string {
	switch u := s.usage; {
	case u.CallsMonth == 0:
		return "–"
	case u.ErrorsMonth > 0 && u.ErrorRate() < 0.001:
		return "< 0.1 %"
	default:
		return fmt.Sprintf("%.1f %%", 100*u.ErrorRate())
	}
}

// keyStats lists per-key figures from what metering keeps: every key the
// account holds or held that has calls, and every unrevoked key.
func keyStats(keys []*coinpulse.APIKey, u *coinpulse.Usage) []keyStat {
	usage := make(map[int64]coinpulse.KeyUsage, len(u.Keys))
	for _, k := range u.Keys {
		usage[k.KeyID] = k
	}
	var out []keyStat
	for _, k := range keys {
		ku, used := usage[k.ID]
		if k.RevokedAt != nil && !used {
			continue
		}
		ku.KeyID = k.ID
		s := keyStat{id: k.ID, name: k.Name, display: k.Display(), mode: k.Mode, state: "active", usage: ku, lastCall: "never"}
		if k.RevokedAt != nil {
			s.state = "revoked"
		}
		if used {
			lc := ku.LastCall
			s.lastCallTime = &lc
			s.lastCall = lc.UTC().Format("2006-01-02 15:04 UTC")
		}
		out = append(out, s)
	}
	return out
}

// dailyChart is the SVG of calls per day.
type dailyChart struct {
	Width, Height int
	Bars          []bar
	Max           string
	First, Last   string
}

type bar struct {
	X, Y, W, H int
	Title      string
}

const (
	chartWidth  = 600
	chartHeight = 190 // the axis at 160, the dates' labels below it
	chartTop    = 20
	chartBottom = 160
)

func newDailyChart(days []coinpulse.DayUsage) dailyChart {
	c := dailyChart{Width: chartWidth, Height: chartHeight}
	var peak int64
	for _, d := range days {
		peak = max(peak, d.Calls)
	}
	c.Max = "peak " + formatInt(peak)
	if peak == 0 {
		c.Max = "no counted calls yet"
	}
	peak = max(peak, 1)
	step := chartWidth / max(len(days), 1)
	for i, d := range days {
		h := int(d.Calls * (chartBottom - chartTop) / peak)
		h = max(h, 1) // a baseline for empty days
		unit := "calls"
		if d.Calls == 1 {
			unit = "call"
		}
		c.Bars = append(c.Bars, bar{X: i*step + 2, Y: chartBottom - h, W: step - 4, H: h,
			Title: fmt.Sprintf("%s: %s %s", d.Day.Format("2006-01-02"), formatInt(d.Calls), unit)})
	}
	if len(days) > 0 {
		c.First, c.Last = days[0].Day.Format("2006-01-02"), days[len(days)-1].Day.Format("2006-01-02")
	}
	return c
}

// latencyChart is the SVG of each day's p50 and p95 response times.
type latencyChart struct {
	Width, Height int
	P50, P95      string // polyline points
	Points        []latencyPoint
	Max           string
	Empty         bool
}

type latencyPoint struct {
	X, Y50, Y95 int
	Title       string
}

func newLatencyChart(days []coinpulse.DayUsage) latencyChart {
	c := latencyChart{Width: chartWidth, Height: chartHeight, Empty: true}
	var peak time.Duration
	for _, d := range days {
		peak = max(peak, d.P95)
	}
	if peak == 0 {
		return c
	}
	c.Empty = false
	c.Max = formatDuration(peak)
	step := chartWidth / max(len(days), 1)
	var p50, p95 []string
	for i, d := range days {
		if d.P95 == 0 {
			continue
		}
		x := i*step + step/2
		y := func(v time.Duration) int { return chartBottom - int(int64(v)*(chartBottom-chartTop)/int64(peak)) }
		p50 = append(p50, fmt.Sprintf("%d,%d", x, y(d.P50)))
		p95 = append(p95, fmt.Sprintf("%d,%d", x, y(d.P95)))
		c.Points = append(c.Points, latencyPoint{X: x, Y50: y(d.P50), Y95: y(d.P95),
			Title: fmt.Sprintf("%s: p50 %s, p95 %s", d.Day.Format("2006-01-02"), formatDuration(d.P50), formatDuration(d.P95))})
	}
	c.P50, c.P95 = strings.Join(p50, " "), strings.Join(p95, " ")
	return c
}
