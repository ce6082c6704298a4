package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"coinpulse"
	"coinpulse/internal/meter/rollup"
)

// histColumns lists the latency bucket columns of usage_daily and
// key_usage_daily: "h00, …, h39".
var histColumns = func() string {
	cols := make([]string, rollup.Buckets)
	for i := range cols {
		cols[i] = fmt.Sprintf("h%02d", i)
	}
	return strings.Join(cols, ", ")
}()

// Multi-row statements of RecordCalls: a statement per row would spend
// more time in the driver than in SQLite.
var (
	insertCalls = rowsStatement{
		head: `INSERT INTO api_calls (user_id, key_id, mode, at, method, route, status, duration_us, request_id, counted) VALUES `,
		cols: 10,
		rows: 100,
	}
	upsertKeys = rowsStatement{
		head: `INSERT INTO key_usage (key_id, user_id, calls, last_call) VALUES `,
		tail: ` ON CONFLICT (key_id) DO UPDATE SET
			calls = calls + excluded.calls,
			last_call = max(last_call, excluded.last_call)`,
		cols: 4,
		rows: 100,
	}
	// usage_daily rows: calls add up, as does each latency bucket.
	upsertDays = newHistUpsert("usage_daily", "user_id, day", []string{"user_id", "day", "calls"}, []string{"calls"})
	// key_usage_daily rows, likewise.
	upsertKeyDays = newHistUpsert("key_usage_daily", "key_id, day",
		[]string{"key_id", "user_id", "day", "calls", "errors"}, []string{"calls", "errors"})
)

// histUpsert adds rows of leading columns and a latency histogram to a
// table whose rows add up on conflict.
type histUpsert struct {
	// full upserts a row with every bucket; one[i] one whose counts all
	// fell in bucket i: a row of one call, the most common in a batch of
	// many users, binds lead+1 parameters rather than lead+40.
	full rowsStatement
	one  [rollup.Buckets]rowsStatement
}

// newHistUpsert returns the upsert into table of rows lead, h00 … h39,
// which on conflict on the columns conflict adds the columns add and the
// buckets.
func newHistUpsert(table, conflict string, lead, add []string) *histUpsert {
	var set strings.Builder
	fmt.Fprintf(&set, " ON CONFLICT (%s) DO UPDATE SET ", conflict)
	for i, c := range add {
		if i > 0 {
			set.WriteString(", ")
		}
		fmt.Fprintf(&set, "%s = %s + excluded.%s", c, c, c)
	}
	cols := strings.Join(lead, ", ")
	u := &histUpsert{}
	var full strings.Builder
	full.WriteString(set.String())
	for i := range rollup.Buckets {
		fmt.Fprintf(&full, ", h%02d = h%02d + excluded.h%02d", i, i, i)
		u.one[i] = rowsStatement{
			head: fmt.Sprintf(`INSERT INTO %s (%s, h%02d) VALUES `, table, cols, i),
			tail: fmt.Sprintf("%s, h%02d = h%02d + excluded.h%02d", set.String(), i, i, i),
			cols: len(lead) + 1,
			rows: 100,
		}
	}
	u.full = rowsStatement{
		head: fmt.Sprintf(`INSERT INTO %s (%s, %s) VALUES `, table, cols, histColumns),
		tail: full.String(),
		cols: len(lead) + rollup.Buckets,
		rows: 20,
	}
	return u
}

// exec upserts n rows: row(i, args) appends row i's leading columns to
// args and returns its histogram.
func (u *histUpsert) exec(ctx context.Context, tx *sql.Tx, n int, row func(i int, args []any) ([]any, *rollup.Histogram)) error {
	var one [rollup.Buckets][]any // parameters of u.one[i]
	full := make([]any, 0, 8*u.full.cols)
	for i := range n {
		// Append to full, then move the row to one if it has one bucket.
		start := len(full)
		var h *rollup.Histogram
		full, h = row(i, full)
		bucket, buckets := -1, 0
		for j, c := range h {
			if c != 0 {
				bucket = j
				buckets++
			}
		}
		if buckets == 1 {
			one[bucket] = append(append(one[bucket], full[start:]...), h[bucket])
			full = full[:start]
			continue
		}
		for _, c := range h {
			full = append(full, c)
		}
	}
	for i, args := range one {
		if err := u.one[i].exec(ctx, tx, args); err != nil {
			return err
		}
	}
	return u.full.exec(ctx, tx, full)
}

// rowsStatement is an INSERT of up to rows rows of cols parameters each.
type rowsStatement struct {
	head, tail string
	cols, rows int
}

// sql returns the statement for n rows.
func (s rowsStatement) sql(n int) string {
	var b strings.Builder
	b.WriteString(s.head)
	row := "(?" + strings.Repeat(", ?", s.cols-1) + ")"
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(row)
	}
	b.WriteString(s.tail)
	return b.String()
}

