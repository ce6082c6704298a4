package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"coinpulse"
	"coinpulse/internal/alerting"
	"coinpulse/internal/api"
	"coinpulse/internal/dashboard"
	"coinpulse/internal/feed/binance"
	"coinpulse/internal/feed/coingecko"
	"coinpulse/internal/feed/relay"
	"coinpulse/internal/feed/replay"
	"coinpulse/internal/feed/sim"
	"coinpulse/internal/feed/upstream"
	"coinpulse/internal/market"
	"coinpulse/internal/meter"
	"coinpulse/internal/notify"
	"coinpulse/internal/ratelimit"
	"coinpulse/internal/stream"
)

// serveConfig is everything serve reads from flags and environment.
type serveConfig struct {
	addr, db, dataDir, feed  string
	replayDir                string
	coingecko                coingecko.Config
	coingeckoKeyFile         string
	binance                  binance.Config
	refresh, shutdownTimeout time.Duration
	writeTimeout             time.Duration
	seed                     int64
	simCoins                 int
	maxBody                  int64
	wsMaxPerAccount          int
	minMoverVolume           float64
	logLevel, logFormat      string
	demo                     bool
	plans                    map[coinpulse.Tier]coinpulse.Plan
	plansFile, redis, limits string
	billingURL               string
	https                    bool
	trustedProxies           []netip.Prefix
	metricsTokenFile         string
	metricsToken             string
	redisPrefix              string
	meterInterval            time.Duration
	sandbox                  coinpulse.Limits // the abuse limit
	webhookAllowPrivate      bool
	deliveryLease            time.Duration
	smtp                     notify.SMTPConfig
	smtpPasswordFile         string
}

