package coinpulse

import (
	"context"
	"fmt"
	"time"

	"github.com/shopspring/decimal"
)

// Condition is the direction an alert watches.
type Condition string

// The two conditions: Above fires when the price goes strictly above the
// target, Below when it goes strictly below.
const (
	Above Condition = "above"
	Below Condition = "below"
)

// Valid reports whether c is a known condition.
func (c Condition) Valid() bool { return c == Above || c == Below }

// Crossed reports whether price is strictly past target in c's direction.
func (c Condition) Crossed(price, target float64) bool {
	if c == Above {
		return price > target
	}
	return price < target
}

// EmailStatus is how the e-mail of an alert's last firing went.
type EmailStatus string

// The e-mail states. EmailNone: not asked for, or the alert has not fired
// since it was armed.
const (
	EmailNone          EmailStatus = ""
	EmailPending       EmailStatus = "pending"
	EmailSent          EmailStatus = "sent"
	EmailUndeliverable EmailStatus = "undeliverable" // no SMTP server configured
	EmailFailed        EmailStatus = "failed"        // retries exhausted
)

// Alert is a price alert. It is armed (IsActive) when created and when
// re-enabled; it fires once per arming.
type Alert struct {
	ID          int64
	Owner       Owner
	CoinID      string
	CoinSymbol  string
	TargetPrice decimal.Decimal
	Condition   Condition
	NotifyEmail bool
	IsActive    bool
	// ArmedSeq names the alert's current arming: a number unique among
	// all armings of all alerts, given at creation and at each re-enable.
	// A Firing names the arming it ends, so that an alert fires once per
	// arming however many nodes see the crossing.
	ArmedSeq int64
	// ArmedAt is when the current arming began (the store's now).
	ArmedAt time.Time
	// TriggeredAt and TriggeredPrice are set by the arming's firing and
	// cleared by a re-enable.
	TriggeredAt    *time.Time
	TriggeredPrice decimal.NullDecimal
	// EmailStatus and EmailError are the last firing's e-mail (when
	// NotifyEmail), cleared by a re-enable.
	EmailStatus EmailStatus
	EmailError  string
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// Firing is one crossing the evaluator saw: the arming it ends, the price
// that crossed and when.
type Firing struct {
	AlertID  int64
	ArmedSeq int64
	Price    decimal.Decimal
	At       time.Time
}

// The event types.
const (
	EventAlertTriggered = "alert.triggered"
	EventWebhookTest    = "webhook.test"
)

// EventTypes are the event types a webhook endpoint can subscribe to.
var EventTypes = []string{EventAlertTriggered}

// Event is a message for an owner's endpoints: ID is the Standard Webhooks
// webhook-id ("msg_…"), the same in every attempt of every delivery of the
// event; Payload is the JSON body delivered.
type Event struct {
	ID        string
	Type      string
	Payload   []byte
	CreatedAt time.Time
}

// EventFunc builds the event of an alert's firing (the alert as fired).
type EventFunc func(a *Alert) Event

// Webhook is an owner's endpoint. Secret ("whsec_<base64>") signs its
// deliveries; it is returned to the subscriber only at creation.
type Webhook struct {
	ID          int64
	Owner       Owner
	URL         string
	Events      []string
	Description string
	Secret      string
	// Enabled endpoints receive deliveries; a 410 Gone or a delivery whose
	// retries ran out disables one, and DisabledReason says why.
	Enabled        bool
	DisabledReason string
	CreatedAt      time.Time
	UpdatedAt      time.Time
}

// DeliveryKind is the channel of a delivery.
type DeliveryKind string

// The channels of the outbox.
const (
	KindWebhook DeliveryKind = "webhook"
	KindEmail   DeliveryKind = "email"
)

// DeliveryStatus is where a delivery stands.
type DeliveryStatus string

// The delivery states. Pending deliveries are attempted at NextAttemptAt;
// the others are final.
const (
	DeliveryPending       DeliveryStatus = "pending"
	DeliveryDelivered     DeliveryStatus = "delivered"
	DeliveryFailed        DeliveryStatus = "failed"        // retries exhausted, or the endpoint refused it for good
	DeliveryUndeliverable DeliveryStatus = "undeliverable" // nowhere to send it (e-mail without SMTP)
)

// Delivery is one event bound for one endpoint (or one e-mail inbox): a row
// of the persisted outbox, and its log.
type Delivery struct {
	ID    int64
	Kind  DeliveryKind
	Owner Owner
	// AlertID is the alert whose firing this is (0 for a test event).
	AlertID int64
	// EndpointID is the webhook's id (0 for e-mail).
	EndpointID int64
	EventID    string
	EventType  string
	Payload    []byte
	Status     DeliveryStatus
	// Attempts counts the attempts made so far.
	Attempts       int
	NextAttemptAt  time.Time
	LastAttemptAt  *time.Time
	LastStatusCode int // HTTP status of the last webhook attempt (0: none)
	LastError      string
	CreatedAt      time.Time
	DeliveredAt    *time.Time
	// LeaseUntil is when the lease ClaimDeliveries gave ends (zero from
	// any other read).
	LeaseUntil time.Time
}

// Entitlement is what an account's plan in force and its subscription
// allow of its alerts now: Alerts, that they fire and send e-mail;
// Webhooks, that their firings also go to its webhooks.
type Entitlement struct{ Alerts, Webhooks bool }

// EntitlementFunc says what the account userID is entitled to now.
type EntitlementFunc func(ctx context.Context, userID int64) (Entitlement, error)

// Attempt is the outcome of one delivery attempt.
type Attempt struct {
	At time.Time
	// Status is DeliveryPending to retry at NextAttemptAt, or a final state.
	Status        DeliveryStatus
	NextAttemptAt time.Time
	StatusCode    int
	Error         string
	// DisableEndpoint, when not empty, disables the delivery's webhook
	// endpoint with this reason.
	DisableEndpoint string
	// Lease, when set, is the LeaseUntil of the claim the attempt was
	// made under: the attempt is recorded only while the delivery still
	// holds that lease, else RecordAttempt fails with ErrLeaseLost.
	Lease time.Time
}

// ErrLeaseLost is RecordAttempt's CONFLICT for an attempt whose lease
// ended and whose delivery another claim has taken (or that the store
// settled meanwhile, as when its endpoint was disabled).
func ErrLeaseLost(id int64) error {
	return Errorf(CodeConflict, "Delivery %d is no longer leased to this attempt; it was not recorded.", id)
}

// AlertStore keeps alerts, webhook endpoints and the outbox of their
// deliveries. Every method that takes an Owner is scoped to it: another
// owner's rows are RESOURCE_NOT_FOUND, never revealed.
type AlertStore interface {
	// CreateAlert stores a (ID, ArmedSeq, ArmedAt, trigger and e-mail
	// fields ignored; IsActive forced true) and sets its ID, ArmedSeq,
	// ArmedAt, CreatedAt and UpdatedAt (from a.CreatedAt when set, else
	// now). With max >= 0 it fails with ErrAlertLimit when the owner
	// already has max active alerts, atomically.
	CreateAlert(ctx context.Context, a *Alert, max int) error
	// Alerts returns the owner's alerts pg selects, oldest (by CreatedAt,
	// then ID) first, and how many alerts pg.Active selects in all.
	Alerts(ctx context.Context, o Owner, pg AlertPage) ([]Alert, int, error)
	// Alert returns one alert.
	Alert(ctx context.Context, o Owner, id int64) (*Alert, error)
	// ToggleAlert flips IsActive. Enabling re-arms the alert (new ArmedSeq
	// and ArmedAt = now, TriggeredAt, TriggeredPrice and the e-mail fields
	// cleared) and, with max >= 0, fails with ErrAlertLimit when the owner
	// already has max active alerts, atomically.
	ToggleAlert(ctx context.Context, o Owner, id int64, max int, now time.Time) (*Alert, error)
	// DeleteAlert deletes an alert; its deliveries stay in the log.
	DeleteAlert(ctx context.Context, o Owner, id int64) error
	// ArmedAlerts returns active alerts armed at or after since, with id
	// greater than afterID, by id, at most limit: how the evaluator loads
	// its index at start (since zero) and follows new armings.
	ArmedAlerts(ctx context.Context, since time.Time, afterID int64, limit int) ([]Alert, error)
	// FiredAlerts returns the alerts whose current arming fired at or
	// after since (TriggeredAt >= since), with id greater than afterID, by
	// id, at most limit: how each node learns of the firings other nodes
	// made, for its own WebSocket clients.
	FiredAlerts(ctx context.Context, since time.Time, afterID int64, limit int) ([]Alert, error)
	// FireAlerts ends the armings fs names that are still armed, each in
	// the same transaction as its deliveries: one per enabled webhook of
	// the alert's owner subscribed to alert.triggered, and one e-mail when
	// NotifyEmail (the alert's EmailStatus becomes pending), all carrying
	// event(alert) for the alert as fired. It returns every alert of fs
	// whose named arming has fired, by this call or an earlier one (another
	// node's), in the order of fs; firings of armings that ended otherwise
	// (disabled, deleted, re-armed) are left out.
	FireAlerts(ctx context.Context, fs []Firing, event EventFunc) ([]Alert, error)

	// CreateWebhook stores w (ID ignored; Enabled forced true) and sets its
	// ID and times. With max >= 0 it fails with ErrWebhookLimit when the
	// owner already has max endpoints, atomically.
	CreateWebhook(ctx context.Context, w *Webhook, max int) error
	// Webhooks returns the owner's endpoints, oldest first.
	Webhooks(ctx context.Context, o Owner) ([]Webhook, error)
	// Webhook returns one endpoint.
	Webhook(ctx context.Context, o Owner, id int64) (*Webhook, error)
	// DeleteWebhook deletes an endpoint with its pending deliveries (its
	// delivery log goes with it).
	DeleteWebhook(ctx context.Context, o Owner, id int64) error

	// EnqueueDelivery adds d to the outbox (ID, Status, Attempts, times
	// set by the store; NextAttemptAt = d.CreatedAt, or now).
	EnqueueDelivery(ctx context.Context, d *Delivery) error
	// ClaimDeliveries leases up to n pending deliveries of kind that are
	// due at now (NextAttemptAt <= now) and not leased, until now+lease
	// (their LeaseUntil), oldest due first. Two callers never hold the
	// same delivery.
	ClaimDeliveries(ctx context.Context, kind DeliveryKind, now time.Time, lease time.Duration, n int) ([]Delivery, error)
	// RecordAttempt stores an attempt's outcome on delivery id: attempts+1,
	// the status, next time, code and error, and releases the lease (with
	// a.Lease set, only the lease it names: ErrLeaseLost otherwise). For an
	// e-mail delivery it sets the alert's EmailStatus (sent, failed,
	// undeliverable; pending while retrying) and EmailError. With
	// DisableEndpoint set it disables the webhook and fails its other
	// pending deliveries.
	RecordAttempt(ctx context.Context, id int64, a Attempt) error
	// Deliveries returns an endpoint's deliveries, newest (by CreatedAt,
	// then ID) first, at most limit; those after startingAfter's place in
	// that order when it is not 0 (a delivery of the endpoint, else
	// ErrDeliveryCursor).
	Deliveries(ctx context.Context, o Owner, endpointID, startingAfter int64, limit int) ([]Delivery, error)
}

// ErrDeliveryCursor is the VALIDATION_ERROR of a starting_after that is
// not a delivery of the endpoint listed.
func ErrDeliveryCursor(id int64) error {
	return ValidationError("starting_after", fmt.Sprintf("this endpoint has no delivery %d", id))
}

// ErrAlertNotFound is RESOURCE_NOT_FOUND for an alert.
func ErrAlertNotFound(id int64) error { return Errorf(CodeNotFound, "No alert %d.", id) }

// AlertPage selects from an owner's alerts: those whose IsActive is
// *Active (all when nil); from the one after StartingAfter's place in the
// list when it is set (one of the owner's alerts, whatever its state and
// Active, else ErrAlertCursor); at most Limit of them (negative: no limit).
type AlertPage struct {
	Active        *bool
	StartingAfter int64
	Limit         int
}

// AllAlerts selects every alert of an owner.
var AllAlerts = AlertPage{Limit: -1}

// ErrAlertCursor is the VALIDATION_ERROR of an AlertPage.StartingAfter that
// names none of the owner's alerts.
func ErrAlertCursor(id int64) error {
	return ValidationError("starting_after", fmt.Sprintf("you have no alert %d", id))
}

// ErrWebhookNotFound is RESOURCE_NOT_FOUND for a webhook endpoint.
func ErrWebhookNotFound(id int64) error { return Errorf(CodeNotFound, "No webhook endpoint %d.", id) }

// ErrAlertLimit is the refusal of an alert past the plan's cap.
func ErrAlertLimit(max int) error {
	return Errorf(CodeAlertLimitReached, "Your plan allows %s; disable or delete one, or upgrade at /user/api.", Count(max, "active alert", "active alerts"))
}

// ErrWebhookLimit is the refusal of an endpoint past MaxWebhooks.
func ErrWebhookLimit(max int) error {
	return Errorf(CodeConflict, "An account can have %d webhook endpoints; delete one first.", max)
}

// MaxWebhooks is how many webhook endpoints an owner can have.
const MaxWebhooks = 10
