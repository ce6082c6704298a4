package api

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"maps"
	"mime"
	"net"
	"net/http"
	"net/mail"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"coinpulse"
	"coinpulse/internal/notify"
)

// The dispatcher's behaviour, end to end: alerts created through the API
// fire on a made-up snapshot, the evaluator queues their deliveries in
// the store's outbox, and a real notify.Dispatcher (with a real Sender)
// delivers them to real HTTP receivers on loopback. Time is the env's
// fake clock: the tests step it to a retry's due time instead of waiting.

// deliveryEnv is an env with a dispatcher on a fake clock, and a premium
// account's live key.
func deliveryEnv(t *testing.T, sender notify.SenderOptions, mailer *notify.Mailer) (*alertEnv, string) {
	t.Helper()
	env := newAlertEnv(t, alertEnvOptions{allowPrivate: true, dispatch: true, clock: newFakeClock(), sender: sender, mailer: mailer})
	return env, env.newKey(coinpulse.TierPremium)
}

// fireAlert creates an alert on bitcoin for key and fires it with a tick
// at the env's clock; it returns the alert as fired.
func (e *alertEnv) fireAlert(key string, notifyEmail bool) jsonAlert {
	e.tb.Helper()
	a := e.createAlert(key, fmt.Sprintf(`{"coin_id":"bitcoin","target_price":"1000","condition":"above","notify_email":%t}`, notifyEmail))
	fired := e.tick(map[string]float64{"bitcoin": 1234.56})
	if len(fired) != 1 || fired[0].ID != a.ID {
		e.tb.Fatalf("fired %+v, want alert %d", fired, a.ID)
	}
	return e.getAlert(key, a.ID)
}

// stepTo moves the clock to t and wakes the dispatcher.
func (e *alertEnv) stepTo(t time.Time) {
	e.clock.Set(t)
	e.disp.Wake()
}