// exec runs the statement over args, cols parameters a row, in statements
// of at most s.rows rows.
func (s rowsStatement) exec(ctx context.Context, tx *sql.Tx, args []any) error {
	if len(args) == 0 {
		return nil
	}
	per := s.cols * s.rows
	var full *sql.Stmt
	for len(args) > 0 {
		n := min(len(args), per)
		var err error
		if n == per {
			if full == nil {
				if full, err = tx.PrepareContext(ctx, s.sql(s.rows)); err != nil {
					return err
				}
				defer full.Close()
			}
			_, err = full.ExecContext(ctx, args[:n]...)
		} else {
			_, err = tx.ExecContext(ctx, s.sql(n/s.cols), args[:n]...)
		}
		if err != nil {
			return err
		}
		args = args[n:]
	}
	return nil
}

// jsonIDs returns ids as a JSON array, for json_each.
func jsonIDs(ids []int64) string {
	b := make([]byte, 0, 2+8*len(ids))
	b = append(b, '[')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, id, 10)
	}
	return string(append(b, ']'))
}

// RecordCalls stores a batch of calls in one transaction: it adds them to
// their keys' totals, their users' days (counted calls to the day's calls,
// every duration to its latency histogram) and their keys' days (every
// call to the day's calls, 4xx and 5xx answers to its errors, every
// duration to its histogram), appends them to their users' recent calls
// (keeping the 50 newest of each user by time, the last recorded first
// among equal times),
// and drops days (of users and of their keys) of those users older than
// 400 days before the batch's newest day. Calls of users that do not exist are
// left out. Times and durations are truncated to microseconds. It returns
// a VALIDATION_ERROR (and stores nothing) when a call's mode is unknown,
// and the database's error otherwise.
func (db *DB) RecordCalls(ctx context.Context, calls []coinpulse.Call) error {
	if len(calls) == 0 {
		return nil
	}
	for i := range calls {
		if !calls[i].Mode.Valid() {
			return coinpulse.ValidationError("mode", fmt.Sprintf("unknown mode %q", calls[i].Mode))
		}
	}
	err := db.Transact(ctx, func(tx *sql.Tx) error {
		exists := make(map[int64]bool)
		rows, err := tx.QueryContext(ctx, `SELECT id FROM users WHERE id IN (SELECT value FROM json_each(?))`,
			jsonIDs(rollup.UserIDs(calls)))
		if err != nil {
			return err
		}
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			exists[id] = true
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if len(exists) == 0 {
			return nil
		}
		b := rollup.Aggregate(calls, func(id int64) bool { return exists[id] })

		args := make([]any, 0, insertCalls.cols*len(b.Recent))
		for _, c := range b.Recent {
			args = append(args, c.UserID, c.KeyID, string(c.Mode), micros(c.Time), c.Method, c.Route,
				c.Status, c.Duration.Microseconds(), c.RequestID, c.Counted)
		}
		if err := insertCalls.exec(ctx, tx, args); err != nil {
			return err
		}
		users := jsonIDs(b.Users)
		// Each user's RecentCalls-th newest call by (at, id) (a batch
		// written later may hold older calls: nodes flush up to a second
		// apart), then every call after it in that order, both on
		// api_calls_user_id_at_idx.
		_, err = tx.ExecContext(ctx, `
			WITH cut (user_id, at, id) AS (
				SELECT u.value, c.at, c.id FROM json_each(?1) u
				JOIN api_calls c ON c.id = (
					SELECT c2.id FROM api_calls c2 WHERE c2.user_id = u.value
					ORDER BY c2.at DESC, c2.id DESC LIMIT 1 OFFSET ?2)
			)
			DELETE FROM api_calls WHERE id IN (
				SELECT a.id FROM cut JOIN api_calls a
					ON a.user_id = cut.user_id AND (a.at, a.id) < (cut.at, cut.id)
			)`, users, rollup.RecentCalls-1)
		if err != nil {
			return err
		}

		args = slices.Grow(args[:0], upsertKeys.cols*len(b.Keys))
		for _, k := range b.Keys {
			args = append(args, k.KeyID, k.UserID, k.Calls, micros(k.LastCall))
		}
		if err := upsertKeys.exec(ctx, tx, args); err != nil {
			return err
		}

		err = upsertDays.exec(ctx, tx, len(b.Days), func(i int, args []any) ([]any, *rollup.Histogram) {
			d := &b.Days[i]
			return append(args, d.UserID, micros(d.Day), d.Calls), &d.Latency
		})
		if err != nil {
			return err
		}
		err = upsertKeyDays.exec(ctx, tx, len(b.KeyDays), func(i int, args []any) ([]any, *rollup.Histogram) {
			d := &b.KeyDays[i]
			return append(args, d.KeyID, d.UserID, micros(d.Day), d.Calls, d.Errors), &d.Latency
		})
		if err != nil {
			return err
		}
		cutoff := micros(b.Newest.AddDate(0, 0, -rollup.RetainDays+1))
		_, err = tx.ExecContext(ctx, `
			DELETE FROM usage_daily WHERE user_id IN (SELECT value FROM json_each(?)) AND day < ?`,
			users, cutoff)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `
			DELETE FROM key_usage_daily WHERE user_id IN (SELECT value FROM json_each(?)) AND day < ?`,
			users, cutoff)
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite: record calls: %w", err)
	}
	return nil
}

