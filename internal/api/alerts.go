package api

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"coinpulse"
	"coinpulse/internal/notify"
)

// alertView is an alert as the API shows it: in REST responses, webhook
// events and WebSocket messages alike.
type alertView struct {
	ID             int64      `json:"id"`
	CoinID         string     `json:"coin_id"`
	CoinSymbol     string     `json:"coin_symbol"`
	TargetPrice    num        `json:"target_price"`
	Condition      string     `json:"condition"`
	NotifyEmail    bool       `json:"notify_email"`
	IsActive       bool       `json:"is_active"`
	TriggeredAt    *time.Time `json:"triggered_at"`
	TriggeredPrice *num       `json:"triggered_price"`
	// EmailStatus is null unless the alert asked for e-mail and fired.
	EmailStatus *string   `json:"email_status"`
	EmailError  *string   `json:"email_error"`
	Mode        string    `json:"mode"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
}

func viewAlert(a *coinpulse.Alert) alertView {
	v := alertView{
		ID: a.ID, CoinID: a.CoinID, CoinSymbol: a.CoinSymbol, TargetPrice: num(a.TargetPrice),
		Condition: string(a.Condition), NotifyEmail: a.NotifyEmail, IsActive: a.IsActive,
		Mode: string(a.Owner.Mode), CreatedAt: a.CreatedAt.UTC(), UpdatedAt: a.UpdatedAt.UTC(),
		TriggeredAt: utcPtr(a.TriggeredAt),
	}
	if a.TriggeredPrice.Valid {
		n := num(a.TriggeredPrice.Decimal)
		v.TriggeredPrice = &n
	}
	if a.EmailStatus != coinpulse.EmailNone {
		v.EmailStatus, v.EmailError = orNull(string(a.EmailStatus)), orNull(a.EmailError)
	}
	return v
}

func alertNotFound(s string) error {
	return coinpulse.Errorf(coinpulse.CodeNotFound, "No alert %q.", truncate(s, 50))
}

// maxAlerts is the owner's cap on active alerts under p's plan (-1: none).
func (s *Server) maxAlerts(p *principal) int {
	n := s.planMap()[p.user.Tier].MaxActiveAlerts
	if n == coinpulse.Unlimited {
		return -1
	}
	return n
}

// alertLimit words ALERT_LIMIT_REACHED for p's plan.
func alertLimit(p *principal, max int) error {
	if max == 0 {
		return coinpulse.Errorf(coinpulse.CodeAlertLimitReached, "The %s plan includes no active alerts; upgrade at /user/api.", p.user.Tier)
	}
	return coinpulse.Errorf(coinpulse.CodeAlertLimitReached,
		"The %s plan allows %s per mode (live and sandbox each), and this mode has reached that; disable or delete one, or upgrade at /user/api.", p.user.Tier, coinpulse.Count(max, "active alert", "active alerts"))
}

// GET /alerts
func (s *Server) listAlerts(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r.URL.RawQuery, "is_active", "limit", "starting_after")
	if err != nil {
		return err
	}
	pg := coinpulse.AllAlerts
	if v, err := q.enum("is_active", "", "true", "false"); err != nil {
		return err
	} else if v != "" {
		active := v == "true"
		pg.Active = &active
	}
	limit, after, ask, err := q.cursor(1000)
	if err != nil {
		return err
	}
	pg.StartingAfter, pg.Limit = after, ask
	as, total, err := s.store.Alerts(r.Context(), owner(w), pg)
	if err != nil {
		return err
	}
	as, more := trimPage(as, limit)
	out := make([]alertView, len(as))
	for i := range as {
		out[i] = viewAlert(&as[i])
	}
	m := s.newMeta(w)
	m.Total, m.HasMore = &total, &more
	return writeData(w, http.StatusOK, out, &m)
}

// GET /alerts/{id}
func (s *Server) getAlert(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id", alertNotFound)
	if err != nil {
		return err
	}
	if _, err := parseQuery(r.URL.RawQuery); err != nil {
		return err
	}
	a, err := s.store.Alert(r.Context(), owner(w), id)
	if err != nil {
		return err
	}
	m := s.newMeta(w)
	return writeData(w, http.StatusOK, viewAlert(a), &m)
}

// POST /alerts
func (s *Server) createAlert(w http.ResponseWriter, r *http.Request) error {
	b, err := readBody(r, "coin_id", "target_price", "condition", "notify_email")
	if err != nil {
		return err
	}
	coin, _ := s.resolveCoin(b, "coin_id")
	target, _ := b.amount("target_price", true)
	cond, _ := b.enum("condition", string(coinpulse.Above), string(coinpulse.Below))
	email, _ := b.boolean("notify_email", false)
	if err := b.err(); err != nil {
		return err
	}
	p := exchangeOf(w).principal
	max := s.maxAlerts(p)
	now := s.clock().UTC()
	a := &coinpulse.Alert{
		Owner: owner(w), CoinID: coin.ID, CoinSymbol: coin.Symbol, TargetPrice: target,
		Condition: coinpulse.Condition(cond), NotifyEmail: email, IsActive: true, CreatedAt: now,
	}
	if err := s.store.CreateAlert(r.Context(), a, max); err != nil {
		if coinpulse.ErrorCode(err) == coinpulse.CodeAlertLimitReached {
			return alertLimit(p, max)
		}
		return err
	}
	s.armed(a)
	m := s.newMeta(w)
	return writeData(w, http.StatusCreated, viewAlert(a), &m)
}

// POST /alerts/{id}/toggle
func (s *Server) toggleAlert(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id", alertNotFound)
	if err != nil {
		return err
	}
	b, err := readBody(r)
	if err != nil {
		return err
	}
	if err := b.err(); err != nil { // it takes no fields
		return err
	}
	p := exchangeOf(w).principal
	max := s.maxAlerts(p)
	a, err := s.store.ToggleAlert(r.Context(), owner(w), id, max, s.clock().UTC())
	if err != nil {
		if coinpulse.ErrorCode(err) == coinpulse.CodeAlertLimitReached {
			return alertLimit(p, max)
		}
		return err
	}
	if a.IsActive {
		s.armed(a)
	} else {
		s.disarmed(a.ID)
	}
	m := s.newMeta(w)
	return writeData(w, http.StatusOK, viewAlert(a), &m)
}

// DELETE /alerts/{id}
func (s *Server) deleteAlert(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id", alertNotFound)
	if err != nil {
		return err
	}
	if err := s.store.DeleteAlert(r.Context(), owner(w), id); err != nil {
		return err
	}
	s.disarmed(id)
	m := s.newMeta(w)
	return writeData(w, http.StatusOK, deleted{id, true}, &m)
}

// armed tells this node's evaluator of an arming at once (other nodes
// find it when they next poll the store).
func (s *Server) armed(a *coinpulse.Alert) {
	if s.alertIndex != nil {
		s.alertIndex.Armed(a)
	}
}

// disarmed tells this node's evaluator that an alert no longer waits.
func (s *Server) disarmed(id int64) {
	if s.alertIndex != nil {
		s.alertIndex.Disarmed(id)
	}
}

// AlertIndex is what the API tells the alert evaluator of this node.
type AlertIndex interface {
	Armed(a *coinpulse.Alert)
	Disarmed(id int64)
}

// AlertEvent builds the event of an alert's firing: the Standard Webhooks
// payload {"type", "timestamp", "data": {"alert", "price"}}, the same
// alert object as the REST API's. The evaluator hands it to the store.
func AlertEvent(a *coinpulse.Alert) coinpulse.Event {
	at := time.Now().UTC()
	if a.TriggeredAt != nil {
		at = a.TriggeredAt.UTC()
	}
	price := a.TriggeredPrice.Decimal
	payload, _ := json.Marshal(eventPayload{
		Type: coinpulse.EventAlertTriggered, Timestamp: at,
		Data: alertEventData{Alert: viewAlert(a), Price: num(price)},
	})
	return coinpulse.Event{ID: NewEventID(), Type: coinpulse.EventAlertTriggered, Payload: payload, CreatedAt: at}
}

// Unmailed tells the e-mail of a's firing as a server without SMTP will
// record it, undeliverable rather than pending, so that the firing's
// webhook payload and WebSocket message say what the alert says a moment
// later, once the dispatcher has recorded it. a is not changed.
func Unmailed(a *coinpulse.Alert) *coinpulse.Alert {
	if a.EmailStatus != coinpulse.EmailPending {
		return a
	}
	b := *a
	b.EmailStatus, b.EmailError = coinpulse.EmailUndeliverable, notify.NoSMTP
	return &b
}

// AlertJSON is the alert object of REST responses, for WebSocket messages.
func AlertJSON(a *coinpulse.Alert) json.RawMessage {
	b, _ := json.Marshal(viewAlert(a))
	return b
}

type eventPayload struct {
	Type      string    `json:"type"`
	Timestamp time.Time `json:"timestamp"`
	Data      any       `json:"data"`
}

type alertEventData struct {
	Alert alertView `json:"alert"`
	Price num       `json:"price"`
}

var eventIDEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// NewEventID returns a new Standard Webhooks message id: "msg_" and 26
// random base32 characters (130 bits).
func NewEventID() string {
	var b [17]byte
	rand.Read(b[:])
	return "msg_" + strings.ToLower(eventIDEncoding.EncodeToString(b[:])[:26])
}