func verifier(t *testing.T, secret string) *standardwebhooks.Webhook {
	t.Helper()
	v, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestDeliveryAlertTriggered(t *testing.T) {
	t.Parallel()
	env, _ := deliveryEnv(t, notify.SenderOptions{}, nil)
	ann := env.user(coinpulse.TierPremium)
	live, sandbox := env.key(ann, coinpulse.ModeLive, rw), env.key(ann, coinpulse.ModeTest, rw)
	bob := env.newKey(coinpulse.TierPremium)
	rc, rcSandbox, rcBob := newHookReceiver(t, nil), newHookReceiver(t, nil), newHookReceiver(t, nil)
	w := env.createWebhook(live, rc.url())
	ws := env.createWebhook(sandbox, rcSandbox.url())
	wb := env.createWebhook(bob, rcBob.url())

	a := env.fireAlert(live, false)
	h := rc.wait(t, 1)[0]
	if err := verifier(t, w.Secret).Verify(h.Body, h.Header); err != nil {
		t.Errorf("signature: %v", err)
	}
	if ts := h.Header.Get("webhook-timestamp"); ts != strconv.FormatInt(env.now().Unix(), 10) {
		t.Errorf("webhook-timestamp %s, want the dispatcher clock's %d", ts, env.now().Unix())
	}
	id := h.Header.Get("webhook-id")
	if !strings.HasPrefix(id, "msg_") || !strings.HasPrefix(h.Header.Get("webhook-signature"), "v1,") {
		t.Errorf("headers %v", h.Header)
	}
	// The payload: the alert as GET /alerts/{id} shows it, just fired,
	// and the price that crossed.
	body := jsonObject(t, h.Body)
	data, _ := body["data"].(map[string]any)
	rest := jsonObject(t, do(t, env.srv, "GET", fmt.Sprintf("/api/v1/alerts/%d", a.ID), live).Data)
	if body["type"] != "alert.triggered" || data == nil || fmt.Sprint(data["alert"]) != fmt.Sprint(rest) {
		t.Errorf("payload %s\nwant data.alert = %v", h.Body, rest)
	}
	if data["price"] != jsonNum("1234.56") || a.TriggeredPrice == nil || *a.TriggeredPrice != "1234.56" {
		t.Errorf("price %v, alert's triggered_price %v", data["price"], a.TriggeredPrice)
	}
	if ts, err := time.Parse(time.RFC3339Nano, fmt.Sprint(body["timestamp"])); err != nil || !ts.Equal(*a.TriggeredAt) {
		t.Errorf("payload timestamp %v, triggered_at %v", body["timestamp"], a.TriggeredAt)
	}
	d := env.waitDelivery(live, w.ID, "delivered", func(d jsonDelivery) bool { return d.Status == "delivered" })
	if d.EventID != id || d.EventType != "alert.triggered" || d.AlertID == nil || *d.AlertID != a.ID || d.Attempts != 1 ||
		d.LastStatusCode == nil || *d.LastStatusCode != 200 || d.LastError != nil {
		t.Errorf("delivery %+v", d)
	}
	// Nothing for the same user's sandbox endpoint or another account's.
	if ds := env.deliveries(sandbox, ws.ID); len(ds) != 0 {
		t.Errorf("the sandbox endpoint has deliveries %+v", ds)
	}
	if ds := env.deliveries(bob, wb.ID); len(ds) != 0 {
		t.Errorf("another account's endpoint has deliveries %+v", ds)
	}
	if n, m := len(rcSandbox.got()), len(rcBob.got()); n+m != 0 || len(rc.got()) != 1 {
		t.Errorf("receivers got %d (owner), %d (sandbox), %d (other account)", len(rc.got()), n, m)
	}
}

func jsonNum(s string) any { return jsonObject(&testing.T{}, []byte(`{"n":`+s+`}`))["n"] }

func TestDeliveryRetryAfter500(t *testing.T) {
	t.Parallel()
	env, key := deliveryEnv(t, notify.SenderOptions{}, nil)
	rc := newHookReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 0 {
			http.Error(w, "oops", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	w := env.createWebhook(key, rc.url())
	a := env.fireAlert(key, false)
	start := env.now()
	first := rc.wait(t, 1)[0]
	d := env.waitDelivery(key, w.ID, "attempted once", func(d jsonDelivery) bool { return d.Attempts == 1 })
	if d.Status != "pending" || d.LastStatusCode == nil || *d.LastStatusCode != 500 || d.LastError == nil ||
		*d.LastError != "the endpoint answered 500 Internal Server Error" || d.DeliveredAt != nil || d.NextAttemptAt == nil {
		t.Fatalf("after a 500: %+v", d)
	}
	// The next attempt is about 5 s later (±20 % jitter).
	if wait := d.NextAttemptAt.Sub(start); wait < 4*time.Second || wait > 6*time.Second {
		t.Fatalf("next attempt in %s, want about 5 s", wait)
	}
	// Not before it is due.
	env.stepTo(d.NextAttemptAt.Add(-time.Millisecond))
	time.Sleep(100 * time.Millisecond) // several dispatcher polls
	if n := len(rc.got()); n != 1 {
		t.Fatalf("%d attempts before the retry was due", n)
	}
	due := *d.NextAttemptAt
	env.stepTo(due)
	second := rc.wait(t, 2)[1]
	d = env.waitDelivery(key, w.ID, "delivered", func(d jsonDelivery) bool { return d.Status == "delivered" })
	if d.Attempts != 2 || d.LastStatusCode == nil || *d.LastStatusCode != 204 || d.LastError != nil || d.DeliveredAt == nil ||
		!d.DeliveredAt.Equal(due) || d.NextAttemptAt != nil {
		t.Errorf("after the retry: %+v", d)
	}
	// The same message twice: same webhook-id and body, each signed at its
	// own time.
	v := verifier(t, w.Secret)
	for i, h := range []hookHit{first, second} {
		if err := v.Verify(h.Body, h.Header); err != nil {
			t.Errorf("attempt %d: %v", i+1, err)
		}
	}
	if first.Header.Get("webhook-id") != second.Header.Get("webhook-id") || first.Header.Get("webhook-id") != d.EventID || !bytes.Equal(first.Body, second.Body) {
		t.Errorf("webhook-id %s then %s (log %s); bodies equal: %v", first.Header.Get("webhook-id"), second.Header.Get("webhook-id"), d.EventID, bytes.Equal(first.Body, second.Body))
	}
	if t1, t2 := first.Header.Get("webhook-timestamp"), second.Header.Get("webhook-timestamp"); t1 == t2 {
		t.Errorf("both attempts have timestamp %s", t1)
	}
	if d.AlertID == nil || *d.AlertID != a.ID {
		t.Errorf("delivery of alert %v, want %d", d.AlertID, a.ID)
	}
}

func TestDelivery410DisablesEndpoint(t *testing.T) {
	t.Parallel()
	env, key := deliveryEnv(t, notify.SenderOptions{}, nil)
	rc := newHookReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusGone) })
	w := env.createWebhook(key, rc.url())
	env.fireAlert(key, false)
	d := env.waitDelivery(key, w.ID, "failed", func(d jsonDelivery) bool { return d.Status == "failed" })
	if d.Attempts != 1 || d.LastStatusCode == nil || *d.LastStatusCode != 410 || d.NextAttemptAt != nil || d.DeliveredAt != nil {
		t.Errorf("after a 410: %+v", d)
	}
	got := env.webhook(key, w.ID)
	if got.Enabled || got.DisabledReason == nil || *got.DisabledReason != "the endpoint answered 410 Gone" {
		t.Fatalf("endpoint after a 410: %+v", got)
	}
	// A disabled endpoint gets no further firings.
	env.fireAlert(key, false)
	if ds := env.deliveries(key, w.ID); len(ds) != 1 {
		t.Errorf("%d deliveries after another firing, want 1", len(ds))
	}
	if n := len(rc.got()); n != 1 {
		t.Errorf("the receiver got %d requests, want 1", n)
	}
}

