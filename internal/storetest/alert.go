package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/shopspring/decimal"

	"coinpulse"
)

// Contract tests of coinpulse.AlertStore: alerts and their armings, the
// firing of armings with the outbox it fills, webhook endpoints, and the
// leasing and recording of deliveries.

// RunNodes runs the checks that need two stores on one database, as two
// nodes of a deployment have: open must return two stores on a new, empty
// database each time it is called, and close them when t ends (t.Cleanup);
// subtests call it in parallel. RunNodes returns nothing: failures are
// reported through t.
func RunNodes(t *testing.T, open func(t *testing.T) (a, b coinpulse.Store)) {
	tests := []struct {
		name string
		fn   func(t *testing.T, nodes []coinpulse.Store)
	}{
		{"Alerts/FireConcurrent", fireConcurrent},
		{"Alerts/LimitConcurrent", alertLimitConcurrent},
		{"Deliveries/ClaimConcurrent", claimConcurrent},
		{"Idempotency/Concurrent", idempotencyConcurrent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, b := open(t)
			tt.fn(t, []coinpulse.Store{a, b})
		})
	}
}

// newAlert creates an alert of o on coin, created at t0, with no cap.
func newAlert(t *testing.T, s coinpulse.Store, o coinpulse.Owner, coin, target string, cond coinpulse.Condition, email bool) *coinpulse.Alert {
	t.Helper()
	return newAlertAt(t, s, o, coin, target, cond, email, t0)
}

// newAlertAt creates an alert of o on coin, created (and armed) at at,
// with no cap.
func newAlertAt(t *testing.T, s coinpulse.Store, o coinpulse.Owner, coin, target string, cond coinpulse.Condition, email bool, at time.Time) *coinpulse.Alert {
	t.Helper()
	a := &coinpulse.Alert{
		Owner: o, CoinID: coin, CoinSymbol: strings.ToUpper(coin[:3]), TargetPrice: d(target),
		Condition: cond, NotifyEmail: email, CreatedAt: at,
	}
	if err := s.CreateAlert(t.Context(), a, coinpulse.Unlimited); err != nil {
		t.Fatalf("CreateAlert(%s): %v", coin, err)
	}
	return a
}

// getAlert returns the stored alert or fails t.
func getAlert(t *testing.T, s coinpulse.Store, o coinpulse.Owner, id int64) *coinpulse.Alert {
	t.Helper()
	a, err := s.Alert(t.Context(), o, id)
	if err != nil {
		t.Fatalf("Alert(%d): %v", id, err)
	}
	wantUTC(t, "Alert", alertTimes(a)...)
	return a
}

func alertTimes(a *coinpulse.Alert) []*time.Time {
	return []*time.Time{&a.ArmedAt, a.TriggeredAt, &a.CreatedAt, &a.UpdatedAt}
}

// toggle toggles the alert at now with no cap, or fails t.
func toggle(t *testing.T, s coinpulse.Store, o coinpulse.Owner, id int64, now time.Time) *coinpulse.Alert {
	t.Helper()
	a, err := s.ToggleAlert(t.Context(), o, id, coinpulse.Unlimited, now)
	if err != nil {
		t.Fatalf("ToggleAlert(%d): %v", id, err)
	}
	return a
}

// firing is the firing of a's current arming at price, at at.
func firing(a *coinpulse.Alert, price string, at time.Time) coinpulse.Firing {
	return coinpulse.Firing{AlertID: a.ID, ArmedSeq: a.ArmedSeq, Price: d(price), At: at}
}

// eventLog is an EventFunc that counts its calls per alert.
type eventLog struct {
	mu    sync.Mutex
	calls map[int64]int
}

func newEventLog() *eventLog { return &eventLog{calls: map[int64]int{}} }

// event returns the event of a's firing: its ID and payload name the
// arming and the price.
func (l *eventLog) event(a *coinpulse.Alert) coinpulse.Event {
	l.mu.Lock()
	l.calls[a.ID]++
	l.mu.Unlock()
	return alertEvent(a)
}

// total returns how many times event was called.
func (l *eventLog) total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.calls {
		n += c
	}
	return n
}

// alertEvent is the event eventLog makes of a's firing.
func alertEvent(a *coinpulse.Alert) coinpulse.Event {
	var at time.Time
	if a.TriggeredAt != nil {
		at = *a.TriggeredAt
	}
	return coinpulse.Event{
		ID:        fmt.Sprintf("msg_%d_%d", a.ID, a.ArmedSeq),
		Type:      coinpulse.EventAlertTriggered,
		Payload:   fmt.Appendf(nil, `{"alert_id":%d,"price":"%s","active":%t}`, a.ID, a.TriggeredPrice.Decimal, a.IsActive),
		CreatedAt: at,
	}
}

// fire fires fs or fails t.
func fire(t *testing.T, s coinpulse.Store, l *eventLog, fs ...coinpulse.Firing) []coinpulse.Alert {
	t.Helper()
	as, err := s.FireAlerts(t.Context(), fs, l.event)
	if err != nil {
		t.Fatalf("FireAlerts(%d firings): %v", len(fs), err)
	}
	for i := range as {
		wantUTC(t, "FireAlerts", alertTimes(&as[i])...)
	}
	return as
}

// ids returns the IDs of the alerts.
func alertIDs(as []coinpulse.Alert) []int64 {
	ids := make([]int64, len(as))
	for i, a := range as {
		ids[i] = a.ID
	}
	return ids
}

// asFired is a as its firing at price, at at, leaves it.
func asFired(a coinpulse.Alert, price string, at time.Time) coinpulse.Alert {
	a.IsActive = false
	a.TriggeredAt = ptr(us(at))
	a.TriggeredPrice = decimal.NewNullDecimal(d(price))
	a.UpdatedAt = us(at)
	a.EmailStatus, a.EmailError = coinpulse.EmailNone, ""
	if a.NotifyEmail {
		a.EmailStatus = coinpulse.EmailPending
	}
	return a
}

// newWebhook creates an endpoint of o subscribed to events, created at t0,
// with no cap.
func newWebhook(t *testing.T, s coinpulse.Store, o coinpulse.Owner, url string, events ...string) *coinpulse.Webhook {
	t.Helper()
	w := &coinpulse.Webhook{Owner: o, URL: url, Events: events, Secret: "whsec_c2VjcmV0", CreatedAt: t0}
	if err := s.CreateWebhook(t.Context(), w, coinpulse.Unlimited); err != nil {
		t.Fatalf("CreateWebhook(%s): %v", url, err)
	}
	return w
}

// getWebhook returns the stored endpoint or fails t.
func getWebhook(t *testing.T, s coinpulse.Store, o coinpulse.Owner, id int64) *coinpulse.Webhook {
	t.Helper()
	w, err := s.Webhook(t.Context(), o, id)
	if err != nil {
		t.Fatalf("Webhook(%d): %v", id, err)
	}
	wantUTC(t, "Webhook", &w.CreatedAt, &w.UpdatedAt)
	return w
}

// enqueue adds a test event for endpoint w of o, created at at, or fails t.
func enqueue(t *testing.T, s coinpulse.Store, w *coinpulse.Webhook, at time.Time) *coinpulse.Delivery {
	t.Helper()
	dl := &coinpulse.Delivery{
		Kind: coinpulse.KindWebhook, Owner: w.Owner, EndpointID: w.ID,
		EventID: fmt.Sprintf("msg_test_%d_%d", w.ID, at.UnixNano()), EventType: coinpulse.EventWebhookTest,
		Payload: []byte(`{"type":"webhook.test"}`), CreatedAt: at,
	}
	if err := s.EnqueueDelivery(t.Context(), dl); err != nil {
		t.Fatalf("EnqueueDelivery(endpoint %d): %v", w.ID, err)
	}
	return dl
}

// claim claims up to n deliveries of kind at now for lease, or fails t.
func claim(t *testing.T, s coinpulse.Store, kind coinpulse.DeliveryKind, now time.Time, lease time.Duration, n int) []coinpulse.Delivery {
	t.Helper()
	ds, err := s.ClaimDeliveries(t.Context(), kind, now, lease, n)
	if err != nil {
		t.Fatalf("ClaimDeliveries(%s, %v): %v", kind, now, err)
	}
	if ds == nil {
		t.Fatalf("ClaimDeliveries(%s, %v) = nil, want a non-nil slice", kind, now)
	}
	for i := range ds {
		wantUTC(t, "ClaimDeliveries", deliveryTimes(&ds[i])...)
		if want := us(now).Add(lease); !ds[i].LeaseUntil.Equal(want) || ds[i].LeaseUntil.Location() != time.UTC {
			t.Errorf("ClaimDeliveries(%s, %v): delivery %d LeaseUntil %v, want %v", kind, now, ds[i].ID, ds[i].LeaseUntil, want)
		}
		ds[i].LeaseUntil = time.Time{} // the deliveries compare with what was enqueued
	}
	return ds
}

// claimAll claims every delivery of kind due at now, for a minute.
func claimAll(t *testing.T, s coinpulse.Store, kind coinpulse.DeliveryKind, now time.Time) []coinpulse.Delivery {
	t.Helper()
	return claim(t, s, kind, now, time.Minute, 100_000)
}

// logOf returns the endpoint's deliveries, newest first, or fails t.
func logOf(t *testing.T, s coinpulse.Store, o coinpulse.Owner, endpointID int64) []coinpulse.Delivery {
	t.Helper()
	ds, err := s.Deliveries(t.Context(), o, endpointID, 0, 100_000)
	if err != nil {
		t.Fatalf("Deliveries(%d): %v", endpointID, err)
	}
	if ds == nil {
		t.Fatalf("Deliveries(%d) = nil, want a non-nil slice", endpointID)
	}
	for i := range ds {
		wantUTC(t, "Deliveries", deliveryTimes(&ds[i])...)
	}
	return ds
}

func deliveryTimes(d *coinpulse.Delivery) []*time.Time {
	return []*time.Time{&d.NextAttemptAt, d.LastAttemptAt, &d.CreatedAt, d.DeliveredAt}
}

// deliveryIDs returns the IDs of the deliveries.
func deliveryIDs(ds []coinpulse.Delivery) []int64 {
	ids := make([]int64, len(ds))
	for i, dl := range ds {
		ids[i] = dl.ID
	}
	return ids
}

// recordAttempt records an attempt on delivery id or fails t.
func recordAttempt(t *testing.T, s coinpulse.Store, id int64, a coinpulse.Attempt) {
	t.Helper()
	if err := s.RecordAttempt(t.Context(), id, a); err != nil {
		t.Fatalf("RecordAttempt(%d, %s): %v", id, a.Status, err)
	}
}

// firedDelivery is the delivery that a's firing (a as fired) enqueues for
// endpoint (0: e-mail), before any attempt.
func firedDelivery(a coinpulse.Alert, endpointID int64) coinpulse.Delivery {
	ev := alertEvent(&a)
	kind := coinpulse.KindEmail
	if endpointID != 0 {
		kind = coinpulse.KindWebhook
	}
	return coinpulse.Delivery{
		Kind: kind, Owner: a.Owner, AlertID: a.ID, EndpointID: endpointID,
		EventID: ev.ID, EventType: ev.Type, Payload: ev.Payload,
		Status: coinpulse.DeliveryPending, NextAttemptAt: *a.TriggeredAt, CreatedAt: *a.TriggeredAt,
	}
}

// ignoreDeliveryID leaves the store-given ID out of comparisons.
var ignoreDeliveryID = cmpopts.IgnoreFields(coinpulse.Delivery{}, "ID")

