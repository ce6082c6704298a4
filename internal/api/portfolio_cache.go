package api

import (
	"sync"

	"coinpulse"
)

// portfolioCache keeps portfolios as read from the store, each valid for
// one version of the portfolio, with its encoding priced at one market
// snapshot. A read asks the store for the version (one indexed look-up):
// while the portfolio has not moved it is not read again, and while the
// prices have not moved either the bytes are reused. The version check
// makes it right on every node without invalidation messages.
type portfolioCache struct {
	mu      sync.Mutex
	entries map[int64]cachedPortfolio
	size    int // bytes of the bodies held
	max     int
}

type cachedPortfolio struct {
	portfolio *coinpulse.Portfolio // read-only once kept
	snapshot  string
	body      []byte
}

// cost approximates an entry's memory: the body and the decoded holdings.
func (e cachedPortfolio) cost() int { return 2 * len(e.body) }

func newPortfolioCache(maxBytes int) *portfolioCache {
	return &portfolioCache{entries: map[int64]cachedPortfolio{}, max: maxBytes}
}

// get returns the portfolio kept for id at version (nil if none) and, if
// it was priced at snapshot, its body.
func (c *portfolioCache) get(id, version int64, snapshot string) (*coinpulse.Portfolio, []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[id]
	if !ok || e.portfolio.Version != version {
		return nil, nil
	}
	if e.snapshot != snapshot {
		return e.portfolio, nil
	}
	return e.portfolio, e.body
}

// put keeps p with its body priced at snapshot, replacing what was kept
// for p.ID. Past the size bound it forgets arbitrary entries down to three
// quarters of it.
func (c *portfolioCache) put(p *coinpulse.Portfolio, snapshot string, body []byte) {
	e := cachedPortfolio{p, snapshot, body}
	if e.cost() > c.max/4 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.entries[p.ID]; ok {
		c.size -= old.cost()
	}
	c.entries[p.ID] = e
	c.size += e.cost()
	if c.size > c.max {
		for k, e := range c.entries {
			if c.size <= c.max*3/4 {
				break
			}
			delete(c.entries, k)
			c.size -= e.cost()
		}
	}
}