func parseServe(args []string, getenv func(string) string, stderr io.Writer) (serveConfig, error) {
	var c serveConfig
	c.sandbox.Monthly = coinpulse.Unlimited
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8080", "address to listen on")
	db := dbFlag(fs)
	fs.StringVar(&c.dataDir, "data-dir", defaultDataDir, "directory of the default SQLite database")
	fs.StringVar(&c.feed, "feed", "sim", "market feed: sim (a simulation), replay (recorded daily prices from --replay-dir, on a loop), coingecko (CoinGecko's API) or binance (Binance's spot prices of the bundled real coins)")
	fs.StringVar(&c.replayDir, "replay-dir", "", "directory of the recording the replay feed plays: coinlist.csv and coins/<id>.csv, as ../shared/datasets/coingecko-2021")
	fs.StringVar(&c.coingecko.BaseURL, "coingecko-url", coingecko.DefaultURL, "root of CoinGecko's API (a paid plan's: https://pro-api.coingecko.com/api/v3)")
	fs.StringVar(&c.coingeckoKeyFile, "coingecko-key-file", "", "file holding the CoinGecko API key (sent as x-cg-pro-api-key to pro-api.coingecko.com, else as x-cg-demo-api-key); none: no key")
	fs.IntVar(&c.coingecko.Coins, "coingecko-coins", coingecko.DefaultCoins, "how many of the largest coins by market cap the coingecko feed serves (1 to 5000)")
	fs.IntVar(&c.coingecko.CallsPerMinute, "coingecko-rate", coingecko.DefaultCallsPerMinute, "calls a minute the coingecko feed makes at most (a little under your CoinGecko plan's rate: 30 for a free demo key)")
	fs.IntVar(&c.coingecko.HistoryDays, "coingecko-history-days", coingecko.DefaultHistoryDays, "days of daily history the coingecko feed fetches at a first start (92 to 7320; a free key reaches 365)")
	fs.StringVar(&c.binance.BaseURL, "binance-url", binance.DefaultURL, "root of Binance's API (Binance.US: https://api.binance.us)")
	fs.StringVar(&c.binance.Quote, "binance-quote", "USDT", "the quote asset the binance feed prices coins in, served as USD")
	fs.IntVar(&c.binance.CallsPerMinute, "binance-rate", binance.DefaultCallsPerMinute, "calls a minute the binance feed makes at most (1 to 2500, and with the refresh within Binance's 6,000 request weight a minute)")
	fs.IntVar(&c.binance.HistoryDays, "binance-history-days", binance.DefaultHistoryDays, "days of daily history the binance feed fetches at a first start (92 to 7320)")
	fs.DurationVar(&c.refresh, "refresh", time.Minute, "time between price refreshes (a Go duration such as 1s)")
	fs.Int64Var(&c.seed, "seed", 1, "seed of the simulated feed")
	fs.IntVar(&c.simCoins, "sim-coins", sim.MinCoins, "size of the simulated universe (real coins topped up with synthetic sim- coins; 1000 to 100000)")
	fs.Int64Var(&c.maxBody, "max-body", 64<<10, "largest request body in bytes")
	fs.IntVar(&c.wsMaxPerAccount, "ws-max-per-account", api.DefaultMaxStreamsPerAccount, "WebSocket connections an account may hold open: on every node sharing --redis (limits on), else on this node (0: no cap)")
	fs.Float64Var(&c.minMoverVolume, "min-mover-volume", 50_000, "24 h volume floor (USD) for top movers")
	fs.DurationVar(&c.writeTimeout, "write-timeout", api.DefaultWriteTimeout, "longest a client may take to take in an answer's first part, and each further 64 KiB of it, before it is cut off")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 15*time.Second, "how long graceful shutdown waits for in-flight requests")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log-format", "text", "text or json")
	fs.BoolVar(&c.demo, "demo", true, "on a fresh database, create a demo account and print its keys")
	fs.StringVar(&c.billingURL, "billing-url", "", "where the dashboard's upgrade prompt links (default: the API documentation)")
	fs.BoolVar(&c.https, "https", false, "the service is reached over HTTPS only (a proxy terminates TLS): the dashboard's cookies are always Secure and its pages send Strict-Transport-Security")
	proxies := fs.String("trusted-proxies", "", "comma-separated addresses or CIDR prefixes of the reverse proxies whose X-Forwarded-For names the client (for the dashboard's log-in throttle and security log); none by default")
	fs.StringVar(&c.metricsTokenFile, "metrics-token-file", "", "file holding the token GET /metrics must be sent with as \"Authorization: Bearer <token>\" (none: /metrics is public)")
	fs.StringVar(&c.plansFile, "plans", "", "plan file (JSON, see plans/default.json); default: the shipped plans")
	fs.StringVar(&c.redis, "redis", "", "Redis URL (redis://host:6379/0) for rate limits shared by several nodes; default: in-process")
	fs.StringVar(&c.redisPrefix, "redis-prefix", ratelimit.DefaultPrefix, "prefix of the limiter's Redis keys (to keep deployments sharing a Redis apart; every node on one database must use the same)")
	fs.StringVar(&c.limits, "limits", "on", "on, or off to serve without rate limits and metering (for measuring their cost)")
	fs.IntVar(&c.sandbox.PerSecond, "sandbox-per-second", api.DefaultSandboxLimits.PerSecond, "abuse limit of an account's sandbox calls, and of its live keys' /usage calls: calls a second")
	fs.IntVar(&c.sandbox.PerMinute, "sandbox-per-minute", api.DefaultSandboxLimits.PerMinute, "the same abuse limit: calls a minute")
	fs.DurationVar(&c.meterInterval, "meter-interval", meter.DefaultInterval, "longest a metered call waits before it is written")
	fs.BoolVar(&c.webhookAllowPrivate, "webhook-allow-private", false, "let webhook URLs reach loopback, private, link-local and metadata addresses (development and tests only)")
	fs.DurationVar(&c.deliveryLease, "delivery-lease", defaultDeliveryLease, "how long a node holds a webhook or e-mail delivery it is attempting; a delivery abandoned by a stopped or crashed node is retried once its lease ends (for tests; keep the default in production)")
	fs.StringVar(&c.smtp.Host, "smtp-host", "", "SMTP server for alert e-mails (none: e-mail notifications are marked undeliverable)")
	fs.IntVar(&c.smtp.Port, "smtp-port", 0, "SMTP server port (0: 587, or 465 with --smtp-tls)")
	fs.StringVar(&c.smtp.Username, "smtp-user", "", "SMTP user name (none: no AUTH)")
	fs.StringVar(&c.smtpPasswordFile, "smtp-password-file", "", "file holding the SMTP password")
	fs.StringVar(&c.smtp.From, "smtp-from", "", "sender address of alert e-mails, e.g. alerts@example.com")
	fs.StringVar(&c.smtp.StartTLS, "smtp-starttls", "mandatory", "STARTTLS policy: mandatory, opportunistic or none")
	fs.BoolVar(&c.smtp.TLS, "smtp-tls", false, "implicit TLS (SMTPS, usually port 465) instead of STARTTLS")
	if err := parseFlags(fs, args, getenv); err != nil {
		return c, err
	}
	c.db = *db
	given := map[string]bool{} // on the command line or by the environment
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	cgFlag := givenAny(given, "coingecko-url", "coingecko-key-file", "coingecko-coins", "coingecko-rate", "coingecko-history-days")
	bnFlag := givenAny(given, "binance-url", "binance-quote", "binance-rate", "binance-history-days")
	switch {
	case c.feed != "sim" && c.feed != "replay" && c.feed != "coingecko" && c.feed != "binance":
		return c, fmt.Errorf("--feed %q: sim, replay, coingecko or binance", c.feed)
	case c.feed == "replay" && c.replayDir == "":
		return c, errors.New("--feed replay needs --replay-dir: the directory of the recording to play (coinlist.csv and coins/<id>.csv)")
	case c.feed != "replay" && c.replayDir != "":
		return c, fmt.Errorf("--replay-dir is for --feed replay; the feed is %s", c.feed)
	case c.feed != "sim" && given["seed"]:
		return c, fmt.Errorf("--seed is for --feed sim; the feed is %s", c.feed)
	case c.feed != "sim" && given["sim-coins"]:
		return c, fmt.Errorf("--sim-coins is for --feed sim; the feed is %s", c.feed)
	case c.feed != "coingecko" && cgFlag != "":
		return c, fmt.Errorf("--%s is for --feed coingecko; the feed is %s", cgFlag, c.feed)
	case c.feed != "binance" && bnFlag != "":
		return c, fmt.Errorf("--%s is for --feed binance; the feed is %s", bnFlag, c.feed)
	case c.refresh < 100*time.Millisecond:
		return c, fmt.Errorf("--refresh %s: must be at least 100ms", c.refresh)
	case c.refresh > 24*time.Hour:
		return c, fmt.Errorf("--refresh %s: at most 24h (market data older than a day is not served as current)", c.refresh)
	case c.shutdownTimeout < time.Second:
		return c, fmt.Errorf("--shutdown-timeout %s: at least 1s, long enough to answer the calls in flight and write the metered ones", c.shutdownTimeout)
	case c.writeTimeout < time.Second:
		return c, fmt.Errorf("--write-timeout %s: at least 1s", c.writeTimeout)
	case !validAddr(c.addr):
		return c, fmt.Errorf("--addr %q: HOST:PORT or :PORT to listen on, such as 127.0.0.1:8080 or :8080", c.addr)
	case c.maxBody < 1024:
		return c, fmt.Errorf("--max-body %d: must be at least 1024", c.maxBody)
	case c.wsMaxPerAccount < 0:
		return c, fmt.Errorf("--ws-max-per-account %d: 0 (no cap) or more", c.wsMaxPerAccount)
	case c.simCoins < sim.MinCoins || c.simCoins > sim.MaxCoins:
		return c, fmt.Errorf("--sim-coins %d: from %d to %d", c.simCoins, sim.MinCoins, sim.MaxCoins)
	case !(c.minMoverVolume >= 0) || math.IsInf(c.minMoverVolume, 1):
		return c, fmt.Errorf("--min-mover-volume %v: a volume in USD, 0 or more", c.minMoverVolume)
	case c.limits != "on" && c.limits != "off":
		return c, fmt.Errorf("--limits %q: on or off", c.limits)
	case c.sandbox.PerSecond < 1 || c.sandbox.PerSecond > coinpulse.MaxRate:
		return c, fmt.Errorf("--sandbox-per-second %d: from 1 to %d", c.sandbox.PerSecond, coinpulse.MaxRate)
	case c.sandbox.PerMinute < 1 || c.sandbox.PerMinute > coinpulse.MaxRate:
		return c, fmt.Errorf("--sandbox-per-minute %d: from 1 to %d", c.sandbox.PerMinute, coinpulse.MaxRate)
	case c.sandbox.PerSecond > c.sandbox.PerMinute:
		return c, fmt.Errorf("--sandbox-per-second %d is above --sandbox-per-minute %d: the minute would always bind first; swapped?", c.sandbox.PerSecond, c.sandbox.PerMinute)
	case c.meterInterval < 10*time.Millisecond || c.meterInterval > time.Second:
		return c, fmt.Errorf("--meter-interval %s: from 10ms to 1s (a crash loses at most one interval)", c.meterInterval)
	case c.billingURL != "" && !validBillingURL(c.billingURL):
		return c, fmt.Errorf("--billing-url %q: an http or https URL with a host, or a path on this server starting with /", c.billingURL)
	case c.deliveryLease < minDeliveryLease:
		return c, fmt.Errorf("--delivery-lease %s: at least %s, longer than a webhook attempt may take (%s), or a delivery would be sent twice at once", c.deliveryLease, minDeliveryLease, notify.DefaultTimeout)
	}
	for _, p := range strings.Split(*proxies, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		prefix, err := netip.ParsePrefix(p)
		if err != nil {
			ip, err2 := netip.ParseAddr(p)
			if err2 != nil {
				return c, fmt.Errorf("--trusted-proxies %q: %q is not an address or a CIDR prefix such as 10.0.0.0/8", *proxies, p)
			}
			prefix = netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen())
		}
		c.trustedProxies = append(c.trustedProxies, prefix.Masked())
	}
	if c.redis != "" {
		// Checked before anything is opened: a typo must not first
		// create or migrate a database.
		if _, err := ratelimit.ClientOptions(c.redis); err != nil {
			return c, fmt.Errorf("--redis: %w", err)
		}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true }) // on the command line or from the environment
	if c.smtp.TLS && set["smtp-starttls"] {
		return c, fmt.Errorf("--smtp-starttls %q: not taken with --smtp-tls, whose connection is TLS from its start; give one of them", c.smtp.StartTLS)
	}
	if c.metricsTokenFile != "" {
		t, err := readMetricsToken(c.metricsTokenFile)
		if err != nil {
			return c, fmt.Errorf("--metrics-token-file: %w", err)
		}
		c.metricsToken = t
	}
	if c.feed == "coingecko" {
		if err := c.checkCoinGecko(); err != nil {
			return c, err
		}
	}
	if c.feed == "binance" {
		if err := c.binance.Validate(); err != nil {
			return c, configFlagError(err, map[string]string{"BaseURL": "--binance-url", "Quote": "--binance-quote", "CallsPerMinute": "--binance-rate", "HistoryDays": "--binance-history-days"})
		}
		// Every refresh is one call of every pair's tickers, which Binance
		// weighs 80 of the 6,000 an address may spend a minute: refreshes
		// may take half of it, the backfill's candles (2 each) the rest.
		if w := binance.TickerWeight * float64(time.Minute) / float64(c.refresh); w > 3000 {
			return c, fmt.Errorf("--refresh %s: Binance weighs a refresh %d of the 6,000 an address may spend a minute, %.0f a minute at this refresh; at least %s", c.refresh, binance.TickerWeight, w, time.Duration(binance.TickerWeight*float64(time.Minute)/3000).Round(100*time.Millisecond))
		}
		if w := binance.TickerWeight*float64(time.Minute)/float64(c.refresh) + binance.KlineWeight*float64(c.binance.CallsPerMinute); w > binance.WeightPerMinute {
			return c, fmt.Errorf("--binance-rate %d: with --refresh %s, up to %.0f of the 6,000 request weight an address may spend a minute (a candle call weighs %d, a refresh %d); lower the rate", c.binance.CallsPerMinute, c.refresh, w, binance.KlineWeight, binance.TickerWeight)
		}
	}
	if c.smtpPasswordFile != "" {
		pw, err := notify.ReadPasswordFile(c.smtpPasswordFile)
		if err != nil {
			return c, fmt.Errorf("--smtp-password-file: %w", err)
		}
		c.smtp.Password = pw
	}
	if err := c.smtp.Validate(); err != nil {
		// Each problem as "--flag ...", so that run names the variable
		// that set it.
		errs := []error{err}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			errs = j.Unwrap()
		}
		for i, e := range errs {
			errs[i] = errors.New(strings.TrimPrefix(e.Error(), "smtp config: "))
		}
		return c, errors.Join(errs...)
	}
	c.plans = coinpulse.DefaultPlans()
	if c.plansFile != "" {
		plans, err := readPlans(c.plansFile)
		if err != nil {
			return c, err
		}
		c.plans = plans
	}
	return c, nil
}