func testCreateAlert(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "alert-create@example.com")
	o := live(u)
	a := &coinpulse.Alert{
		Owner: o, CoinID: "bitcoin", CoinSymbol: "BTC", TargetPrice: d("65000.123456789012345678"),
		Condition: coinpulse.Above, NotifyEmail: true,
		// Ignored:
		ID: 99, IsActive: false, ArmedSeq: 12345, ArmedAt: t0.Add(time.Hour), TriggeredAt: ptr(t0),
		TriggeredPrice: decimal.NewNullDecimal(d("1")), EmailStatus: coinpulse.EmailSent, EmailError: "x",
		CreatedAt: t0.In(time.FixedZone("X", 3600)),
	}
	if err := s.CreateAlert(ctx, a, 3); err != nil {
		t.Fatalf("CreateAlert: %v", err)
	}
	if a.ID == 0 || a.ID == 99 {
		t.Errorf("CreateAlert set ID %d", a.ID)
	}
	if a.ArmedSeq <= 0 {
		t.Errorf("CreateAlert set ArmedSeq %d, want a positive number", a.ArmedSeq)
	}
	want := &coinpulse.Alert{
		ID: a.ID, Owner: o, CoinID: "bitcoin", CoinSymbol: "BTC", TargetPrice: d("65000.123456789012345678"),
		Condition: coinpulse.Above, NotifyEmail: true, IsActive: true, ArmedSeq: a.ArmedSeq,
		ArmedAt: us(t0), CreatedAt: us(t0), UpdatedAt: us(t0),
	}
	if diff := cmp.Diff(want, a); diff != "" {
		t.Errorf("alert after CreateAlert mismatch (-want +got):\n%s", diff)
	}
	wantUTC(t, "CreateAlert", alertTimes(a)...)
	got := getAlert(t, s, o, a.ID)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Alert mismatch (-want +got):\n%s", diff)
	}
	wantDec(t, "stored target price", got.TargetPrice, "65000.123456789012345678")

	// Without CreatedAt it is now, and every arming gets its own number.
	before := time.Now().Truncate(time.Microsecond)
	b := &coinpulse.Alert{Owner: o, CoinID: "ethereum", TargetPrice: d("0.00000001"), Condition: coinpulse.Below}
	if err := s.CreateAlert(ctx, b, coinpulse.Unlimited); err != nil {
		t.Fatalf("CreateAlert: %v", err)
	}
	if b.CreatedAt.Before(before) || b.CreatedAt.After(time.Now()) || !b.UpdatedAt.Equal(b.CreatedAt) || !b.ArmedAt.Equal(b.CreatedAt) {
		t.Errorf("CreatedAt, UpdatedAt, ArmedAt = %v, %v, %v; want equal, now", b.CreatedAt, b.UpdatedAt, b.ArmedAt)
	}
	if b.ID == a.ID || b.ArmedSeq == a.ArmedSeq {
		t.Errorf("two alerts share ID %d or ArmedSeq %d", b.ID, b.ArmedSeq)
	}
	wantDec(t, "stored target price", getAlert(t, s, o, b.ID).TargetPrice, "0.00000001")

	// Listed oldest first: b, created now, after a, created at t0; c,
	// created before t0, first.
	c := newAlertAt(t, s, o, "solana", "150", coinpulse.Below, false, t0.Add(-time.Hour))
	list, _, err := s.Alerts(ctx, o, coinpulse.AllAlerts)
	if err != nil {
		t.Fatalf("Alerts: %v", err)
	}
	if diff := cmp.Diff([]coinpulse.Alert{*c, *got, *getAlert(t, s, o, b.ID)}, list); diff != "" {
		t.Errorf("Alerts mismatch (-want +got):\n%s", diff)
	}
	for i := range list {
		wantUTC(t, "Alerts", alertTimes(&list[i])...)
	}

	// An owner with none gets an empty list.
	list, _, err = s.Alerts(ctx, sandbox(u), coinpulse.AllAlerts)
	if err != nil || list == nil || len(list) != 0 {
		t.Errorf("Alerts of an owner with none = %v, %v; want an empty slice", list, err)
	}
}

func testCreateAlertInvalid(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "alert-invalid@example.com")
	o := live(u)
	valid := func() *coinpulse.Alert {
		return &coinpulse.Alert{Owner: o, CoinID: "bitcoin", TargetPrice: d("1"), Condition: coinpulse.Above}
	}
	tests := []struct {
		name   string
		change func(a *coinpulse.Alert)
	}{
		{"mode", func(a *coinpulse.Alert) { a.Owner.Mode = "prod" }},
		{"condition", func(a *coinpulse.Alert) { a.Condition = "sideways" }},
		{"no condition", func(a *coinpulse.Alert) { a.Condition = "" }},
		{"coin", func(a *coinpulse.Alert) { a.CoinID = "" }},
		{"zero target", func(a *coinpulse.Alert) { a.TargetPrice = decimal.Zero }},
		{"negative target", func(a *coinpulse.Alert) { a.TargetPrice = d("-5") }},
	}
	for _, tt := range tests {
		a := valid()
		tt.change(a)
		err := s.CreateAlert(ctx, a, 10)
		if coinpulse.ErrorCode(err) != coinpulse.CodeValidation {
			t.Errorf("%s: CreateAlert = %v, want VALIDATION_ERROR", tt.name, err)
		}
	}
	a := valid()
	a.Owner.UserID += 1000
	wantCode(t, s.CreateAlert(ctx, a, 10), coinpulse.CodeNotFound)
	wantCode(t, s.CreateAlert(ctx, a, coinpulse.Unlimited), coinpulse.CodeNotFound)
	if list, _, err := s.Alerts(ctx, o, coinpulse.AllAlerts); err != nil || len(list) != 0 {
		t.Errorf("Alerts = %v, %v; want none", list, err)
	}
	if as, err := s.ArmedAlerts(ctx, time.Time{}, 0, 100); err != nil || len(as) != 0 {
		t.Errorf("ArmedAlerts = %v, %v; want none", as, err)
	}
}

func testAlertOwnerScoping(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "alert-carol@example.com")
	mallory := newUser(t, s, "alert-mallory@example.com")
	o := live(u)
	a := newAlert(t, s, o, "bitcoin", "70000", coinpulse.Above, true)
	before := getAlert(t, s, o, a.ID)

	for _, other := range []coinpulse.Owner{live(mallory), sandbox(mallory), sandbox(u)} {
		t.Run(fmt.Sprintf("%d/%s", other.UserID, other.Mode), func(t *testing.T) {
			own := newAlert(t, s, other, "bitcoin", "70000", coinpulse.Above, true)
			list, _, err := s.Alerts(ctx, other, coinpulse.AllAlerts)
			if err != nil {
				t.Fatalf("Alerts: %v", err)
			}
			if len(list) != 1 || list[0].ID != own.ID {
				t.Errorf("Alerts lists %v, want only alert %d", alertIDs(list), own.ID)
			}
			_, err = s.Alert(ctx, other, a.ID)
			wantCode(t, err, coinpulse.CodeNotFound)
			_, err = s.ToggleAlert(ctx, other, a.ID, coinpulse.Unlimited, t0.Add(time.Hour))
			wantCode(t, err, coinpulse.CodeNotFound)
			_, err = s.ToggleAlert(ctx, other, a.ID, 5, t0.Add(time.Hour))
			wantCode(t, err, coinpulse.CodeNotFound)
			wantCode(t, s.DeleteAlert(ctx, other, a.ID), coinpulse.CodeNotFound)
		})
	}
	if diff := cmp.Diff(before, getAlert(t, s, o, a.ID)); diff != "" {
		t.Errorf("alert changed by other owners (-before +after):\n%s", diff)
	}
	// And the alert's own owner can still do all of it.
	if got := toggle(t, s, o, a.ID, t0.Add(time.Hour)); got.IsActive {
		t.Errorf("ToggleAlert left the alert active")
	}
	if err := s.DeleteAlert(ctx, o, a.ID); err != nil {
		t.Errorf("DeleteAlert: %v", err)
	}
	_, err := s.Alert(ctx, o, a.ID)
	wantCode(t, err, coinpulse.CodeNotFound)
	wantCode(t, s.DeleteAlert(ctx, o, a.ID), coinpulse.CodeNotFound)
}

func testAlertLimit(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "alert-dave@example.com")
	o := live(u)
	create := func(o coinpulse.Owner, limit int) (*coinpulse.Alert, error) {
		a := &coinpulse.Alert{Owner: o, CoinID: "bitcoin", TargetPrice: d("1"), Condition: coinpulse.Above, CreatedAt: t0}
		return a, s.CreateAlert(ctx, a, limit)
	}
	var as []*coinpulse.Alert
	for i := range 3 {
		a, err := create(o, 3)
		if err != nil {
			t.Fatalf("CreateAlert %d of 3: %v", i+1, err)
		}
		as = append(as, a)
	}
	_, err := create(o, 3)
	wantCode(t, err, coinpulse.CodeAlertLimitReached)
	if msg := coinpulse.ErrorMessage(err); !strings.Contains(msg, "3") {
		t.Errorf("message = %q, want it to name the limit", msg)
	}
	_, err = create(o, 0)
	wantCode(t, err, coinpulse.CodeAlertLimitReached)
	if list, _, err := s.Alerts(ctx, o, coinpulse.AllAlerts); err != nil || len(list) != 3 {
		t.Fatalf("Alerts: %d, %v; want 3", len(list), err)
	}

	// The count is per owner.
	if _, err := create(sandbox(u), 3); err != nil {
		t.Errorf("CreateAlert in the sandbox: %v", err)
	}
	if _, err := create(live(newUser(t, s, "alert-erin@example.com")), 1); err != nil {
		t.Errorf("CreateAlert of another user: %v", err)
	}
	_, err = create(sandbox(u), 1)
	wantCode(t, err, coinpulse.CodeAlertLimitReached)

	// Only active alerts count: a disabled one and a fired one make room.
	toggle(t, s, o, as[0].ID, t0.Add(time.Minute))
	c, err := create(o, 3)
	if err != nil {
		t.Fatalf("CreateAlert after disabling one: %v", err)
	}
	fire(t, s, newEventLog(), firing(as[1], "2", t0.Add(time.Hour)))
	if _, err := create(o, 3); err != nil {
		t.Fatalf("CreateAlert after one fired: %v", err)
	}
	// Re-enabling at the cap fails and changes nothing; below it, it
	// succeeds.
	before := getAlert(t, s, o, as[0].ID)
	_, err = s.ToggleAlert(ctx, o, as[0].ID, 3, t0.Add(2*time.Hour))
	wantCode(t, err, coinpulse.CodeAlertLimitReached)
	if diff := cmp.Diff(before, getAlert(t, s, o, as[0].ID)); diff != "" {
		t.Errorf("a refused ToggleAlert changed the alert (-before +after):\n%s", diff)
	}
	_, err = s.ToggleAlert(ctx, o, as[1].ID, 3, t0.Add(2*time.Hour))
	wantCode(t, err, coinpulse.CodeAlertLimitReached)
	// Disabling is never refused.
	if a, err := s.ToggleAlert(ctx, o, c.ID, 0, t0.Add(2*time.Hour)); err != nil || a.IsActive {
		t.Fatalf("ToggleAlert (disable) with cap 0 = %v, %v; want it disabled", a, err)
	}
	if a, err := s.ToggleAlert(ctx, o, as[0].ID, 3, t0.Add(3*time.Hour)); err != nil || !a.IsActive {
		t.Fatalf("ToggleAlert (enable) below the cap = %v, %v; want it enabled", a, err)
	}
	// Unlimited has no cap.
	for range 3 {
		if _, err := create(o, coinpulse.Unlimited); err != nil {
			t.Fatalf("CreateAlert, unlimited: %v", err)
		}
	}
	if a, err := s.ToggleAlert(ctx, o, c.ID, coinpulse.Unlimited, t0.Add(4*time.Hour)); err != nil || !a.IsActive {
		t.Fatalf("ToggleAlert (enable), unlimited = %v, %v; want it enabled", a, err)
	}
	active := 0
	list, _, err := s.Alerts(ctx, o, coinpulse.AllAlerts)
	if err != nil {
		t.Fatalf("Alerts: %v", err)
	}
	for _, a := range list {
		if a.IsActive {
			active++
		}
	}
	if active != 7 {
		t.Errorf("%d active alerts, want 7", active)
	}
}

func testAlertLimitConcurrent(t *testing.T, s coinpulse.Store) {
	alertLimitConcurrent(t, []coinpulse.Store{s})
}