// An account that loses alerts (a lower tier, an expired subscription)
// has its alerts held, armed: a crossing fires nothing and sends nothing,
// and the alert fires at a crossing once the account has alerts again. A
// delivery made before the change fails unsent.
func TestAlertsHeldWithoutEntitlement(t *testing.T) {
	t.Parallel()
	env, _ := deliveryEnv(t, notify.SenderOptions{}, nil)
	u := env.user(coinpulse.TierPremium)
	key := env.key(u, coinpulse.ModeLive, rw)
	rc := newHookReceiver(t, nil)
	w := env.createWebhook(key, rc.url())
	a := env.createAlert(key, `{"coin_id":"bitcoin","target_price":"1000","condition":"above"}`)
	expired := env.now().Add(-time.Hour)
	for _, change := range []struct {
		tier    coinpulse.Tier
		expires *time.Time
	}{{coinpulse.TierFree, nil}, {coinpulse.TierPremium, &expired}} {
		if err := env.store.SetUserTier(env.ctx, u.ID, change.tier, change.expires); err != nil {
			t.Fatal(err)
		}
		env.waitEntitlement(u.ID, false)
		if fired := env.tick(map[string]float64{"bitcoin": 1234.56}); len(fired) != 0 {
			t.Errorf("tier %s, expires %v: fired %+v", change.tier, change.expires, fired)
		}
		if _, armed := env.ev.Index().Get(a.ID); !armed {
			t.Errorf("tier %s, expires %v: the alert left the index", change.tier, change.expires)
		}
	}
	if err := env.store.SetUserTier(env.ctx, u.ID, coinpulse.TierPremium, nil); err != nil {
		t.Fatal(err)
	}
	env.waitEntitlement(u.ID, true) // the node sees the change at its next poll of the auth epoch
	if fired := env.tick(map[string]float64{"bitcoin": 1234.56}); len(fired) != 1 || fired[0].ID != a.ID {
		t.Fatalf("entitled again: fired %+v, want alert %d", fired, a.ID)
	}
	env.waitDelivery(key, w.ID, "delivered", func(d jsonDelivery) bool { return d.Status == "delivered" })

	// A firing whose delivery is still to be sent when the account is
	// downgraded: its webhook delivery fails unsent.
	rc2 := newHookReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	w2 := env.createWebhook(key, rc2.url())
	env.fireAlert(key, false)
	env.waitDelivery(key, w2.ID, "a retry", func(d jsonDelivery) bool { return d.Attempts == 1 && d.Status == "pending" })
	if err := env.store.SetUserTier(env.ctx, u.ID, coinpulse.TierFree, nil); err != nil {
		t.Fatal(err)
	}
	env.waitEntitlement(u.ID, false)
	env.stepTo(env.now().Add(time.Hour))
	env.waitFailedUnsent(u.ID, w2.ID, "the account's plan or subscription no longer includes alerts")
	if n := len(rc2.got()); n != 1 {
		t.Errorf("the receiver got %d requests, want the one before the downgrade", n)
	}
}

