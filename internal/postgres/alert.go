package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
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

const alertColumns = `id, user_id, mode, coin_id, coin_symbol, target_price::text, condition, notify_email, is_active,
	armed_seq, armed_at, triggered_at, triggered_price::text, email_status, email_error, created_at, updated_at`

func scanAlert(row pgx.Row) (coinpulse.Alert, error) {
	var (
		a              coinpulse.Alert
		target         string
		triggeredPrice *string
	)
	err := row.Scan(&a.ID, &a.Owner.UserID, &a.Owner.Mode, &a.CoinID, &a.CoinSymbol, &target, &a.Condition,
		&a.NotifyEmail, &a.IsActive, &a.ArmedSeq, &a.ArmedAt, &a.TriggeredAt, &triggeredPrice, &a.EmailStatus,
		&a.EmailError, &a.CreatedAt, &a.UpdatedAt)
	if err != nil {
		return a, err
	}
	if a.TargetPrice, err = parseDec(target); err != nil {
		return a, err
	}
	if a.TriggeredPrice, err = parseNullDec(triggeredPrice); err != nil {
		return a, err
	}
	a.ArmedAt = a.ArmedAt.UTC()
	a.TriggeredAt = utcPtr(a.TriggeredAt)
	a.CreatedAt = a.CreatedAt.UTC()
	a.UpdatedAt = a.UpdatedAt.UTC()
	return a, nil
}

// readAlerts returns the alerts the query selects, in its order (an empty
// slice when there are none).
func readAlerts(ctx context.Context, q querier, query string, args ...any) ([]coinpulse.Alert, error) {
	rows, err := q.Query(ctx, query, args...)
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

// lockUser locks the user's row (FOR NO KEY UPDATE, which leaves
// foreign-key checks alone), serialising the owner's capped creations. It
// returns RESOURCE_NOT_FOUND for an unknown user.
func lockUser(ctx context.Context, tx pgx.Tx, userID int64) error {
	var one int
	err := tx.QueryRow(ctx, `SELECT 1 FROM users WHERE id = $1 FOR NO KEY UPDATE`, userID).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return coinpulse.ErrUserNotFound()
	}
	return err
}

// countActiveAlerts returns how many active alerts o has.
func countActiveAlerts(ctx context.Context, tx pgx.Tx, o coinpulse.Owner) (int, error) {
	var n int
	err := tx.QueryRow(ctx, `SELECT count(*) FROM alerts WHERE user_id = $1 AND mode = $2 AND is_active`,
		o.UserID, o.Mode).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count active alerts: %w", err)
	}
	return n, nil
}

