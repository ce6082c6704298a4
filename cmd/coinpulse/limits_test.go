package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/redis/go-redis/v9"

	"coinpulse"
	"coinpulse/internal/ratelimit"
	"coinpulse/internal/sqlite"
	"coinpulse/internal/testlog"
)

// The tests here run `coinpulse serve` as separate processes, built once.
var binary struct {
	once sync.Once
	path string
	err  error
}

func buildBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		// The race pass of .ci/run is -short: its detector would watch
		// only this test's side of the conversation, not the processes.
		t.Skip("runs coinpulse serve as separate processes; left to the plain pass under -short")
	}
	binary.once.Do(func() {
		dir, err := os.MkdirTemp("", "coinpulse-bin-")
		if err != nil {
			binary.err = err
			return
		}
		binary.path = filepath.Join(dir, "coinpulse")
		out, err := exec.Command("go", "build", "-o", binary.path, ".").CombinedOutput()
		if err != nil {
			binary.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binary.err != nil {
		t.Fatal(binary.err)
	}
	return binary.path
}

// proc is a `coinpulse serve` process.
type proc struct {
	cmd    *exec.Cmd
	base   string
	stderr *testlog.Buffer
	exited chan error
}

func startProc(t *testing.T, args ...string) *proc {
	t.Helper()
	addr := freeAddr(t)
	p := &proc{base: "http://" + addr, stderr: &testlog.Buffer{}, exited: make(chan error, 1)}
	p.cmd = exec.Command(buildBinary(t), append([]string{"serve", "--addr", addr, "--refresh", "1s", "--demo=false"}, args...)...)
	p.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			<-p.exited
		}
	})
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if res, err := http.Get(p.base + "/readyz"); err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return p
			}
		}
		select {
		case err := <-p.exited:
			t.Fatalf("serve exited: %v\n%s", err, p.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve not ready after 3 minutes\n%s", p.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// term sends SIGTERM and waits for a clean exit.
func (p *proc) term(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		if err != nil {
			t.Errorf("serve exited with %v\n%s", err, p.stderr)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("serve did not stop within 60 s after SIGTERM\n%s", p.stderr)
	}
}

// get sends GET path with key; the caller closes the body.
func (p *proc) get(key, path string) (*http.Response, error) {
	req, _ := http.NewRequest("GET", p.base+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	return http.DefaultClient.Do(req)
}

func (p *proc) status(key, path string) (int, error) {
	res, err := p.get(key, path)
	if err != nil {
		return 0, err
	}
	res.Body.Close()
	return res.StatusCode, nil
}

// plansFile writes the default plans with premium's allowance set to
// monthly calls and rolling windows too wide to interfere.
func plansFile(t *testing.T, monthly int) string {
	t.Helper()
	b, err := os.ReadFile("../../plans/default.json")
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(b), `"tier": "premium",    "monthly_calls": 10000,       "per_minute": 60,  "per_second": 5,`,
		fmt.Sprintf(`"tier": "premium", "monthly_calls": %d, "per_minute": 1000000, "per_second": 1000000,`, monthly), 1)
	if s == string(b) {
		t.Fatal("plans/default.json changed: update plansFile")
	}
	path := filepath.Join(t.TempDir(), "plans.json")
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// generousPlans writes the default plans with pro's rolling windows too
// wide for a test's bursts to reach.
func generousPlans(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../plans/default.json")
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(b), `"tier": "pro",        "monthly_calls": "unlimited", "per_minute": 60,  "per_second": 5,`,
		`"tier": "pro", "monthly_calls": "unlimited", "per_minute": 1000000, "per_second": 1000000,`, 1)
	if s == string(b) {
		t.Fatal("plans/default.json changed: update generousPlans")
	}
	path := filepath.Join(t.TempDir(), "plans.json")
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// premiumKey creates a premium account on db with the CLI and returns its
// live key.
func premiumKey(t *testing.T, db string) string {
	t.Helper()
	env := map[string]string{"COINPULSE_DB": db}
	mustCLI(t, env, "users", "create", "--email", "limits@example.com", "--tier", "premium")
	return strings.TrimSpace(mustCLI(t, env, "keys", "create", "--email", "limits@example.com"))
}

// With K calls left this month, 4K concurrent calls spread over TWO serve
// processes sharing PostgreSQL and Redis admit exactly K; and the calls
// are metered once each.
func TestLimitsExactAcrossTwoNodes(t *testing.T) {
	redisURL := ratelimit.RedisURL(t)
	db := postgresSchema(t)
	const k = 40
	plans := plansFile(t, k)
	prefix := fmt.Sprintf("cp:test:%d:", time.Now().UnixNano())
	key := premiumKey(t, db)
	args := []string{"--db", db, "--plans", plans, "--redis", redisURL, "--redis-prefix", prefix, "--meter-interval", "50ms"}
	nodes := []*proc{startProc(t, args...), startProc(t, args...)}

	var ok, limited, other atomic.Int64
	var wg sync.WaitGroup
	for i := range 4 * k {
		wg.Go(func() {
			switch status, err := nodes[i%2].status(key, "/api/v1/markets/global"); {
			case err != nil:
				t.Error(err)
			case status == 200:
				ok.Add(1)
			case status == 429:
				limited.Add(1)
			default:
				other.Add(1)
			}
		})
	}
	wg.Wait()
	if ok.Load() != k || limited.Load() != 3*k || other.Load() != 0 {
		t.Fatalf("%d×200, %d×429, %d other; want exactly %d admitted of %d", ok.Load(), limited.Load(), other.Load(), k, 4*k)
	}
	// Both nodes metered their share into the one database.
	deadline := time.Now().Add(10 * time.Second)
	for {
		res := getUsage(t, nodes[1], key)
		if res.MonthCalls == k {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("month_calls %d after 10 s, want %d", res.MonthCalls, k)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A Redis that lost its data (a restart: this one keeps nothing on
	// disk) resets nobody's allowance: the month is seeded again from the
	// calls metered in the database.
	loseLimiterKeys(t, redisURL, prefix)
	for _, n := range nodes {
		if status, err := n.status(key, "/api/v1/markets/global"); err != nil || status != 429 {
			t.Errorf("after Redis lost its keys: %d, %v; want 429 (the allowance was used up)", status, err)
		}
	}
	termAll(t, nodes)
}

// With --redis, an account's WebSocket connections are capped across the
// nodes, not on each: two nodes with --ws-max-per-account 3 hold 3 of
// one account's connections between them, and a connection closed on one,
// or by its node's stop, frees its slot for the other.
func TestStreamCapAcrossTwoNodes(t *testing.T) {
	redisURL := ratelimit.RedisURL(t)
	db := postgresSchema(t)
	prefix := fmt.Sprintf("cp:test:%d:", time.Now().UnixNano())
	key := premiumKey(t, db)
	args := []string{"--db", db, "--plans", generousPlans(t), "--redis", redisURL, "--redis-prefix", prefix, "--ws-max-per-account", "3"}
	nodes := []*proc{startProc(t, args...), startProc(t, args...)}
	dial := func(p *proc) (*websocket.Conn, int, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, res, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(p.base, "http")+"/api/v1/ws",
			&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + key}}})
		if err == nil {
			go func() { // read, so that a close from the server is answered
				for {
					if _, _, err := c.Read(context.Background()); err != nil {
						return
					}
				}
			}()
			return c, http.StatusSwitchingProtocols, ""
		}
		if res == nil {
			t.Fatalf("websocket: %v", err)
		}
		var body struct {
			Error struct{ Message string } `json:"error"`
		}
		json.NewDecoder(res.Body).Decode(&body)
		return nil, res.StatusCode, res.Header.Get("Retry-After") + " " + body.Error.Message
	}
	var open []*websocket.Conn
	for i, n := range []int{0, 1, 0} {
		c, status, msg := dial(nodes[n])
		if c == nil {
			t.Fatalf("connection %d, on node %d: %d %s; want 101", i+1, n+1, status, msg)
		}
		open = append(open, c)
	}
	for n := range nodes {
		c, status, msg := dial(nodes[n])
		if c != nil || status != http.StatusTooManyRequests || !strings.Contains(msg, "3 WebSocket connections open across the service") || !strings.HasPrefix(msg, "10 ") {
			t.Fatalf("a 4th connection, on node %d: %d %q; want 429, Retry-After 10, and the cap across the service", n+1, status, msg)
		}
	}
	// Closing one on the first node frees a slot on the second (the
	// server gives it back once the connection has ended there).
	open[0].Close(websocket.StatusNormalClosure, "")
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, status, msg := dial(nodes[1])
		if c != nil {
			open[0] = c
			break
		}
		if status != http.StatusTooManyRequests || time.Now().After(deadline) {
			t.Fatalf("after closing a connection on node 1, node 2 answers %d %s; want 101 within 10 s", status, msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if c, status, msg := dial(nodes[0]); c != nil || status != http.StatusTooManyRequests {
		t.Fatalf("a 4th connection again: %d %s; want 429", status, msg)
	}
	// A node stopped with a connection open gives its slot back as it
	// closes it.
	nodes[0].term(t)
	c, status, msg := dial(nodes[1])
	if c == nil {
		t.Fatalf("after the first node stopped, the second answers %d %s; want 101", status, msg)
	}
	open = append(open, c)
	for _, c := range open {
		c.CloseNow()
	}
	nodes[1].term(t)
}

// Redis losing its state while the nodes' meters still hold calls they
// admitted but have not written gives nobody a call more than the plan:
// the month is seeded again once the meters have written them.
func TestRedisLossBeforeTheMetersWrote(t *testing.T) {
	const k = 8
	redisURL, prefix, key, nodes, calls := twoRedisNodes(t, k)
	// The first call seeds the month (nothing written yet: at once). Once
	// it is written, four more calls on both nodes: Redis then loses a
	// month the database has calls of (TestRedisLossInTheMonthsFirstSecond
	// has it lose one the database has none of yet).
	calls(1)
	for deadline := time.Now().Add(10 * time.Second); getUsage(t, nodes[1], key).MonthCalls != 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first call was not metered within 10 s")
		}
	}
	calls(4)
	loseLimiterKeys(t, redisURL, prefix)
	// 1 + 4 calls made: 3 left, whichever node is asked.
	burstAfterLoss(t, nodes, key, k, 5)
	termAll(t, nodes)
}

// Redis losing its state in the first second of an account's month,
// before the meters wrote any of its calls and while a node could still
// hand on the month's first seed (0), gives nobody a call more than the
// plan either: the database remembers that the month was seeded, so it is
// seeded again once the meters have written.
func TestRedisLossInTheMonthsFirstSecond(t *testing.T) {
	const k = 8
	redisURL, prefix, key, nodes, calls := twoRedisNodes(t, k)
	// The month's first four calls, on both nodes, then at once (well
	// within a meter interval and seedRecent) Redis loses them.
	start := time.Now()
	calls(4)
	loseLimiterKeys(t, redisURL, prefix)
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Logf("the four calls and the loss took %v, more than half the meter interval", took)
	}
	burstAfterLoss(t, nodes, key, k, 4)
	termAll(t, nodes)
}

// Redis losing its state while a call it admitted is still being answered
// (here its client has yet to send the body) gives nobody a call more
// than the plan: the meters counted the call in the database when it was
// admitted, and the month is seeded again from that count. (Seeded from
// the metered calls, as before, the burst had a call more.)
func TestRedisLossWithACallInFlight(t *testing.T) {
	const k = 8
	redisURL, prefix, key, nodes, calls := twoRedisNodes(t, k)
	calls(2)
	// The third call is admitted (the server asks for its body once it
	// is) and waits for its body.
	c, err := net.Dial("tcp", strings.TrimPrefix(nodes[0].base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	const body = `{"name":"in flight"}`
	fmt.Fprintf(c, "POST /api/v1/portfolio HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", key, len(body))
	if res, err := http.ReadResponse(br, nil); err != nil || res.StatusCode != http.StatusContinue {
		t.Fatalf("waiting for 100 Continue: %v %v", res, err)
	}
	loseLimiterKeys(t, redisURL, prefix)
	burstAdmits(t, nodes, key, k, 3)
	fmt.Fprint(c, body)
	if res, err := http.ReadResponse(br, nil); err != nil || res.StatusCode != http.StatusCreated {
		t.Fatalf("the call in flight: %v %v", res, err)
	}
	waitMonthCalls(t, nodes[0], key, k)
	termAll(t, nodes)
}

// twoRedisNodes starts two serve processes on one new PostgreSQL schema
// and one Redis prefix, with a premium key whose plan allows k calls a
// month, and the longest batch interval (1 s), so that calls are still in
// the meters when a test has Redis lose them. calls(n) makes n calls,
// alternating between the nodes, each of which must be admitted.
func twoRedisNodes(t *testing.T, k int) (redisURL, prefix, key string, nodes []*proc, calls func(n int)) {
	redisURL = ratelimit.RedisURL(t)
	db := postgresSchema(t)
	prefix = fmt.Sprintf("cp:test:%d:", time.Now().UnixNano())
	key = premiumKey(t, db)
	args := []string{"--db", db, "--plans", plansFile(t, k), "--redis", redisURL, "--redis-prefix", prefix, "--meter-interval", "1s"}
	nodes = []*proc{startProc(t, args...), startProc(t, args...)}
	made := 0
	calls = func(n int) {
		t.Helper()
		for range n {
			made++
			status, err := nodes[made%2].status(key, "/api/v1/markets/global")
			if err != nil || status != 200 {
				t.Fatalf("call %d: %d, %v; want 200", made, status, err)
			}
		}
	}
	return redisURL, prefix, key, nodes, calls
}

// termAll stops nodes with SIGTERM, each cleanly.
func termAll(t *testing.T, nodes []*proc) {
	t.Helper()
	for _, n := range nodes {
		n.term(t)
	}
}

// loseLimiterKeys deletes every limiter key under prefix, as a Redis that
// lost its data would have none.
func loseLimiterKeys(t *testing.T, redisURL, prefix string) {
	t.Helper()
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	keys, err := rdb.Keys(context.Background(), prefix+"*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("limiter keys under %s: %v, %v", prefix, keys, err)
	}
	if err := rdb.Del(context.Background(), keys...).Err(); err != nil {
		t.Fatal(err)
	}
}

// burstAfterLoss makes k concurrent calls of key, alternating between the
// nodes, after Redis lost the limiter's keys with made of the plan's k
// calls made: exactly k-made must be admitted, and month_calls must end
// at k.
func burstAfterLoss(t *testing.T, nodes []*proc, key string, k, made int) {
	t.Helper()
	burstAdmits(t, nodes, key, k, made)
	waitMonthCalls(t, nodes[0], key, k)
}

// burstAdmits is burstAfterLoss without the wait for month_calls.
func burstAdmits(t *testing.T, nodes []*proc, key string, k, made int) {
	t.Helper()
	var ok, limited atomic.Int64
	var wg sync.WaitGroup
	for i := range k {
		wg.Go(func() {
			switch status, err := nodes[i%len(nodes)].status(key, "/api/v1/markets/global"); {
			case err != nil:
				t.Error(err)
			case status == 200:
				ok.Add(1)
			case status == 429:
				limited.Add(1)
			default:
				t.Errorf("after Redis lost its keys: %d", status)
			}
		})
	}
	wg.Wait()
	if ok.Load() != int64(k-made) || limited.Load() != int64(made) {
		t.Errorf("after Redis lost its keys: %d×200, %d×429; want %d×200 (the plan's %d less the %d made)", ok.Load(), limited.Load(), k-made, k, made)
	}
}

// waitMonthCalls waits until node's /usage says k calls this month.
func waitMonthCalls(t *testing.T, node *proc, key string, k int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		n := getUsage(t, node, key).MonthCalls
		if n == int64(k) {
			break
		}
		if n > int64(k) || time.Now().After(deadline) {
			t.Fatalf("month_calls %d, want the plan's %d", n, k)
		}
	}
}

type usageData struct {
	MonthCalls int64 `json:"month_calls"`
}

func getUsage(t *testing.T, p *proc, key string) usageData {
	t.Helper()
	res, err := p.get(key, "/api/v1/usage")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var body struct {
		Data usageData `json:"data"`
	}
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil || res.StatusCode != 200 {
		t.Fatalf("/usage: %d %v", res.StatusCode, err)
	}
	return body.Data
}

// SIGTERM under load: every call the server admitted (every answer the
// clients got, and every WebSocket it accepted, which the shutdown closes)
// is metered by the time the process exits. A sandbox call holding a
// simulated 30-second timeout does not hold the shutdown: it is answered
// at once, and metered too.
func TestSIGTERMMetersEveryAdmittedCall(t *testing.T) {
	path := filepath.Join(t.TempDir(), "coinpulse.db")
	db := "sqlite:" + path
	key := premiumKey(t, db)
	sandbox := strings.TrimSpace(mustCLI(t, map[string]string{"COINPULSE_DB": db}, "keys", "create", "--email", "limits@example.com", "--test"))
	p := startProc(t, "--db", db, "--plans", plansFile(t, 1_000_000))

	simulated := make(chan string, 1)
	sent := make(chan struct{})
	go func() {
		trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { close(sent) }}
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", p.base+"/api/v1/markets/global", nil)
		req.Header.Set("Authorization", "Bearer "+sandbox)
		req.Header.Set("X-Sandbox-Simulate", "timeout")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			simulated <- err.Error()
			return
		}
		defer res.Body.Close()
		var body struct {
			Error struct{ Message string } `json:"error"`
		}
		json.NewDecoder(res.Body).Decode(&body)
		simulated <- fmt.Sprint(res.StatusCode, " ", body.Error.Message)
	}()

	const sockets = 3
	var closed sync.WaitGroup
	for range sockets {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(p.base, "http")+"/api/v1/ws",
			&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + key}}})
		cancel()
		if err != nil {
			t.Fatalf("websocket: %v", err)
		}
		closed.Go(func() { // read until the server closes it
			for {
				if _, _, err := c.Read(context.Background()); err != nil {
					return
				}
			}
		})
	}

	var answered atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 8 {
		wg.Go(func() {
			client := &http.Client{Transport: &http.Transport{}}
			for {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("GET", p.base+"/api/v1/markets?per_page=5", nil)
				req.Header.Set("Authorization", "Bearer "+key)
				res, err := client.Do(req)
				if err != nil {
					return // the server has gone
				}
				res.Body.Close()
				if res.StatusCode != 200 {
					t.Errorf("status %d under load", res.StatusCode)
					return
				}
				answered.Add(1)
			}
		})
	}
	select { // the simulated call is in the server's hands
	case <-sent:
	case got := <-simulated:
		t.Fatalf("the simulated timeout ended before SIGTERM: %s", got)
	}
	for answered.Load() < 3000 {
		time.Sleep(10 * time.Millisecond)
	}
	p.term(t) // a clean exit: the simulation held no wait past its timeout
	close(stop)
	wg.Wait()
	closed.Wait()
	if got := <-simulated; !strings.HasPrefix(got, "503 ") || !strings.Contains(got, "shutting down") {
		t.Errorf("the simulated timeout in flight at SIGTERM got %q, want 503 saying the server is shutting down", got)
	}

	store, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	u, err := store.UserByEmail(context.Background(), "limits@example.com")
	if err != nil {
		t.Fatal(err)
	}
	n, err := store.MonthCalls(context.Background(), u.ID, coinpulse.MonthStart(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	if n != answered.Load()+sockets {
		t.Errorf("%d calls metered, want the %d answered before SIGTERM took effect and the %d WebSockets", n, answered.Load(), sockets)
	}
	// The shutdown wrote the admission counts too: every admitted call
	// was answered, none with a 5xx.
	if a, err := store.MonthAdmitted(context.Background(), u.ID, coinpulse.MonthStart(time.Now())); err != nil || a != n {
		t.Errorf("MonthAdmitted = %d, %v; want the %d calls metered", a, err, n)
	}
	usage, err := store.Usage(context.Background(), u.ID, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var keyCalls []int64
	for _, k := range usage.Keys {
		keyCalls = append(keyCalls, k.Calls)
	}
	if len(keyCalls) != 2 || keyCalls[0]+keyCalls[1] != n+1 || min(keyCalls[0], keyCalls[1]) != 1 {
		t.Errorf("calls by key %v, want %d for the live key and the sandbox's simulated timeout", keyCalls, n)
	}
	t.Logf("%d calls answered and metered", n)
}

// A stop that cannot write the metered calls still queued exits with a
// failure status, as one that cuts requests off does: the supervisor
// should know calls were lost (an audit: it logged the loss at ERROR,
// then "stopped", and exited 0).
func TestSIGTERMFailsWhenMeteredCallsAreLost(t *testing.T) {
	path := filepath.Join(t.TempDir(), "coinpulse.db")
	db := "sqlite:" + path
	key := premiumKey(t, db)
	p := startProc(t, "--db", db, "--plans", plansFile(t, 1_000_000), "--shutdown-timeout", "1s")
	if code, err := p.status(key, "/api/v1/markets/global"); err != nil || code != 200 {
		t.Fatalf("first call: %d, %v", code, err) // the key is cached now
	}
	// Another connection holds the database's write lock: the meter's
	// writes wait on it. (Readers go on: the file is in WAL mode.)
	// (It waits for the lock too: the meter may hold it a moment.)
	lock, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	ctx := context.Background()
	conn, err := lock.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	defer conn.ExecContext(ctx, "ROLLBACK")
	for range 3 {
		if code, err := p.status(key, "/api/v1/markets/global"); err != nil || code != 200 {
			t.Fatalf("a call with the database locked: %d, %v", code, err)
		}
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		if err == nil || !strings.Contains(p.stderr.String(), "shutdown: metered calls were not written") {
			t.Errorf("serve exited with %v, want a failure saying metered calls were not written\n%s", err, p.stderr)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("serve did not stop within 60 s after SIGTERM\n%s", p.stderr)
	}
}

// SIGHUP reloads the --plans file: the calls after it are held to the new
// plans, and a file that does not load leaves the old ones in force.
func TestSIGHUPReloadsPlans(t *testing.T) {
	path := filepath.Join(t.TempDir(), "coinpulse.db")
	db := "sqlite:" + path
	key := premiumKey(t, db)
	plans := plansFile(t, 100)
	p := startProc(t, "--db", db, "--plans", plans)
	// The month is premium's closest window here: the rolling ones are huge.
	limit := func() string {
		t.Helper()
		res, err := p.get(key, "/api/v1/markets/global")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("status %d", res.StatusCode)
		}
		return res.Header.Get("X-RateLimit-Limit")
	}
	if got := limit(); got != "100" {
		t.Fatalf("X-RateLimit-Limit %q before the reload, want 100", got)
	}
	hup := func(logged string) {
		t.Helper()
		if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(p.stderr.String(), logged) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q in the log 30 s after SIGHUP\n%s", logged, p.stderr)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	b, err := os.ReadFile(plansFile(t, 200))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(plans, b, 0o600); err != nil {
		t.Fatal(err)
	}
	hup("plans reloaded")
	if got := limit(); got != "200" {
		t.Fatalf("X-RateLimit-Limit %q after the reload, want 200", got)
	}
	if err := os.WriteFile(plans, []byte(`{"plans": [`), 0o600); err != nil {
		t.Fatal(err)
	}
	hup("plans not reloaded")
	if got := limit(); got != "200" {
		t.Fatalf("X-RateLimit-Limit %q after a failed reload, want 200 still", got)
	}
	p.term(t)
}

// --sandbox-per-second and --sandbox-per-minute set the abuse limit of
// sandbox calls, which the headers and the 429 then name.
func TestSandboxLimitFlags(t *testing.T) {
	db := "sqlite:" + filepath.Join(t.TempDir(), "coinpulse.db")
	premiumKey(t, db)
	sandbox := strings.TrimSpace(mustCLI(t, map[string]string{"COINPULSE_DB": db}, "keys", "create", "--email", "limits@example.com", "--test"))
	p := startProc(t, "--db", db, "--sandbox-per-second", "2", "--sandbox-per-minute", "100")
	for i := range 20 {
		res, err := p.get(sandbox, "/api/v1/markets/global")
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Error struct{ Message string } `json:"error"`
		}
		json.NewDecoder(res.Body).Decode(&body)
		res.Body.Close()
		switch res.StatusCode {
		case 200:
			if v := res.Header.Get("RateLimit-Policy"); v != `"second";q=2;w=1, "minute";q=100;w=60` {
				t.Fatalf("RateLimit-Policy %q", v)
			}
			continue
		case 429:
		default:
			t.Fatalf("sandbox call %d: %d", i+1, res.StatusCode)
		}
		if !strings.Contains(body.Error.Message, "abuse limit of sandbox calls (2 calls per second)") ||
			res.Header.Get("X-RateLimit-Limit") != "2" || res.Header.Get("Retry-After") == "" {
			t.Errorf("429: message %q, X-RateLimit-Limit %q, Retry-After %q", body.Error.Message, res.Header.Get("X-RateLimit-Limit"), res.Header.Get("Retry-After"))
		}
		p.term(t)
		return
	}
	t.Fatal("20 sandbox calls in a row, none refused at 2 a second")
}

// A second SIGTERM cuts a graceful shutdown short: serve exits at once,
// with a failure status, rather than wait for a request whose body never
// comes; and a shutdown that runs out of --shutdown-timeout fails too,
// saying so. A request that outlasts the timeout but ends within the
// second wait is answered, and the stop is clean (an audit: it was
// reported cut off).
func TestShutdownCutShort(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"second signal", "cut off", "late"} {
		timeout := "60s"
		if how != "second signal" {
			timeout = "1s"
		}
		p := startProc(t, "--db", "sqlite:"+filepath.Join(t.TempDir(), "cp.db"), "--shutdown-timeout", timeout)
		conn, err := net.Dial("tcp", strings.TrimPrefix(p.base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		// Its answer (a 401) waits for the body, which serve reads first.
		fmt.Fprintf(conn, "POST /api/v1/portfolio HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{")
		time.Sleep(200 * time.Millisecond)
		start := time.Now()
		p.cmd.Process.Signal(syscall.SIGTERM)
		switch how {
		case "second signal":
			for p.stderr.Count("shutting down") == 0 {
				if time.Since(start) > 10*time.Second {
					t.Fatalf("no shutdown after SIGTERM\n%s", p.stderr)
				}
				time.Sleep(20 * time.Millisecond)
			}
			select {
			case err := <-p.exited:
				t.Fatalf("serve exited (%v) while a request was in flight\n%s", err, p.stderr)
			case <-time.After(time.Second):
			}
			p.cmd.Process.Signal(syscall.SIGTERM)
		case "late":
			time.Sleep(1500 * time.Millisecond) // past the timeout, within the second wait
			fmt.Fprintf(conn, "}")
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			res, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil || res.StatusCode != http.StatusUnauthorized {
				t.Errorf("late: the request's answer: %v %v", res, err)
			}
		}
		select {
		case err := <-p.exited:
			want := map[string]string{
				"second signal": "shutdown cut short by a second signal",
				"cut off":       "requests still in flight after --shutdown-timeout 1s were cut off",
				"late":          "they ended within the second wait, and none was cut off",
			}[how]
			if (err == nil) != (how == "late") || !strings.Contains(p.stderr.String(), want) {
				t.Errorf("%s: exit %v, want a failure unless late, saying %q\n%s", how, err, want, p.stderr)
			}
		case <-time.After(25 * time.Second): // the body's own deadline is 30 s
			t.Fatalf("%s: serve still running 25 s after SIGTERM\n%s", how, p.stderr)
		}
	}
}