// MonthCalls returns the user's counted calls on the UTC days of the
// calendar month starting at monthStart (a day's start counts as the
// day). It returns the database's error, if any.
func (db *DB) MonthCalls(ctx context.Context, userID int64, monthStart time.Time) (int64, error) {
	var n int64
	err := db.db.QueryRowContext(ctx, `SELECT coalesce(sum(calls), 0) FROM usage_daily WHERE user_id = ? AND day >= ? AND day < ?`,
		userID, micros(monthStart), micros(monthStart.AddDate(0, 1, 0))).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("sqlite: month calls: %w", err)
	}
	return n, nil
}

// AddAdmitted adds each change to its user's month of admitted calls (see
// coinpulse.UsageStore), in one transaction. It returns the database's
// error, if any.
func (db *DB) AddAdmitted(ctx context.Context, changes []coinpulse.Admitted) error {
	rows, users, cutoffs := rollup.AdmittedRows(changes)
	if len(rows) == 0 {
		return nil
	}
	err := db.Transact(ctx, func(tx *sql.Tx) error {
		var b strings.Builder
		b.WriteByte('[')
		for i, r := range rows {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "[%d,%d,%d,%d]", r.UserID, micros(r.Month), r.Calls, micros(r.Month.AddDate(0, 1, 0)))
		}
		b.WriteByte(']')
		// A new row takes the month's metered calls as metered.
		if _, err := tx.ExecContext(ctx, `
			INSERT INTO month_admitted (user_id, month, calls, metered)
			SELECT c.user_id, c.month, c.calls,
				CASE WHEN EXISTS (SELECT 1 FROM month_admitted AS m WHERE m.user_id = c.user_id AND m.month = c.month) THEN 0
				ELSE (SELECT coalesce(sum(d.calls), 0) FROM usage_daily AS d WHERE d.user_id = c.user_id AND d.day >= c.month AND d.day < c.month_end)
				END
			FROM (SELECT json_extract(value, '$[0]') AS user_id, json_extract(value, '$[1]') AS month,
			             json_extract(value, '$[2]') AS calls, json_extract(value, '$[3]') AS month_end
			      FROM json_each(?)) AS c
			JOIN users ON users.id = c.user_id
			WHERE true
			ON CONFLICT (user_id, month) DO UPDATE SET calls = month_admitted.calls + excluded.calls`,
			b.String()); err != nil {
			return err
		}
		b.Reset()
		b.WriteByte('[')
		for i, u := range users {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "[%d,%d]", u, micros(cutoffs[i]))
		}
		b.WriteByte(']')
		// Found from the batch's users on the primary key: a correlated
		// EXISTS would scan the whole table.
		_, err := tx.ExecContext(ctx, `
			DELETE FROM month_admitted WHERE rowid IN (
				SELECT m.rowid FROM json_each(?) AS c JOIN month_admitted AS m
				ON m.user_id = json_extract(c.value, '$[0]') AND m.month < json_extract(c.value, '$[1]'))`,
			b.String())
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite: add admitted calls: %w", err)
	}
	return nil
}

// MonthAdmitted returns the user's admitted calls in the month starting at
// monthStart (see coinpulse.UsageStore). It returns the database's error,
// if any.
func (db *DB) MonthAdmitted(ctx context.Context, userID int64, monthStart time.Time) (int64, error) {
	var n int64
	err := db.db.QueryRowContext(ctx, `SELECT max(calls + metered, 0) FROM month_admitted WHERE user_id = ? AND month = ?`,
		userID, micros(monthStart)).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("sqlite: month admitted: %w", err)
	}
	return n, nil
}

// MarkMonth records that the rate limiter has seeded the user's month
// starting at monthStart and reports whether it had before (see
// coinpulse.UsageStore), removing the user's marks older than the month
// before. It returns the database's error, if any.
func (db *DB) MarkMonth(ctx context.Context, userID int64, monthStart time.Time) (before bool, err error) {
	err = db.Transact(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM limiter_months WHERE user_id = ? AND month < ?`,
			userID, micros(monthStart.AddDate(0, -1, 0))); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO limiter_months (user_id, month) VALUES (?, ?) ON CONFLICT DO NOTHING`,
			userID, micros(monthStart))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		before = n == 0
		return err
	})
	if err != nil {
		return false, fmt.Errorf("sqlite: mark month: %w", err)
	}
	return before, nil
}

