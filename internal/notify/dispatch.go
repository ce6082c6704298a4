package notify

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	mrand "math/rand/v2"
	"net/url"
	"sync"
	"time"

	"coinpulse"
)

// Dispatcher delivers the outbox: it leases due deliveries from the store,
// sends each (webhooks through a Sender, e-mails through a Mailer) and
// records the attempt. Every node may run one: a lease gives a delivery to
// one node at a time, and a node that dies mid-delivery loses only its
// lease, so the delivery is sent again, with the same webhook-id, once the
// lease expires (at-least-once).
type Dispatcher struct {
	store  DispatchStore
	sender *Sender
	mailer *Mailer // nil: e-mail is undeliverable
	log    *slog.Logger
	clock  func() time.Time
	opts   DispatchOptions
	wake   chan struct{}
	// entitled, when set, says whose firings may still be sent.
	entitled coinpulse.EntitlementFunc
}

// DispatchStore is what the dispatcher needs of the store.
type DispatchStore interface {
	coinpulse.AlertStore
	UserByID(ctx context.Context, id int64) (*coinpulse.User, error)
}

// DispatchOptions tunes a Dispatcher; zero values take the defaults.
type DispatchOptions struct {
	// Poll is the longest a due delivery waits when nobody wakes the
	// dispatcher (default 1 s).
	Poll time.Duration
	// Lease is how long a claimed delivery is this node's (default 2 min,
	// well over an attempt's timeout).
	Lease time.Duration
	// Workers is how many deliveries are sent at once (default 32).
	Workers int
	// Batch is the most deliveries one claim takes (default 128); it takes
	// no more than there are Workers free.
	Batch int
	// Clock is the time of attempts (default time.Now).
	Clock func() time.Time
	// Rand returns a number in [0, 1) for e-mail retry jitter.
	Rand func() float64
}

// NoSMTP is the error of an e-mail on a server without SMTP, which
// records it undeliverable.
const NoSMTP = "no SMTP server is configured on this Coinpulse server"

// NewDispatcher returns a dispatcher; mailer nil marks e-mails
// undeliverable.
func NewDispatcher(store DispatchStore, sender *Sender, mailer *Mailer, log *slog.Logger, opts DispatchOptions) *Dispatcher {
	if opts.Poll <= 0 {
		opts.Poll = time.Second
	}
	if opts.Lease <= 0 {
		opts.Lease = 2 * time.Minute
	}
	if opts.Workers <= 0 {
		opts.Workers = 32
	}
	if opts.Batch <= 0 {
		opts.Batch = 128
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Rand == nil {
		opts.Rand = mrand.Float64
	}
	if log == nil {
		log = slog.Default()
	}
	return &Dispatcher{store: store, sender: sender, mailer: mailer, log: log, clock: opts.Clock, opts: opts,
		wake: make(chan struct{}, 1)}
}

// SetEntitled sets the function that says whose firings may still be
// sent; call it before Run. A firing's delivery to an account whose plan
// or subscription no longer includes alerts (e-mail, webhooks) or
// webhooks (webhooks) fails at its next attempt, without being sent.
func (d *Dispatcher) SetEntitled(f coinpulse.EntitlementFunc) { d.entitled = f }

// refused returns the failed attempt of a firing's delivery that the
// owner's account is no longer entitled to, or ok false when it may be
// sent (a test event always may: the API sends it to an entitled caller).
func (d *Dispatcher) refused(ctx context.Context, del coinpulse.Delivery, now time.Time) (coinpulse.Attempt, bool) {
	if d.entitled == nil || del.EventType == coinpulse.EventWebhookTest {
		return coinpulse.Attempt{}, false
	}
	en, err := d.entitled(ctx, del.Owner.UserID)
	switch {
	case err != nil:
		return coinpulse.Attempt{At: now, Status: coinpulse.DeliveryPending, NextAttemptAt: now.Add(time.Minute), Error: "internal error; will retry"}, true
	case !en.Alerts:
		return coinpulse.Attempt{At: now, Status: coinpulse.DeliveryFailed, Error: "the account's plan or subscription no longer includes alerts"}, true
	case del.Kind == coinpulse.KindWebhook && !en.Webhooks:
		return coinpulse.Attempt{At: now, Status: coinpulse.DeliveryFailed, Error: "the account's plan no longer includes webhooks"}, true
	}
	return coinpulse.Attempt{}, false
}

// Wake makes the dispatcher look for due deliveries now (after a firing).
func (d *Dispatcher) Wake() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Run delivers until ctx ends. Attempts in flight when ctx ends are
// abandoned unrecorded; their leases expire and they are sent again.
func (d *Dispatcher) Run(ctx context.Context) {
	sem := make(chan struct{}, d.opts.Workers)
	var wg sync.WaitGroup
	defer wg.Wait()
	t := time.NewTimer(0)
	defer t.Stop()
	kinds := [...]coinpulse.DeliveryKind{coinpulse.KindWebhook, coinpulse.KindEmail}
	var failing [len(kinds)]claimFailures
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.wake:
		case <-t.C:
		}
		for ctx.Err() == nil {
			n := 0
			for i, kind := range kinds {
				// Claim no more than the workers free to send them now: a
				// claimed delivery waiting for a worker would hold its
				// lease idle, and past the lease another node would send
				// it too. Only this loop takes workers, so as many as are
				// free now stay free until it does.
				free := d.opts.Workers - len(sem)
				if free == 0 {
					select { // wait for one to finish
					case sem <- struct{}{}:
						<-sem
					case <-ctx.Done():
						return
					}
					free = d.opts.Workers - len(sem)
				}
				ds, err := d.store.ClaimDeliveries(ctx, kind, d.clock(), d.opts.Lease, min(d.opts.Batch, max(free, 1)))
				if err != nil {
					if ctx.Err() == nil {
						failing[i].failed(d.log, kind, err, d.clock())
					}
					break
				}
				failing[i].ok(d.log, kind, d.clock())
				n += len(ds)
				for _, del := range ds {
					select {
					case sem <- struct{}{}:
					case <-ctx.Done():
						return
					}
					wg.Go(func() {
						defer func() { <-sem }()
						d.deliver(ctx, del)
					})
				}
			}
			if n == 0 {
				break
			}
		}
		t.Reset(d.opts.Poll)
	}
}

