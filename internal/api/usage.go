package api

import (
	"net/http"
	"time"

	"coinpulse"
)

type usageWindow struct {
	Window    coinpulse.Window `json:"window"`
	Limit     *int64           `json:"limit"` // null: unlimited
	Remaining *int64           `json:"remaining"`
	ResetsAt  *time.Time       `json:"resets_at"`
}

type usageKey struct {
	ID       int64          `json:"id"`
	Name     string         `json:"name"`
	Key      string         `json:"key"` // prefix…last4
	Mode     coinpulse.Mode `json:"mode"`
	Calls    int64          `json:"calls"`
	LastCall *time.Time     `json:"last_call"`
}

type usageCall struct {
	Time       time.Time      `json:"time"`
	KeyID      int64          `json:"key_id"`
	Mode       coinpulse.Mode `json:"mode"`
	Method     string         `json:"method"`
	Route      string         `json:"route"`
	Status     int            `json:"status"`
	DurationMS float64        `json:"duration_ms"`
	RequestID  string         `json:"request_id"`
}

type usageDay struct {
	Date  string `json:"date"`
	Calls int64  `json:"calls"`
}

type usageView struct {
	Tier          coinpulse.Tier      `json:"tier"`
	TierExpiresAt *time.Time          `json:"tier_expires_at"`
	Endpoints     coinpulse.Endpoints `json:"endpoints"`
	Mode          coinpulse.Mode      `json:"mode"`
	// Windows describe the limits this key's calls are held to: the plan's
	// for a live key, the sandbox abuse limit for a sandbox key.
	Windows        []usageWindow       `json:"windows"`
	MonthCalls     int64               `json:"month_calls"`
	MonthlyLimit   *int64              `json:"monthly_limit"`
	MonthResetsAt  time.Time           `json:"month_resets_at"`
	Daily          []usageDay          `json:"daily"`
	ResponseTimeMS map[string]*float64 `json:"response_time_ms"`
	Keys           []usageKey          `json:"keys"`
	Recent         []usageCall         `json:"recent"`
}

func limitPtr(n int64) *int64 {
	if n <= 0 {
		return nil
	}
	return &n
}

// monthlyLimit is a plan's monthly allowance, nil when unlimited (a plan
// without API access has none: 0).
func monthlyLimit(p coinpulse.Plan) *int64 {
	if p.Endpoints == coinpulse.EndpointsNone {
		n := int64(0)
		return &n
	}
	return limitPtr(p.MonthlyCalls)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// msOrNull is a percentile in milliseconds, or null when there were no
// calls to take it of (a percentile is never 0: its histogram buckets
// start at 0.05 ms).
func msOrNull(d time.Duration) *float64 {
	if d <= 0 {
		return nil
	}
	v := ms(d)
	return &v
}

// GET /usage: free of charge on every plan.
func (s *Server) usage(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r.URL.RawQuery); err != nil {
		return err
	}
	e := exchangeOf(w)
	p := e.principal
	plan := s.planMap()[p.user.Tier]
	// The month and the day are the limiter's, as the meter's are (calls
	// are metered at the limiter's time): on a node whose clock is off
	// from Redis's, month_calls, daily and month_resets_at then describe
	// the month the windows below count in. Keys expire on this node's
	// clock, which authenticates them.
	nodeNow := s.clock().UTC()
	now := nodeNow
	var account string
	var v *coinpulse.Verdict
	if s.limiter != nil {
		// The windows of this key's other calls (not of /usage itself):
		// those its headers already describe, from the check of this call,
		// so that the body shows the same snapshot without a second trip
		// to the limiter.
		var limits coinpulse.Limits
		account, limits = s.limitsOf(p, Route{})
		v = e.standing
		if v == nil {
			// The check's look failed: one more try.
			pv, err := s.limiter.Peek(r.Context(), account, limits)
			if err != nil {
				w.Header().Set("Retry-After", "1")
				return &coinpulse.Error{Code: coinpulse.CodeUnavailable, Message: "Rate limits cannot be read right now; retry in a second.", Err: err}
			}
			s.setStandingHeaders(w.Header(), p, &pv)
			v = &pv
		}
		now = s.decidedAt(v).UTC()
	}
	u, err := s.store.Usage(r.Context(), p.user.ID, now)
	if err != nil {
		return err
	}
	keys, err := s.store.KeysByUser(r.Context(), p.user.ID)
	if err != nil {
		return err
	}
	out := usageView{
		Tier: p.user.Tier, TierExpiresAt: p.user.TierExpiresAt, Endpoints: plan.Endpoints, Mode: p.key.Mode,
		MonthCalls: u.MonthCalls, MonthlyLimit: monthlyLimit(plan), MonthResetsAt: coinpulse.MonthStart(now).AddDate(0, 1, 0),
		ResponseTimeMS: map[string]*float64{"p50": msOrNull(u.P50), "p95": msOrNull(u.P95), "p99": msOrNull(u.P99)},
		Windows:        []usageWindow{}, Daily: make([]usageDay, len(u.Daily)), Keys: []usageKey{}, Recent: make([]usageCall, len(u.Recent)),
	}
	if v != nil {
		for _, st := range v.Windows {
			uw := usageWindow{Window: st.Window, Limit: limitPtr(st.Limit)}
			if st.Window == coinpulse.WindowMonth && account == p.live && plan.Endpoints == coinpulse.EndpointsNone {
				// No API access: the month allows no call, which the
				// limiter, never asked to count one, sees as no limit.
				st.Limit, st.Remaining, st.Reset = 0, 0, out.MonthResetsAt
				uw.Limit = &st.Limit
			}
			if uw.Limit != nil {
				// To the microsecond, as every time the API gives, rounded
				// up: never before the window is whole.
				rem, reset := st.Remaining, st.Reset.UTC().Add(time.Microsecond-1).Truncate(time.Microsecond)
				uw.Remaining, uw.ResetsAt = &rem, &reset
			}
			out.Windows = append(out.Windows, uw)
		}
	}
	for i, d := range u.Daily {
		out.Daily[i] = usageDay{Date: d.Day.UTC().Format(time.DateOnly), Calls: d.Calls}
	}
	calls := make(map[int64]coinpulse.KeyUsage, len(u.Keys))
	for _, k := range u.Keys {
		calls[k.KeyID] = k
	}
	for _, k := range keys {
		ku, used := calls[k.ID]
		if !used && !k.Active(nodeNow) {
			continue
		}
		v := usageKey{ID: k.ID, Name: k.Name, Key: k.Display(), Mode: k.Mode, Calls: ku.Calls}
		if used {
			t := ku.LastCall.UTC()
			v.LastCall = &t
		}
		out.Keys = append(out.Keys, v)
	}
	for i, c := range u.Recent {
		out.Recent[i] = usageCall{Time: c.Time.UTC(), KeyID: c.KeyID, Mode: c.Mode, Method: c.Method, Route: c.Route,
			Status: c.Status, DurationMS: ms(c.Duration), RequestID: c.RequestID}
	}
	m := s.newMeta(w)
	return writeData(w, http.StatusOK, out, &m)
}