// CreateAlert inserts a for a.Owner, armed, and sets its ID, ArmedSeq (the
// next value of the alert_armed_seq sequence), IsActive (true), and
// CreatedAt (kept when set, else now), ArmedAt and UpdatedAt
// (= CreatedAt), truncated to microseconds in UTC; the trigger and e-mail
// fields are cleared. With max >= 0 it locks the user's row (FOR NO KEY
// UPDATE), counts the owner's active alerts and, when there are already
// max, fails with ALERT_LIMIT_REACHED and inserts nothing. An unknown mode
// or condition, an empty CoinID or a TargetPrice not above 0 is a
// VALIDATION_ERROR, an unknown user a RESOURCE_NOT_FOUND error.
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
	err := db.writeTx(ctx, func(tx pgx.Tx) error {
		if max >= 0 {
			if err := lockUser(ctx, tx, a.Owner.UserID); err != nil {
				return wrapf(err, "postgres: create alert: %w")
			}
			n, err := countActiveAlerts(ctx, tx, a.Owner)
			if err != nil {
				return fmt.Errorf("postgres: create alert: %w", err)
			}
			if n >= max {
				return coinpulse.ErrAlertLimit(max)
			}
		}
		err := tx.QueryRow(ctx, `
			INSERT INTO alerts (user_id, mode, coin_id, coin_symbol, target_price, condition, notify_email, is_active,
				armed_at, created_at, updated_at)
			SELECT id, $2, $3, $4, $5, $6, $7, true, $8, $9, $10 FROM users WHERE id = $1
			RETURNING id, armed_seq`,
			a.Owner.UserID, a.Owner.Mode, a.CoinID, a.CoinSymbol, dec(a.TargetPrice), a.Condition, a.NotifyEmail,
			a.ArmedAt, a.CreatedAt, a.UpdatedAt,
		).Scan(&id, &seq)
		if errors.Is(err, pgx.ErrNoRows) {
			return coinpulse.ErrUserNotFound()
		}
		if err != nil {
			return fmt.Errorf("postgres: create alert: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	a.ID, a.ArmedSeq = id, seq
	return nil
}

// wrapf wraps err with format unless it is a *coinpulse.Error, which is
// returned as it is.
func wrapf(err error, format string) error {
	var e *coinpulse.Error
	if errors.As(err, &e) {
		return err
	}
	return fmt.Errorf(format, err)
}

// Alerts returns the owner's alerts pg selects, oldest (by CreatedAt,
// then ID) first (an empty slice when none), and how many pg.Active
// selects in all.
func (db *DB) Alerts(ctx context.Context, o coinpulse.Owner, pg coinpulse.AlertPage) ([]coinpulse.Alert, int, error) {
	var (
		total  int
		cursor bool
	)
	err := db.pool.QueryRow(ctx, `
		SELECT count(*), EXISTS (SELECT 1 FROM alerts WHERE id = $1 AND user_id = $2 AND mode = $3)
		FROM alerts WHERE user_id = $2 AND mode = $3 AND ($4::boolean IS NULL OR is_active = $4)`,
		pg.StartingAfter, o.UserID, o.Mode, pg.Active).Scan(&total, &cursor)
	if err != nil {
		return nil, 0, fmt.Errorf("postgres: alerts: %w", err)
	}
	if pg.StartingAfter != 0 && !cursor {
		return nil, 0, coinpulse.ErrAlertCursor(pg.StartingAfter)
	}
	var lim *int // NULL: no limit
	if pg.Limit >= 0 {
		lim = &pg.Limit
	}
	if pg.Limit == 0 {
		return []coinpulse.Alert{}, total, nil
	}
	as, err := readAlerts(ctx, db.pool, `
		SELECT `+alertColumns+` FROM alerts
		WHERE user_id = $2 AND mode = $3 AND ($4::boolean IS NULL OR is_active = $4)
			AND ($1::bigint = 0 OR (created_at, id) > (SELECT created_at, id FROM alerts WHERE id = $1))
		ORDER BY created_at, id
		LIMIT $5`,
		pg.StartingAfter, o.UserID, o.Mode, pg.Active, lim)
	if err != nil {
		return nil, 0, fmt.Errorf("postgres: alerts: %w", err)
	}
	return as, total, nil
}

// Alert returns the owner's alert id, or a RESOURCE_NOT_FOUND error when
// the owner has no such alert.
func (db *DB) Alert(ctx context.Context, o coinpulse.Owner, id int64) (*coinpulse.Alert, error) {
	a, err := scanAlert(db.pool.QueryRow(ctx, `SELECT `+alertColumns+` FROM alerts WHERE id = $1 AND user_id = $2 AND mode = $3`,
		id, o.UserID, o.Mode))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, coinpulse.ErrAlertNotFound(id)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: alert: %w", err)
	}
	return &a, nil
}

// ToggleAlert flips the owner's alert's IsActive in one transaction that
// locks the user's row (with max >= 0) and then the alert's, and returns
// the alert after it, with UpdatedAt now (the store's clock when zero;
// truncated to microseconds in UTC). Disabling changes nothing else.
// Enabling re-arms it: ArmedSeq takes the next value of the
// alert_armed_seq sequence, ArmedAt becomes now, and the trigger and e-mail
// fields are cleared; with max >= 0 it first counts the owner's active
// alerts and, when there are already max, fails with ALERT_LIMIT_REACHED
// and changes nothing. An alert the owner does not have is a
// RESOURCE_NOT_FOUND error.
func (db *DB) ToggleAlert(ctx context.Context, o coinpulse.Owner, id int64, max int, now time.Time) (*coinpulse.Alert, error) {
	if now.IsZero() {
		now = db.now()
	}
	now = truncate(now)
	var a coinpulse.Alert
	err := db.writeTx(ctx, func(tx pgx.Tx) error {
		if max >= 0 {
			err := lockUser(ctx, tx, o.UserID)
			if coinpulse.IsNotFound(err) {
				return coinpulse.ErrAlertNotFound(id)
			}
			if err != nil {
				return fmt.Errorf("postgres: toggle alert: %w", err)
			}
		}
		var active bool
		err := tx.QueryRow(ctx, `SELECT is_active FROM alerts WHERE id = $1 AND user_id = $2 AND mode = $3 FOR NO KEY UPDATE`,
			id, o.UserID, o.Mode).Scan(&active)
		if errors.Is(err, pgx.ErrNoRows) {
			return coinpulse.ErrAlertNotFound(id)
		}
		if err != nil {
			return fmt.Errorf("postgres: toggle alert: %w", err)
		}
		if active {
			a, err = scanAlert(tx.QueryRow(ctx, `
				UPDATE alerts SET is_active = false, updated_at = $1 WHERE id = $2
				RETURNING `+alertColumns, now, id))
			if err != nil {
				return fmt.Errorf("postgres: toggle alert: %w", err)
			}
			return nil
		}
		if max >= 0 {
			n, err := countActiveAlerts(ctx, tx, o)
			if err != nil {
				return fmt.Errorf("postgres: toggle alert: %w", err)
			}
			if n >= max {
				return coinpulse.ErrAlertLimit(max)
			}
		}
		a, err = scanAlert(tx.QueryRow(ctx, `
			UPDATE alerts SET is_active = true, armed_seq = DEFAULT, armed_at = $1, triggered_at = NULL,
				triggered_price = NULL, email_status = '', email_error = '', updated_at = $1
			WHERE id = $2
			RETURNING `+alertColumns,
			now, id))
		if err != nil {
			return fmt.Errorf("postgres: toggle alert: %w", err)
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
	tag, err := db.pool.Exec(ctx, `DELETE FROM alerts WHERE id = $1 AND user_id = $2 AND mode = $3`, id, o.UserID, o.Mode)
	if err != nil {
		return fmt.Errorf("postgres: delete alert: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return coinpulse.ErrAlertNotFound(id)
	}
	return nil
}

// ArmedAlerts returns up to limit active alerts (a negative limit: no
// limit) armed at or after since with an ID above afterID, by ID. A zero
// since reads the primary key in ID order; a later one lets the planner
// use the partial index of active alerts by ArmedAt.
func (db *DB) ArmedAlerts(ctx context.Context, since time.Time, afterID int64, limit int) ([]coinpulse.Alert, error) {
	if limit == 0 {
		return []coinpulse.Alert{}, nil
	}
	var lim any // NULL: no limit
	if limit > 0 {
		lim = limit
	}
	var (
		as  []coinpulse.Alert
		err error
	)
	if since.IsZero() {
		as, err = readAlerts(ctx, db.pool, `
			SELECT `+alertColumns+` FROM alerts
			WHERE is_active AND id > $1
			ORDER BY id LIMIT $2`,
			afterID, lim)
	} else {
		as, err = readAlerts(ctx, db.pool, `
			SELECT `+alertColumns+` FROM alerts
			WHERE is_active AND armed_at >= $1 AND id > $2
			ORDER BY id LIMIT $3`,
			ceilMicro(since), afterID, lim)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: armed alerts: %w", err)
	}
	return as, nil
}

// FiredAlerts implements coinpulse.AlertStore.
func (db *DB) FiredAlerts(ctx context.Context, since time.Time, afterID int64, limit int) ([]coinpulse.Alert, error) {
	if limit == 0 {
		return []coinpulse.Alert{}, nil
	}
	var lim any // NULL: no limit
	if limit > 0 {
		lim = limit
	}
	as, err := readAlerts(ctx, db.pool, `
		SELECT `+alertColumns+` FROM alerts
		WHERE triggered_at >= $1 AND id > $2
		ORDER BY id LIMIT $3`,
		ceilMicro(since), afterID, lim)
	if err != nil {
		return nil, fmt.Errorf("postgres: fired alerts: %w", err)
	}
	return as, nil
}

// arming names one arming of one alert.
type arming struct{ alertID, seq int64 }

// FireAlerts ends the armings fs names that are still armed. It takes the
// firings by alert ID (so that concurrent callers lock alerts in one order
// and cannot deadlock), in batches of up to 500, each in one transaction
// and sent in pipelined batches of statements. Every firing is a
// conditional update (the alert's ArmedSeq is the firing's and it is
// active) that sets IsActive false, TriggeredAt f.At (now when zero),
// TriggeredPrice f.Price, UpdatedAt f.At and EmailStatus pending when
// NotifyEmail, else none; a concurrent caller's update of the same alert
// waits for this transaction and then finds the alert inactive. When it
// updates the alert, event is called once with the alert as fired and its
// deliveries are inserted, pending and due at f.At: one per enabled webhook
// of the alert's owner subscribed to alert.triggered (each locked FOR
// SHARE, so that an endpoint being disabled is waited for), and an e-mail
// one when NotifyEmail.
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
	sorted := slices.Clone(order)
	slices.SortFunc(sorted, func(a, b arming) int {
		if c := cmp.Compare(a.alertID, b.alertID); c != 0 {
			return c
		}
		return cmp.Compare(a.seq, b.seq)
	})
	fired := make(map[arming]coinpulse.Alert, len(order))
	for batch := range slices.Chunk(sorted, fireBatch) {
		got := make(map[arming]coinpulse.Alert, len(batch))
		err := db.Transact(ctx, func(tx pgx.Tx) error {
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
// each alert of batch whose arming has fired. It makes two round trips:
// the updates, then the inserts with the look-up of the armings that had
// fired before.
func fireAlerts(ctx context.Context, tx pgx.Tx, batch []arming, firings map[arming]coinpulse.Firing,
	event coinpulse.EventFunc, fired map[arming]coinpulse.Alert) error {
	var updates pgx.Batch
	for _, k := range batch {
		f := firings[k]
		updates.Queue(`
			UPDATE alerts SET is_active = false, triggered_at = GREATEST($1, armed_at), triggered_price = $2,
				email_status = CASE WHEN notify_email THEN 'pending' ELSE '' END, email_error = '', updated_at = GREATEST($1, updated_at)
			WHERE id = $3 AND armed_seq = $4 AND is_active
			RETURNING `+alertColumns,
			f.At, dec(f.Price), k.alertID, k.seq)
	}
	var (
		firedNow  []coinpulse.Alert // by this transaction
		ids, seqs []int64           // the armings to look up
		results   = tx.SendBatch(ctx, &updates)
	)
	for _, k := range batch {
		a, err := scanAlert(results.QueryRow())
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			ids, seqs = append(ids, k.alertID), append(seqs, k.seq)
		case err != nil:
			results.Close()
			return fmt.Errorf("postgres: fire alert %d: %w", k.alertID, err)
		default:
			firedNow = append(firedNow, a)
		}
	}
	if err := results.Close(); err != nil {
		return fmt.Errorf("postgres: fire alerts: %w", err)
	}

	var inserts pgx.Batch
	for _, a := range firedNow {
		f := firings[arming{a.ID, a.ArmedSeq}]
		ev := event(&a)
		payload := ev.Payload
		if payload == nil {
			payload = []byte{}
		}
		inserts.Queue(`
			INSERT INTO deliveries (kind, user_id, mode, alert_id, armed_seq, endpoint_id, event_id, event_type, payload,
				status, next_attempt_at, created_at)
			SELECT 'webhook', user_id, mode, $1, $2, id, $3, $4, $5, 'pending', $6, $6
			FROM webhooks
			WHERE user_id = $7 AND mode = $8 AND enabled AND $9 = ANY (events)
			ORDER BY id
			FOR SHARE`,
			a.ID, a.ArmedSeq, ev.ID, ev.Type, payload, f.At, a.Owner.UserID, a.Owner.Mode, coinpulse.EventAlertTriggered)
		if a.NotifyEmail {
			inserts.Queue(`
				INSERT INTO deliveries (kind, user_id, mode, alert_id, armed_seq, event_id, event_type, payload,
					status, next_attempt_at, created_at)
				VALUES ('email', $1, $2, $3, $4, $5, $6, $7, 'pending', $8, $8)`,
				a.Owner.UserID, a.Owner.Mode, a.ID, a.ArmedSeq, ev.ID, ev.Type, payload, f.At)
		}
		fired[arming{a.ID, a.ArmedSeq}] = a
	}
	if len(ids) > 0 {
		inserts.Queue(`
			SELECT `+alertColumns+` FROM alerts
			WHERE (id, armed_seq) IN (SELECT * FROM unnest($1::bigint[], $2::bigint[]))
				AND NOT is_active AND triggered_at IS NOT NULL`,
			ids, seqs)
	}
	if inserts.Len() == 0 {
		return nil
	}
	results = tx.SendBatch(ctx, &inserts)
	defer results.Close()
	for _, a := range firedNow {
		if _, err := results.Exec(); err != nil {
			return fmt.Errorf("postgres: fire alert %d: enqueue webhooks: %w", a.ID, err)
		}
		if a.NotifyEmail {
			if _, err := results.Exec(); err != nil {
				return fmt.Errorf("postgres: fire alert %d: enqueue e-mail: %w", a.ID, err)
			}
		}
	}
	if len(ids) > 0 {
		rows, err := results.Query()
		if err != nil {
			return fmt.Errorf("postgres: fire alerts: read fired alerts: %w", err)
		}
		for rows.Next() {
			a, err := scanAlert(rows)
			if err != nil {
				rows.Close()
				return fmt.Errorf("postgres: fire alerts: read fired alerts: %w", err)
			}
			fired[arming{a.ID, a.ArmedSeq}] = a
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("postgres: fire alerts: read fired alerts: %w", err)
		}
	}
	if err := results.Close(); err != nil {
		return fmt.Errorf("postgres: fire alerts: %w", err)
	}
	return nil
}

// checkWebhook returns the VALIDATION_ERROR of w's first invalid field, or
// nil. An event type may hold no comma, as in the SQLite store, which
// keeps them comma-separated.
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

func scanWebhook(row pgx.Row) (coinpulse.Webhook, error) {
	var w coinpulse.Webhook
	err := row.Scan(&w.ID, &w.Owner.UserID, &w.Owner.Mode, &w.URL, &w.Events, &w.Description, &w.Secret, &w.Enabled,
		&w.DisabledReason, &w.CreatedAt, &w.UpdatedAt)
	if err != nil {
		return w, err
	}
	if w.Events == nil {
		w.Events = []string{}
	}
	w.CreatedAt = w.CreatedAt.UTC()
	w.UpdatedAt = w.UpdatedAt.UTC()
	return w, nil
}

// CreateWebhook inserts w for w.Owner, enabled, and sets its ID and
// CreatedAt (kept when set, else now) and UpdatedAt (= CreatedAt),
// truncated to microseconds in UTC; DisabledReason is cleared and nil
// Events become empty. With max >= 0 it locks the user's row (FOR NO KEY
// UPDATE), counts the owner's endpoints and, when there are already max,
// fails with CONFLICT and inserts nothing. An unknown mode, an empty URL or
// an event type that is empty or holds a comma is a VALIDATION_ERROR, an
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
	err := db.writeTx(ctx, func(tx pgx.Tx) error {
		if max >= 0 {
			if err := lockUser(ctx, tx, w.Owner.UserID); err != nil {
				return wrapf(err, "postgres: create webhook: %w")
			}
			var n int
			err := tx.QueryRow(ctx, `SELECT count(*) FROM webhooks WHERE user_id = $1 AND mode = $2`,
				w.Owner.UserID, w.Owner.Mode).Scan(&n)
			if err != nil {
				return fmt.Errorf("postgres: create webhook: count webhooks: %w", err)
			}
			if n >= max {
				return coinpulse.ErrWebhookLimit(max)
			}
		}
		err := tx.QueryRow(ctx, `
			INSERT INTO webhooks (user_id, mode, url, events, description, secret, enabled, created_at, updated_at)
			SELECT id, $2, $3, $4, $5, $6, true, $7, $8 FROM users WHERE id = $1
			RETURNING id`,
			w.Owner.UserID, w.Owner.Mode, w.URL, w.Events, w.Description, w.Secret, w.CreatedAt, w.UpdatedAt,
		).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			return coinpulse.ErrUserNotFound()
		}
		if err != nil {
			return fmt.Errorf("postgres: create webhook: %w", err)
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
	rows, err := db.pool.Query(ctx, `SELECT `+webhookColumns+` FROM webhooks WHERE user_id = $1 AND mode = $2 ORDER BY created_at, id`,
		o.UserID, o.Mode)
	if err != nil {
		return nil, fmt.Errorf("postgres: webhooks: %w", err)
	}
	defer rows.Close()
	ws := []coinpulse.Webhook{}
	for rows.Next() {
		w, err := scanWebhook(rows)
		if err != nil {
			return nil, fmt.Errorf("postgres: webhooks: %w", err)
		}
		ws = append(ws, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: webhooks: %w", err)
	}
	return ws, nil
}

// Webhook returns the owner's endpoint id, or a RESOURCE_NOT_FOUND error
// when the owner has no such endpoint.
func (db *DB) Webhook(ctx context.Context, o coinpulse.Owner, id int64) (*coinpulse.Webhook, error) {
	w, err := scanWebhook(db.pool.QueryRow(ctx, `SELECT `+webhookColumns+` FROM webhooks WHERE id = $1 AND user_id = $2 AND mode = $3`,
		id, o.UserID, o.Mode))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, coinpulse.ErrWebhookNotFound(id)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: webhook: %w", err)
	}
	return &w, nil
}

// DeleteWebhook deletes the owner's endpoint id with all its deliveries,
// pending ones and log alike. An endpoint the owner does not have is a
// RESOURCE_NOT_FOUND error.
func (db *DB) DeleteWebhook(ctx context.Context, o coinpulse.Owner, id int64) error {
	tag, err := db.pool.Exec(ctx, `DELETE FROM webhooks WHERE id = $1 AND user_id = $2 AND mode = $3`, id, o.UserID, o.Mode)
	if err != nil {
		return fmt.Errorf("postgres: delete webhook: %w", err)
	}
	if tag.RowsAffected() == 0 {
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

// deliveryColumns are read from deliveries d.
const deliveryColumns = `d.id, d.kind, d.user_id, d.mode, d.alert_id, d.endpoint_id, d.event_id, d.event_type, d.payload,
	d.status, d.attempts, d.next_attempt_at, d.last_attempt_at, d.last_status_code, d.last_error, d.created_at,
	d.delivered_at`

func scanDelivery(row pgx.Row) (coinpulse.Delivery, error) {
	var (
		d                   coinpulse.Delivery
		alertID, endpointID *int64
	)
	err := row.Scan(&d.ID, &d.Kind, &d.Owner.UserID, &d.Owner.Mode, &alertID, &endpointID, &d.EventID, &d.EventType,
		&d.Payload, &d.Status, &d.Attempts, &d.NextAttemptAt, &d.LastAttemptAt, &d.LastStatusCode, &d.LastError,
		&d.CreatedAt, &d.DeliveredAt)
	if err != nil {
		return d, err
	}
	if d.Payload == nil {
		d.Payload = []byte{}
	}
	if alertID != nil {
		d.AlertID = *alertID
	}
	if endpointID != nil {
		d.EndpointID = *endpointID
	}
	d.NextAttemptAt = d.NextAttemptAt.UTC()
	d.LastAttemptAt = utcPtr(d.LastAttemptAt)
	d.CreatedAt = d.CreatedAt.UTC()
	d.DeliveredAt = utcPtr(d.DeliveredAt)
	return d, nil
}

// readDeliveries returns the deliveries the query selects, in its order
// (an empty slice when there are none).
func readDeliveries(ctx context.Context, q querier, query string, args ...any) ([]coinpulse.Delivery, error) {
	rows, err := q.Query(ctx, query, args...)
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
func nullID(id int64) *int64 {
	if id == 0 {
		return nil
	}
	return &id
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
	from := `FROM users WHERE id = $2 AND $4::bigint IS NULL`
	if d.Kind == coinpulse.KindWebhook {
		from = `FROM webhooks WHERE id = $4 AND user_id = $2 AND mode = $3`
	}
	var id int64
	err := db.writeTx(ctx, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `
			INSERT INTO deliveries (kind, user_id, mode, alert_id, armed_seq, endpoint_id, event_id, event_type, payload,
				status, next_attempt_at, created_at)
			SELECT $1, $2, $3, $5::bigint, (SELECT armed_seq FROM alerts WHERE id = $5 AND user_id = $2 AND mode = $3),
				$4::bigint, $6, $7, $8, 'pending', $9, $9
			`+from+`
			RETURNING id`,
			d.Kind, d.Owner.UserID, d.Owner.Mode, nullID(d.EndpointID), nullID(d.AlertID), d.EventID, d.EventType,
			d.Payload, d.CreatedAt,
		).Scan(&id)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		if d.Kind == coinpulse.KindWebhook {
			return coinpulse.ErrWebhookNotFound(d.EndpointID)
		}
		return coinpulse.ErrUserNotFound()
	}
	if err != nil {
		return fmt.Errorf("postgres: enqueue delivery: %w", err)
	}
	d.ID = id
	return nil
}

// ClaimDeliveries leases up to n pending deliveries of kind that are due at
// now (NextAttemptAt <= now) and not leased (or whose lease ended by now),
// until now+lease, and returns them oldest due (then lowest ID) first;
// n <= 0 claims none. One statement picks them FOR UPDATE SKIP LOCKED and
// sets their lease, so concurrent claimers skip each other's picks, and
// one that waited re-checks the lease. An unknown kind is a
// VALIDATION_ERROR.
func (db *DB) ClaimDeliveries(ctx context.Context, kind coinpulse.DeliveryKind, now time.Time, lease time.Duration, n int) ([]coinpulse.Delivery, error) {
	if kind != coinpulse.KindWebhook && kind != coinpulse.KindEmail {
		return nil, coinpulse.ValidationError("kind", "must be webhook or email")
	}
	if n <= 0 {
		return []coinpulse.Delivery{}, nil
	}
	now = truncate(now)
	until := now.Add(lease)
	ds, err := readDeliveries(ctx, db.pool, `
		WITH due AS (
			SELECT id FROM deliveries
			WHERE kind = $2 AND status = 'pending' AND next_attempt_at <= $3 AND (lease_until IS NULL OR lease_until <= $3)
			ORDER BY next_attempt_at, id
			LIMIT $4
			FOR UPDATE SKIP LOCKED)
		UPDATE deliveries d SET lease_until = $1
		FROM due WHERE d.id = due.id
		RETURNING `+deliveryColumns,
		until, kind, now, n)
	if err != nil {
		return nil, fmt.Errorf("postgres: claim deliveries: %w", err)
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
// transaction: Attempts grows by one, Status, LastAttemptAt (a.At, or now),
// LastStatusCode and LastError become the attempt's, NextAttemptAt
// a.NextAttemptAt when set, DeliveredAt a.At when delivered, and the lease
// is released. For an e-mail delivery of an alert's firing it sets the
// alert's EmailStatus (pending, sent, failed, undeliverable) and
// EmailError, unless the alert has been re-armed since. With
// a.DisableEndpoint set, a webhook delivery's endpoint is locked first
// (so that two attempts disabling it do not deadlock), disabled with that
// reason (UpdatedAt a.At), and its other pending deliveries fail with a
// LastError saying so. An unknown status is a VALIDATION_ERROR, an unknown
// delivery a RESOURCE_NOT_FOUND error, and one whose lease is not a.Lease
// (when set) ErrLeaseLost.
func (db *DB) RecordAttempt(ctx context.Context, id int64, a coinpulse.Attempt) error {
	if !validStatus(a.Status) {
		return coinpulse.ValidationError("status", fmt.Sprintf("unknown delivery status %q", a.Status))
	}
	if a.At.IsZero() {
		a.At = db.now()
	}
	at := truncate(a.At)
	var next *time.Time
	if !a.NextAttemptAt.IsZero() {
		next = truncatePtr(&a.NextAttemptAt)
	}
	notFound := coinpulse.Errorf(coinpulse.CodeNotFound, "No delivery %d.", id)
	var lease *time.Time
	if !a.Lease.IsZero() {
		lease = truncatePtr(&a.Lease)
	}
	return db.Transact(ctx, func(tx pgx.Tx) error {
		if a.DisableEndpoint != "" {
			var endpointID *int64
			err := tx.QueryRow(ctx, `SELECT endpoint_id FROM deliveries WHERE id = $1`, id).Scan(&endpointID)
			if errors.Is(err, pgx.ErrNoRows) {
				return notFound
			}
			if err != nil {
				return fmt.Errorf("postgres: record attempt: %w", err)
			}
			if endpointID != nil {
				_, err := tx.Exec(ctx, `SELECT 1 FROM webhooks WHERE id = $1 FOR NO KEY UPDATE`, *endpointID)
				if err != nil {
					return fmt.Errorf("postgres: record attempt: lock endpoint: %w", err)
				}
			}
		}
		var (
			kind                     coinpulse.DeliveryKind
			alertID, seq, endpointID *int64
		)
		err := tx.QueryRow(ctx, `
			UPDATE deliveries SET attempts = attempts + 1, status = $1, next_attempt_at = coalesce($2, next_attempt_at),
				last_attempt_at = $3, last_status_code = $4, last_error = $5, lease_until = NULL,
				delivered_at = CASE WHEN $1 = 'delivered' THEN $3 ELSE delivered_at END
			WHERE id = $6 AND ($7::timestamptz IS NULL OR lease_until = $7)
			RETURNING kind, alert_id, armed_seq, endpoint_id`,
			string(a.Status), next, at, a.StatusCode, a.Error, id, lease,
		).Scan(&kind, &alertID, &seq, &endpointID)
		if errors.Is(err, pgx.ErrNoRows) {
			if lease != nil {
				var exists bool
				if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM deliveries WHERE id = $1)`, id).Scan(&exists); err != nil {
					return fmt.Errorf("postgres: record attempt: %w", err)
				}
				if exists {
					return coinpulse.ErrLeaseLost(id)
				}
			}
			return notFound
		}
		if err != nil {
			return fmt.Errorf("postgres: record attempt: %w", err)
		}
		if kind == coinpulse.KindEmail && alertID != nil && seq != nil {
			_, err := tx.Exec(ctx, `UPDATE alerts SET email_status = $1, email_error = $2 WHERE id = $3 AND armed_seq = $4`,
				emailStatus(a.Status), a.Error, *alertID, *seq)
			if err != nil {
				return fmt.Errorf("postgres: record attempt: e-mail status: %w", err)
			}
		}
		if a.DisableEndpoint != "" && endpointID != nil {
			_, err := tx.Exec(ctx, `UPDATE webhooks SET enabled = false, disabled_reason = $1, updated_at = $2 WHERE id = $3`,
				a.DisableEndpoint, at, *endpointID)
			if err != nil {
				return fmt.Errorf("postgres: record attempt: disable endpoint: %w", err)
			}
			_, err = tx.Exec(ctx, `
				UPDATE deliveries SET status = 'failed', last_error = $1, lease_until = NULL
				WHERE endpoint_id = $2 AND status = 'pending' AND id <> $3`,
				endpointDisabled(a.DisableEndpoint), *endpointID, id)
			if err != nil {
				return fmt.Errorf("postgres: record attempt: fail endpoint's deliveries: %w", err)
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
	err := db.pool.QueryRow(ctx, `
		SELECT EXISTS (SELECT 1 FROM deliveries WHERE id = $1 AND endpoint_id = $2)
		FROM webhooks WHERE id = $2 AND user_id = $3 AND mode = $4`,
		startingAfter, endpointID, o.UserID, o.Mode).Scan(&cursor)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, coinpulse.ErrWebhookNotFound(endpointID)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: deliveries: %w", err)
	}
	if startingAfter != 0 && !cursor {
		return nil, coinpulse.ErrDeliveryCursor(startingAfter)
	}
	if limit == 0 {
		return []coinpulse.Delivery{}, nil
	}
	var lim any // NULL: no limit
	if limit > 0 {
		lim = limit
	}
	ds, err := readDeliveries(ctx, db.pool, `
		SELECT `+deliveryColumns+` FROM deliveries d
		WHERE d.endpoint_id = $1
			AND ($2 = 0 OR (d.created_at, d.id) < (SELECT created_at, id FROM deliveries WHERE id = $2))
		ORDER BY d.created_at DESC, d.id DESC
		LIMIT $3`,
		endpointID, startingAfter, lim)
	if err != nil {
		return nil, fmt.Errorf("postgres: deliveries: %w", err)
	}
	return ds, nil
}