// A plan with alerts but without webhooks: alerts fire, webhook
// deliveries fail unsent.
func TestWebhooksHeldWithoutEntitlement(t *testing.T) {
	t.Parallel()
	plans := coinpulse.DefaultPlans()
	env := newAlertEnv(t, alertEnvOptions{allowPrivate: true, dispatch: true, clock: newFakeClock(), plans: plans})
	u := env.user(coinpulse.TierPremium)
	key := env.key(u, coinpulse.ModeLive, rw)
	rc := newHookReceiver(t, nil)
	w := env.createWebhook(key, rc.url())
	lowered := maps.Clone(plans)
	p := lowered[coinpulse.TierPremium]
	p.Webhooks = false
	lowered[coinpulse.TierPremium] = p
	env.srv.SetPlans(env.ctx, lowered)
	env.fireAlert(key, false)
	env.waitFailedUnsent(u.ID, w.ID, "the account's plan no longer includes webhooks")
	if n := len(rc.got()); n != 0 {
		t.Errorf("the receiver got %d requests, want none", n)
	}
}

func TestDeliveryRedirectNotFollowed(t *testing.T) {
	t.Parallel()
	env, key := deliveryEnv(t, notify.SenderOptions{}, nil)
	target := newHookReceiver(t, nil)
	rc := newHookReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.url(), http.StatusTemporaryRedirect)
	})
	w := env.createWebhook(key, rc.url())
	env.fireAlert(key, false)
	d := env.waitDelivery(key, w.ID, "attempted", func(d jsonDelivery) bool { return d.Attempts == 1 })
	if d.Status != "pending" || d.LastStatusCode == nil || *d.LastStatusCode != 307 || d.LastError == nil ||
		!strings.Contains(*d.LastError, "redirects are not followed") || !strings.Contains(*d.LastError, target.url()) || d.NextAttemptAt == nil {
		t.Fatalf("after a redirect: %+v (error %v)", d, d.LastError)
	}
	// Retried on schedule, still never followed.
	env.stepTo(*d.NextAttemptAt)
	d = env.waitDelivery(key, w.ID, "attempted twice", func(d jsonDelivery) bool { return d.Attempts == 2 })
	if d.Status != "pending" || len(rc.got()) != 2 {
		t.Errorf("second attempt: %+v, %d requests", d, len(rc.got()))
	}
	if n := len(target.got()); n != 0 {
		t.Errorf("the redirect's target was hit %d times", n)
	}
	if got := env.webhook(key, w.ID); !got.Enabled {
		t.Errorf("a redirect disabled the endpoint: %+v", got)
	}
}