// alertLimitConcurrent races creations and re-enables of one owner's
// alerts under a cap, through nodes in turn: exactly the cap's worth
// succeed.
func alertLimitConcurrent(t *testing.T, nodes []coinpulse.Store) {
	s := nodes[0]
	u := newUser(t, s, "alert-frank@example.com")
	other := newUser(t, s, "alert-grace@example.com")
	o := live(u)
	// Four disabled alerts and one active one.
	var disabled []*coinpulse.Alert
	for range 4 {
		a := newAlert(t, s, o, "bitcoin", "1", coinpulse.Above, false)
		toggle(t, s, o, a.ID, t0.Add(time.Minute))
		disabled = append(disabled, a)
	}
	newAlert(t, s, o, "bitcoin", "1", coinpulse.Above, false)
	for _, n := range nodes {
		warmUp(t, n, 20)
	}

	const creators, limit = 16, 6
	errs := make([]error, creators+len(disabled))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range creators {
		n := nodes[i%len(nodes)]
		wg.Go(func() {
			<-start
			errs[i] = n.CreateAlert(t.Context(), &coinpulse.Alert{Owner: o, CoinID: "ethereum", TargetPrice: d("1"), Condition: coinpulse.Below, CreatedAt: t0}, limit)
		})
	}
	for i, a := range disabled {
		n := nodes[(i+1)%len(nodes)]
		wg.Go(func() {
			<-start
			_, errs[creators+i] = n.ToggleAlert(t.Context(), o, a.ID, limit, t0.Add(time.Hour))
		})
	}
	// Another user's creations at the same time take none of u's places.
	for i := range 3 {
		n := nodes[i%len(nodes)]
		wg.Go(func() {
			<-start
			if err := n.CreateAlert(t.Context(), &coinpulse.Alert{Owner: live(other), CoinID: "x", TargetPrice: d("1"), Condition: coinpulse.Above}, limit); err != nil {
				t.Errorf("CreateAlert of another user: %v", err)
			}
		})
	}
	close(start)
	wg.Wait()
	succeeded := 0
	for _, err := range errs {
		switch coinpulse.ErrorCode(err) {
		case "":
			succeeded++
		case coinpulse.CodeAlertLimitReached:
		default:
			t.Errorf("CreateAlert or ToggleAlert: %v, want success or ALERT_LIMIT_REACHED", err)
		}
	}
	if succeeded != limit-1 {
		t.Errorf("%d of %d concurrent creations and re-enables succeeded, want %d", succeeded, len(errs), limit-1)
	}
	list, _, err := s.Alerts(t.Context(), o, coinpulse.AllAlerts)
	if err != nil {
		t.Fatalf("Alerts: %v", err)
	}
	active := 0
	for _, a := range list {
		if a.IsActive {
			active++
		}
	}
	if active != limit {
		t.Errorf("owner has %d active alerts, want %d", active, limit)
	}
	// Every refused creation inserted nothing.
	if want := 5 + (limit - 1) - countSuccesses(errs[creators:]); len(list) != want {
		t.Errorf("owner has %d alerts, want %d", len(list), want)
	}

	// Re-enables alone.
	h := live(newUser(t, s, "alert-heidi@example.com"))
	disabled = nil
	for i := range 12 {
		a := newAlert(t, s, h, "bitcoin", "1", coinpulse.Above, false)
		if i > 0 {
			toggle(t, s, h, a.ID, t0.Add(time.Minute))
			disabled = append(disabled, a)
		}
	}
	const toggleLimit = 4
	errs = make([]error, len(disabled))
	start = make(chan struct{})
	for i, a := range disabled {
		n := nodes[i%len(nodes)]
		wg.Go(func() {
			<-start
			_, errs[i] = n.ToggleAlert(t.Context(), h, a.ID, toggleLimit, t0.Add(time.Hour))
		})
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		if err != nil && coinpulse.ErrorCode(err) != coinpulse.CodeAlertLimitReached {
			t.Errorf("ToggleAlert: %v, want success or ALERT_LIMIT_REACHED", err)
		}
	}
	if got := countSuccesses(errs); got != toggleLimit-1 {
		t.Errorf("%d of %d concurrent re-enables succeeded, want %d", got, len(errs), toggleLimit-1)
	}
	armed, err := s.ArmedAlerts(t.Context(), time.Time{}, 0, -1)
	if err != nil {
		t.Fatalf("ArmedAlerts: %v", err)
	}
	active = 0
	for _, a := range armed {
		if a.Owner == h {
			active++
		}
	}
	if active != toggleLimit {
		t.Errorf("owner has %d active alerts, want %d", active, toggleLimit)
	}
}

// countSuccesses returns how many of errs are nil.
func countSuccesses(errs []error) int {
	n := 0
	for _, err := range errs {
		if err == nil {
			n++
		}
	}
	return n
}

func testToggleRearms(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "alert-toggle@example.com")
	o := live(u)
	l := newEventLog()
	a := newAlert(t, s, o, "bitcoin", "70000", coinpulse.Above, true)
	seqs := map[int64]bool{a.ArmedSeq: true}
	fired := fire(t, s, l, firing(a, "70001", t0.Add(time.Hour)))
	if len(fired) != 1 || fired[0].TriggeredAt == nil || fired[0].EmailStatus != coinpulse.EmailPending {
		t.Fatalf("FireAlerts = %+v, want the alert fired with its e-mail pending", fired)
	}

	// Enabling a fired alert re-arms it.
	t1 := t0.Add(2*time.Hour + 123)
	got := toggle(t, s, o, a.ID, t1)
	if seqs[got.ArmedSeq] {
		t.Errorf("re-armed alert has ArmedSeq %d, which an earlier arming had", got.ArmedSeq)
	}
	seqs[got.ArmedSeq] = true
	want := *a
	want.IsActive, want.ArmedSeq, want.ArmedAt, want.UpdatedAt = true, got.ArmedSeq, us(t1), us(t1)
	if diff := cmp.Diff(&want, got); diff != "" {
		t.Errorf("ToggleAlert (enable) mismatch (-want +got):\n%s", diff)
	}
	wantUTC(t, "ToggleAlert", alertTimes(got)...)
	if diff := cmp.Diff(got, getAlert(t, s, o, a.ID)); diff != "" {
		t.Errorf("Alert after ToggleAlert mismatch (-want +got):\n%s", diff)
	}

	// Disabling keeps the arming's number and time; enabling again gives
	// a new one.
	t2 := t1.Add(time.Hour)
	off := toggle(t, s, o, a.ID, t2)
	want.IsActive, want.UpdatedAt = false, us(t2)
	if diff := cmp.Diff(&want, off); diff != "" {
		t.Errorf("ToggleAlert (disable) mismatch (-want +got):\n%s", diff)
	}
	t3 := t2.Add(time.Hour)
	on := toggle(t, s, o, a.ID, t3)
	if seqs[on.ArmedSeq] {
		t.Errorf("re-armed alert has ArmedSeq %d, which an earlier arming had", on.ArmedSeq)
	}
	if !on.IsActive || !on.ArmedAt.Equal(us(t3)) {
		t.Errorf("ToggleAlert (enable) = active %t, armed at %v; want active, armed at %v", on.IsActive, on.ArmedAt, us(t3))
	}

	// Stale armings do not fire, nor are they reported: not the disabled
	// one, nor the first, whose firing the re-arming cleared. The current
	// one fires, once more.
	stale := firing(got, "80000", t3.Add(time.Minute))
	if as := fire(t, s, l, stale, firing(a, "80000", t3.Add(time.Minute))); len(as) != 0 {
		t.Errorf("FireAlerts of ended armings = %v, want none", alertIDs(as))
	}
	if diff := cmp.Diff(on, getAlert(t, s, o, a.ID)); diff != "" {
		t.Errorf("stale firings changed the alert (-want +got):\n%s", diff)
	}
	as := fire(t, s, l, firing(on, "80000", t3.Add(time.Minute)))
	if diff := cmp.Diff([]coinpulse.Alert{asFired(*on, "80000", t3.Add(time.Minute))}, as); diff != "" {
		t.Errorf("FireAlerts of the new arming mismatch (-want +got):\n%s", diff)
	}
	if n := l.total(); n != 2 {
		t.Errorf("event called %d times, want 2 (one per firing)", n)
	}

	// Toggling an unknown alert.
	_, err := s.ToggleAlert(ctx, o, a.ID+1000, coinpulse.Unlimited, t3)
	wantCode(t, err, coinpulse.CodeNotFound)
}

func testArmedAlerts(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "alert-armed@example.com")
	v := newUser(t, s, "alert-armed-2@example.com")
	o := live(u)
	h := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Hour) }
	a1 := newAlertAt(t, s, o, "bitcoin", "1", coinpulse.Above, false, h(0))
	a2 := newAlertAt(t, s, o, "bitcoin", "2", coinpulse.Above, false, h(1))
	a3 := newAlertAt(t, s, o, "bitcoin", "3", coinpulse.Above, false, h(2))
	toggle(t, s, o, a3.ID, h(3)) // disabled
	a4 := newAlertAt(t, s, o, "bitcoin", "4", coinpulse.Above, true, h(0))
	fire(t, s, newEventLog(), firing(a4, "5", h(4))) // fired
	a5 := newAlertAt(t, s, live(v), "ethereum", "5", coinpulse.Below, false, h(5))
	a6 := newAlertAt(t, s, sandbox(u), "solana", "6", coinpulse.Below, true, h(-24))
	toggle(t, s, sandbox(u), a6.ID, h(6))
	toggle(t, s, sandbox(u), a6.ID, h(7)) // re-armed at h(7)

	stored := func(as ...*coinpulse.Alert) []coinpulse.Alert {
		out := []coinpulse.Alert{}
		for _, a := range as {
			out = append(out, *getAlert(t, s, a.Owner, a.ID))
		}
		return out
	}
	armed := func(since time.Time, afterID int64, limit int) []coinpulse.Alert {
		t.Helper()
		as, err := s.ArmedAlerts(ctx, since, afterID, limit)
		if err != nil {
			t.Fatalf("ArmedAlerts(%v, %d, %d): %v", since, afterID, limit, err)
		}
		if as == nil {
			t.Fatalf("ArmedAlerts(%v, %d, %d) = nil, want a non-nil slice", since, afterID, limit)
		}
		for i := range as {
			wantUTC(t, "ArmedAlerts", alertTimes(&as[i])...)
		}
		return as
	}
	a2At := getAlert(t, s, o, a2.ID).ArmedAt
	tests := []struct {
		name    string
		since   time.Time
		afterID int64
		limit   int
		want    []coinpulse.Alert
	}{
		{"all", time.Time{}, 0, 100, stored(a1, a2, a5, a6)},
		{"no limit", time.Time{}, 0, -1, stored(a1, a2, a5, a6)},
		{"limit 0", time.Time{}, 0, 0, stored()},
		{"first page", time.Time{}, 0, 2, stored(a1, a2)},
		{"second page", time.Time{}, a2.ID, 2, stored(a5, a6)},
		{"last page", time.Time{}, a6.ID, 2, stored()},
		{"since an arming", a2At, 0, 100, stored(a2, a5, a6)},
		{"just after an arming", a2At.Add(time.Nanosecond), 0, 100, stored(a5, a6)},
		{"since, paged", a2At, a2.ID, 1, stored(a5)},
		{"re-armed", h(6), 0, 100, stored(a6)},
		{"after all", h(8), 0, 100, stored()},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, armed(tt.since, tt.afterID, tt.limit)); diff != "" {
			t.Errorf("%s: ArmedAlerts mismatch (-want +got):\n%s", tt.name, diff)
		}
	}
	// A deleted alert is not armed.
	if err := s.DeleteAlert(ctx, o, a1.ID); err != nil {
		t.Fatalf("DeleteAlert: %v", err)
	}
	if diff := cmp.Diff(stored(a2, a5, a6), armed(time.Time{}, 0, 100)); diff != "" {
		t.Errorf("ArmedAlerts after a delete mismatch (-want +got):\n%s", diff)
	}
}

