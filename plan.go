package coinpulse

// Unlimited marks a plan figure with no cap.
const Unlimited = -1

// Plan is what a tier allows. The operator's plan file (a later issue)
// replaces DefaultPlans.
type Plan struct {
	Tier         Tier
	MonthlyCalls int64 // Unlimited or a count
	PerMinute    int
	PerSecond    int
	// AllEndpoints is false for a plan limited to the basic endpoints.
	AllEndpoints    bool
	Webhooks        bool // webhooks and WebSocket
	MaxPortfolios   int  // 0: no access; Unlimited
	MaxActiveAlerts int  // 0: no access; Unlimited
}

// DefaultPlans is the SPEC's shipped plan table.
func DefaultPlans() map[Tier]Plan {
	return map[Tier]Plan{
		TierFree:       {Tier: TierFree, MonthlyCalls: 1000, PerMinute: 60, PerSecond: 5},
		TierPremium:    {Tier: TierPremium, MonthlyCalls: 10000, PerMinute: 60, PerSecond: 5, AllEndpoints: true, Webhooks: true, MaxPortfolios: 10, MaxActiveAlerts: 100},
		TierPro:        {Tier: TierPro, MonthlyCalls: Unlimited, PerMinute: 60, PerSecond: 5, AllEndpoints: true, Webhooks: true, MaxPortfolios: 50, MaxActiveAlerts: 1000},
		TierEnterprise: {Tier: TierEnterprise, MonthlyCalls: Unlimited, PerMinute: 600, PerSecond: 50, AllEndpoints: true, Webhooks: true, MaxPortfolios: Unlimited, MaxActiveAlerts: Unlimited},
		TierBusiness:   {Tier: TierBusiness, MonthlyCalls: Unlimited, PerMinute: 600, PerSecond: 50, AllEndpoints: true, Webhooks: true, MaxPortfolios: Unlimited, MaxActiveAlerts: Unlimited},
	}
}
