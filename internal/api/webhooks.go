package api

import (
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"coinpulse"
	"coinpulse/internal/notify"
)

// Bounds of webhook fields.
const (
	maxURLLen         = 2048
	maxWebhookDescLen = 500
	// deliveryLogLimit is how many deliveries GET /webhooks/{id}/deliveries
	// returns at most.
	deliveryLogLimit = 100
)

// webhookView is an endpoint as the API shows it; Secret only at creation.
type webhookView struct {
	ID             int64     `json:"id"`
	URL            string    `json:"url"`
	Events         []string  `json:"events"`
	Description    string    `json:"description"`
	Enabled        bool      `json:"enabled"`
	DisabledReason *string   `json:"disabled_reason"`
	Mode           string    `json:"mode"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
	Secret         string    `json:"secret,omitempty"`
}

func viewWebhook(wh *coinpulse.Webhook, withSecret bool) webhookView {
	v := webhookView{
		ID: wh.ID, URL: wh.URL, Events: wh.Events, Description: wh.Description, Enabled: wh.Enabled,
		Mode: string(wh.Owner.Mode), CreatedAt: wh.CreatedAt.UTC(), UpdatedAt: wh.UpdatedAt.UTC(),
		DisabledReason: orNull(wh.DisabledReason),
	}
	if v.Events == nil {
		v.Events = []string{}
	}
	if withSecret {
		v.Secret = wh.Secret
	}
	return v
}

// deliveryView is one entry of an endpoint's delivery log.
type deliveryView struct {
	ID             int64           `json:"id"`
	EventID        string          `json:"event_id"`
	EventType      string          `json:"event_type"`
	AlertID        *int64          `json:"alert_id"`
	Status         string          `json:"status"`
	Attempts       int             `json:"attempts"`
	NextAttemptAt  *time.Time      `json:"next_attempt_at"`
	LastAttemptAt  *time.Time      `json:"last_attempt_at"`
	LastStatusCode *int            `json:"last_status_code"`
	LastError      *string         `json:"last_error"`
	CreatedAt      time.Time       `json:"created_at"`
	DeliveredAt    *time.Time      `json:"delivered_at"`
	Payload        json.RawMessage `json:"payload"`
}

// orNull is v, or nil (JSON null) when v is its type's zero value.
func orNull[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func viewDelivery(d *coinpulse.Delivery) deliveryView {
	v := deliveryView{
		ID: d.ID, EventID: d.EventID, EventType: d.EventType, Status: string(d.Status), Attempts: d.Attempts,
		LastAttemptAt: utcPtr(d.LastAttemptAt), CreatedAt: d.CreatedAt.UTC(), DeliveredAt: utcPtr(d.DeliveredAt),
		Payload: json.RawMessage(d.Payload), AlertID: orNull(d.AlertID),
		LastStatusCode: orNull(d.LastStatusCode), LastError: orNull(d.LastError),
	}
	if !json.Valid(v.Payload) {
		v.Payload = json.RawMessage("null")
	}
	if d.Status == coinpulse.DeliveryPending {
		v.NextAttemptAt = utcPtr(&d.NextAttemptAt)
	}
	return v
}

func webhookNotFound(s string) error {
	return coinpulse.Errorf(coinpulse.CodeNotFound, "No webhook endpoint %q.", truncate(s, 50))
}

// GET /webhooks
func (s *Server) listWebhooks(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r.URL.RawQuery); err != nil {
		return err
	}
	whs, err := s.store.Webhooks(r.Context(), owner(w))
	if err != nil {
		return err
	}
	out := make([]webhookView, len(whs))
	for i := range whs {
		out[i] = viewWebhook(&whs[i], false)
	}
	m := s.newMeta(w)
	n := len(out)
	m.Total = &n
	return writeData(w, http.StatusOK, out, &m)
}

// POST /webhooks
func (s *Server) createWebhook(w http.ResponseWriter, r *http.Request) error {
	b, err := readBody(r, "url", "events", "description")
	if err != nil {
		return err
	}
	url, ok := b.text("url", true, 1, maxURLLen)
	if ok {
		if err := notify.CheckURL(r.Context(), url, s.webhookAllowPrivate, s.resolver); err != nil {
			b.fail("url", err.Error())
		}
	}
	events := b.events("events")
	desc, _ := b.text("description", false, 0, maxWebhookDescLen)
	if err := b.err(); err != nil {
		return err
	}
	secret, err := notify.NewSecret()
	if err != nil {
		return err
	}
	now := s.clock().UTC()
	wh := &coinpulse.Webhook{Owner: owner(w), URL: url, Events: events, Description: desc, Secret: secret,
		Enabled: true, CreatedAt: now, UpdatedAt: now}
	if err := s.store.CreateWebhook(r.Context(), wh, coinpulse.MaxWebhooks); err != nil {
		return err
	}
	m := s.newMeta(w)
	return writeData(w, http.StatusCreated, viewWebhook(wh, true), &m)
}

// events reads the optional list of event types, ["alert.triggered"] by
// default.
func (b *body) events(name string) []string {
	v, present := b.raw(name, false)
	if !present {
		return []string{coinpulse.EventAlertTriggered}
	}
	var list []*string // a null entry is not "" but a mistake
	if json.Unmarshal(v, &list) != nil || len(list) == 0 || slices.Contains(list, nil) {
		b.fail(name, "must be a non-empty array of event types: "+strings.Join(coinpulse.EventTypes, ", "))
		return nil
	}
	out := make([]string, 0, len(list))
	for _, p := range list {
		e := *p
		if !slices.Contains(coinpulse.EventTypes, e) {
			b.fail(name, "unknown event type "+truncateQuote(e)+"; known: "+strings.Join(coinpulse.EventTypes, ", "))
			return nil
		}
		if !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	return out
}

func truncateQuote(s string) string {
	q, _ := json.Marshal(truncate(s, 50))
	return string(q)
}

// DELETE /webhooks/{id}
func (s *Server) deleteWebhook(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id", webhookNotFound)
	if err != nil {
		return err
	}
	if err := s.store.DeleteWebhook(r.Context(), owner(w), id); err != nil {
		return err
	}
	m := s.newMeta(w)
	return writeData(w, http.StatusOK, deleted{id, true}, &m)
}

// POST /webhooks/{id}/test queues a webhook.test event for the endpoint,
// delivered (and logged) like any other, even to a disabled endpoint.
func (s *Server) testWebhook(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id", webhookNotFound)
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
	o := owner(w)
	wh, err := s.store.Webhook(r.Context(), o, id)
	if err != nil {
		return err
	}
	now := s.clock().UTC().Truncate(time.Microsecond) // as the delivery's created_at is kept
	evID := NewEventID()
	payload, _ := json.Marshal(eventPayload{Type: coinpulse.EventWebhookTest, Timestamp: now,
		Data: map[string]any{"webhook_id": wh.ID, "message": "A test event from Coinpulse."}})
	d := &coinpulse.Delivery{Kind: coinpulse.KindWebhook, Owner: o, EndpointID: wh.ID, EventID: evID,
		EventType: coinpulse.EventWebhookTest, Payload: payload, CreatedAt: now, NextAttemptAt: now}
	if err := s.store.EnqueueDelivery(r.Context(), d); err != nil {
		return err
	}
	if s.deliveries != nil {
		s.deliveries.Wake()
	}
	m := s.newMeta(w)
	return writeData(w, http.StatusAccepted, viewDelivery(d), &m)
}

// GET /webhooks/{id}/deliveries
func (s *Server) listDeliveries(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id", webhookNotFound)
	if err != nil {
		return err
	}
	q, err := parseQuery(r.URL.RawQuery, "limit", "starting_after")
	if err != nil {
		return err
	}
	limit, err := q.int("limit", 50, 1, deliveryLogLimit)
	if err != nil {
		return err
	}
	after, err := q.int("starting_after", 0, 1, math.MaxInt64)
	if err != nil {
		return err
	}
	o := owner(w)
	if _, err := s.store.Webhook(r.Context(), o, id); err != nil {
		return err
	}
	// One more than the page holds says whether more come after it.
	ds, err := s.store.Deliveries(r.Context(), o, id, int64(after), limit+1)
	if err != nil {
		return err
	}
	more := len(ds) > limit
	ds = ds[:min(len(ds), limit)]
	out := make([]deliveryView, len(ds))
	for i := range ds {
		out[i] = viewDelivery(&ds[i])
	}
	m := s.newMeta(w)
	n := len(out)
	m.Total, m.HasMore = &n, &more
	return writeData(w, http.StatusOK, out, &m)
}

// Waker is woken when a delivery is queued outside an alert firing.
type Waker interface{ Wake() }