func testFireOnce(t *testing.T, s coinpulse.Store) {
	u := newUser(t, s, "alert-fire-once@example.com")
	o := live(u)
	w := newWebhook(t, s, o, "https://example.com/hook", coinpulse.EventAlertTriggered)
	a := newAlert(t, s, o, "bitcoin", "70000", coinpulse.Above, true)
	b := newAlert(t, s, o, "ethereum", "3000", coinpulse.Below, false)
	l := newEventLog()
	t1 := t0.Add(time.Hour + 7)

	got := fire(t, s, l, firing(a, "70000.50", t1), firing(b, "2999.999999999999999999", t1))
	want := []coinpulse.Alert{asFired(*a, "70000.5", t1), asFired(*b, "2999.999999999999999999", t1)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("FireAlerts mismatch (-want +got):\n%s", diff)
	}
	wantDec(t, "TriggeredPrice", got[1].TriggeredPrice.Decimal, "2999.999999999999999999")
	if diff := cmp.Diff(want, []coinpulse.Alert{*getAlert(t, s, o, a.ID), *getAlert(t, s, o, b.ID)}); diff != "" {
		t.Errorf("stored alerts after FireAlerts mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[int64]int{a.ID: 1, b.ID: 1}, l.calls); diff != "" {
		t.Errorf("event calls per alert mismatch (-want +got):\n%s", diff)
	}

	// Again, as another node that saw the same crossings (at another
	// price) would: the armings are reported fired, as stored, and
	// nothing is enqueued twice. A firing named twice counts once.
	again := fire(t, s, l, firing(b, "1", t1.Add(time.Minute)), firing(a, "1", t1.Add(time.Minute)), firing(b, "2", t1))
	if diff := cmp.Diff([]coinpulse.Alert{want[1], want[0]}, again); diff != "" {
		t.Errorf("FireAlerts again mismatch (-want +got):\n%s", diff)
	}
	if n := l.total(); n != 2 {
		t.Errorf("event called %d times in all, want 2", n)
	}
	log := logOf(t, s, o, w.ID)
	if diff := cmp.Diff([]coinpulse.Delivery{firedDelivery(want[1], w.ID), firedDelivery(want[0], w.ID)}, log, ignoreDeliveryID); diff != "" {
		t.Errorf("webhook deliveries mismatch (-want +got):\n%s", diff)
	}
	emails := claimAll(t, s, coinpulse.KindEmail, t1.Add(time.Hour))
	if diff := cmp.Diff([]coinpulse.Delivery{firedDelivery(want[0], 0)}, emails, ignoreDeliveryID); diff != "" {
		t.Errorf("e-mail deliveries mismatch (-want +got):\n%s", diff)
	}
	if as := fire(t, s, l); len(as) != 0 {
		t.Errorf("FireAlerts of no firings = %v, want none", as)
	}
}

func testFireConcurrent(t *testing.T, s coinpulse.Store) {
	fireConcurrent(t, []coinpulse.Store{s})
}

// fireConcurrent fires the same armings from many goroutines at once,
// through nodes in turn, each in its own order: each alert fires once,
// with one set of deliveries, and every call reports every alert.
func fireConcurrent(t *testing.T, nodes []coinpulse.Store) {
	s := nodes[0]
	u := newUser(t, s, "alert-fire-race@example.com")
	o := live(u)
	w1 := newWebhook(t, s, o, "https://example.com/1", coinpulse.EventAlertTriggered)
	w2 := newWebhook(t, s, o, "https://example.com/2", coinpulse.EventAlertTriggered)
	const alerts, callers = 60, 8
	var fs []coinpulse.Firing
	for i := range alerts {
		a := newAlert(t, s, o, fmt.Sprintf("coin-%02d", i), "100", coinpulse.Above, i%2 == 0)
		fs = append(fs, firing(a, fmt.Sprintf("%d.5", 100+i), t0.Add(time.Hour)))
	}
	for _, n := range nodes {
		warmUp(t, n, callers)
	}
	l := newEventLog()
	results := make([][]coinpulse.Alert, callers)
	orders := make([][]coinpulse.Firing, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range callers {
		orders[i] = slices.Clone(fs)
		if i > 0 {
			rand.New(rand.NewPCG(uint64(i), 7)).Shuffle(len(fs), func(x, y int) {
				orders[i][x], orders[i][y] = orders[i][y], orders[i][x]
			})
		}
		n := nodes[i%len(nodes)]
		wg.Go(func() {
			<-start
			results[i], errs[i] = n.FireAlerts(t.Context(), orders[i], l.event)
		})
	}
	close(start)
	wg.Wait()

	stored := map[int64]coinpulse.Alert{}
	list, _, err := s.Alerts(t.Context(), o, coinpulse.AllAlerts)
	if err != nil {
		t.Fatalf("Alerts: %v", err)
	}
	for _, a := range list {
		if a.IsActive || a.TriggeredAt == nil {
			t.Errorf("alert %d: active %t, triggered at %v; want fired", a.ID, a.IsActive, a.TriggeredAt)
		}
		stored[a.ID] = a
	}
	for i := range callers {
		if errs[i] != nil {
			t.Errorf("caller %d: FireAlerts: %v", i, errs[i])
			continue
		}
		var want []coinpulse.Alert
		for _, f := range orders[i] {
			want = append(want, stored[f.AlertID])
		}
		if diff := cmp.Diff(want, results[i]); diff != "" {
			t.Errorf("caller %d: FireAlerts mismatch with the stored alerts, in its order (-want +got):\n%s", i, diff)
		}
	}
	for id, n := range l.calls {
		if n != 1 {
			t.Errorf("event called %d times for alert %d, want once", n, id)
		}
	}
	if len(l.calls) != alerts {
		t.Errorf("event called for %d alerts, want %d", len(l.calls), alerts)
	}
	for _, w := range []*coinpulse.Webhook{w1, w2} {
		seen := map[int64]int{}
		for _, dl := range logOf(t, s, o, w.ID) {
			seen[dl.AlertID]++
		}
		if len(seen) != alerts {
			t.Errorf("endpoint %d has deliveries for %d alerts, want %d", w.ID, len(seen), alerts)
		}
		for id, n := range seen {
			if n != 1 {
				t.Errorf("endpoint %d has %d deliveries for alert %d, want 1", w.ID, n, id)
			}
		}
	}
	emails := claimAll(t, s, coinpulse.KindEmail, t0.Add(2*time.Hour))
	seen := map[int64]int{}
	for _, e := range emails {
		seen[e.AlertID]++
		if !stored[e.AlertID].NotifyEmail {
			t.Errorf("e-mail delivery for alert %d, which asked for none", e.AlertID)
		}
	}
	if len(emails) != alerts/2 || len(seen) != alerts/2 {
		t.Errorf("%d e-mail deliveries for %d alerts, want %d for %d", len(emails), len(seen), alerts/2, alerts/2)
	}
}

func testFireStale(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "alert-fire-stale@example.com")
	o := live(u)
	w := newWebhook(t, s, o, "https://example.com/hook", coinpulse.EventAlertTriggered)
	l := newEventLog()
	mk := func(coin string) *coinpulse.Alert { return newAlert(t, s, o, coin, "10", coinpulse.Above, true) }
	good, disabled, rearmed, deleted, last := mk("good"), mk("disabled"), mk("rearmed"), mk("deleted"), mk("last")

	off := toggle(t, s, o, disabled.ID, t0.Add(time.Minute))
	fire(t, s, l, firing(rearmed, "11", t0.Add(time.Minute)))
	rearmedNow := toggle(t, s, o, rearmed.ID, t0.Add(2*time.Minute))
	if err := s.DeleteAlert(ctx, o, deleted.ID); err != nil {
		t.Fatalf("DeleteAlert: %v", err)
	}
	callsBefore := l.total()

	t1 := t0.Add(time.Hour)
	wrongSeq := firing(good, "12", t1)
	wrongSeq.ArmedSeq += 1_000_000
	fs := []coinpulse.Firing{
		firing(disabled, "12", t1),
		wrongSeq,
		firing(rearmed, "12", t1), // its first arming, which fired and ended
		firing(good, "12", t1),
		firing(deleted, "12", t1),
		{AlertID: last.ID + 1000, ArmedSeq: last.ArmedSeq, Price: d("12"), At: t1}, // no such alert
		firing(last, "13", t1),
	}
	got := fire(t, s, l, fs...)
	want := []coinpulse.Alert{asFired(*good, "12", t1), asFired(*last, "13", t1)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("FireAlerts mismatch (-want +got):\n%s", diff)
	}
	if n := l.total() - callsBefore; n != 2 {
		t.Errorf("event called %d times, want 2", n)
	}
	// The ended armings' alerts are as they were.
	if diff := cmp.Diff(off, getAlert(t, s, o, disabled.ID)); diff != "" {
		t.Errorf("disabled alert changed (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(rearmedNow, getAlert(t, s, o, rearmed.ID)); diff != "" {
		t.Errorf("re-armed alert changed (-want +got):\n%s", diff)
	}
	_, err := s.Alert(ctx, o, deleted.ID)
	wantCode(t, err, coinpulse.CodeNotFound)
	// Deliveries: the re-armed alert's first firing, and good and last.
	var ids []int64
	for _, dl := range logOf(t, s, o, w.ID) {
		ids = append(ids, dl.AlertID)
	}
	slices.Sort(ids)
	if diff := cmp.Diff([]int64{good.ID, rearmed.ID, last.ID}, ids); diff != "" {
		t.Errorf("alerts with webhook deliveries mismatch (-want +got):\n%s", diff)
	}
}

func testFireEnqueues(t *testing.T, s coinpulse.Store) {
	u := newUser(t, s, "alert-fire-enqueue@example.com")
	v := newUser(t, s, "alert-fire-enqueue-2@example.com")
	o := live(u)
	w1 := newWebhook(t, s, o, "https://example.com/1", coinpulse.EventAlertTriggered)
	w2 := newWebhook(t, s, o, "https://example.com/2", coinpulse.EventWebhookTest, coinpulse.EventAlertTriggered)
	w3 := newWebhook(t, s, o, "https://example.com/3", coinpulse.EventWebhookTest) // not subscribed
	w4 := newWebhook(t, s, o, "https://example.com/4", coinpulse.EventAlertTriggered)
	w5 := newWebhook(t, s, sandbox(u), "https://example.com/5", coinpulse.EventAlertTriggered)
	w6 := newWebhook(t, s, live(v), "https://example.com/6", coinpulse.EventAlertTriggered)
	w7 := newWebhook(t, s, o, "https://example.com/7") // no events

	// Disable w4 the way a 410 Gone does.
	probe := enqueue(t, s, w4, t0)
	if got := claimAll(t, s, coinpulse.KindWebhook, t0); len(got) != 1 || got[0].ID != probe.ID {
		t.Fatalf("ClaimDeliveries = %v, want the probe %d", deliveryIDs(got), probe.ID)
	}
	recordAttempt(t, s, probe.ID, coinpulse.Attempt{At: t0, Status: coinpulse.DeliveryFailed, StatusCode: 410, Error: "410 Gone", DisableEndpoint: "The endpoint answered 410 Gone."})
	if w := getWebhook(t, s, o, w4.ID); w.Enabled {
		t.Fatalf("endpoint %d still enabled after DisableEndpoint", w4.ID)
	}

	a := newAlert(t, s, o, "bitcoin", "100", coinpulse.Above, true)
	b := newAlert(t, s, sandbox(u), "bitcoin", "100", coinpulse.Above, false)
	c := newAlert(t, s, o, "ethereum", "100", coinpulse.Below, false)
	t1 := t0.Add(time.Hour)
	got := fire(t, s, newEventLog(), firing(c, "99", t1), firing(b, "101", t1), firing(a, "101", t1))
	fa, fb, fc := asFired(*a, "101", t1), asFired(*b, "101", t1), asFired(*c, "99", t1)
	if diff := cmp.Diff([]coinpulse.Alert{fc, fb, fa}, got); diff != "" {
		t.Fatalf("FireAlerts mismatch (-want +got):\n%s", diff)
	}

	tests := []struct {
		name string
		w    *coinpulse.Webhook
		want []coinpulse.Delivery
	}{
		{"subscribed", w1, []coinpulse.Delivery{firedDelivery(fa, w1.ID), firedDelivery(fc, w1.ID)}},
		{"subscribed among others", w2, []coinpulse.Delivery{firedDelivery(fa, w2.ID), firedDelivery(fc, w2.ID)}},
		{"not subscribed", w3, []coinpulse.Delivery{}},
		{"sandbox", w5, []coinpulse.Delivery{firedDelivery(fb, w5.ID)}},
		{"another user", w6, []coinpulse.Delivery{}},
		{"no events", w7, []coinpulse.Delivery{}},
	}
	for _, tt := range tests {
		got := logOf(t, s, tt.w.Owner, tt.w.ID)
		// Same CreatedAt: the order between them is the store's (by ID).
		slices.SortFunc(got, func(x, y coinpulse.Delivery) int { return int(x.AlertID - y.AlertID) })
		slices.SortFunc(tt.want, func(x, y coinpulse.Delivery) int { return int(x.AlertID - y.AlertID) })
		if diff := cmp.Diff(tt.want, got, ignoreDeliveryID); diff != "" {
			t.Errorf("%s: deliveries of endpoint %d mismatch (-want +got):\n%s", tt.name, tt.w.ID, diff)
		}
	}
	// The disabled endpoint has only its probe.
	if log := logOf(t, s, o, w4.ID); len(log) != 1 || log[0].ID != probe.ID {
		t.Errorf("disabled endpoint's deliveries = %v, want only the probe %d", deliveryIDs(log), probe.ID)
	}
	// One e-mail, for the alert that asked for it.
	emails := claimAll(t, s, coinpulse.KindEmail, t1)
	if diff := cmp.Diff([]coinpulse.Delivery{firedDelivery(fa, 0)}, emails, ignoreDeliveryID); diff != "" {
		t.Errorf("e-mail deliveries mismatch (-want +got):\n%s", diff)
	}
	// All of them due at the firing, not before.
	if early := claimAll(t, s, coinpulse.KindWebhook, t1.Add(-time.Microsecond)); len(early) != 0 {
		t.Errorf("deliveries claimed before the firing: %v", deliveryIDs(early))
	}
	if due := claimAll(t, s, coinpulse.KindWebhook, t1); len(due) != 5 {
		t.Errorf("%d webhook deliveries due at the firing, want 5", len(due))
	}
}

func testFireMany(t *testing.T, s coinpulse.Store) {
	u := newUser(t, s, "alert-fire-many@example.com")
	o := live(u)
	w := newWebhook(t, s, o, "https://example.com/hook", coinpulse.EventAlertTriggered)
	const n = 1000
	fs := make([]coinpulse.Firing, n)
	for i := range n {
		a := newAlert(t, s, o, fmt.Sprintf("coin-%04d", i), "1", coinpulse.Above, i%4 == 0)
		fs[i] = firing(a, "2", t0.Add(time.Hour))
	}
	// Fire in an order unlike the IDs'.
	rand.New(rand.NewPCG(5, 6)).Shuffle(n, func(i, j int) { fs[i], fs[j] = fs[j], fs[i] })
	l := newEventLog()
	start := time.Now()
	got := fire(t, s, l, fs...)
	elapsed := time.Since(start)
	t.Logf("FireAlerts of %d firings took %v", n, elapsed)
	if len(got) != n {
		t.Fatalf("FireAlerts returned %d alerts, want %d", len(got), n)
	}
	for i, a := range got {
		if a.ID != fs[i].AlertID || a.IsActive {
			t.Fatalf("FireAlerts result %d is alert %d (active %t), want alert %d fired", i, a.ID, a.IsActive, fs[i].AlertID)
		}
	}
	if l.total() != n {
		t.Errorf("event called %d times, want %d", l.total(), n)
	}
	if log := logOf(t, s, o, w.ID); len(log) != n {
		t.Errorf("%d webhook deliveries, want %d", len(log), n)
	}
	if emails := claimAll(t, s, coinpulse.KindEmail, t0.Add(time.Hour)); len(emails) != n/4 {
		t.Errorf("%d e-mail deliveries, want %d", len(emails), n/4)
	}
	if as, err := s.ArmedAlerts(t.Context(), time.Time{}, 0, -1); err != nil || len(as) != 0 {
		t.Errorf("ArmedAlerts after firing all = %d alerts, %v; want none", len(as), err)
	}
	// A generous bound, for slow machines and the race detector; the
	// stores take well under a second.
	if elapsed > 20*time.Second {
		t.Errorf("FireAlerts of %d firings took %v", n, elapsed)
	}
}

func testCreateWebhook(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "webhook-create@example.com")
	o := live(u)
	w := &coinpulse.Webhook{
		Owner: o, URL: "https://example.com/hooks/coinpulse?x=1", Events: []string{coinpulse.EventAlertTriggered},
		Description: "Trading bot", Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		// Ignored:
		ID: 99, Enabled: false, DisabledReason: "x", UpdatedAt: t0.Add(time.Hour),
		CreatedAt: t0.In(time.FixedZone("X", -7200)),
	}
	if err := s.CreateWebhook(ctx, w, coinpulse.MaxWebhooks); err != nil {
		t.Fatalf("CreateWebhook: %v", err)
	}
	if w.ID == 0 || w.ID == 99 {
		t.Errorf("CreateWebhook set ID %d", w.ID)
	}
	want := &coinpulse.Webhook{
		ID: w.ID, Owner: o, URL: "https://example.com/hooks/coinpulse?x=1", Events: []string{coinpulse.EventAlertTriggered},
		Description: "Trading bot", Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", Enabled: true,
		CreatedAt: us(t0), UpdatedAt: us(t0),
	}
	if diff := cmp.Diff(want, w); diff != "" {
		t.Errorf("endpoint after CreateWebhook mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, getWebhook(t, s, o, w.ID)); diff != "" {
		t.Errorf("Webhook mismatch (-want +got):\n%s", diff)
	}

	// Without CreatedAt it is now; events keep their order; no events is
	// an empty list.
	before := time.Now().Truncate(time.Microsecond)
	x := &coinpulse.Webhook{Owner: o, URL: "https://example.com/x", Events: []string{"webhook.test", "alert.triggered"}, Secret: "whsec_x"}
	if err := s.CreateWebhook(ctx, x, coinpulse.Unlimited); err != nil {
		t.Fatalf("CreateWebhook: %v", err)
	}
	if x.CreatedAt.Before(before) || x.CreatedAt.After(time.Now()) || !x.UpdatedAt.Equal(x.CreatedAt) {
		t.Errorf("CreatedAt, UpdatedAt = %v, %v; want equal, now", x.CreatedAt, x.UpdatedAt)
	}
	y := &coinpulse.Webhook{Owner: o, URL: "https://example.com/y", Secret: "whsec_y", CreatedAt: t0.Add(-time.Hour)}
	if err := s.CreateWebhook(ctx, y, coinpulse.Unlimited); err != nil {
		t.Fatalf("CreateWebhook: %v", err)
	}
	if y.Events == nil || len(y.Events) != 0 {
		t.Errorf("Events after CreateWebhook with none = %#v, want an empty slice", y.Events)
	}
	list, err := s.Webhooks(ctx, o)
	if err != nil {
		t.Fatalf("Webhooks: %v", err)
	}
	if diff := cmp.Diff([]coinpulse.Webhook{*y, *w, *x}, list); diff != "" {
		t.Errorf("Webhooks mismatch (-want +got):\n%s", diff)
	}
	list, err = s.Webhooks(ctx, sandbox(u))
	if err != nil || list == nil || len(list) != 0 {
		t.Errorf("Webhooks of an owner with none = %v, %v; want an empty slice", list, err)
	}

	// Invalid input.
	for name, bad := range map[string]*coinpulse.Webhook{
		"mode":        {Owner: coinpulse.Owner{UserID: u.ID, Mode: "prod"}, URL: "https://example.com", Secret: "s"},
		"url":         {Owner: o, Secret: "s"},
		"empty event": {Owner: o, URL: "https://example.com", Events: []string{""}, Secret: "s"},
		"comma":       {Owner: o, URL: "https://example.com", Events: []string{"alert.triggered,webhook.test"}, Secret: "s"},
	} {
		if err := s.CreateWebhook(ctx, bad, coinpulse.Unlimited); coinpulse.ErrorCode(err) != coinpulse.CodeValidation {
			t.Errorf("%s: CreateWebhook = %v, want VALIDATION_ERROR", name, err)
		}
	}
	unknown := &coinpulse.Webhook{Owner: coinpulse.Owner{UserID: u.ID + 1000, Mode: coinpulse.ModeLive}, URL: "https://example.com", Secret: "s"}
	wantCode(t, s.CreateWebhook(ctx, unknown, coinpulse.Unlimited), coinpulse.CodeNotFound)
	wantCode(t, s.CreateWebhook(ctx, unknown, 5), coinpulse.CodeNotFound)

	// Deleting an endpoint deletes its deliveries, pending or not.
	done := enqueue(t, s, w, t0)
	pending := enqueue(t, s, w, t0.Add(time.Minute))
	other := enqueue(t, s, x, t0.Add(time.Minute))
	claim(t, s, coinpulse.KindWebhook, t0, time.Minute, 1)
	recordAttempt(t, s, done.ID, coinpulse.Attempt{At: t0, Status: coinpulse.DeliveryDelivered, StatusCode: 200})
	if err := s.DeleteWebhook(ctx, o, w.ID); err != nil {
		t.Fatalf("DeleteWebhook: %v", err)
	}
	_, err = s.Webhook(ctx, o, w.ID)
	wantCode(t, err, coinpulse.CodeNotFound)
	_, err = s.Deliveries(ctx, o, w.ID, 0, 10)
	wantCode(t, err, coinpulse.CodeNotFound)
	wantCode(t, s.DeleteWebhook(ctx, o, w.ID), coinpulse.CodeNotFound)
	if got := claimAll(t, s, coinpulse.KindWebhook, t0.Add(time.Hour)); len(got) != 1 || got[0].ID != other.ID {
		t.Errorf("ClaimDeliveries after DeleteWebhook = %v, want only %d (not %d)", deliveryIDs(got), other.ID, pending.ID)
	}
	wantCode(t, s.RecordAttempt(ctx, pending.ID, coinpulse.Attempt{At: t0, Status: coinpulse.DeliveryDelivered}), coinpulse.CodeNotFound)
	if list, err := s.Webhooks(ctx, o); err != nil || len(list) != 2 {
		t.Errorf("Webhooks after DeleteWebhook = %d, %v; want 2", len(list), err)
	}
}

func testWebhookOwnerScoping(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "webhook-carol@example.com")
	mallory := newUser(t, s, "webhook-mallory@example.com")
	o := live(u)
	w := newWebhook(t, s, o, "https://example.com/hook", coinpulse.EventAlertTriggered)
	dl := enqueue(t, s, w, t0)
	before := getWebhook(t, s, o, w.ID)

	for _, other := range []coinpulse.Owner{live(mallory), sandbox(mallory), sandbox(u)} {
		t.Run(fmt.Sprintf("%d/%s", other.UserID, other.Mode), func(t *testing.T) {
			own := newWebhook(t, s, other, "https://example.com/own", coinpulse.EventAlertTriggered)
			list, err := s.Webhooks(ctx, other)
			if err != nil {
				t.Fatalf("Webhooks: %v", err)
			}
			if len(list) != 1 || list[0].ID != own.ID {
				t.Errorf("Webhooks lists %d endpoints, want only endpoint %d", len(list), own.ID)
			}
			_, err = s.Webhook(ctx, other, w.ID)
			wantCode(t, err, coinpulse.CodeNotFound)
			_, err = s.Deliveries(ctx, other, w.ID, 0, 10)
			wantCode(t, err, coinpulse.CodeNotFound)
			wantCode(t, s.DeleteWebhook(ctx, other, w.ID), coinpulse.CodeNotFound)
			err = s.EnqueueDelivery(ctx, &coinpulse.Delivery{Kind: coinpulse.KindWebhook, Owner: other, EndpointID: w.ID,
				EventID: "msg_x", EventType: coinpulse.EventWebhookTest, Payload: []byte("{}")})
			wantCode(t, err, coinpulse.CodeNotFound)
		})
	}
	if diff := cmp.Diff(before, getWebhook(t, s, o, w.ID)); diff != "" {
		t.Errorf("endpoint changed by other owners (-before +after):\n%s", diff)
	}
	if log := logOf(t, s, o, w.ID); len(log) != 1 || log[0].ID != dl.ID {
		t.Errorf("endpoint's deliveries = %v, want only %d", deliveryIDs(log), dl.ID)
	}
}

func testWebhookLimit(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "webhook-limit@example.com")
	o := live(u)
	create := func(o coinpulse.Owner, limit int) (*coinpulse.Webhook, error) {
		w := &coinpulse.Webhook{Owner: o, URL: "https://example.com", Secret: "s", CreatedAt: t0}
		return w, s.CreateWebhook(ctx, w, limit)
	}
	var first *coinpulse.Webhook
	for i := range 3 {
		w, err := create(o, 3)
		if err != nil {
			t.Fatalf("CreateWebhook %d of 3: %v", i+1, err)
		}
		if first == nil {
			first = w
		}
	}
	_, err := create(o, 3)
	wantCode(t, err, coinpulse.CodeConflict)
	if msg := coinpulse.ErrorMessage(err); !strings.Contains(msg, "3") {
		t.Errorf("message = %q, want it to name the limit", msg)
	}
	// Disabled endpoints count too.
	dl := enqueue(t, s, first, t0)
	claimAll(t, s, coinpulse.KindWebhook, t0)
	recordAttempt(t, s, dl.ID, coinpulse.Attempt{At: t0, Status: coinpulse.DeliveryFailed, DisableEndpoint: "gone"})
	_, err = create(o, 3)
	wantCode(t, err, coinpulse.CodeConflict)
	// Per owner.
	if _, err := create(sandbox(u), 3); err != nil {
		t.Errorf("CreateWebhook in the sandbox: %v", err)
	}
	// Deleting one makes room.
	if err := s.DeleteWebhook(ctx, o, first.ID); err != nil {
		t.Fatalf("DeleteWebhook: %v", err)
	}
	if _, err := create(o, 3); err != nil {
		t.Errorf("CreateWebhook after a delete: %v", err)
	}
	if _, err := create(o, coinpulse.Unlimited); err != nil {
		t.Errorf("CreateWebhook, unlimited: %v", err)
	}

	// Atomically.
	v := newUser(t, s, "webhook-limit-2@example.com")
	warmUp(t, s, 12)
	const n, limit = 12, 4
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			_, errs[i] = create(live(v), limit)
		})
	}
	close(start)
	wg.Wait()
	created := 0
	for _, err := range errs {
		switch coinpulse.ErrorCode(err) {
		case "":
			created++
		case coinpulse.CodeConflict:
		default:
			t.Errorf("CreateWebhook: %v, want success or CONFLICT", err)
		}
	}
	if list, err := s.Webhooks(ctx, live(v)); err != nil || created != limit || len(list) != limit {
		t.Errorf("%d concurrent CreateWebhook calls succeeded and %d endpoints stored (%v), want %d", created, len(list), err, limit)
	}
}