func TestDeliveryTimeoutRetried(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	env, key := deliveryEnv(t, notify.SenderOptions{Timeout: timeout}, nil)
	release := make(chan struct{})
	rc := newHookReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 0 {
			select { // hang
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	t.Cleanup(func() { close(release) })
	w := env.createWebhook(key, rc.url())
	env.fireAlert(key, false)
	first := rc.wait(t, 1)[0]
	d := env.waitDelivery(key, w.ID, "attempted", func(d jsonDelivery) bool { return d.Attempts == 1 })
	took := time.Since(first.At)
	if d.Status != "pending" || d.LastStatusCode != nil || d.LastError == nil || *d.LastError != "no response within 300ms" || d.NextAttemptAt == nil {
		t.Fatalf("after a hang: %+v (error %v)", d, d.LastError)
	}
	if took > 5*time.Second {
		t.Errorf("the hung attempt was recorded %s after it began; the timeout is %s", took, timeout)
	}
	env.stepTo(*d.NextAttemptAt)
	second := rc.wait(t, 2)[1]
	d = env.waitDelivery(key, w.ID, "delivered", func(d jsonDelivery) bool { return d.Status == "delivered" })
	if d.Attempts != 2 || first.Header.Get("webhook-id") != second.Header.Get("webhook-id") {
		t.Errorf("after the retry: %+v; ids %s, %s", d, first.Header.Get("webhook-id"), second.Header.Get("webhook-id"))
	}
}

func TestDeliveryRetriesExhausted(t *testing.T) {
	t.Parallel()
	env, key := deliveryEnv(t, notify.SenderOptions{}, nil)
	rc := newHookReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	w := env.createWebhook(key, rc.url())
	env.fireAlert(key, false)
	start := env.now()
	var d jsonDelivery
	for n := 1; n <= notify.MaxAttempts; n++ {
		d = env.waitDelivery(key, w.ID, fmt.Sprintf("attempted %d times", n), func(d jsonDelivery) bool { return d.Attempts == n })
		if n < notify.MaxAttempts {
			if d.Status != "pending" || d.NextAttemptAt == nil {
				t.Fatalf("attempt %d: %+v", n, d)
			}
			env.stepTo(*d.NextAttemptAt)
		}
	}
	if d.Status != "failed" || d.NextAttemptAt != nil || d.LastStatusCode == nil || *d.LastStatusCode != 503 {
		t.Fatalf("after %d attempts: %+v", notify.MaxAttempts, d)
	}
	// Over about 32 hours (the schedule's 31 h 42 min, jittered).
	if span := env.now().Sub(start); span < 25*time.Hour || span > 39*time.Hour {
		t.Errorf("the attempts spanned %s", span)
	}
	got := env.webhook(key, w.ID)
	wantReason := "a delivery failed 11 times over about 32 hours; last error: the endpoint answered 503 Service Unavailable"
	if got.Enabled || got.DisabledReason == nil || *got.DisabledReason != wantReason {
		t.Fatalf("endpoint after exhausted retries: %+v (reason %v)", got, got.DisabledReason)
	}
	hits := rc.got()
	if len(hits) != notify.MaxAttempts {
		t.Fatalf("the receiver got %d requests, want %d", len(hits), notify.MaxAttempts)
	}
	v := verifier(t, w.Secret)
	for i, h := range hits {
		if h.Header.Get("webhook-id") != d.EventID {
			t.Errorf("attempt %d: webhook-id %s, want %s", i+1, h.Header.Get("webhook-id"), d.EventID)
		}
		if err := v.VerifyIgnoringTimestamp(h.Body, h.Header); err != nil { // the clock ran 32 h ahead
			t.Errorf("attempt %d: %v", i+1, err)
		}
	}
	// A test event still reaches the disabled endpoint (to check a fix),
	// once, without retries and without touching the endpoint.
	res := send(t, env.srv, "POST", fmt.Sprintf("/api/v1/webhooks/%d/test", w.ID), key, "")
	queued := want[jsonDelivery](t, res, http.StatusAccepted)
	pollUntil(t, "the test event's attempt", func() bool {
		for _, d := range env.deliveries(key, w.ID) {
			if d.ID == queued.ID && d.Attempts == 1 {
				return true
			}
		}
		return false
	})
	for _, d := range env.deliveries(key, w.ID) {
		if d.ID == queued.ID && (d.Status != "failed" || d.NextAttemptAt != nil || d.LastError == nil ||
			!strings.HasSuffix(*d.LastError, "; not retried: the endpoint is disabled")) {
			t.Errorf("test event to a disabled endpoint: %+v, want failed, not retried, and why", d)
		}
	}
	if got2 := env.webhook(key, w.ID); *got2.DisabledReason != wantReason {
		t.Errorf("the test event changed the reason to %q", *got2.DisabledReason)
	}
}

func TestEmailUndeliverableWithoutSMTP(t *testing.T) {
	t.Parallel()
	env, key := deliveryEnv(t, notify.SenderOptions{}, nil)
	a := env.fireAlert(key, true)
	if a.EmailStatus == nil || (*a.EmailStatus != "pending" && *a.EmailStatus != "undeliverable") {
		t.Errorf("just fired: email_status %v", a.EmailStatus)
	}
	var got jsonAlert
	pollUntil(t, "email_status undeliverable", func() bool {
		got = env.getAlert(key, a.ID)
		return got.EmailStatus != nil && *got.EmailStatus == "undeliverable"
	})
	if got.EmailError == nil || !strings.Contains(*got.EmailError, "no SMTP server") {
		t.Errorf("email_error %v, want a message saying there is no SMTP server", got.EmailError)
	}
	// Re-enabling clears the e-mail state with the trigger.
	re := want[jsonAlert](t, env.toggle(key, a.ID), http.StatusOK)
	if re.EmailStatus != nil || re.EmailError != nil || re.TriggeredAt != nil {
		t.Errorf("re-enabled: %+v", re)
	}
	want[map[string]any](t, send(t, env.srv, "DELETE", fmt.Sprintf("/api/v1/alerts/%d", a.ID), key, ""), http.StatusOK)
	// An alert without notify_email has no e-mail state at all.
	b := env.fireAlert(key, false)
	time.Sleep(50 * time.Millisecond) // a couple of dispatcher polls
	if got := env.getAlert(key, b.ID); got.EmailStatus != nil || got.EmailError != nil {
		t.Errorf("alert without e-mail: %+v", got)
	}
}

// smtpSink is an in-process SMTP server that keeps what it accepts.
type smtpSink struct {
	addr *net.TCPAddr
	mu   sync.Mutex
	msgs []smtpMsg
}

type smtpMsg struct {
	from string
	to   []string
	data []byte
}

type smtpSinkSession struct {
	sink *smtpSink
	from string
	to   []string
}

func (s *smtpSinkSession) Mail(from string, _ *smtp.MailOptions) error { s.from = from; return nil }
func (s *smtpSinkSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.to = append(s.to, to)
	return nil
}
func (s *smtpSinkSession) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s.sink.mu.Lock()
	s.sink.msgs = append(s.sink.msgs, smtpMsg{from: s.from, to: s.to, data: b})
	s.sink.mu.Unlock()
	return nil
}
func (s *smtpSinkSession) Reset()        { s.from, s.to = "", nil }
func (s *smtpSinkSession) Logout() error { return nil }

func startSMTPSink(t *testing.T) *smtpSink {
	t.Helper()
	sink := &smtpSink{}
	srv := smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) { return &smtpSinkSession{sink: sink}, nil }))
	srv.Domain = "localhost"
	srv.ReadTimeout, srv.WriteTimeout = 10*time.Second, 10*time.Second
	srv.ErrorLog = log.New(io.Discard, "", 0)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sink.addr = l.Addr().(*net.TCPAddr)
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(l) }()
	t.Cleanup(func() { srv.Close(); l.Close(); <-done })
	return sink
}