// validAddr reports whether addr is a listen address: HOST:PORT or :PORT,
// the port a number from 0 (any free port) to 65535 or a service name.
func validAddr(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return false
	}
	if n, err := strconv.Atoi(port); err == nil {
		return n >= 0 && n <= 65535
	}
	_, err = net.LookupPort("tcp", port)
	return err == nil
}

// validBillingURL reports whether u can be the dashboard's upgrade link:
// an absolute http or https URL with a host, or a path on this server
// ("/billing"); the dashboard's template would turn anything else, such
// as a javascript: URL, into a dead link.
func validBillingURL(u string) bool {
	p, err := url.Parse(u)
	switch {
	case err != nil || strings.ContainsAny(u, " \t\r\n"):
		return false
	case p.Scheme == "http" || p.Scheme == "https":
		return p.Host != "" && p.User == nil
	}
	return p.Scheme == "" && p.Host == "" && strings.HasPrefix(u, "/") && !strings.HasPrefix(u, "//")
}

// readPlans loads the plan file at path (--plans).
func readPlans(path string) (map[coinpulse.Tier]coinpulse.Plan, error) {
	plans, err := coinpulse.LoadPlansFile(path)
	if err != nil {
		return nil, fmt.Errorf("--plans %w", err)
	}
	return plans, nil
}

