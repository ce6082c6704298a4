package api

import (
	"bytes"
	"testing"

	"coinpulse"
)

func TestPortfolioCache(t *testing.T) {
	c := newPortfolioCache(800)
	body := bytes.Repeat([]byte("x"), 100) // costs 200
	p := &coinpulse.Portfolio{ID: 1, Version: 3}
	c.put(p, "s1", body)
	if got, b := c.get(1, 3, "s1"); got != p || b == nil {
		t.Fatal("a kept portfolio and body are not found")
	}
	if got, b := c.get(1, 3, "s2"); got != p || b != nil {
		t.Errorf("at another snapshot: %v, %q; want the portfolio without a body", got, b)
	}
	for _, miss := range []struct{ id, version int64 }{{1, 4}, {2, 3}} {
		if got, b := c.get(miss.id, miss.version, "s1"); got != nil || b != nil {
			t.Errorf("get(%d, %d) found what was kept for (1, 3)", miss.id, miss.version)
		}
	}
	c.put(&coinpulse.Portfolio{ID: 1, Version: 4}, "s1", body) // replaces, does not add
	if c.size != 200 || len(c.entries) != 1 {
		t.Errorf("after replacing: size %d, %d entries; want 200 and 1", c.size, len(c.entries))
	}
	for id := int64(2); id <= 6; id++ {
		c.put(&coinpulse.Portfolio{ID: id, Version: 1}, "s1", body)
	}
	if c.size > c.max || c.size != 200*len(c.entries) {
		t.Errorf("size %d with %d entries, bound %d", c.size, len(c.entries), c.max)
	}
	c.put(&coinpulse.Portfolio{ID: 9, Version: 1}, "s1", bytes.Repeat([]byte("y"), 101)) // over a quarter of the bound
	if got, _ := c.get(9, 1, "s1"); got != nil {
		t.Error("an entry over a quarter of the bound was kept")
	}
}