// ClaimLogEvery is how often at most the dispatcher logs about failed
// claims of one kind: while the database is down every poll fails (once
// a second).
const ClaimLogEvery = 10 * time.Second

// claimFailures rations the log of one kind's failed claims to a line
// every ClaimLogEvery at most (by the dispatcher's clock): the first
// failure is logged at once, later ones in the next line with their
// count, and once a claim works a line says so, with the failures no line
// counted yet. A database that fails every other poll logs no more.
type claimFailures struct {
	failing  bool      // claims failed since the last line that said they work
	unlogged int       // failures no line has counted
	last     time.Time // the last line; zero: none
}

func (c *claimFailures) turn(now time.Time) bool {
	return c.last.IsZero() || now.Sub(c.last) >= ClaimLogEvery
}

func (c *claimFailures) failed(log *slog.Logger, kind coinpulse.DeliveryKind, err error, now time.Time) {
	c.failing = true
	c.unlogged++
	if c.turn(now) {
		log.Error("claim deliveries", "kind", kind, "err", err, "failures", c.unlogged)
		c.unlogged, c.last = 0, now
	}
}

func (c *claimFailures) ok(log *slog.Logger, kind coinpulse.DeliveryKind, now time.Time) {
	if c.failing && c.turn(now) {
		log.Info("deliveries are claimed again", "kind", kind, "failures", c.unlogged)
		c.failing, c.unlogged, c.last = false, 0, now
	}
}

// deliver makes one attempt of del and records it.
func (d *Dispatcher) deliver(ctx context.Context, del coinpulse.Delivery) {
	var a coinpulse.Attempt
	switch del.Kind {
	case coinpulse.KindWebhook:
		a = d.webhook(ctx, del)
	case coinpulse.KindEmail:
		a = d.email(ctx, del)
	default:
		a = coinpulse.Attempt{At: d.clock(), Status: coinpulse.DeliveryFailed, Error: "unknown delivery kind " + string(del.Kind)}
	}
	if ctx.Err() != nil {
		return // shutting down: the lease expires and the attempt is made again
	}
	a.Lease = del.LeaseUntil
	err := d.store.RecordAttempt(ctx, del.ID, a)
	switch {
	case err == nil, ctx.Err() != nil, coinpulse.IsNotFound(err): // not found: the endpoint was deleted meanwhile
	case coinpulse.ErrorCode(err) == coinpulse.CodeConflict:
		// The attempt outlived its lease (this node stalled): another
		// claim has the delivery, and records its own attempt.
		d.log.Warn("delivery attempt outlived its lease; not recorded", "delivery", del.ID, "status", a.Status, "lease_until", del.LeaseUntil)
	default:
		d.log.Error("record delivery attempt", "delivery", del.ID, "err", err)
	}
}