// reloadPlans reads the --plans file again (on SIGHUP) and puts its plans
// in force on srv and dash. A file that does not load changes nothing.
func reloadPlans(ctx context.Context, path string, srv *api.Server, dash *dashboard.Dashboard, log *slog.Logger) {
	if path == "" {
		log.Warn("SIGHUP: no --plans file to reload; the shipped plans stay in force")
		return
	}
	plans, err := readPlans(path)
	if err != nil {
		log.Error("SIGHUP: plans not reloaded; the previous ones stay in force", "err", err)
		return
	}
	dash.SetPlans(plans)
	srv.SetPlans(ctx, plans)
	log.Info("plans reloaded", "file", path)
}

// The delivery lease (--delivery-lease): the dispatcher's default, and the
// shortest allowed, which must exceed a webhook attempt's timeout so that
// no delivery is claimed again while it is being attempted.
const (
	defaultDeliveryLease = 2 * time.Minute
	minDeliveryLease     = notify.DefaultTimeout + 5*time.Second
)

func newLogger(level, format string, w io.Writer) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: debug, info, warn or error (or one with +N or -N, as slog reads levels)", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: text or json", format)
}

func runServe(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	cfg, err := parseServe(args, getenv, stderr)
	if err != nil {
		return err
	}
	log, err := newLogger(cfg.logLevel, cfg.logFormat, stderr)
	if err != nil {
		return err
	}
	// The address first: a port in use fails the start before the
	// database is created or migrated.
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return err
	}
	defer ln.Close() // the HTTP server's once it serves; closing it again is harmless
	// Then the feed: a recording that does not load fails the start
	// before the database is created, too.
	feed, err := newFeed(cfg, log)
	if err != nil {
		return err
	}
	// And Redis: a host that does not answer fails the start before the
	// database is created or migrated, too.
	var rdb *redis.Client
	if cfg.limits == "on" && cfg.redis != "" {
		if rdb, err = dialRedis(ctx, cfg, log); err != nil {
			return err
		}
		defer rdb.Close() // after the limiter's and the slots' Close
	}
	store, err := openStore(ctx, cfg.db, cfg.dataDir, true)
	if err != nil {
		if strings.HasPrefix(err.Error(), "--db ") {
			return err // names the value already, and run adds its variable
		}
		return fmt.Errorf("open database %s: %w", describeDB(cfg.db, cfg.dataDir), err)
	}
	defer store.Close()
	log.Info("database open", "db", describeDB(cfg.db, cfg.dataDir))
	var turn time.Duration
	if (cfg.feed == "coingecko" || cfg.feed == "binance") && isPostgres(store) {
		// The nodes sharing the database take each refresh's quotes from
		// the upstream once, through it, and take turns at its history.
		// (A SQLite file has one node.)
		host, _ := os.Hostname()
		feed = relay.New(relay.Config{Feed: feed, KV: store, Log: log, Refresh: cfg.refresh, Host: host + "/" + ln.Addr().String()})
		turn = 30 * time.Second
	}

	engine := market.New(market.Config{Feed: feed, Store: store, Log: log, Refresh: cfg.refresh, MinMoverVolume: cfg.minMoverVolume, Turn: turn})
	apiCfg := api.Config{Store: store, Market: engine, Log: log, MaxBody: cfg.maxBody, WriteTimeout: cfg.writeTimeout, Plans: cfg.plans, SandboxLimits: &cfg.sandbox, MetricsToken: cfg.metricsToken}
	if apiCfg.MaxStreamsPerAccount = cfg.wsMaxPerAccount; cfg.wsMaxPerAccount == 0 {
		apiCfg.MaxStreamsPerAccount = -1 // no cap
	}
	var mtr *meter.Meter
	if cfg.limits == "on" {
		limiter, slots, closeLimiter, err := newLimiter(ctx, cfg, rdb, store, log)
		if err != nil {
			return err
		}
		defer closeLimiter()
		mtr = meter.New(store, log, meter.Options{Interval: cfg.meterInterval})
		apiCfg.Limiter, apiCfg.Meter, apiCfg.StreamSlots = limiter, mtr, slots
	} else {
		log.Warn("rate limits and metering are OFF (--limits off)")
	}
	var mailer *notify.Mailer
	told := func(a *coinpulse.Alert) *coinpulse.Alert { return a } // a firing's alert as its messages tell it
	if cfg.smtp.Host != "" {
		if mailer, err = notify.NewMailer(cfg.smtp); err != nil {
			return fmt.Errorf("smtp: %w", err)
		}
		log.Info("alert e-mails through SMTP", "host", cfg.smtp.Host, "port", mailer.Port(), "tls", cfg.smtp.TLS, "starttls", cfg.smtp.StartTLS)
	} else {
		log.Warn("no SMTP server (--smtp-host): alert e-mails are marked undeliverable")
		told = api.Unmailed
	}
	evaluator := alerting.NewEvaluator(alerting.EvaluatorConfig{Store: store, Log: log,
		Event: func(a *coinpulse.Alert) coinpulse.Event { return api.AlertEvent(told(a)) }})
	if cfg.webhookAllowPrivate {
		log.Warn("webhooks may reach private and loopback addresses (--webhook-allow-private)")
	}
	sender := notify.NewSender(notify.SenderOptions{AllowPrivate: cfg.webhookAllowPrivate})
	dispatcher := notify.NewDispatcher(store, sender, mailer, log, notify.DispatchOptions{Lease: cfg.deliveryLease})
	apiCfg.AlertIndex, apiCfg.Deliveries, apiCfg.WebhookAllowPrivate = evaluator, dispatcher, cfg.webhookAllowPrivate
	dash := dashboard.New(dashboard.Config{Store: store, Plans: cfg.plans, Log: log, BillingURL: cfg.billingURL, Secure: cfg.https, Limiter: apiCfg.Limiter, TrustedProxies: cfg.trustedProxies})
	apiCfg.Dashboard = dash.Handler()
	srv := api.New(apiCfg)
	hub := srv.Hub()
	announceFirings(evaluator, hub, dispatcher, told)
	evaluator.SetEntitled(srv.Entitlement)
	dash.SetOnRevoke(srv.RefreshAuth)
	dispatcher.SetEntitled(srv.Entitlement)

	base := baseURL(ln.Addr())
	log.Info("listening", "addr", ln.Addr().String(), "docs", base+"/docs")
	if err := demoAccount(ctx, store, base, cfg, stdout); err != nil {
		return err
	}

	// Background work stops after the HTTP server has drained.
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBG()
	var wg sync.WaitGroup
	wg.Go(func() { srv.Run(bg) })
	if mtr != nil {
		wg.Go(func() { mtr.Run(bg) })
	}
	wg.Go(func() { dispatcher.Run(bg) })
	// SIGHUP puts the --plans file's plans in force again, without a
	// restart (hup is watched from the start, so that an early one does
	// not end the process).
	wg.Go(func() {
		for {
			select {
			case <-bg.Done():
				return
			case <-hup:
				reloadPlans(bg, cfg.plansFile, srv, dash, log)
			}
		}
	})
	snaps := engine.Subscribe()
	prices := engine.Subscribe()
	wg.Go(func() { evaluator.Run(bg, snaps) })
	wg.Go(func() { publishPrices(bg, hub, prices) })
	wg.Go(func() {
		// A failed load (the feed or the database erring) is tried again,
		// after 1 s, then twice as long each time up to 30 s: the node
		// stays unready (503) until one succeeds, but for a live feed's,
		// which serves quotes while it backfills (/readyz says so).
		for wait := time.Second; ; wait = min(2*wait, 30*time.Second) {
			err := engine.Load(bg)
			if err == nil {
				break
			}
			if bg.Err() != nil {
				return
			}
			log.Error("market data failed to load; retrying", "err", err, "retry_in", wait)
			select {
			case <-bg.Done():
				return
			case <-time.After(wait):
			}
		}
		if err := engine.Run(bg); err != nil {
			log.Error("market engine stopped", "err", err)
		}
	})

	handler := srv.Handler()
	if withBenchHeaders != nil && cfg.limits != "on" {
		handler = withBenchHeaders(handler, log)
	}
	hs := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second, WriteTimeout: cfg.writeTimeout, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		DisableGeneralOptionsHandler: true} // OPTIONS * gets the API's JSON 404, not net/http's bare 200
	hs.RegisterOnShutdown(hub.Close)         // WebSockets are hijacked: Shutdown does not wait for them
	hs.RegisterOnShutdown(srv.BeginShutdown) // simulated timeouts end at once
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(srv.Listener(ln)) }() // net/http's own 400, 431, … in the envelope
	select {
	case err := <-serveErr:
		stopBG()
		wg.Wait()
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down", "timeout", cfg.shutdownTimeout)
	// A second SIGINT or SIGTERM cuts the waits below short.
	stopping, cutShort := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cutShort(nil)
	again := make(chan os.Signal, 1)
	signal.Notify(again, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(again)
	go func() {
		select {
		case <-again:
			log.Warn("a second signal: stopping now, without waiting for the calls in flight or the queued metered calls; a third kills the process")
			signal.Reset(os.Interrupt, syscall.SIGTERM) // the default: a third one ends the process
			cutShort(errSecondSignal)
		case <-stopping.Done():
		}
	}()
	sctx, cancel := context.WithTimeout(stopping, cfg.shutdownTimeout)
	defer cancel()
	err = hs.Shutdown(sctx)
	// Each wait below has its own timeout, so that a call still running
	// does not cost the queue its write.
	dctx, dcancel := context.WithTimeout(stopping, cfg.shutdownTimeout)
	defer dcancel()
	var meterErr error // admitted calls that will not be metered
	if mtr != nil {
		// Every call the server admitted is written before the store
		// closes: the handlers Shutdown does not wait for (WebSockets,
		// which the hub is closing, and calls past its timeout) meter
		// their calls first.
		if derr := srv.Drain(dctx); derr != nil {
			log.Error("calls still running, not metered", "err", derr)
			meterErr = fmt.Errorf("calls still running were not metered: %w", derr)
		}
	}
	if errors.Is(err, context.DeadlineExceeded) && context.Cause(stopping) == nil {
		// Shutdown leaves the connections it gave up on open, and their
		// requests go on: given the same time again, they may all end,
		// late but whole, and nothing is cut off.
		if hs.Shutdown(dctx) == nil {
			log.Warn("requests in flight outlasted --shutdown-timeout; they ended within the second wait, and none was cut off", "timeout", cfg.shutdownTimeout)
			err = nil
		}
	}
	if mtr != nil {
		mctx, mcancel := context.WithTimeout(stopping, cfg.shutdownTimeout)
		defer mcancel()
		if merr := mtr.Close(mctx); merr != nil {
			log.Error("metering not drained", "err", merr)
			meterErr = errors.Join(meterErr, fmt.Errorf("metered calls were not written: %w", merr))
		}
	}
	stopBG()
	bgDone := make(chan struct{})
	go func() { wg.Wait(); close(bgDone) }()
	select {
	case <-bgDone:
	case <-stopping.Done(): // cut short: background work (saving the market state) gets a second
		select {
		case <-bgDone:
		case <-time.After(time.Second):
		}
	}
	switch {
	case context.Cause(stopping) == errSecondSignal:
		return errSecondSignal
	case errors.Is(err, context.DeadlineExceeded):
		// A non-zero exit: the supervisor should know the stop was not
		// clean.
		return fmt.Errorf("shutdown: requests still in flight after --shutdown-timeout %s were cut off", cfg.shutdownTimeout)
	case err != nil && !errors.Is(err, http.ErrServerClosed):
		return fmt.Errorf("shutdown: %w", err)
	case meterErr != nil:
		// Lost calls count in the month but are not in /usage: as in a
		// crash, and the supervisor should know it.
		return fmt.Errorf("shutdown: %w", meterErr)
	}
	log.Info("stopped")
	return nil
}

// errSecondSignal ends a serve whose graceful shutdown a second SIGINT or
// SIGTERM cut short.
var errSecondSignal = errors.New("shutdown cut short by a second signal")

// givenAny returns the first of names that was given, or "".
func givenAny(given map[string]bool, names ...string) string {
	for _, n := range names {
		if given[n] {
			return n
		}
	}
	return ""
}

// configFlagError names the flag of the Config field a feed refused (an
// *upstream.ConfigError), by flags.
func configFlagError(err error, flags map[string]string) error {
	var ce *upstream.ConfigError
	if errors.As(err, &ce) {
		return fmt.Errorf("%s: %w", flags[ce.Field], err)
	}
	return err
}

// checkCoinGecko checks the coingecko feed's flags and reads its key: the
// feed's own bounds, and a refresh whose quotes alone would take more
// calls than the rate allows.
func (c *serveConfig) checkCoinGecko() error {
	if c.coingeckoKeyFile != "" {
		k, err := readToken(c.coingeckoKeyFile, 1)
		if err != nil {
			return fmt.Errorf("--coingecko-key-file: %w", err)
		}
		c.coingecko.APIKey = k
	}
	if err := c.coingecko.Validate(); err != nil { // a 0 given is refused, not the default
		return configFlagError(err, map[string]string{"BaseURL": "--coingecko-url", "APIKey": "--coingecko-key-file", "Coins": "--coingecko-coins",
			"CallsPerMinute": "--coingecko-rate", "HistoryDays": "--coingecko-history-days"})
	}
	u, _ := url.Parse(c.coingecko.BaseURL)
	switch host := u.Hostname(); {
	case host == "api.coingecko.com" && c.coingecko.HistoryDays > 365:
		return fmt.Errorf("--coingecko-history-days %d: CoinGecko's public API, and its free demo keys, reach 365 days back; more takes a paid plan's --coingecko-url https://pro-api.coingecko.com/api/v3", c.coingecko.HistoryDays)
	case strings.HasPrefix(host, "pro-api.") && c.coingecko.APIKey == "":
		return fmt.Errorf("--coingecko-url %s: a paid plan's API needs its key: --coingecko-key-file", c.coingecko.BaseURL)
	}
	// The quotes' calls, and the hourly one for the count of exchanges,
	// must fit the rate, or the refreshes fall behind.
	perRefresh := (c.coingecko.Coins + 249) / 250
	if perHour := float64(perRefresh)*float64(time.Hour)/float64(c.refresh) + 1; perHour > float64(c.coingecko.CallsPerMinute)*60 {
		return fmt.Errorf("--refresh %s: quoting %d coins takes %d CoinGecko calls a refresh, %.0f an hour with the hourly count of exchanges, more than --coingecko-rate %d allows (%d an hour); refresh less often",
			c.refresh, c.coingecko.Coins, perRefresh, perHour, c.coingecko.CallsPerMinute, c.coingecko.CallsPerMinute*60)
	}
	return nil
}

// newFeed opens the market feed cfg names, and logs that its figures are
// not the market's of the moment.
func newFeed(cfg serveConfig, log *slog.Logger) (coinpulse.Feed, error) {
	if cfg.feed == "binance" {
		bc := cfg.binance
		bc.Log = log
		f, err := binance.New(bc)
		if err != nil {
			return nil, err
		}
		log.Info("market data from Binance", "url", bc.BaseURL, "quote", bc.Quote, "calls_a_minute", bc.CallsPerMinute,
			"note", "the bundled real coins that trade against the quote asset; market caps are Binance's price times the bundled circulating supply")
		return f, nil
	}
	if cfg.feed == "coingecko" {
		cg := cfg.coingecko
		cg.Log = log
		f, err := coingecko.New(cg)
		if err != nil {
			return nil, err
		}
		calls := coingecko.BackfillCalls(cfg.coingecko.Coins)
		log.Info("market data from CoinGecko", "url", cfg.coingecko.BaseURL, "coins", cfg.coingecko.Coins, "calls_a_minute", cfg.coingecko.CallsPerMinute,
			"key", cfg.coingecko.APIKey != "",
			"first_start", fmt.Sprintf("backfills %d coins in about %d calls, %s at this rate", cfg.coingecko.Coins, calls, (time.Duration(calls)*time.Minute/time.Duration(cfg.coingecko.CallsPerMinute)).Round(time.Second)))
		if cfg.coingecko.APIKey == "" && cfg.coingecko.BaseURL == coingecko.DefaultURL {
			log.Warn("coingecko: no --coingecko-key-file: CoinGecko's public API answers a few calls a minute without a key; a free demo key allows 30")
		}
		return f, nil
	}
	if cfg.feed == "replay" {
		f, err := replay.Load(cfg.replayDir)
		if err != nil {
			return nil, fmt.Errorf("--replay-dir: %w", err)
		}
		if f.Start().After(time.Now()) {
			return nil, fmt.Errorf("--replay-dir %s: the recording starts on %s, in the future: there is nothing to play yet", cfg.replayDir, f.Start().Format(time.DateOnly))
		}
		log.Warn("market data is REPLAYED: recorded prices on a loop, not the market's of the moment",
			"feed", f.String(), "dir", cfg.replayDir, "loop_start", f.Start(), "loop_days", int(f.Period()/(24*time.Hour)))
		if left := f.LeftOut(); len(left) > 0 {
			log.Info("replay: coins not recorded for the whole span are left out", "coins", len(left), "first", left[:min(len(left), 5)])
		}
		if u := f.UnknownPrices(); len(u) > 0 {
			log.Info("replay: rows of unknown price (0, or beyond what a price can be) are read as missing, the price moving over them", "coins", u)
		}
		return f, nil
	}
	f, err := sim.New(cfg.seed, cfg.simCoins)
	if err != nil {
		return nil, err
	}
	log.Warn("market data is SIMULATED: prices are made up by the sim feed", "feed", f.String())
	return f, nil
}

// withBenchHeaders is set only in a build with -tags benchheaders
// (benchheaders.go), which bench/limits.sh makes to measure what the five
// rate-limit headers alone cost: it wraps the handler of a serve whose
// limits are off.
var withBenchHeaders func(http.Handler, *slog.Logger) http.Handler

// dialRedis connects to --redis and checks that it answers within 5 s.
func dialRedis(ctx context.Context, cfg serveConfig, log *slog.Logger) (*redis.Client, error) {
	opts, err := ratelimit.ClientOptions(cfg.redis)
	if err != nil {
		return nil, fmt.Errorf("--redis: %w", err)
	}
	redis.SetLogger(&redisLog{log: log, now: time.Now})
	client := redis.NewClient(opts)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		client.Close()
		return nil, fmt.Errorf("--redis %s: %w", opts.Addr, err)
	}
	return client, nil
}

