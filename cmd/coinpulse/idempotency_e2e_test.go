package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// A buy sent many times at once with one Idempotency-Key, through two
// serve processes sharing PostgreSQL, is applied once: every answer is
// the first one, its replay, or a 409 to send again.
func TestIdempotencyKeyAcrossTwoNodes(t *testing.T) {
	db := postgresSchema(t)
	key := alertKey(t, db)
	args := []string{"--db", db, "--plans", generousPlans(t)}
	nodes := []*proc{startProc(t, args...), startProc(t, args...)}
	pid := nodes[0].data(t, 201, "POST", "/api/v1/portfolio", key, `{"name":"Two nodes"}`)["id"].(json.Number).String()
	path := "/api/v1/portfolio/" + pid + "/holdings"
	buy := `{"coin_id":"bitcoin","quantity":"0.125","buy_price":"50000"}`

	type answer struct {
		status             int
		replayed, original string
		requestID, body    string
	}
	send := func(node *proc) answer {
		req, _ := http.NewRequest("POST", node.base+path, strings.NewReader(buy))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "two-nodes-1")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return answer{}
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		var env struct {
			Data json.RawMessage `json:"data"`
		}
		json.Unmarshal(b, &env)
		return answer{res.StatusCode, res.Header.Get("Idempotent-Replayed"), res.Header.Get("Original-Request"), res.Header.Get("X-Request-Id"), string(env.Data)}
	}

	const n = 24
	answers := make([]answer, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			answers[i] = send(nodes[i%2])
		})
	}
	close(start)
	wg.Wait()
	var first *answer
	counts := map[string]int{}
	for i, a := range answers {
		switch {
		case a.status == 201 && a.replayed == "":
			counts["first"]++
			first = &answers[i]
		case a.status == 201 && a.replayed == "true":
			counts["replay"]++
		case a.status == 409:
			counts["conflict"]++
		default:
			t.Errorf("answer %d: %+v", i, a)
		}
	}
	if counts["first"] != 1 {
		t.Fatalf("answers %v; want exactly one first answer", counts)
	}
	for _, a := range answers {
		if a.status == 201 && a.replayed == "true" && (a.original != first.requestID || a.body != first.body) {
			t.Errorf("replay %+v; want the first answer %+v", a, *first)
		}
	}
	for _, node := range nodes {
		if txs := node.list(t, "/api/v1/portfolio/"+pid+"/transactions", key); len(txs) != 1 {
			t.Fatalf("%d transactions; want 1 from %d sends with one key (%v)", len(txs), n, counts)
		}
		if a := send(node); a.status != 201 || a.replayed != "true" || a.original != first.requestID {
			t.Errorf("sent again after the race: %+v", a)
		}
	}
	t.Logf("%d sends through two nodes: %s", n, fmt.Sprint(counts))
	termAll(t, nodes)
}