func testEnqueueDelivery(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "delivery-enqueue@example.com")
	o := live(u)
	w := newWebhook(t, s, o, "https://example.com/hook")
	dl := &coinpulse.Delivery{
		Kind: coinpulse.KindWebhook, Owner: o, EndpointID: w.ID, EventID: "msg_2x9Y", EventType: coinpulse.EventWebhookTest,
		Payload: []byte{0, '{', '}', 0xff}, CreatedAt: t0.In(time.FixedZone("X", 3600)),
		// Ignored:
		ID: 99, Status: coinpulse.DeliveryDelivered, Attempts: 5, NextAttemptAt: t0.Add(time.Hour),
		LastAttemptAt: ptr(t0), LastStatusCode: 200, LastError: "x", DeliveredAt: ptr(t0),
	}
	if err := s.EnqueueDelivery(ctx, dl); err != nil {
		t.Fatalf("EnqueueDelivery: %v", err)
	}
	if dl.ID == 0 || dl.ID == 99 {
		t.Errorf("EnqueueDelivery set ID %d", dl.ID)
	}
	want := &coinpulse.Delivery{
		ID: dl.ID, Kind: coinpulse.KindWebhook, Owner: o, EndpointID: w.ID, EventID: "msg_2x9Y", EventType: coinpulse.EventWebhookTest,
		Payload: []byte{0, '{', '}', 0xff}, Status: coinpulse.DeliveryPending, NextAttemptAt: us(t0), CreatedAt: us(t0),
	}
	if diff := cmp.Diff(want, dl); diff != "" {
		t.Errorf("delivery after EnqueueDelivery mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]coinpulse.Delivery{*want}, logOf(t, s, o, w.ID)); diff != "" {
		t.Errorf("Deliveries mismatch (-want +got):\n%s", diff)
	}

	// An e-mail of an alert, now.
	a := newAlert(t, s, o, "bitcoin", "1", coinpulse.Above, true)
	before := time.Now().Truncate(time.Microsecond)
	e := &coinpulse.Delivery{Kind: coinpulse.KindEmail, Owner: o, AlertID: a.ID, EventID: "msg_e", EventType: coinpulse.EventAlertTriggered, Payload: []byte("{}")}
	if err := s.EnqueueDelivery(ctx, e); err != nil {
		t.Fatalf("EnqueueDelivery(e-mail): %v", err)
	}
	if e.CreatedAt.Before(before) || e.CreatedAt.After(time.Now()) || !e.NextAttemptAt.Equal(e.CreatedAt) {
		t.Errorf("CreatedAt, NextAttemptAt = %v, %v; want equal, now", e.CreatedAt, e.NextAttemptAt)
	}
	got := claimAll(t, s, coinpulse.KindEmail, time.Now().Add(time.Second))
	if diff := cmp.Diff([]coinpulse.Delivery{*e}, got); diff != "" {
		t.Errorf("claimed e-mail mismatch (-want +got):\n%s", diff)
	}

	// Invalid input.
	v := newUser(t, s, "delivery-enqueue-2@example.com")
	theirs := newWebhook(t, s, live(v), "https://example.com/theirs")
	tests := []struct {
		name string
		d    coinpulse.Delivery
		code coinpulse.Code
	}{
		{"kind", coinpulse.Delivery{Kind: "sms", Owner: o}, coinpulse.CodeValidation},
		{"mode", coinpulse.Delivery{Kind: coinpulse.KindEmail, Owner: coinpulse.Owner{UserID: u.ID, Mode: "prod"}}, coinpulse.CodeValidation},
		{"webhook without endpoint", coinpulse.Delivery{Kind: coinpulse.KindWebhook, Owner: o}, coinpulse.CodeValidation},
		{"e-mail with endpoint", coinpulse.Delivery{Kind: coinpulse.KindEmail, Owner: o, EndpointID: w.ID}, coinpulse.CodeValidation},
		{"another owner's endpoint", coinpulse.Delivery{Kind: coinpulse.KindWebhook, Owner: o, EndpointID: theirs.ID}, coinpulse.CodeNotFound},
		{"no such endpoint", coinpulse.Delivery{Kind: coinpulse.KindWebhook, Owner: o, EndpointID: theirs.ID + 1000}, coinpulse.CodeNotFound},
		{"no such user", coinpulse.Delivery{Kind: coinpulse.KindEmail, Owner: coinpulse.Owner{UserID: v.ID + 1000, Mode: coinpulse.ModeLive}}, coinpulse.CodeNotFound},
	}
	for _, tt := range tests {
		tt.d.EventID, tt.d.EventType = "msg_bad", coinpulse.EventWebhookTest
		if err := s.EnqueueDelivery(ctx, &tt.d); coinpulse.ErrorCode(err) != tt.code {
			t.Errorf("%s: EnqueueDelivery = %v, want %s", tt.name, err, tt.code)
		}
	}
	if got := claimAll(t, s, coinpulse.KindWebhook, t0.Add(time.Hour)); len(got) != 1 || got[0].ID != dl.ID {
		t.Errorf("claimed after invalid enqueues: %v, want only %d", deliveryIDs(got), dl.ID)
	}
	if got := claimAll(t, s, coinpulse.KindEmail, time.Now().Add(time.Hour)); len(got) != 1 || got[0].ID != e.ID {
		t.Errorf("claimed e-mails after invalid enqueues: %v, want only %d", deliveryIDs(got), e.ID)
	}
}