// newLimiter returns the limiter cfg asks for: in Redis (client, dialled
// from --redis) when there is one, else in-process; with Redis, the
// WebSocket connections are capped across the nodes in it too (nil
// slots: each node caps its own). Either
// seeds a month's count from the store, so that a restart resets
// nobody's allowance: from the calls the meters counted admitted to the
// plan, which include those still being answered, or the metered calls
// if more (in a month when nodes of a build that did not count
// admissions served too).
func newLimiter(ctx context.Context, cfg serveConfig, client *redis.Client, store coinpulse.Store, log *slog.Logger) (coinpulse.Limiter, coinpulse.Slots, func(), error) {
	user := func(account string) (int64, bool) {
		id, err := strconv.ParseInt(strings.TrimPrefix(account, "u"), 10, 64)
		return id, err == nil && strings.HasPrefix(account, "u")
	}
	seed := func(ctx context.Context, account string, month time.Time) (int64, error) {
		id, ok := user(account)
		if !ok {
			return 0, nil // sandbox accounts have no monthly allowance
		}
		metered, err := store.MonthCalls(ctx, id, month)
		if err != nil {
			return 0, err
		}
		admitted, err := store.MonthAdmitted(ctx, id, month)
		return max(metered, admitted), err
	}
	if client == nil {
		log.Info("rate limits in process (one node); use --redis to share them between nodes")
		checkLimiter(ctx, store, "in process", log)
		return ratelimit.NewMemory(time.Now, seed), nil, func() {}, nil
	}
	opts := client.Options()
	log.Info("rate limits in Redis", "addr", opts.Addr)
	checkLimiter(ctx, store, fmt.Sprintf("redis %s db %d prefix %q", opts.Addr, opts.DB, cfg.redisPrefix), log)
	// A seed of a month under way, or of one seeded before, waits out one
	// batch of every node's meter, and a margin for the write, so that no
	// call is missed.
	settle := cfg.meterInterval + 500*time.Millisecond
	seen := func(ctx context.Context, account string, month time.Time) (bool, error) {
		id, ok := user(account)
		if !ok {
			return false, nil
		}
		return store.MarkMonth(ctx, id, month)
	}
	limiter := ratelimit.NewRedis(client, seed, ratelimit.WithPrefix(cfg.redisPrefix),
		ratelimit.WithSettle(settle), ratelimit.WithSeen(seen))
	slots := ratelimit.NewRedisSlots(client, ratelimit.SlotsConfig{Prefix: cfg.redisPrefix, Log: log})
	return limiter, slots, func() { limiter.Close(); slots.Close() }, nil
}