func (d *Dispatcher) webhook(ctx context.Context, del coinpulse.Delivery) coinpulse.Attempt {
	now := d.clock()
	wh, err := d.store.Webhook(ctx, del.Owner, del.EndpointID)
	switch {
	case err != nil && coinpulse.IsNotFound(err):
		return coinpulse.Attempt{At: now, Status: coinpulse.DeliveryFailed, Error: "the endpoint was deleted"}
	case err != nil:
		return coinpulse.Attempt{At: now, Status: coinpulse.DeliveryPending, NextAttemptAt: now.Add(time.Minute), Error: "internal error; will retry"}
	case !wh.Enabled && del.EventType != coinpulse.EventWebhookTest:
		return coinpulse.Attempt{At: now, Status: coinpulse.DeliveryFailed, Error: "the endpoint is disabled: " + wh.DisabledReason}
	}
	if a, ok := d.refused(ctx, del, now); ok {
		return a
	}
	res := d.sender.Send(ctx, wh.URL, wh.Secret, del, now)
	if ae := (*AddrError)(nil); errors.As(res.Err, &ae) {
		// The operator's log too: a name that resolves to an internal
		// address may be a probe of the network (DNS rebinding).
		d.log.Warn("webhook delivery refused: the endpoint's address is not public", "delivery", del.ID, "endpoint", del.EndpointID,
			"user_id", del.Owner.UserID, "host", hostOf(wh.URL), "addr", ae.Addr.String(), "reason", ae.Reason)
	}
	a := d.sender.Outcome(res, del.Attempts+1, d.clock())
	if !wh.Enabled { // a test event to a disabled endpoint: no retries, no disabling
		if a.Status == coinpulse.DeliveryPending {
			a.Status, a.NextAttemptAt = coinpulse.DeliveryFailed, time.Time{}
			a.Error += "; not retried: the endpoint is disabled"
		}
		a.DisableEndpoint = ""
	}
	return a
}

// mailEvent is the part of an alert.triggered payload an e-mail needs.
type mailEvent struct {
	Data struct {
		Alert struct {
			ID             int64          `json:"id"`
			CoinID         string         `json:"coin_id"`
			CoinSymbol     string         `json:"coin_symbol"`
			TargetPrice    json.Number    `json:"target_price"`
			Condition      string         `json:"condition"`
			TriggeredAt    time.Time      `json:"triggered_at"`
			TriggeredPrice json.Number    `json:"triggered_price"`
			Mode           coinpulse.Mode `json:"mode"`
		} `json:"alert"`
	} `json:"data"`
}

func (d *Dispatcher) email(ctx context.Context, del coinpulse.Delivery) coinpulse.Attempt {
	now := d.clock()
	if d.mailer == nil {
		return coinpulse.Attempt{At: now, Status: coinpulse.DeliveryUndeliverable, Error: NoSMTP}
	}
	var ev mailEvent
	if err := json.Unmarshal(del.Payload, &ev); err != nil {
		return coinpulse.Attempt{At: now, Status: coinpulse.DeliveryFailed, Error: "the event could not be read"}
	}
	if a, ok := d.refused(ctx, del, now); ok {
		return a
	}
	u, err := d.store.UserByID(ctx, del.Owner.UserID)
	if err != nil {
		if coinpulse.IsNotFound(err) {
			return coinpulse.Attempt{At: now, Status: coinpulse.DeliveryFailed, Error: "the account no longer exists"}
		}
		return coinpulse.Attempt{At: now, Status: coinpulse.DeliveryPending, NextAttemptAt: now.Add(time.Minute), Error: "internal error; will retry"}
	}
	al := ev.Data.Alert
	err = d.mailer.SendAlert(ctx, u.Email, AlertMail{
		AlertID: al.ID, EventID: del.EventID, Mode: del.Owner.Mode, CoinID: al.CoinID, CoinSymbol: al.CoinSymbol,
		Condition: coinpulse.Condition(al.Condition), TargetPrice: al.TargetPrice.String(),
		TriggeredPrice: al.TriggeredPrice.String(), TriggeredAt: al.TriggeredAt,
	})
	now = d.clock()
	if err == nil {
		return coinpulse.Attempt{At: now, Status: coinpulse.DeliveryDelivered}
	}
	// The alert's owner sees what failed; the log also has the mail
	// server's address and the sockets, for the operator.
	d.log.Warn("e-mail delivery failed", "delivery", del.ID, "alert", del.AlertID, "permanent", IsPermanent(err), "err", err)
	a := coinpulse.Attempt{At: now, Error: truncate(PublicError(err), maxErrorLen)}
	if IsPermanent(err) || errors.Is(err, ErrInvalidAddress) {
		a.Status = coinpulse.DeliveryFailed
		return a
	}
	next, giveUp := NextAttempt(del.Attempts+1, now, d.opts.Rand)
	if giveUp {
		a.Status = coinpulse.DeliveryFailed
		return a
	}
	a.Status, a.NextAttemptAt = coinpulse.DeliveryPending, next
	return a
}

// hostOf is the host of a webhook URL, for logs.
func hostOf(rawURL string) string {
	if u, err := url.Parse(rawURL); err == nil {
		return u.Hostname()
	}
	return ""
}