func testClaimLease(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "delivery-claim@example.com")
	o := live(u)
	w := newWebhook(t, s, o, "https://example.com/hook")
	d2 := enqueue(t, s, w, t0.Add(time.Minute))
	d1 := enqueue(t, s, w, t0)
	d3 := enqueue(t, s, w, t0.Add(time.Hour))
	e1 := &coinpulse.Delivery{Kind: coinpulse.KindEmail, Owner: o, EventID: "msg_e", EventType: "x", Payload: []byte("{}"), CreatedAt: t0}
	if err := s.EnqueueDelivery(ctx, e1); err != nil {
		t.Fatalf("EnqueueDelivery: %v", err)
	}
	const lease = 30 * time.Second
	now := t0.Add(2 * time.Minute)

	steps := []struct {
		name string
		kind coinpulse.DeliveryKind
		now  time.Time
		n    int
		want []*coinpulse.Delivery
	}{
		{"due, oldest first; not due left", coinpulse.KindWebhook, now, 10, []*coinpulse.Delivery{d1, d2}},
		{"leased", coinpulse.KindWebhook, now.Add(lease - time.Microsecond), 10, nil},
		{"other kind", coinpulse.KindEmail, now, 10, []*coinpulse.Delivery{e1}},
		{"lease ended", coinpulse.KindWebhook, now.Add(lease), 10, []*coinpulse.Delivery{d1, d2}},
		{"leased again", coinpulse.KindWebhook, now.Add(lease + time.Second), 10, nil},
		{"n", coinpulse.KindWebhook, t0.Add(2 * time.Hour), 1, []*coinpulse.Delivery{d1}},
		{"the rest, now due", coinpulse.KindWebhook, t0.Add(2 * time.Hour), 10, []*coinpulse.Delivery{d2, d3}},
		{"none left", coinpulse.KindWebhook, t0.Add(2 * time.Hour), 10, nil},
		{"n 0", coinpulse.KindWebhook, t0.Add(5 * time.Hour), 0, nil},
	}
	for _, st := range steps {
		want := []coinpulse.Delivery{}
		for _, dl := range st.want {
			want = append(want, *dl)
		}
		if diff := cmp.Diff(want, claim(t, s, st.kind, st.now, lease, st.n)); diff != "" {
			t.Errorf("%s: ClaimDeliveries mismatch (-want +got):\n%s", st.name, diff)
		}
	}
	// Final deliveries are never claimed; pending ones are, when due.
	recordAttempt(t, s, d1.ID, coinpulse.Attempt{At: t0.Add(2 * time.Hour), Status: coinpulse.DeliveryDelivered, StatusCode: 204})
	recordAttempt(t, s, d2.ID, coinpulse.Attempt{At: t0.Add(2 * time.Hour), Status: coinpulse.DeliveryFailed, StatusCode: 500})
	if got := claimAll(t, s, coinpulse.KindWebhook, t0.Add(10*time.Hour)); len(got) != 1 || got[0].ID != d3.ID {
		t.Errorf("ClaimDeliveries after final attempts = %v, want only %d", deliveryIDs(got), d3.ID)
	}
	_, err := s.ClaimDeliveries(ctx, "sms", now, lease, 10)
	wantCode(t, err, coinpulse.CodeValidation)

	// An attempt recorded under its lease: not once another claim has
	// the delivery, nor when the store settled it meanwhile.
	recordAttempt(t, s, d3.ID, coinpulse.Attempt{At: t0.Add(10 * time.Hour), Status: coinpulse.DeliveryDelivered, StatusCode: 204})
	d4 := enqueue(t, s, w, t0.Add(10*time.Hour))
	first, err := s.ClaimDeliveries(ctx, coinpulse.KindWebhook, t0.Add(11*time.Hour), lease, 10)
	if err != nil || len(first) != 1 || first[0].ID != d4.ID {
		t.Fatalf("claim d4: %v, %v", deliveryIDs(first), err)
	}
	second, err := s.ClaimDeliveries(ctx, coinpulse.KindWebhook, t0.Add(11*time.Hour).Add(lease), lease, 10)
	if err != nil || len(second) != 1 || second[0].ID != d4.ID {
		t.Fatalf("claim d4 again after its lease: %v, %v", deliveryIDs(second), err)
	}
	late := coinpulse.Attempt{At: t0.Add(11 * time.Hour).Add(lease + time.Second), Status: coinpulse.DeliveryFailed, StatusCode: 500, Lease: first[0].LeaseUntil}
	wantCode(t, s.RecordAttempt(ctx, d4.ID, late), coinpulse.CodeConflict)
	if got := deliveryByID(t, s, o, w.ID, d4.ID); got.Attempts != 0 || got.Status != coinpulse.DeliveryPending {
		t.Errorf("after an attempt past its lease: %d attempts, %s", got.Attempts, got.Status)
	}
	recordAttempt(t, s, d4.ID, coinpulse.Attempt{At: late.At, Status: coinpulse.DeliveryDelivered, StatusCode: 204, Lease: second[0].LeaseUntil})
	if got := deliveryByID(t, s, o, w.ID, d4.ID); got.Attempts != 1 || got.Status != coinpulse.DeliveryDelivered {
		t.Errorf("after the attempt under the lease: %d attempts, %s", got.Attempts, got.Status)
	}
	wantCode(t, s.RecordAttempt(ctx, d4.ID, coinpulse.Attempt{At: late.At, Status: coinpulse.DeliveryFailed, Lease: second[0].LeaseUntil}), coinpulse.CodeConflict)
	wantCode(t, s.RecordAttempt(ctx, 1<<40, coinpulse.Attempt{At: late.At, Status: coinpulse.DeliveryFailed, Lease: second[0].LeaseUntil}), coinpulse.CodeNotFound)
}

