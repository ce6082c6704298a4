package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"coinpulse"
)

var _ coinpulse.AlertStore = (*DB)(nil)

// fireBatch is how many firings FireAlerts ends per transaction.
const fireBatch = 500

// checkAlert returns the VALIDATION_ERROR of a's first invalid field, or
// nil.
func checkAlert(a *coinpulse.Alert) error {
	switch {
	case !a.Owner.Mode.Valid():
		return coinpulse.ValidationError("mode", "must be live or test")
	case a.CoinID == "":
		return coinpulse.ValidationError("coin_id", "must not be empty")
	case !a.Condition.Valid():
		return coinpulse.ValidationError("condition", "must be above or below")
	case !a.TargetPrice.IsPositive():
		return coinpulse.ValidationError("target_price", "must be greater than 0")
	}
	return nil
}

const alertColumns = `id, user_id, mode, coin_id, coin_symbol, target_price, condition, notify_email, is_active,
	armed_seq, armed_at, triggered_at, triggered_price, email_status, email_error, created_at, updated_at`

func scanAlert(s scanner) (coinpulse.Alert, error) {
	var (
		a                             coinpulse.Alert
		target                        string
		triggeredPrice                sql.NullString
		armedAt, createdAt, updatedAt int64
		triggeredAt                   sql.NullInt64
	)
	err := s.Scan(&a.ID, &a.Owner.UserID, &a.Owner.Mode, &a.CoinID, &a.CoinSymbol, &target, &a.Condition,
		&a.NotifyEmail, &a.IsActive, &a.ArmedSeq, &armedAt, &triggeredAt, &triggeredPrice, &a.EmailStatus,
		&a.EmailError, &createdAt, &updatedAt)
	if err != nil {
		return a, err
	}
	if a.TargetPrice, err = parseDec(target); err != nil {
		return a, err
	}
	if a.TriggeredPrice, err = parseNullDec(triggeredPrice); err != nil {
		return a, err
	}
	a.ArmedAt = fromMicros(armedAt)
	a.TriggeredAt = fromNullMicros(triggeredAt)
	a.CreatedAt = fromMicros(createdAt)
	a.UpdatedAt = fromMicros(updatedAt)
	return a, nil
}

// readAlerts returns the alerts the query selects, in its order (an empty
// slice when there are none).
func readAlerts(ctx context.Context, q querier, query string, args ...any) ([]coinpulse.Alert, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	as := []coinpulse.Alert{}
	for rows.Next() {
		a, err := scanAlert(rows)
		if err != nil {
			return nil, err
		}
		as = append(as, a)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return as, nil
}

// nextArming returns the next arming number, from the alert_arming counter;
// tx holds the write lock, so no two transactions get the same number.
func nextArming(ctx context.Context, tx *sql.Tx) (int64, error) {
	var seq int64
	err := tx.QueryRowContext(ctx, `UPDATE alert_arming SET seq = seq + 1 WHERE id = 1 RETURNING seq`).Scan(&seq)
	if err != nil {
		return 0, fmt.Errorf("next arming: %w", err)
	}
	return seq, nil
}

// countActiveAlerts returns how many active alerts o has.
func countActiveAlerts(ctx context.Context, tx *sql.Tx, o coinpulse.Owner) (int, error) {
	var n int
	err := tx.QueryRowContext(ctx, `SELECT count(*) FROM alerts WHERE user_id = ? AND mode = ? AND is_active = 1`,
		o.UserID, o.Mode).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count active alerts: %w", err)
	}
	return n, nil
}