func (s *smtpSink) received() []smtpMsg {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]smtpMsg(nil), s.msgs...)
}

func TestEmailSentThroughSMTP(t *testing.T) {
	t.Parallel()
	sink := startSMTPSink(t)
	mailer, err := notify.NewMailer(notify.SMTPConfig{Host: "127.0.0.1", Port: sink.addr.Port, From: "Coinpulse <alerts@coinpulse.test>",
		StartTLS: notify.StartTLSNone, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	env, _ := deliveryEnv(t, notify.SenderOptions{}, mailer)
	u := env.user(coinpulse.TierPremium)
	key := env.key(u, coinpulse.ModeLive, rw)
	quietAlert := env.fireAlert(key, false)
	a := env.fireAlert(key, true)
	var got jsonAlert
	pollUntil(t, "email_status sent", func() bool {
		got = env.getAlert(key, a.ID)
		return got.EmailStatus != nil && *got.EmailStatus != "pending"
	})
	if *got.EmailStatus != "sent" || got.EmailError != nil {
		t.Fatalf("e-mail: status %s, error %v", *got.EmailStatus, got.EmailError)
	}
	msgs := sink.received()
	if len(msgs) != 1 {
		t.Fatalf("the SMTP server got %d messages, want 1 (alert %d asked for none)", len(msgs), quietAlert.ID)
	}
	m := msgs[0]
	if m.from != "alerts@coinpulse.test" || len(m.to) != 1 || m.to[0] != u.Email {
		t.Errorf("envelope from %s to %v, want to %s", m.from, m.to, u.Email)
	}
	msg, err := mail.ReadMessage(bytes.NewReader(m.data))
	if err != nil {
		t.Fatal(err)
	}
	subject := msg.Header.Get("Subject")
	if dec, err := new(mime.WordDecoder).DecodeHeader(subject); err == nil {
		subject = dec
	}
	if !strings.Contains(subject, "BTC is above 1,000 USD") || !strings.Contains(subject, fmt.Sprintf("#%d", a.ID)) {
		t.Errorf("subject %q", subject)
	}
	if msg.Header.Get("X-Coinpulse-Alert-Id") != strconv.FormatInt(a.ID, 10) || !strings.HasPrefix(msg.Header.Get("X-Coinpulse-Event-Id"), "msg_") {
		t.Errorf("headers %v", msg.Header)
	}
	text, _ := io.ReadAll(msg.Body)
	if !strings.Contains(string(text), "1,234.56") {
		t.Errorf("the body does not give the price 1,234.56:\n%s", text)
	}
	// The e-mail is sent once.
	time.Sleep(50 * time.Millisecond)
	if n := len(sink.received()); n != 1 {
		t.Errorf("%d messages, want 1", n)
	}
}

// waitEntitlement waits until the server holds the account entitled to
// alerts, or not.
func (e *alertEnv) waitEntitlement(userID int64, alerts bool) {
	e.tb.Helper()
	pollUntil(e.tb, fmt.Sprintf("account %d entitled to alerts: %v", userID, alerts), func() bool {
		en, err := e.srv.Entitlement(e.ctx, userID)
		return err == nil && en.Alerts == alerts
	})
}

// waitFailedUnsent waits until the one delivery to the live endpoint
// webhookID of account userID has failed with lastError. It reads the
// store: the account may no longer reach the delivery log.
func (e *alertEnv) waitFailedUnsent(userID, webhookID int64, lastError string) {
	e.tb.Helper()
	pollUntil(e.tb, "the delivery failed: "+lastError, func() bool {
		ds, err := e.store.Deliveries(e.ctx, coinpulse.Owner{UserID: userID, Mode: coinpulse.ModeLive}, webhookID, 0, 10)
		return err == nil && len(ds) == 1 && ds[0].Status == coinpulse.DeliveryFailed && ds[0].LastError == lastError
	})
}

// Entitlement reads an account once while nothing that could change its
// answer happens: a tier change (the auth epoch), new plans, or its
// subscription's expiry. A plan with every endpoint but no active alerts
// has no alerts.
func TestEntitlementCached(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	users := &probedUsers{}
	env := newAlertEnv(t, alertEnvOptions{clock: clock, wrapStore: func(s coinpulse.Store) coinpulse.Store {
		users.Store = s
		return users
	}})
	inAnHour := clock.Now().Add(time.Hour)
	u := env.user(coinpulse.TierPremium)
	if err := env.store.SetUserTier(env.ctx, u.ID, coinpulse.TierPremium, &inAnHour); err != nil {
		t.Fatal(err)
	}
	ask := func(want coinpulse.Entitlement, reads int64, what string) {
		t.Helper()
		before := users.reads.Load()
		en, err := env.srv.Entitlement(env.ctx, u.ID)
		if err != nil || en != want || users.reads.Load()-before != reads {
			t.Errorf("%s: %+v, %v, %d reads; want %+v, %d reads", what, en, err, users.reads.Load()-before, want, reads)
		}
	}
	all := coinpulse.Entitlement{Alerts: true, Webhooks: true}
	pollUntil(t, "the tier change's epoch", func() bool {
		en, err := env.srv.Entitlement(env.ctx, u.ID)
		return err == nil && en == all
	})
	ask(all, 0, "asked again")
	clock.Advance(2 * time.Hour)
	ask(coinpulse.Entitlement{}, 1, "past the expiry")
	if err := env.store.SetUserTier(env.ctx, u.ID, coinpulse.TierPremium, nil); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, "the renewal's epoch", func() bool {
		en, err := env.srv.Entitlement(env.ctx, u.ID)
		return err == nil && en == all
	})
	plans := maps.Clone(coinpulse.DefaultPlans())
	p := plans[coinpulse.TierPremium]
	p.MaxActiveAlerts = 0
	plans[coinpulse.TierPremium] = p
	env.srv.SetPlans(env.ctx, plans)
	ask(coinpulse.Entitlement{}, 1, "new plans without active alerts")
	ask(coinpulse.Entitlement{}, 0, "asked again")
}