// deliveryByID returns the endpoint's delivery id, or fails t.
func deliveryByID(t *testing.T, s coinpulse.Store, o coinpulse.Owner, endpointID, id int64) coinpulse.Delivery {
	t.Helper()
	ds, err := s.Deliveries(t.Context(), o, endpointID, 0, 100)
	if err != nil {
		t.Fatalf("Deliveries: %v", err)
	}
	for _, dl := range ds {
		if dl.ID == id {
			return dl
		}
	}
	t.Fatalf("no delivery %d", id)
	return coinpulse.Delivery{}
}

func testClaimConcurrent(t *testing.T, s coinpulse.Store) {
	claimConcurrent(t, []coinpulse.Store{s})
}

// claimConcurrent claims many deliveries from many goroutines at once,
// through nodes in turn: each is claimed exactly once.
func claimConcurrent(t *testing.T, nodes []coinpulse.Store) {
	s := nodes[0]
	u := newUser(t, s, "delivery-claim-race@example.com")
	o := live(u)
	w := newWebhook(t, s, o, "https://example.com/hook")
	const n, claimers = 150, 6
	all := map[int64]bool{}
	for i := range n {
		all[enqueue(t, s, w, t0.Add(time.Duration(i%17)*time.Second)).ID] = true
	}
	for _, node := range nodes {
		warmUp(t, node, claimers)
	}
	got := make([][]int64, claimers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range claimers {
		node := nodes[i%len(nodes)]
		wg.Go(func() {
			<-start
			for {
				ds, err := node.ClaimDeliveries(t.Context(), coinpulse.KindWebhook, t0.Add(time.Minute), time.Hour, 7)
				if err != nil {
					t.Errorf("claimer %d: ClaimDeliveries: %v", i, err)
					return
				}
				if len(ds) == 0 {
					return
				}
				got[i] = append(got[i], deliveryIDs(ds)...)
				if len(got[i]) > n {
					t.Errorf("claimer %d claimed %d deliveries of %d", i, len(got[i]), n)
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	seen := map[int64]int{}
	for _, ids := range got {
		for _, id := range ids {
			seen[id]++
		}
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("delivery %d claimed %d times, want once", id, c)
		}
		if !all[id] {
			t.Errorf("claimed unknown delivery %d", id)
		}
	}
	if len(seen) != n {
		t.Errorf("%d deliveries claimed, want %d", len(seen), n)
	}
}

func testRecordAttempt(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "delivery-record@example.com")
	o := live(u)
	w1 := newWebhook(t, s, o, "https://example.com/1")
	w2 := newWebhook(t, s, o, "https://example.com/2")
	x1, x2, x3 := enqueue(t, s, w1, t0), enqueue(t, s, w1, t0.Add(time.Second)), enqueue(t, s, w1, t0.Add(2*time.Second))
	y1 := enqueue(t, s, w2, t0)
	if got := claim(t, s, coinpulse.KindWebhook, t0.Add(time.Minute), 24*time.Hour, 100); len(got) != 4 {
		t.Fatalf("claimed %d deliveries, want 4", len(got))
	}
	byID := func(o coinpulse.Owner, endpointID, id int64) coinpulse.Delivery {
		t.Helper()
		for _, dl := range logOf(t, s, o, endpointID) {
			if dl.ID == id {
				return dl
			}
		}
		t.Fatalf("delivery %d not in endpoint %d's log", id, endpointID)
		return coinpulse.Delivery{}
	}

	// A retry: pending, due later, the lease released.
	t1 := t0.Add(2 * time.Minute)
	recordAttempt(t, s, x1.ID, coinpulse.Attempt{At: t1, Status: coinpulse.DeliveryPending, NextAttemptAt: t1.Add(5 * time.Minute), StatusCode: 503, Error: "503 Service Unavailable"})
	want := *x1
	want.Attempts, want.NextAttemptAt, want.LastAttemptAt = 1, us(t1.Add(5*time.Minute)), ptr(us(t1))
	want.LastStatusCode, want.LastError = 503, "503 Service Unavailable"
	if diff := cmp.Diff(want, byID(o, w1.ID, x1.ID)); diff != "" {
		t.Errorf("after a retry, delivery mismatch (-want +got):\n%s", diff)
	}
	if got := claimAll(t, s, coinpulse.KindWebhook, t1.Add(5*time.Minute-time.Microsecond)); len(got) != 0 {
		t.Errorf("claimed before the retry is due: %v", deliveryIDs(got))
	}
	if got := claimAll(t, s, coinpulse.KindWebhook, t1.Add(5*time.Minute)); len(got) != 1 || got[0].ID != x1.ID {
		t.Errorf("claimed when the retry is due: %v, want %d (the other leases hold)", deliveryIDs(got), x1.ID)
	}

	// Delivered.
	t2 := t1.Add(6 * time.Minute)
	recordAttempt(t, s, x1.ID, coinpulse.Attempt{At: t2, Status: coinpulse.DeliveryDelivered, StatusCode: 200})
	want.Attempts, want.Status, want.LastAttemptAt, want.DeliveredAt = 2, coinpulse.DeliveryDelivered, ptr(us(t2)), ptr(us(t2))
	want.LastStatusCode, want.LastError = 200, ""
	if diff := cmp.Diff(want, byID(o, w1.ID, x1.ID)); diff != "" {
		t.Errorf("after delivery, delivery mismatch (-want +got):\n%s", diff)
	}

	// Failed for good.
	recordAttempt(t, s, y1.ID, coinpulse.Attempt{At: t2, Status: coinpulse.DeliveryFailed, StatusCode: 500, Error: "retries exhausted"})
	wantY := *y1
	wantY.Attempts, wantY.Status, wantY.LastAttemptAt, wantY.LastStatusCode, wantY.LastError = 1, coinpulse.DeliveryFailed, ptr(us(t2)), 500, "retries exhausted"
	if diff := cmp.Diff(wantY, byID(o, w2.ID, y1.ID)); diff != "" {
		t.Errorf("after failure, delivery mismatch (-want +got):\n%s", diff)
	}

	// Disabling the endpoint fails its other pending deliveries, and only
	// those.
	t3 := t2.Add(time.Minute)
	later := enqueue(t, s, w1, t3) // pending, not leased
	recordAttempt(t, s, x2.ID, coinpulse.Attempt{At: t3, Status: coinpulse.DeliveryFailed, StatusCode: 410, Error: "410 Gone", DisableEndpoint: "The endpoint answered 410 Gone."})
	gotW := getWebhook(t, s, o, w1.ID)
	if gotW.Enabled || gotW.DisabledReason != "The endpoint answered 410 Gone." || !gotW.UpdatedAt.Equal(us(t3)) {
		t.Errorf("endpoint after DisableEndpoint: enabled %t, reason %q, updated %v; want disabled with the reason at %v",
			gotW.Enabled, gotW.DisabledReason, gotW.UpdatedAt, us(t3))
	}
	if dx2 := byID(o, w1.ID, x2.ID); dx2.Status != coinpulse.DeliveryFailed || dx2.LastStatusCode != 410 || dx2.Attempts != 1 {
		t.Errorf("the attempted delivery: %s, %d, %d attempts; want failed, 410, 1", dx2.Status, dx2.LastStatusCode, dx2.Attempts)
	}
	for _, id := range []int64{x3.ID, later.ID} {
		dl := byID(o, w1.ID, id)
		if dl.Status != coinpulse.DeliveryFailed || dl.Attempts != 0 || !strings.Contains(dl.LastError, "disabled") {
			t.Errorf("pending delivery %d of the disabled endpoint: %s, %d attempts, error %q; want failed, 0, saying the endpoint was disabled",
				id, dl.Status, dl.Attempts, dl.LastError)
		}
	}
	if diff := cmp.Diff(want, byID(o, w1.ID, x1.ID)); diff != "" {
		t.Errorf("delivered delivery changed by the disabling (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantY, byID(o, w2.ID, y1.ID)); diff != "" {
		t.Errorf("another endpoint's delivery changed by the disabling (-want +got):\n%s", diff)
	}
	if !getWebhook(t, s, o, w2.ID).Enabled {
		t.Errorf("another endpoint was disabled")
	}
	if got := claimAll(t, s, coinpulse.KindWebhook, t3.Add(24*time.Hour)); len(got) != 0 {
		t.Errorf("claimed after the disabling: %v, want none", deliveryIDs(got))
	}

	// E-mail outcomes land on the alert's current firing.
	l := newEventLog()
	mk := func(coin string) *coinpulse.Alert { return newAlert(t, s, o, coin, "1", coinpulse.Above, true) }
	a, b, c, gone := mk("a-coin"), mk("b-coin"), mk("c-coin"), mk("gone-coin")
	t4 := t3.Add(time.Hour)
	fire(t, s, l, firing(a, "2", t4), firing(b, "2", t4), firing(c, "2", t4), firing(gone, "2", t4))
	emails := map[int64]int64{} // alert ID to delivery ID
	for _, e := range claimAll(t, s, coinpulse.KindEmail, t4) {
		emails[e.AlertID] = e.ID
	}
	if len(emails) != 4 {
		t.Fatalf("e-mail deliveries for %d alerts, want 4", len(emails))
	}
	emailOf := func(a *coinpulse.Alert) (coinpulse.EmailStatus, string) {
		t.Helper()
		got := getAlert(t, s, o, a.ID)
		return got.EmailStatus, got.EmailError
	}
	steps := []struct {
		alert   *coinpulse.Alert
		attempt coinpulse.Attempt
		status  coinpulse.EmailStatus
	}{
		{a, coinpulse.Attempt{Status: coinpulse.DeliveryPending, NextAttemptAt: t4.Add(time.Minute), Error: "connection refused"}, coinpulse.EmailPending},
		{a, coinpulse.Attempt{Status: coinpulse.DeliveryDelivered}, coinpulse.EmailSent},
		{b, coinpulse.Attempt{Status: coinpulse.DeliveryUndeliverable, Error: "no SMTP server configured"}, coinpulse.EmailUndeliverable},
		{c, coinpulse.Attempt{Status: coinpulse.DeliveryFailed, Error: "550 mailbox unavailable"}, coinpulse.EmailFailed},
	}
	for _, st := range steps {
		st.attempt.At = t4.Add(time.Second)
		recordAttempt(t, s, emails[st.alert.ID], st.attempt)
		if status, msg := emailOf(st.alert); status != st.status || msg != st.attempt.Error {
			t.Errorf("alert %d after an e-mail %s: %q, %q; want %q, %q", st.alert.ID, st.attempt.Status, status, msg, st.status, st.attempt.Error)
		}
	}
	// A late outcome of an earlier arming's e-mail leaves the new arming
	// alone, and one of a deleted alert's is still recorded.
	toggle(t, s, o, c.ID, t4.Add(time.Hour))
	recordAttempt(t, s, emails[c.ID], coinpulse.Attempt{At: t4.Add(time.Hour), Status: coinpulse.DeliveryDelivered})
	if status, msg := emailOf(c); status != coinpulse.EmailNone || msg != "" {
		t.Errorf("re-armed alert's e-mail after a late outcome: %q, %q; want none", status, msg)
	}
	if err := s.DeleteAlert(ctx, o, gone.ID); err != nil {
		t.Fatalf("DeleteAlert: %v", err)
	}
	recordAttempt(t, s, emails[gone.ID], coinpulse.Attempt{At: t4.Add(time.Hour), Status: coinpulse.DeliveryDelivered})

	// Errors.
	wantCode(t, s.RecordAttempt(ctx, later.ID+1000, coinpulse.Attempt{At: t4, Status: coinpulse.DeliveryDelivered}), coinpulse.CodeNotFound)
	wantCode(t, s.RecordAttempt(ctx, later.ID, coinpulse.Attempt{At: t4, Status: "lost"}), coinpulse.CodeValidation)
}

func testDeliveryLog(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "delivery-log@example.com")
	mallory := newUser(t, s, "delivery-log-mallory@example.com")
	o := live(u)
	w := newWebhook(t, s, o, "https://example.com/hook", coinpulse.EventAlertTriggered)
	x := newWebhook(t, s, o, "https://example.com/other", coinpulse.EventAlertTriggered)
	m := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Minute) }
	d0 := enqueue(t, s, w, m(0))
	d2 := enqueue(t, s, w, m(2))
	d1 := enqueue(t, s, w, m(1))
	d3a := enqueue(t, s, w, m(3))
	d3b := enqueue(t, s, w, m(3))
	enqueue(t, s, x, m(10))

	// An alert's firing, then the alert deleted: its delivery stays.
	a := newAlert(t, s, o, "bitcoin", "1", coinpulse.Above, false)
	fired := fire(t, s, newEventLog(), firing(a, "2", m(4)))
	if err := s.DeleteAlert(ctx, o, a.ID); err != nil {
		t.Fatalf("DeleteAlert: %v", err)
	}
	log := logOf(t, s, o, w.ID)
	if len(log) != 6 {
		t.Fatalf("Deliveries = %d, want 6", len(log))
	}
	if diff := cmp.Diff(firedDelivery(fired[0], w.ID), log[0], ignoreDeliveryID); diff != "" {
		t.Errorf("the deleted alert's delivery mismatch (-want +got):\n%s", diff)
	}
	want := []int64{log[0].ID, d3b.ID, d3a.ID, d2.ID, d1.ID, d0.ID}
	if diff := cmp.Diff(want, deliveryIDs(log)); diff != "" {
		t.Errorf("Deliveries order mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(*d2, log[3]); diff != "" {
		t.Errorf("Deliveries entry mismatch (-want +got):\n%s", diff)
	}
	for _, tt := range []struct {
		limit int
		want  []int64
	}{{2, want[:2]}, {-1, want}, {0, []int64{}}, {100, want}} {
		got, err := s.Deliveries(ctx, o, w.ID, 0, tt.limit)
		if err != nil {
			t.Fatalf("Deliveries(limit %d): %v", tt.limit, err)
		}
		if diff := cmp.Diff(tt.want, deliveryIDs(got)); diff != "" {
			t.Errorf("Deliveries(limit %d) mismatch (-want +got):\n%s", tt.limit, diff)
		}
	}
	// From a cursor: the deliveries after it in the list's order, ties on
	// created_at included.
	for i, after := range want {
		got, err := s.Deliveries(ctx, o, w.ID, after, 2)
		if err != nil {
			t.Fatalf("Deliveries(after %d): %v", after, err)
		}
		if diff := cmp.Diff(want[i+1:min(i+3, len(want))], deliveryIDs(got)); diff != "" {
			t.Errorf("Deliveries(after %d, limit 2) mismatch (-want +got):\n%s", after, diff)
		}
	}
	// A delivery of another endpoint, or none, is no cursor.
	if xs, err := s.Deliveries(ctx, o, x.ID, 0, 1); err == nil && len(xs) == 1 {
		_, err := s.Deliveries(ctx, o, w.ID, xs[0].ID, 10)
		wantCode(t, err, coinpulse.CodeValidation)
	}
	_, err := s.Deliveries(ctx, o, w.ID, 1<<50, 10)
	wantCode(t, err, coinpulse.CodeValidation)
	for _, other := range []coinpulse.Owner{sandbox(u), live(mallory)} {
		_, err := s.Deliveries(ctx, other, w.ID, 0, 10)
		wantCode(t, err, coinpulse.CodeNotFound)
		_, err = s.Deliveries(ctx, other, w.ID, want[0], 10)
		wantCode(t, err, coinpulse.CodeNotFound)
	}
	_, err = s.Deliveries(ctx, o, x.ID+1000, 0, 10)
	wantCode(t, err, coinpulse.CodeNotFound)
}

// FiredAlerts returns the current armings fired at or after since, by id,
// paged; a re-armed alert is no longer among them.
func testFiredAlerts(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "alert-fired@example.com")
	o := live(u)
	h := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Hour) }
	a1 := newAlertAt(t, s, o, "bitcoin", "1", coinpulse.Above, false, h(0))
	a2 := newAlertAt(t, s, o, "bitcoin", "2", coinpulse.Above, false, h(0))
	a3 := newAlertAt(t, s, sandbox(u), "ethereum", "3", coinpulse.Below, false, h(0))
	newAlertAt(t, s, o, "solana", "4", coinpulse.Above, false, h(0)) // never fires
	log := newEventLog()
	fire(t, s, log, firing(a1, "5", h(1)))
	fire(t, s, log, firing(a2, "5", h(2)), firing(a3, "1", h(2)))
	// Times as stored (the store keeps microseconds).
	at2 := *getAlert(t, s, o, a2.ID).TriggeredAt
	ids := func(since time.Time, after int64, limit int) []int64 {
		t.Helper()
		as, err := s.FiredAlerts(ctx, since, after, limit)
		if err != nil {
			t.Fatalf("FiredAlerts: %v", err)
		}
		out := []int64{}
		for _, a := range as {
			if a.TriggeredAt == nil || a.IsActive {
				t.Fatalf("FiredAlerts returned %+v", a)
			}
			out = append(out, a.ID)
		}
		return out
	}
	for _, c := range []struct {
		name  string
		got   []int64
		want  []int64
		since time.Time
	}{
		{"all", ids(h(0), 0, -1), []int64{a1.ID, a2.ID, a3.ID}, h(0)},
		{"since the second firing, inclusive", ids(at2, 0, -1), []int64{a2.ID, a3.ID}, at2},
		{"after", ids(at2, a2.ID, -1), []int64{a3.ID}, at2},
		{"limit", ids(h(0), 0, 1), []int64{a1.ID}, h(0)},
		{"later", ids(h(3), 0, -1), []int64{}, h(3)},
	} {
		if fmt.Sprint(c.got) != fmt.Sprint(c.want) {
			t.Errorf("%s: FiredAlerts = %v, want %v", c.name, c.got, c.want)
		}
	}
	toggle(t, s, o, a1.ID, h(3)) // re-armed: its firing is gone
	if got := ids(h(0), 0, -1); fmt.Sprint(got) != fmt.Sprint([]int64{a2.ID, a3.ID}) {
		t.Errorf("after re-arming %d: FiredAlerts = %v", a1.ID, got)
	}
}