// Usage returns the user's usage as of now (see coinpulse.Usage), read in
// one snapshot: a user without calls, or that does not exist, has zeros
// and 30 empty days. The percentiles are bucket upper edges, per
// internal/meter/rollup. It returns the database's error, if any.
func (db *DB) Usage(ctx context.Context, userID int64, now time.Time) (*coinpulse.Usage, error) {
	// One read transaction (a deferred BEGIN: the driver's immediate
	// lock is for writes) so that the four reads see one snapshot: a
	// batch landing between two of them would count in one and not in
	// the other.
	tx, err := db.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("sqlite: usage: %w", err)
	}
	defer tx.Rollback()
	recent, err := recentCalls(ctx, tx, userID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: usage: %w", err)
	}
	keys, err := keyUsage(ctx, tx, userID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: usage: %w", err)
	}
	days, err := usageDays(ctx, tx, userID, rollup.Since(now))
	if err != nil {
		return nil, fmt.Errorf("sqlite: usage: %w", err)
	}
	kdays, err := keyDays(ctx, tx, userID, now)
	if err != nil {
		return nil, fmt.Errorf("sqlite: usage: %w", err)
	}
	return rollup.Result(now, recent, keys, days, kdays), nil
}

func recentCalls(ctx context.Context, q querier, userID int64) ([]coinpulse.Call, error) {
	rows, err := q.QueryContext(ctx, `
		SELECT key_id, mode, at, method, route, status, duration_us, request_id, counted
		FROM api_calls WHERE user_id = ? ORDER BY at DESC, id DESC LIMIT ?`, userID, rollup.RecentCalls)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	calls := make([]coinpulse.Call, 0, rollup.RecentCalls)
	for rows.Next() {
		c := coinpulse.Call{UserID: userID}
		var at, dur int64
		if err := rows.Scan(&c.KeyID, &c.Mode, &at, &c.Method, &c.Route, &c.Status, &dur, &c.RequestID, &c.Counted); err != nil {
			return nil, err
		}
		c.Time = fromMicros(at)
		c.Duration = time.Duration(dur) * time.Microsecond
		calls = append(calls, c)
	}
	return calls, rows.Err()
}

func keyUsage(ctx context.Context, q querier, userID int64) ([]coinpulse.KeyUsage, error) {
	rows, err := q.QueryContext(ctx, `SELECT key_id, calls, last_call FROM key_usage WHERE user_id = ? ORDER BY key_id`, userID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	keys := []coinpulse.KeyUsage{}
	for rows.Next() {
		var k coinpulse.KeyUsage
		var last int64
		if err := rows.Scan(&k.KeyID, &k.Calls, &last); err != nil {
			return nil, err
		}
		k.LastCall = fromMicros(last)
		keys = append(keys, k)
	}
	return keys, rows.Err()
}

func usageDays(ctx context.Context, q querier, userID int64, since time.Time) ([]rollup.Day, error) {
	rows, err := q.QueryContext(ctx, `SELECT day, calls, `+histColumns+` FROM usage_daily WHERE user_id = ? AND day >= ?`,
		userID, micros(since))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var days []rollup.Day
	dest := make([]any, 2+rollup.Buckets)
	for rows.Next() {
		d := rollup.Day{UserID: userID}
		var day int64
		dest[0], dest[1] = &day, &d.Calls
		for i := range d.Latency {
			dest[2+i] = &d.Latency[i]
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		d.Day = fromMicros(day)
		days = append(days, d)
	}
	return days, rows.Err()
}

// keyDays reads the user's keys' days of now's calendar month.
func keyDays(ctx context.Context, q querier, userID int64, now time.Time) ([]rollup.KeyDay, error) {
	from, to := rollup.KeyMonth(now)
	rows, err := q.QueryContext(ctx, `SELECT key_id, day, calls, errors, `+histColumns+`
		FROM key_usage_daily WHERE user_id = ? AND day >= ? AND day < ?`, userID, micros(from), micros(to))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var days []rollup.KeyDay
	dest := make([]any, 4+rollup.Buckets)
	for rows.Next() {
		d := rollup.KeyDay{UserID: userID}
		var day int64
		dest[0], dest[1], dest[2], dest[3] = &d.KeyID, &day, &d.Calls, &d.Errors
		for i := range d.Latency {
			dest[4+i] = &d.Latency[i]
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		d.Day = fromMicros(day)
		days = append(days, d)
	}
	return days, rows.Err()
}