// limiterKey is where the store keeps which limiter last served it.
const limiterKey = "limiter"

// checkLimiter warns when the store was last served with another limiter
// than limiter (in process, or a Redis, db and prefix), then records
// limiter. Nodes on one database must share one limiter: with different
// ones each seeds an account's month from the database and then counts
// apart, so the account could make its allowance once on each. A
// deliberate move (another Redis) warns once; the check cannot see nodes
// that each keep their limits in process.
func checkLimiter(ctx context.Context, store coinpulse.KVStore, limiter string, log *slog.Logger) {
	last, err := store.GetKV(ctx, limiterKey)
	switch {
	case err == nil && string(last) != limiter:
		log.Warn("this database was last served with another rate limiter; nodes sharing a database must share one limiter (--redis and --redis-prefix), or each counts an account's allowance apart",
			"last", string(last), "now", limiter)
	case err != nil && !coinpulse.IsNotFound(err):
		log.Warn("cannot read which rate limiter last served this database", "err", err)
		return
	}
	if err == nil && string(last) == limiter {
		return
	}
	if err := store.PutKV(ctx, limiterKey, []byte(limiter)); err != nil {
		log.Warn("cannot record the rate limiter in the database", "err", err)
	}
}

// redisLog takes go-redis's own messages (a failed dial, a bad
// connection) into the service's log, at most one a second with the
// number left out since, instead of go-redis's plain lines on stderr,
// which a JSON log cannot parse and a Redis outage under load repeats
// for every call.
type redisLog struct {
	log        *slog.Logger
	now        func() time.Time
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

func (l *redisLog) Printf(_ context.Context, format string, v ...any) {
	l.mu.Lock()
	now := l.now()
	if !l.last.IsZero() && now.Sub(l.last) < time.Second {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	n := l.suppressed
	l.last, l.suppressed = now, 0
	l.mu.Unlock()
	l.log.Warn("redis client: "+strings.TrimSpace(fmt.Sprintf(format, v...)), "suppressed_since_last", n)
}

// cliCommand is how the operator runs the CLI of the binary invoked as
// arg0: "go run ./cmd/coinpulse" under go run (whose binary is built in a
// temporary go-build directory), else the command as invoked.
func cliCommand(arg0 string) string {
	if strings.Contains(filepath.ToSlash(arg0), "/go-build") {
		return "go run ./cmd/coinpulse"
	}
	if strings.ContainsAny(arg0, " '\"$") {
		return "'" + strings.ReplaceAll(arg0, "'", `'\''`) + "'"
	}
	return arg0
}

// DemoEmail is the account serve creates on a fresh database.
const DemoEmail = "demo@coinpulse.local"

// baseURL is the URL to print for the listener at addr: a wildcard
// address (--addr :8080) is shown as localhost, which reaches it from the
// machine it runs on, where http://[::]:8080 or http://0.0.0.0:8080
// would not work everywhere.
func baseURL(addr net.Addr) string {
	if a, ok := addr.(*net.TCPAddr); ok && a.IP.IsUnspecified() {
		return "http://" + net.JoinHostPort("localhost", strconv.Itoa(a.Port))
	}
	return "http://" + addr.String()
}

// demoAccount creates the demo account with a live and a sandbox key on a
// fresh database (one without users) under --demo, and prints them with a
// ready curl line; on later starts, or without --demo, it prints how to
// get a key.
func demoAccount(ctx context.Context, store coinpulse.Store, base string, cfg serveConfig, stdout io.Writer) error {
	dbArg := ""
	if cfg.db != "" {
		dbArg = " --db '" + describeDB(cfg.db, cfg.dataDir) + "'"
		if strings.Contains(describeDB(cfg.db, cfg.dataDir), "xxxxx") {
			dbArg += " (with your password in place of xxxxx)"
		}
	} else if cfg.dataDir != defaultDataDir {
		dbArg = " --data-dir '" + cfg.dataDir + "'"
	}
	cli := cliCommand(os.Args[0])
	// Only a fresh database (one without users) gets the account: an
	// operator who started without it (--demo=false) must not find a pro
	// account with live keys added by a later start that left the flag out.
	has, err := store.HasUsers(ctx)
	if err != nil {
		return err
	}
	if has {
		if _, err := store.UserByEmail(ctx, DemoEmail); err == nil {
			fmt.Fprintf(stdout, "\nCoinpulse is starting on %s (demo account %s).\nCreate a key for it with:\n  %s keys create --email %s%s\nthen: curl -H \"Authorization: Bearer <key>\" \"%s/api/v1/markets?per_page=5\"\n\n", base, DemoEmail, cli, DemoEmail, dbArg, base)
			return nil
		} else if !coinpulse.IsNotFound(err) {
			return err
		}
		fmt.Fprintf(stdout, "\nCoinpulse is starting on %s (no demo account: --demo makes one only on a fresh database).\nCreate a key for an account with:\n  %s keys create --email <e-mail>%s\n\n", base, cli, dbArg)
		return nil
	}
	if !cfg.demo {
		fmt.Fprintf(stdout, "\nCoinpulse is starting on %s with no accounts (--demo=false).\nCreate an account and a key for it with:\n  %s users create --email <e-mail> --tier <tier>%s\n  %s keys create --email <e-mail>%s\n\n", base, cli, dbArg, cli, dbArg)
		return nil
	}
	u := &coinpulse.User{Email: DemoEmail, Tier: coinpulse.TierPro}
	if err := store.CreateUser(ctx, u); coinpulse.ErrorCode(err) == coinpulse.CodeConflict {
		// Another node starting on the same new database made it first.
		fmt.Fprintf(stdout, "\nCoinpulse is starting on %s (demo account %s, made by another node).\nCreate a key for it with:\n  %s keys create --email %s%s\n\n", base, DemoEmail, cli, DemoEmail, dbArg)
		return nil
	} else if err != nil {
		return err
	}
	rw := coinpulse.Permissions{Read: true, Write: true}
	live, err := createKey(ctx, store, u.ID, "demo live", false, rw, nil)
	if err != nil {
		return err
	}
	test, err := createKey(ctx, store, u.ID, "demo sandbox", true, rw, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, `
Coinpulse is starting on %s with a demo account (%s, tier pro).
These keys are shown once; keep them:

  live key:    %s
  sandbox key: %s

Try it (market data is ready a few seconds after the first start):

  curl -H "Authorization: Bearer %s" "%s/api/v1/markets?per_page=5"

API docs: %s/docs
More keys: %s keys create --email %s%s

`, base, DemoEmail, live, test, test, base, base, cli, DemoEmail, dbArg)
	return nil
}

// announceFirings sends the alerts each tick fires to their owners'
// WebSockets, each as told tells it, and wakes the dispatcher for their
// deliveries.
func announceFirings(ev *alerting.Evaluator, hub *stream.Hub, d *notify.Dispatcher, told func(*coinpulse.Alert) *coinpulse.Alert) {
	ev.SetOnFire(func(fired []coinpulse.Alert) {
		d.Wake()
		for i := range fired {
			a := &fired[i]
			hub.PublishAlert(a.Owner.UserID, string(a.Owner.Mode), a.ID, api.AlertJSON(told(a)))
		}
	})
}

// publishPrices sends each new snapshot's prices to the WebSocket clients.
func publishPrices(ctx context.Context, hub *stream.Hub, snaps <-chan *market.Snapshot) {
	var updates []stream.PriceUpdate
	for {
		select {
		case <-ctx.Done():
			return
		case snap := <-snaps:
			if hub.Len() == 0 {
				continue // nobody to tell
			}
			updates = updates[:0]
			for _, c := range snap.Coins() {
				updates = append(updates, stream.PriceUpdate{CoinID: c.ID, Symbol: c.Symbol, Price: c.CurrentPrice,
					PriceChangePercentage24h: c.PriceChangePercentage24h, MarketCap: c.MarketCap,
					TotalVolume: c.TotalVolume, LastUpdated: c.LastUpdated})
			}
			hub.PublishPrices(snap.AsOf, snap.ID, updates)
		}
	}
}

// readToken reads a secret from the file at path: its one line of at
// least minLen printable ASCII characters without spaces (a trailing line
// break is not part of it).
func readToken(path string, minLen int) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	t := strings.TrimRight(string(b), "\r\n")
	if len(t) < minLen {
		return "", fmt.Errorf("%s holds %d characters; use at least %d", path, len(t), minLen)
	}
	for _, c := range t {
		if c <= ' ' || c >= 0x7f {
			return "", fmt.Errorf("%s holds a space, a control character or a non-ASCII one; use printable ASCII on one line", path)
		}
	}
	return t, nil
}

// readMetricsToken reads the token of --metrics-token-file: its one line,
// at least 16 printable characters without spaces, as a bearer token is.
func readMetricsToken(path string) (string, error) {
	t, err := readToken(path, 16)
	if err != nil && strings.Contains(err.Error(), "characters; use at least") {
		err = fmt.Errorf("%w (for example: openssl rand -hex 32)", err)
	}
	return t, err
}