// CreateAlert inserts a for a.Owner, armed, and sets its ID, ArmedSeq (the
// next value of the arming counter), IsActive (true), and CreatedAt (kept
// when set, else now), ArmedAt and UpdatedAt (= CreatedAt), truncated to
// microseconds in UTC; the trigger and e-mail fields are cleared. With
// max >= 0 it counts the owner's active alerts inside one immediate
// transaction and, when there are already max, fails with
// ALERT_LIMIT_REACHED and inserts nothing. An unknown mode or condition,
// an empty CoinID or a TargetPrice not above 0 is a VALIDATION_ERROR, an
// unknown user a RESOURCE_NOT_FOUND error.
func (db *DB) CreateAlert(ctx context.Context, a *coinpulse.Alert, max int) error {
	if err := checkAlert(a); err != nil {
		return err
	}
	if a.CreatedAt.IsZero() {
		a.CreatedAt = db.now()
	}
	a.CreatedAt = truncate(a.CreatedAt)
	a.UpdatedAt, a.ArmedAt = a.CreatedAt, a.CreatedAt
	a.IsActive = true
	a.TriggeredAt, a.TriggeredPrice = nil, decimal.NullDecimal{}
	a.EmailStatus, a.EmailError = coinpulse.EmailNone, ""
	var id, seq int64
	err := db.writeTx(ctx, func(tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM users WHERE id = ?`, a.Owner.UserID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return coinpulse.ErrUserNotFound()
		}
		if err != nil {
			return fmt.Errorf("sqlite: create alert: %w", err)
		}
		if max >= 0 {
			n, err := countActiveAlerts(ctx, tx, a.Owner)
			if err != nil {
				return fmt.Errorf("sqlite: create alert: %w", err)
			}
			if n >= max {
				return coinpulse.ErrAlertLimit(max)
			}
		}
		if seq, err = nextArming(ctx, tx); err != nil {
			return fmt.Errorf("sqlite: create alert: %w", err)
		}
		err = tx.QueryRowContext(ctx, `
			INSERT INTO alerts (user_id, mode, coin_id, coin_symbol, target_price, condition, notify_email, is_active,
				armed_seq, armed_at, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?)
			RETURNING id`,
			a.Owner.UserID, a.Owner.Mode, a.CoinID, a.CoinSymbol, dec(a.TargetPrice), a.Condition, a.NotifyEmail,
			seq, micros(a.ArmedAt), micros(a.CreatedAt), micros(a.UpdatedAt),
		).Scan(&id)
		if err != nil {
			return fmt.Errorf("sqlite: create alert: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	a.ID, a.ArmedSeq = id, seq
	return nil
}

// Alerts returns the owner's alerts pg selects, oldest (by CreatedAt,
// then ID) first (an empty slice when none), and how many pg.Active
// selects in all.
func (db *DB) Alerts(ctx context.Context, o coinpulse.Owner, pg coinpulse.AlertPage) ([]coinpulse.Alert, int, error) {
	var (
		total  int
		cursor bool
	)
	err := db.db.QueryRowContext(ctx, `
		SELECT count(*), EXISTS (SELECT 1 FROM alerts WHERE id = ?1 AND user_id = ?2 AND mode = ?3)
		FROM alerts WHERE user_id = ?2 AND mode = ?3 AND (?4 IS NULL OR is_active = ?4)`,
		pg.StartingAfter, o.UserID, o.Mode, pg.Active).Scan(&total, &cursor)
	if err != nil {
		return nil, 0, fmt.Errorf("sqlite: alerts: %w", err)
	}
	if pg.StartingAfter != 0 && !cursor {
		return nil, 0, coinpulse.ErrAlertCursor(pg.StartingAfter)
	}
	limit := pg.Limit
	if limit < 0 {
		limit = -1 // SQLite's no limit
	}
	if limit == 0 {
		return []coinpulse.Alert{}, total, nil
	}
	as, err := readAlerts(ctx, db.db, `
		SELECT `+alertColumns+` FROM alerts
		WHERE user_id = ?2 AND mode = ?3 AND (?4 IS NULL OR is_active = ?4)
			AND (?1 = 0 OR (created_at, id) > (SELECT created_at, id FROM alerts WHERE id = ?1))
		ORDER BY created_at, id
		LIMIT ?5`,
		pg.StartingAfter, o.UserID, o.Mode, pg.Active, limit)
	if err != nil {
		return nil, 0, fmt.Errorf("sqlite: alerts: %w", err)
	}
	return as, total, nil
}

// Alert returns the owner's alert id, or a RESOURCE_NOT_FOUND error when
// the owner has no such alert.
func (db *DB) Alert(ctx context.Context, o coinpulse.Owner, id int64) (*coinpulse.Alert, error) {
	a, err := scanAlert(db.db.QueryRowContext(ctx, `SELECT `+alertColumns+` FROM alerts WHERE id = ? AND user_id = ? AND mode = ?`,
		id, o.UserID, o.Mode))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, coinpulse.ErrAlertNotFound(id)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: alert: %w", err)
	}
	return &a, nil
}

// ToggleAlert flips the owner's alert's IsActive in one immediate
// transaction and returns the alert after it, with UpdatedAt now (the
// store's clock when zero; truncated to microseconds in UTC). Disabling changes nothing else.
// Enabling re-arms it: ArmedSeq takes the next value of the arming
// counter, ArmedAt becomes now, and the trigger and e-mail fields are
// cleared; with max >= 0 it first counts the owner's active alerts and,
// when there are already max, fails with ALERT_LIMIT_REACHED and changes
// nothing. An alert the owner does not have is a RESOURCE_NOT_FOUND error.
func (db *DB) ToggleAlert(ctx context.Context, o coinpulse.Owner, id int64, max int, now time.Time) (*coinpulse.Alert, error) {
	if now.IsZero() {
		now = db.now()
	}
	at := micros(truncate(now))
	var a coinpulse.Alert
	err := db.writeTx(ctx, func(tx *sql.Tx) error {
		var active bool
		err := tx.QueryRowContext(ctx, `SELECT is_active FROM alerts WHERE id = ? AND user_id = ? AND mode = ?`,
			id, o.UserID, o.Mode).Scan(&active)
		if errors.Is(err, sql.ErrNoRows) {
			return coinpulse.ErrAlertNotFound(id)
		}
		if err != nil {
			return fmt.Errorf("sqlite: toggle alert: %w", err)
		}
		if active {
			a, err = scanAlert(tx.QueryRowContext(ctx, `
				UPDATE alerts SET is_active = 0, updated_at = ? WHERE id = ?
				RETURNING `+alertColumns, at, id))
			if err != nil {
				return fmt.Errorf("sqlite: toggle alert: %w", err)
			}
			return nil
		}
		if max >= 0 {
			n, err := countActiveAlerts(ctx, tx, o)
			if err != nil {
				return fmt.Errorf("sqlite: toggle alert: %w", err)
			}
			if n >= max {
				return coinpulse.ErrAlertLimit(max)
			}
		}
		seq, err := nextArming(ctx, tx)
		if err != nil {
			return fmt.Errorf("sqlite: toggle alert: %w", err)
		}
		a, err = scanAlert(tx.QueryRowContext(ctx, `
			UPDATE alerts SET is_active = 1, armed_seq = ?, armed_at = ?, triggered_at = NULL, triggered_price = NULL,
				email_status = '', email_error = '', updated_at = ?
			WHERE id = ?
			RETURNING `+alertColumns,
			seq, at, at, id))
		if err != nil {
			return fmt.Errorf("sqlite: toggle alert: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &a, nil
}

// DeleteAlert deletes the owner's alert id; its deliveries stay in the
// log. An alert the owner does not have is a RESOURCE_NOT_FOUND error.
func (db *DB) DeleteAlert(ctx context.Context, o coinpulse.Owner, id int64) error {
	res, err := db.db.ExecContext(ctx, `DELETE FROM alerts WHERE id = ? AND user_id = ? AND mode = ?`, id, o.UserID, o.Mode)
	if err != nil {
		return fmt.Errorf("sqlite: delete alert: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("sqlite: delete alert: %w", err)
	} else if n == 0 {
		return coinpulse.ErrAlertNotFound(id)
	}
	return nil
}

// ArmedAlerts returns up to limit active alerts (a negative limit: no
// limit) armed at or after since with an ID above afterID, by ID. A zero
// since reads the table in ID order; a later one reads the partial index
// of active alerts by ArmedAt, which holds only the recent armings.
func (db *DB) ArmedAlerts(ctx context.Context, since time.Time, afterID int64, limit int) ([]coinpulse.Alert, error) {
	if limit == 0 {
		return []coinpulse.Alert{}, nil
	}
	if limit < 0 {
		limit = -1 // SQLite's no limit
	}
	var (
		as  []coinpulse.Alert
		err error
	)
	if since.IsZero() {
		as, err = readAlerts(ctx, db.db, `
			SELECT `+alertColumns+` FROM alerts
			WHERE is_active = 1 AND id > ?
			ORDER BY id LIMIT ?`,
			afterID, limit)
	} else {
		as, err = readAlerts(ctx, db.db, `
			SELECT `+alertColumns+` FROM alerts INDEXED BY alerts_armed_idx
			WHERE is_active = 1 AND armed_at >= ? AND id > ?
			ORDER BY id LIMIT ?`,
			ceilMicros(since), afterID, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: armed alerts: %w", err)
	}
	return as, nil
}

// FiredAlerts implements coinpulse.AlertStore.
func (db *DB) FiredAlerts(ctx context.Context, since time.Time, afterID int64, limit int) ([]coinpulse.Alert, error) {
	if limit == 0 {
		return []coinpulse.Alert{}, nil
	}
	if limit < 0 {
		limit = -1 // SQLite's no limit
	}
	as, err := readAlerts(ctx, db.db, `
		SELECT `+alertColumns+` FROM alerts INDEXED BY alerts_triggered_idx
		WHERE triggered_at >= ? AND id > ?
		ORDER BY id LIMIT ?`,
		ceilMicros(since), afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: fired alerts: %w", err)
	}
	return as, nil
}

// arming names one arming of one alert.
type arming struct{ alertID, seq int64 }

// FireAlerts ends the armings fs names that are still armed. It takes the
// firings in batches of up to 500, each in one immediate transaction, in
// which every firing is a conditional update (the alert's ArmedSeq is the
// firing's and it is active) that sets IsActive false, TriggeredAt f.At
// (now when zero), TriggeredPrice f.Price, UpdatedAt f.At and EmailStatus
// pending when NotifyEmail, else none; when it updates the alert, event is
// called once with the alert as fired and its deliveries are inserted,
// pending and due at f.At: one per enabled webhook of the alert's owner
// subscribed to alert.triggered, and an e-mail one when NotifyEmail.
//
// It returns, in the order of fs, each alert whose named arming has fired,
// by this call or an earlier one (an inactive alert with that ArmedSeq and
// a TriggeredAt), once however often fs names the arming; a firing that
// names the same arming as an earlier one of fs is ignored. When a batch
// fails it returns the error, and the batches before it stay committed.
func (db *DB) FireAlerts(ctx context.Context, fs []coinpulse.Firing, event coinpulse.EventFunc) ([]coinpulse.Alert, error) {
	order := make([]arming, 0, len(fs))
	firings := make(map[arming]coinpulse.Firing, len(fs))
	for _, f := range fs {
		k := arming{f.AlertID, f.ArmedSeq}
		if _, dup := firings[k]; dup {
			continue
		}
		if f.At.IsZero() {
			f.At = db.now()
		}
		f.At = truncate(f.At)
		firings[k] = f
		order = append(order, k)
	}
	fired := make(map[arming]coinpulse.Alert, len(order))
	for batch := range slices.Chunk(order, fireBatch) {
		got := make(map[arming]coinpulse.Alert, len(batch))
		err := db.Transact(ctx, func(tx *sql.Tx) error {
			clear(got)
			return fireAlerts(ctx, tx, batch, firings, event, got)
		})
		if err != nil {
			return nil, err
		}
		for k, a := range got {
			fired[k] = a
		}
	}
	as := make([]coinpulse.Alert, 0, len(fired))
	for _, k := range order {
		if a, ok := fired[k]; ok {
			as = append(as, a)
		}
	}
	return as, nil
}

// fireAlerts is one transaction of FireAlerts: it ends the armings of
// batch that are still armed, enqueues their deliveries, and puts in fired
// each alert of batch whose arming has fired.
func fireAlerts(ctx context.Context, tx *sql.Tx, batch []arming, firings map[arming]coinpulse.Firing,
	event coinpulse.EventFunc, fired map[arming]coinpulse.Alert) error {
	fire, err := tx.PrepareContext(ctx, `
		UPDATE alerts SET is_active = 0, triggered_at = max(?, armed_at), triggered_price = ?,
			email_status = CASE WHEN notify_email = 1 THEN 'pending' ELSE '' END, email_error = '', updated_at = max(?, updated_at)
		WHERE id = ? AND armed_seq = ? AND is_active = 1
		RETURNING `+alertColumns)
	if err != nil {
		return fmt.Errorf("sqlite: fire alerts: %w", err)
	}
	defer fire.Close()
	done, err := tx.PrepareContext(ctx, `
		SELECT `+alertColumns+` FROM alerts
		WHERE id = ? AND armed_seq = ? AND is_active = 0 AND triggered_at IS NOT NULL`)
	if err != nil {
		return fmt.Errorf("sqlite: fire alerts: %w", err)
	}
	defer done.Close()
	hooks, err := tx.PrepareContext(ctx, `
		INSERT INTO deliveries (kind, user_id, mode, alert_id, armed_seq, endpoint_id, event_id, event_type, payload,
			status, next_attempt_at, created_at)
		SELECT 'webhook', user_id, mode, ?, ?, id, ?, ?, ?, 'pending', ?, ?
		FROM webhooks
		WHERE user_id = ? AND mode = ? AND enabled = 1 AND instr(',' || events || ',', ?) > 0
		ORDER BY id`)
	if err != nil {
		return fmt.Errorf("sqlite: fire alerts: %w", err)
	}
	defer hooks.Close()
	mail, err := tx.PrepareContext(ctx, `
		INSERT INTO deliveries (kind, user_id, mode, alert_id, armed_seq, event_id, event_type, payload,
			status, next_attempt_at, created_at)
		VALUES ('email', ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?)`)
	if err != nil {
		return fmt.Errorf("sqlite: fire alerts: %w", err)
	}
	defer mail.Close()

	subscribed := "," + coinpulse.EventAlertTriggered + ","
	for _, k := range batch {
		f := firings[k]
		at := micros(f.At)
		a, err := scanAlert(fire.QueryRowContext(ctx, at, dec(f.Price), at, k.alertID, k.seq))
		if errors.Is(err, sql.ErrNoRows) {
			a, err = scanAlert(done.QueryRowContext(ctx, k.alertID, k.seq))
			if errors.Is(err, sql.ErrNoRows) {
				continue // the arming ended otherwise
			}
			if err != nil {
				return fmt.Errorf("sqlite: fire alerts: read alert %d: %w", k.alertID, err)
			}
			fired[k] = a
			continue
		}
		if err != nil {
			return fmt.Errorf("sqlite: fire alert %d: %w", k.alertID, err)
		}
		ev := event(&a)
		payload := ev.Payload
		if payload == nil {
			payload = []byte{}
		}
		_, err = hooks.ExecContext(ctx, a.ID, a.ArmedSeq, ev.ID, ev.Type, payload, at, at,
			a.Owner.UserID, a.Owner.Mode, subscribed)
		if err != nil {
			return fmt.Errorf("sqlite: fire alert %d: enqueue webhooks: %w", a.ID, err)
		}
		if a.NotifyEmail {
			_, err = mail.ExecContext(ctx, a.Owner.UserID, a.Owner.Mode, a.ID, a.ArmedSeq, ev.ID, ev.Type, payload, at, at)
			if err != nil {
				return fmt.Errorf("sqlite: fire alert %d: enqueue e-mail: %w", a.ID, err)
			}
		}
		fired[k] = a
	}
	return nil
}

// checkWebhook returns the VALIDATION_ERROR of w's first invalid field, or
// nil. Event types are stored comma-separated, so they may hold no comma.
func checkWebhook(w *coinpulse.Webhook) error {
	if !w.Owner.Mode.Valid() {
		return coinpulse.ValidationError("mode", "must be live or test")
	}
	if w.URL == "" {
		return coinpulse.ValidationError("url", "must not be empty")
	}
	for _, e := range w.Events {
		if e == "" || strings.Contains(e, ",") {
			return coinpulse.ValidationError("events", fmt.Sprintf("invalid event type %q", e))
		}
	}
	return nil
}

const webhookColumns = `id, user_id, mode, url, events, description, secret, enabled, disabled_reason, created_at, updated_at`

func scanWebhook(s scanner) (coinpulse.Webhook, error) {
	var (
		w                    coinpulse.Webhook
		events               string
		createdAt, updatedAt int64
	)
	err := s.Scan(&w.ID, &w.Owner.UserID, &w.Owner.Mode, &w.URL, &events, &w.Description, &w.Secret, &w.Enabled,
		&w.DisabledReason, &createdAt, &updatedAt)
	if err != nil {
		return w, err
	}
	w.Events = []string{}
	if events != "" {
		w.Events = strings.Split(events, ",")
	}
	w.CreatedAt = fromMicros(createdAt)
	w.UpdatedAt = fromMicros(updatedAt)
	return w, nil
}

// CreateWebhook inserts w for w.Owner, enabled, and sets its ID and
// CreatedAt (kept when set, else now) and UpdatedAt (= CreatedAt),
// truncated to microseconds in UTC; DisabledReason is cleared and nil
// Events become empty. With max >= 0 it counts the owner's endpoints inside
// one immediate transaction and, when there are already max, fails with
// CONFLICT and inserts nothing. An unknown mode, an empty URL or an event
// type that is empty or holds a comma is a VALIDATION_ERROR, an
// unknown user a RESOURCE_NOT_FOUND error.
func (db *DB) CreateWebhook(ctx context.Context, w *coinpulse.Webhook, max int) error {
	if err := checkWebhook(w); err != nil {
		return err
	}
	if w.CreatedAt.IsZero() {
		w.CreatedAt = db.now()
	}
	w.CreatedAt = truncate(w.CreatedAt)
	w.UpdatedAt = w.CreatedAt
	w.Enabled, w.DisabledReason = true, ""
	if w.Events == nil {
		w.Events = []string{}
	}
	var id int64
	err := db.writeTx(ctx, func(tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM users WHERE id = ?`, w.Owner.UserID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return coinpulse.ErrUserNotFound()
		}
		if err != nil {
			return fmt.Errorf("sqlite: create webhook: %w", err)
		}
		if max >= 0 {
			var n int
			err := tx.QueryRowContext(ctx, `SELECT count(*) FROM webhooks WHERE user_id = ? AND mode = ?`,
				w.Owner.UserID, w.Owner.Mode).Scan(&n)
			if err != nil {
				return fmt.Errorf("sqlite: create webhook: count webhooks: %w", err)
			}
			if n >= max {
				return coinpulse.ErrWebhookLimit(max)
			}
		}
		err = tx.QueryRowContext(ctx, `
			INSERT INTO webhooks (user_id, mode, url, events, description, secret, enabled, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, 1, ?, ?)
			RETURNING id`,
			w.Owner.UserID, w.Owner.Mode, w.URL, strings.Join(w.Events, ","), w.Description, w.Secret,
			micros(w.CreatedAt), micros(w.UpdatedAt),
		).Scan(&id)
		if err != nil {
			return fmt.Errorf("sqlite: create webhook: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	w.ID = id
	return nil
}

// Webhooks returns the owner's endpoints, oldest (by CreatedAt, then ID)
// first; an owner with none gets an empty slice.
func (db *DB) Webhooks(ctx context.Context, o coinpulse.Owner) ([]coinpulse.Webhook, error) {
	rows, err := db.db.QueryContext(ctx, `SELECT `+webhookColumns+` FROM webhooks WHERE user_id = ? AND mode = ? ORDER BY created_at, id`,
		o.UserID, o.Mode)
	if err != nil {
		return nil, fmt.Errorf("sqlite: webhooks: %w", err)
	}
	defer rows.Close()
	ws := []coinpulse.Webhook{}
	for rows.Next() {
		w, err := scanWebhook(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: webhooks: %w", err)
		}
		ws = append(ws, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: webhooks: %w", err)
	}
	return ws, nil
}

// Webhook returns the owner's endpoint id, or a RESOURCE_NOT_FOUND error
// when the owner has no such endpoint.
func (db *DB) Webhook(ctx context.Context, o coinpulse.Owner, id int64) (*coinpulse.Webhook, error) {
	w, err := scanWebhook(db.db.QueryRowContext(ctx, `SELECT `+webhookColumns+` FROM webhooks WHERE id = ? AND user_id = ? AND mode = ?`,
		id, o.UserID, o.Mode))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, coinpulse.ErrWebhookNotFound(id)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: webhook: %w", err)
	}
	return &w, nil
}

// DeleteWebhook deletes the owner's endpoint id with all its deliveries,
// pending ones and log alike. An endpoint the owner does not have is a
// RESOURCE_NOT_FOUND error.
func (db *DB) DeleteWebhook(ctx context.Context, o coinpulse.Owner, id int64) error {
	res, err := db.db.ExecContext(ctx, `DELETE FROM webhooks WHERE id = ? AND user_id = ? AND mode = ?`, id, o.UserID, o.Mode)
	if err != nil {
		return fmt.Errorf("sqlite: delete webhook: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("sqlite: delete webhook: %w", err)
	} else if n == 0 {
		return coinpulse.ErrWebhookNotFound(id)
	}
	return nil
}

// validStatus reports whether s is a known delivery state.
func validStatus(s coinpulse.DeliveryStatus) bool {
	switch s {
	case coinpulse.DeliveryPending, coinpulse.DeliveryDelivered, coinpulse.DeliveryFailed, coinpulse.DeliveryUndeliverable:
		return true
	}
	return false
}

const deliveryColumns = `id, kind, user_id, mode, alert_id, endpoint_id, event_id, event_type, payload, status, attempts,
	next_attempt_at, last_attempt_at, last_status_code, last_error, created_at, delivered_at`

func scanDelivery(s scanner) (coinpulse.Delivery, error) {
	var (
		d                          coinpulse.Delivery
		alertID, endpointID        sql.NullInt64
		nextAt, createdAt          int64
		lastAttemptAt, deliveredAt sql.NullInt64
	)
	err := s.Scan(&d.ID, &d.Kind, &d.Owner.UserID, &d.Owner.Mode, &alertID, &endpointID, &d.EventID, &d.EventType,
		&d.Payload, &d.Status, &d.Attempts, &nextAt, &lastAttemptAt, &d.LastStatusCode, &d.LastError, &createdAt,
		&deliveredAt)
	if err != nil {
		return d, err
	}
	if d.Payload == nil {
		d.Payload = []byte{}
	}
	d.AlertID, d.EndpointID = alertID.Int64, endpointID.Int64
	d.NextAttemptAt = fromMicros(nextAt)
	d.LastAttemptAt = fromNullMicros(lastAttemptAt)
	d.CreatedAt = fromMicros(createdAt)
	d.DeliveredAt = fromNullMicros(deliveredAt)
	return d, nil
}

// readDeliveries returns the deliveries the query selects, in its order
// (an empty slice when there are none).
func readDeliveries(ctx context.Context, q querier, query string, args ...any) ([]coinpulse.Delivery, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	ds := []coinpulse.Delivery{}
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, err
		}
		ds = append(ds, d)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return ds, nil
}

// nullID returns id as stored: NULL for 0.
func nullID(id int64) any {
	if id == 0 {
		return nil
	}
	return id
}

// EnqueueDelivery inserts d into the outbox, pending, and sets its ID,
// Status, Attempts (0), CreatedAt (kept when set, else now, truncated to
// microseconds in UTC) and NextAttemptAt (= CreatedAt), and clears the
// attempt fields. A webhook delivery must name an endpoint of d.Owner (else
// RESOURCE_NOT_FOUND), an e-mail one none; an unknown kind or mode is a
// VALIDATION_ERROR, an unknown user a RESOURCE_NOT_FOUND error. When
// AlertID names an alert of d.Owner, the delivery belongs to its current
// arming: an e-mail outcome is recorded on the alert only while that
// arming lasts.
func (db *DB) EnqueueDelivery(ctx context.Context, d *coinpulse.Delivery) error {
	switch {
	case d.Kind != coinpulse.KindWebhook && d.Kind != coinpulse.KindEmail:
		return coinpulse.ValidationError("kind", "must be webhook or email")
	case !d.Owner.Mode.Valid():
		return coinpulse.ValidationError("mode", "must be live or test")
	case d.Kind == coinpulse.KindWebhook && d.EndpointID == 0:
		return coinpulse.ValidationError("endpoint_id", "a webhook delivery needs an endpoint")
	case d.Kind == coinpulse.KindEmail && d.EndpointID != 0:
		return coinpulse.ValidationError("endpoint_id", "an e-mail delivery has no endpoint")
	}
	if d.CreatedAt.IsZero() {
		d.CreatedAt = db.now()
	}
	d.CreatedAt = truncate(d.CreatedAt)
	d.NextAttemptAt = d.CreatedAt
	d.Status, d.Attempts = coinpulse.DeliveryPending, 0
	d.LastAttemptAt, d.LastStatusCode, d.LastError, d.DeliveredAt = nil, 0, "", nil
	if d.Payload == nil {
		d.Payload = []byte{}
	}
	// The row comes from the endpoint (which must be the owner's) or from
	// the user (which must exist).
	from := `FROM users WHERE id = ?`
	args := []any{d.Owner.UserID}
	if d.Kind == coinpulse.KindWebhook {
		from = `FROM webhooks WHERE id = ? AND user_id = ? AND mode = ?`
		args = []any{d.EndpointID, d.Owner.UserID, d.Owner.Mode}
	}
	var id int64
	err := db.writeTx(ctx, func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, `
			INSERT INTO deliveries (kind, user_id, mode, alert_id, armed_seq, endpoint_id, event_id, event_type, payload,
				status, next_attempt_at, created_at)
			SELECT ?, ?, ?, ?, (SELECT armed_seq FROM alerts WHERE id = ? AND user_id = ? AND mode = ?), ?, ?, ?, ?,
				'pending', ?, ?
			`+from+`
			RETURNING id`,
			append([]any{d.Kind, d.Owner.UserID, d.Owner.Mode, nullID(d.AlertID), d.AlertID, d.Owner.UserID, d.Owner.Mode,
				nullID(d.EndpointID), d.EventID, d.EventType, d.Payload, micros(d.NextAttemptAt), micros(d.CreatedAt)},
				args...)...,
		).Scan(&id)
	})
	if errors.Is(err, sql.ErrNoRows) {
		if d.Kind == coinpulse.KindWebhook {
			return coinpulse.ErrWebhookNotFound(d.EndpointID)
		}
		return coinpulse.ErrUserNotFound()
	}
	if err != nil {
		return fmt.Errorf("sqlite: enqueue delivery: %w", err)
	}
	d.ID = id
	return nil
}

// ClaimDeliveries leases up to n pending deliveries of kind that are due at
// now (NextAttemptAt <= now) and not leased (or whose lease ended by now),
// until now+lease, by one UPDATE in an immediate transaction, and returns
// them oldest due (then lowest ID) first; n <= 0 claims none. An unknown
// kind is a VALIDATION_ERROR.
func (db *DB) ClaimDeliveries(ctx context.Context, kind coinpulse.DeliveryKind, now time.Time, lease time.Duration, n int) ([]coinpulse.Delivery, error) {
	if kind != coinpulse.KindWebhook && kind != coinpulse.KindEmail {
		return nil, coinpulse.ValidationError("kind", "must be webhook or email")
	}
	if n <= 0 {
		return []coinpulse.Delivery{}, nil
	}
	now = truncate(now)
	until := now.Add(lease)
	var ds []coinpulse.Delivery
	err := db.Transact(ctx, func(tx *sql.Tx) error {
		var err error
		ds, err = readDeliveries(ctx, tx, `
			UPDATE deliveries SET lease_until = ?
			WHERE id IN (
				SELECT id FROM deliveries
				WHERE kind = ? AND status = 'pending' AND next_attempt_at <= ? AND (lease_until IS NULL OR lease_until <= ?)
				ORDER BY next_attempt_at, id
				LIMIT ?)
			RETURNING `+deliveryColumns,
			micros(until), kind, micros(now), micros(now), n)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: claim deliveries: %w", err)
	}
	for i := range ds {
		ds[i].LeaseUntil = until
	}
	slices.SortFunc(ds, func(a, b coinpulse.Delivery) int {
		if c := a.NextAttemptAt.Compare(b.NextAttemptAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return ds, nil
}

// emailStatus is the alert's EmailStatus that a delivery state gives.
func emailStatus(s coinpulse.DeliveryStatus) coinpulse.EmailStatus {
	switch s {
	case coinpulse.DeliveryDelivered:
		return coinpulse.EmailSent
	case coinpulse.DeliveryFailed:
		return coinpulse.EmailFailed
	case coinpulse.DeliveryUndeliverable:
		return coinpulse.EmailUndeliverable
	}
	return coinpulse.EmailPending
}

// endpointDisabled is the LastError of the pending deliveries that
// RecordAttempt fails when it disables their endpoint.
func endpointDisabled(reason string) string {
	return "The endpoint was disabled: " + reason
}

// RecordAttempt stores an attempt's outcome on delivery id in one
// immediate transaction: Attempts grows by one, Status, LastAttemptAt
// (a.At, or now), LastStatusCode and LastError become the attempt's,
// NextAttemptAt a.NextAttemptAt when set, DeliveredAt a.At when delivered,
// and the lease is released. For an e-mail delivery of an alert's firing
// it sets the alert's EmailStatus (pending, sent, failed, undeliverable)
// and EmailError, unless the alert has been re-armed since. With
// a.DisableEndpoint set, a webhook delivery's endpoint is disabled with
// that reason (UpdatedAt a.At) and its other pending deliveries fail with
// a LastError saying so. An unknown status is a VALIDATION_ERROR, an
// unknown delivery a RESOURCE_NOT_FOUND error, and one whose lease is not
// a.Lease (when set) ErrLeaseLost.
func (db *DB) RecordAttempt(ctx context.Context, id int64, a coinpulse.Attempt) error {
	if !validStatus(a.Status) {
		return coinpulse.ValidationError("status", fmt.Sprintf("unknown delivery status %q", a.Status))
	}
	if a.At.IsZero() {
		a.At = db.now()
	}
	at := micros(truncate(a.At))
	var next any
	if !a.NextAttemptAt.IsZero() {
		next = micros(truncate(a.NextAttemptAt))
	}
	var lease any
	if !a.Lease.IsZero() {
		lease = micros(truncate(a.Lease))
	}
	return db.Transact(ctx, func(tx *sql.Tx) error {
		var (
			kind                     coinpulse.DeliveryKind
			alertID, seq, endpointID sql.NullInt64
		)
		err := tx.QueryRowContext(ctx, `
			UPDATE deliveries SET attempts = attempts + 1, status = ?, next_attempt_at = coalesce(?, next_attempt_at),
				last_attempt_at = ?, last_status_code = ?, last_error = ?, lease_until = NULL,
				delivered_at = CASE WHEN ? = 'delivered' THEN ? ELSE delivered_at END
			WHERE id = ? AND (?9 IS NULL OR lease_until = ?9)
			RETURNING kind, alert_id, armed_seq, endpoint_id`,
			a.Status, next, at, a.StatusCode, a.Error, a.Status, at, id, lease,
		).Scan(&kind, &alertID, &seq, &endpointID)
		if errors.Is(err, sql.ErrNoRows) {
			if lease != nil {
				var exists bool
				if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM deliveries WHERE id = ?)`, id).Scan(&exists); err != nil {
					return fmt.Errorf("sqlite: record attempt: %w", err)
				}
				if exists {
					return coinpulse.ErrLeaseLost(id)
				}
			}
			return coinpulse.Errorf(coinpulse.CodeNotFound, "No delivery %d.", id)
		}
		if err != nil {
			return fmt.Errorf("sqlite: record attempt: %w", err)
		}
		if kind == coinpulse.KindEmail && alertID.Valid && seq.Valid {
			_, err := tx.ExecContext(ctx, `UPDATE alerts SET email_status = ?, email_error = ? WHERE id = ? AND armed_seq = ?`,
				emailStatus(a.Status), a.Error, alertID.Int64, seq.Int64)
			if err != nil {
				return fmt.Errorf("sqlite: record attempt: e-mail status: %w", err)
			}
		}
		if a.DisableEndpoint != "" && endpointID.Valid {
			_, err := tx.ExecContext(ctx, `UPDATE webhooks SET enabled = 0, disabled_reason = ?, updated_at = ? WHERE id = ?`,
				a.DisableEndpoint, at, endpointID.Int64)
			if err != nil {
				return fmt.Errorf("sqlite: record attempt: disable endpoint: %w", err)
			}
			_, err = tx.ExecContext(ctx, `
				UPDATE deliveries SET status = 'failed', last_error = ?, lease_until = NULL
				WHERE endpoint_id = ? AND status = 'pending' AND id <> ?`,
				endpointDisabled(a.DisableEndpoint), endpointID.Int64, id)
			if err != nil {
				return fmt.Errorf("sqlite: record attempt: fail endpoint's deliveries: %w", err)
			}
		}
		return nil
	})
}

// Deliveries returns up to limit (a negative limit: no limit) of the
// owner's endpoint's deliveries, newest (by CreatedAt, then ID) first,
// from the one after startingAfter when it is not 0. An endpoint the
// owner does not have is a RESOURCE_NOT_FOUND error.
func (db *DB) Deliveries(ctx context.Context, o coinpulse.Owner, endpointID, startingAfter int64, limit int) ([]coinpulse.Delivery, error) {
	var cursor bool
	err := db.db.QueryRowContext(ctx, `
		SELECT EXISTS (SELECT 1 FROM deliveries WHERE id = ?1 AND endpoint_id = ?2)
		FROM webhooks WHERE id = ?2 AND user_id = ?3 AND mode = ?4`,
		startingAfter, endpointID, o.UserID, o.Mode).Scan(&cursor)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, coinpulse.ErrWebhookNotFound(endpointID)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: deliveries: %w", err)
	}
	if startingAfter != 0 && !cursor {
		return nil, coinpulse.ErrDeliveryCursor(startingAfter)
	}
	if limit == 0 {
		return []coinpulse.Delivery{}, nil
	}
	if limit < 0 {
		limit = -1 // SQLite's no limit
	}
	ds, err := readDeliveries(ctx, db.db, `
		SELECT `+deliveryColumns+` FROM deliveries
		WHERE endpoint_id = ?1
			AND (?2 = 0 OR (created_at, id) < (SELECT created_at, id FROM deliveries WHERE id = ?2))
		ORDER BY created_at DESC, id DESC
		LIMIT ?3`,
		endpointID, startingAfter, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: deliveries: %w", err)
	}
	return ds, nil
}