// testFireBeforeArming: a firing at a time before its arming began (a
// snapshot of the period the alert was created in, evaluated after a
// restart) fires it at the arming's time, so that triggered_at never
// precedes armed_at, nor updated_at goes back.
func testFireBeforeArming(t *testing.T, s coinpulse.Store) {
	u := newUser(t, s, "alert-fire-before-arming@example.com")
	o := live(u)
	armed := t0.Add(time.Hour + 878188*time.Microsecond)
	a := newAlertAt(t, s, o, "bitcoin", "5", coinpulse.Above, false, armed)
	l := newEventLog()
	got := fire(t, s, l, firing(a, "70000", t0.Add(time.Hour)))
	want := []coinpulse.Alert{asFired(*a, "70000", armed)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("FireAlerts before the arming mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want[0], *getAlert(t, s, o, a.ID)); diff != "" {
		t.Errorf("stored alert mismatch (-want +got):\n%s", diff)
	}
}

// An owner's alerts page by cursor, oldest first (ties on CreatedAt by
// id), filtered by state; the total counts the filter's alerts in all.
func testAlertsPaging(t *testing.T, s coinpulse.Store) {
	ctx := t.Context()
	u := newUser(t, s, "alert-paging@example.com")
	o := live(u)
	var a []coinpulse.Alert
	for i, at := range []time.Duration{0, time.Hour, time.Hour, 2 * time.Hour, 3 * time.Hour} { // a[1], a[2] tie
		a = append(a, *newAlertAt(t, s, o, "bitcoin", fmt.Sprint(100+i), coinpulse.Above, false, t0.Add(at)))
	}
	for _, i := range []int{1, 3} {
		off, err := s.ToggleAlert(ctx, o, a[i].ID, -1, t0.Add(4*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		a[i] = *off
	}
	ids := func(as []coinpulse.Alert) []int64 {
		out := []int64{}
		for _, x := range as {
			out = append(out, x.ID)
		}
		return out
	}
	yes, no := true, false
	for _, tt := range []struct {
		name  string
		pg    coinpulse.AlertPage
		want  []coinpulse.Alert
		total int
	}{
		{"all", coinpulse.AllAlerts, a, 5},
		{"first two", coinpulse.AlertPage{Limit: 2}, a[:2], 5},
		{"after the first tie", coinpulse.AlertPage{StartingAfter: a[1].ID, Limit: 2}, a[2:4], 5},
		{"after the last", coinpulse.AlertPage{StartingAfter: a[4].ID, Limit: -1}, nil, 5},
		{"active", coinpulse.AlertPage{Active: &yes, Limit: -1}, []coinpulse.Alert{a[0], a[2], a[4]}, 3},
		{"active after an inactive one", coinpulse.AlertPage{Active: &yes, StartingAfter: a[1].ID, Limit: 1}, a[2:3], 3},
		{"inactive", coinpulse.AlertPage{Active: &no, Limit: -1}, []coinpulse.Alert{a[1], a[3]}, 2},
		{"none", coinpulse.AlertPage{Limit: 0}, nil, 5},
	} {
		got, total, err := s.Alerts(ctx, o, tt.pg)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got == nil || total != tt.total || !slices.Equal(ids(got), ids(tt.want)) {
			t.Errorf("%s: alerts %v (total %d), want %v (total %d)", tt.name, ids(got), total, ids(tt.want), tt.total)
		}
	}
	other := newAlert(t, s, sandbox(u), "bitcoin", "1", coinpulse.Above, false)
	for _, after := range []int64{other.ID, 1 << 50} {
		_, _, err := s.Alerts(ctx, o, coinpulse.AlertPage{StartingAfter: after, Limit: 10})
		var e *coinpulse.Error
		if !errors.As(err, &e) || e.Code != coinpulse.CodeValidation || len(e.Details) != 1 || e.Details[0].Field != "starting_after" {
			t.Errorf("a cursor %d not of the owner's alerts: %v, want VALIDATION_ERROR on starting_after", after, err)
		}
	}
}
