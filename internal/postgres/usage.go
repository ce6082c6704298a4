package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

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

// upsertDaysSQL adds rows to usage_daily from arrays: $1 user ids, $2 days,
// $3 counted calls, then one array per latency bucket.
var upsertDaysSQL = func() string {
	var params, set strings.Builder
	for i := range rollup.Buckets {
		fmt.Fprintf(&params, ", $%d::integer[]", 4+i)
		fmt.Fprintf(&set, ", h%02d = usage_daily.h%02d + excluded.h%02d", i, i, i)
	}
	return `INSERT INTO usage_daily (user_id, day, calls, ` + histColumns + `)
		SELECT * FROM unnest($1::bigint[], $2::timestamptz[], $3::bigint[]` + params.String() + `)
		ON CONFLICT (user_id, day) DO UPDATE SET calls = usage_daily.calls + excluded.calls` + set.String()
}()

// upsertKeyDaysSQL adds rows to key_usage_daily from arrays: $1 key ids,
// $2 user ids, $3 days, $4 calls, $5 errors, then one array per latency
// bucket.
var upsertKeyDaysSQL = func() string {
	var params, set strings.Builder
	for i := range rollup.Buckets {
		fmt.Fprintf(&params, ", $%d::integer[]", 6+i)
		fmt.Fprintf(&set, ", h%02d = key_usage_daily.h%02d + excluded.h%02d", i, i, i)
	}
	return `INSERT INTO key_usage_daily (key_id, user_id, day, calls, errors, ` + histColumns + `)
		SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::timestamptz[], $4::bigint[], $5::bigint[]` + params.String() + `)
		ON CONFLICT (key_id, day) DO UPDATE SET calls = key_usage_daily.calls + excluded.calls,
			errors = key_usage_daily.errors + excluded.errors` + set.String()
}()

// RecordCalls stores a batch of calls in one transaction: it adds them to
// their keys' totals, their users' days (counted calls to the day's calls,
// every duration to its latency histogram) and their keys' days (every
// call to the day's calls, 4xx and 5xx answers to its errors, every
// duration to its histogram), appends them to their users' recent calls
// (keeping the 50 newest of each user by time, the last recorded first
// among equal times),
// and drops days (of users and of their keys) of those users older than
// 400 days before the batch's newest day. Calls of users that do not
// exist are left out. Times and durations are truncated to microseconds.
// Rows are upserted in key, (user, day) and (key, day) order, so
// concurrent batches cannot deadlock on them. It returns a VALIDATION_ERROR (and stores nothing)
// when a call's mode is unknown, and the database's error otherwise.
func (db *DB) RecordCalls(ctx context.Context, calls []coinpulse.Call) error {
	if len(calls) == 0 {
		return nil
	}
	for i := range calls {
		if !calls[i].Mode.Valid() {
			return coinpulse.ValidationError("mode", fmt.Sprintf("unknown mode %q", calls[i].Mode))
		}
	}
	err := db.Transact(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id FROM users WHERE id = ANY($1)`, rollup.UserIDs(calls))
		if err != nil {
			return err
		}
		exists := make(map[int64]bool)
		var id int64
		_, err = pgx.ForEachRow(rows, []any{&id}, func() error {
			exists[id] = true
			return nil
		})
		if err != nil || len(exists) == 0 {
			return err
		}
		b := rollup.Aggregate(calls, func(id int64) bool { return exists[id] })

		var batch pgx.Batch
		n := len(b.Recent)
		var (
			users, keys, durs      = make([]int64, n), make([]int64, n), make([]int64, n)
			modes, methods, routes = make([]string, n), make([]string, n), make([]string, n)
			ats                    = make([]time.Time, n)
			statuses               = make([]int32, n)
			requestIDs             = make([]string, n)
			counted                = make([]bool, n)
		)
		for i, c := range b.Recent {
			users[i], keys[i], modes[i], ats[i] = c.UserID, c.KeyID, string(c.Mode), c.Time
			methods[i], routes[i], statuses[i] = c.Method, c.Route, int32(c.Status)
			durs[i], requestIDs[i], counted[i] = c.Duration.Microseconds(), c.RequestID, c.Counted
		}
		// WITH ORDINALITY and ORDER BY: ids follow the batch's order.
		batch.Queue(`
			INSERT INTO api_calls (user_id, key_id, mode, at, method, route, status, duration_us, request_id, counted)
			SELECT user_id, key_id, mode, at, method, route, status, duration_us, request_id, counted
			FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::timestamptz[], $5::text[], $6::text[],
			            $7::integer[], $8::bigint[], $9::text[], $10::boolean[])
			     WITH ORDINALITY AS c (user_id, key_id, mode, at, method, route, status, duration_us, request_id, counted, ord)
			ORDER BY ord`,
			users, keys, modes, ats, methods, routes, statuses, durs, requestIDs, counted)
		// Each user's calls beyond the newest RecentCalls by (at, id) (a
		// batch written later may hold older calls: nodes flush up to a
		// second apart), found from the user's RecentCalls-th newest call
		// on api_calls_user_id_at_idx, locked in id order first:
		// concurrent batches prune overlapping rows, and a plain DELETE
		// would lock them in an order of its plan's choosing and could
		// deadlock. A batch sees its own calls and committed ones, so
		// concurrent batches never prune a call newest among them all.
		batch.Queue(`
			WITH cut AS (
				SELECT u.user_id, c.at, c.id
				FROM unnest($1::bigint[]) AS u (user_id)
				CROSS JOIN LATERAL (
					SELECT at, id FROM api_calls WHERE user_id = u.user_id
					ORDER BY at DESC, id DESC OFFSET $2 - 1 LIMIT 1
				) AS c
			), doomed AS (
				SELECT a.id FROM cut JOIN api_calls AS a
					ON a.user_id = cut.user_id AND (a.at, a.id) < (cut.at, cut.id)
				ORDER BY a.id FOR UPDATE OF a
			)
			DELETE FROM api_calls AS a USING doomed WHERE a.id = doomed.id`, b.Users, rollup.RecentCalls)

		keyIDs, keyUsers, keyCalls, keyLast := make([]int64, len(b.Keys)), make([]int64, len(b.Keys)), make([]int64, len(b.Keys)), make([]time.Time, len(b.Keys))
		for i, k := range b.Keys {
			keyIDs[i], keyUsers[i], keyCalls[i], keyLast[i] = k.KeyID, k.UserID, k.Calls, k.LastCall
		}
		batch.Queue(`
			INSERT INTO key_usage (key_id, user_id, calls, last_call)
			SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::timestamptz[])
			ON CONFLICT (key_id) DO UPDATE SET
				calls = key_usage.calls + excluded.calls,
				last_call = greatest(key_usage.last_call, excluded.last_call)`,
			keyIDs, keyUsers, keyCalls, keyLast)

		args := make([]any, 3+rollup.Buckets)
		nd := len(b.Days)
		dayUsers, days, dayCalls := make([]int64, nd), make([]time.Time, nd), make([]int64, nd)
		hist := make([][]int64, rollup.Buckets)
		for j := range hist {
			hist[j] = make([]int64, nd)
			args[3+j] = hist[j]
		}
		for i := range b.Days {
			d := &b.Days[i]
			dayUsers[i], days[i], dayCalls[i] = d.UserID, d.Day, d.Calls
			for j, c := range d.Latency {
				hist[j][i] = c
			}
		}
		args[0], args[1], args[2] = dayUsers, days, dayCalls
		batch.Queue(upsertDaysSQL, args...)

		args = make([]any, 5+rollup.Buckets)
		nk := len(b.KeyDays)
		kdKeys, kdUsers, kdDays, kdCalls, kdErrors := make([]int64, nk), make([]int64, nk), make([]time.Time, nk), make([]int64, nk), make([]int64, nk)
		for j := range hist {
			hist[j] = make([]int64, nk)
			args[5+j] = hist[j]
		}
		for i := range b.KeyDays {
			d := &b.KeyDays[i]
			kdKeys[i], kdUsers[i], kdDays[i], kdCalls[i], kdErrors[i] = d.KeyID, d.UserID, d.Day, d.Calls, d.Errors
			for j, c := range d.Latency {
				hist[j][i] = c
			}
		}
		args[0], args[1], args[2], args[3], args[4] = kdKeys, kdUsers, kdDays, kdCalls, kdErrors
		batch.Queue(upsertKeyDaysSQL, args...)

		cutoff := b.Newest.AddDate(0, 0, -rollup.RetainDays+1)
		batch.Queue(`DELETE FROM usage_daily WHERE user_id = ANY($1) AND day < $2`, b.Users, cutoff)
		batch.Queue(`DELETE FROM key_usage_daily WHERE user_id = ANY($1) AND day < $2`, b.Users, cutoff)
		return tx.SendBatch(ctx, &batch).Close()
	})
	if err != nil {
		return fmt.Errorf("postgres: record calls: %w", err)
	}
	return nil
}

// MonthCalls returns the user's counted calls on the UTC days of the
// calendar month starting at monthStart (a day's start counts as the
// day). It returns the database's error, if any.
func (db *DB) MonthCalls(ctx context.Context, userID int64, monthStart time.Time) (int64, error) {
	var n int64
	err := db.pool.QueryRow(ctx, `SELECT coalesce(sum(calls), 0)::bigint FROM usage_daily WHERE user_id = $1 AND day >= $2 AND day < $3`,
		userID, monthStart, monthStart.AddDate(0, 1, 0)).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("postgres: month calls: %w", err)
	}
	return n, nil
}

// AddAdmitted adds each change to its user's month of admitted calls (see
// coinpulse.UsageStore), in one transaction, upserting rows in (user,
// month) order so that concurrent writers cannot deadlock on them. It
// returns the database's error, if any.
func (db *DB) AddAdmitted(ctx context.Context, changes []coinpulse.Admitted) error {
	rows, users, cutoffs := rollup.AdmittedRows(changes)
	if len(rows) == 0 {
		return nil
	}
	ids, calls := make([]int64, len(rows)), make([]int64, len(rows))
	months, ends := make([]time.Time, len(rows)), make([]time.Time, len(rows))
	for i, r := range rows {
		ids[i], months[i], calls[i], ends[i] = r.UserID, r.Month, r.Calls, r.Month.AddDate(0, 1, 0)
	}
	err := db.Transact(ctx, func(tx pgx.Tx) error {
		var batch pgx.Batch
		// WITH ORDINALITY and ORDER BY: rows are upserted in the order
		// given. A new row takes the month's metered calls as metered.
		batch.Queue(`
			INSERT INTO month_admitted (user_id, month, calls, metered)
			SELECT c.user_id, c.month, c.calls,
				CASE WHEN EXISTS (SELECT 1 FROM month_admitted AS m WHERE m.user_id = c.user_id AND m.month = c.month) THEN 0
				ELSE (SELECT coalesce(sum(d.calls), 0) FROM usage_daily AS d WHERE d.user_id = c.user_id AND d.day >= c.month AND d.day < c.month_end)
				END
			FROM unnest($1::bigint[], $2::timestamptz[], $3::bigint[], $4::timestamptz[]) WITH ORDINALITY AS c (user_id, month, calls, month_end, ord)
			JOIN users ON users.id = c.user_id
			ORDER BY c.ord
			ON CONFLICT (user_id, month) DO UPDATE SET calls = month_admitted.calls + excluded.calls`,
			ids, months, calls, ends)
		batch.Queue(`
			DELETE FROM month_admitted AS m USING unnest($1::bigint[], $2::timestamptz[]) AS c (user_id, cutoff)
			WHERE m.user_id = c.user_id AND m.month < c.cutoff`, users, cutoffs)
		return tx.SendBatch(ctx, &batch).Close()
	})
	if err != nil {
		return fmt.Errorf("postgres: add admitted calls: %w", err)
	}
	return nil
}

// MonthAdmitted returns the user's admitted calls in the month starting at
// monthStart (see coinpulse.UsageStore). It returns the database's error,
// if any.
func (db *DB) MonthAdmitted(ctx context.Context, userID int64, monthStart time.Time) (int64, error) {
	var n int64
	err := db.pool.QueryRow(ctx, `SELECT coalesce(max(greatest(calls + metered, 0)), 0)::bigint FROM month_admitted WHERE user_id = $1 AND month = $2`,
		userID, monthStart).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("postgres: month admitted: %w", err)
	}
	return n, nil
}

// MarkMonth records that the rate limiter has seeded the user's month
// starting at monthStart and reports whether it had before (see
// coinpulse.UsageStore), removing the user's marks older than the month
// before, in one statement. It returns the database's error, if any.
func (db *DB) MarkMonth(ctx context.Context, userID int64, monthStart time.Time) (before bool, err error) {
	tag, err := db.pool.Exec(ctx, `
		WITH old AS (DELETE FROM limiter_months WHERE user_id = $1 AND month < $3)
		INSERT INTO limiter_months (user_id, month) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
		userID, monthStart, monthStart.AddDate(0, -1, 0))
	if err != nil {
		return false, fmt.Errorf("postgres: mark month: %w", err)
	}
	return tag.RowsAffected() == 0, nil
}

// Usage returns the user's usage as of now (see coinpulse.Usage), reading
// it in one round trip and one snapshot: a user without calls, or that
// does not exist, has zeros and 30 empty days. The percentiles are bucket
// upper edges, per internal/meter/rollup. It returns the database's
// error, if any.
func (db *DB) Usage(ctx context.Context, userID int64, now time.Time) (*coinpulse.Usage, error) {
	var batch pgx.Batch
	// One repeatable-read transaction, so that the four reads see one
	// snapshot: under read committed each takes its own, and a batch of
	// calls landing between two of them would count in one and not in the
	// other. A failed read leaves the transaction open; the pool then
	// closes the connection rather than reuse it.
	batch.Queue(`BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY`)
	recent := make([]coinpulse.Call, 0, rollup.RecentCalls)
	batch.Queue(`
		SELECT key_id, mode, at, method, route, status, duration_us, request_id, counted
		FROM api_calls WHERE user_id = $1 ORDER BY at DESC, id DESC LIMIT $2`, userID, rollup.RecentCalls).
		Query(func(rows pgx.Rows) error {
			var c coinpulse.Call
			var mode string
			var dur int64
			_, err := pgx.ForEachRow(rows, []any{&c.KeyID, &mode, &c.Time, &c.Method, &c.Route, &c.Status, &dur, &c.RequestID, &c.Counted}, func() error {
				c.UserID, c.Mode, c.Time, c.Duration = userID, coinpulse.Mode(mode), c.Time.UTC(), time.Duration(dur)*time.Microsecond
				recent = append(recent, c)
				return nil
			})
			return err
		})
	keys := []coinpulse.KeyUsage{}
	batch.Queue(`SELECT key_id, calls, last_call FROM key_usage WHERE user_id = $1 ORDER BY key_id`, userID).
		Query(func(rows pgx.Rows) error {
			var k coinpulse.KeyUsage
			_, err := pgx.ForEachRow(rows, []any{&k.KeyID, &k.Calls, &k.LastCall}, func() error {
				k.LastCall = k.LastCall.UTC()
				keys = append(keys, k)
				return nil
			})
			return err
		})
	var days []rollup.Day
	batch.Queue(`SELECT day, calls, `+histColumns+` FROM usage_daily WHERE user_id = $1 AND day >= $2`,
		userID, rollup.Since(now)).
		Query(func(rows pgx.Rows) error {
			d := rollup.Day{UserID: userID}
			dest := make([]any, 2+rollup.Buckets)
			dest[0], dest[1] = &d.Day, &d.Calls
			for i := range d.Latency {
				dest[2+i] = &d.Latency[i]
			}
			_, err := pgx.ForEachRow(rows, dest, func() error {
				day := d
				day.Day = day.Day.UTC()
				days = append(days, day)
				return nil
			})
			return err
		})
	var keyDays []rollup.KeyDay
	from, to := rollup.KeyMonth(now)
	batch.Queue(`SELECT key_id, day, calls, errors, `+histColumns+` FROM key_usage_daily WHERE user_id = $1 AND day >= $2 AND day < $3`,
		userID, from, to).
		Query(func(rows pgx.Rows) error {
			d := rollup.KeyDay{UserID: userID}
			dest := make([]any, 4+rollup.Buckets)
			dest[0], dest[1], dest[2], dest[3] = &d.KeyID, &d.Day, &d.Calls, &d.Errors
			for i := range d.Latency {
				dest[4+i] = &d.Latency[i]
			}
			_, err := pgx.ForEachRow(rows, dest, func() error {
				day := d
				day.Day = day.Day.UTC()
				keyDays = append(keyDays, day)
				return nil
			})
			return err
		})
	batch.Queue(`COMMIT`)
	if err := db.pool.SendBatch(ctx, &batch).Close(); err != nil {
		return nil, fmt.Errorf("postgres: usage: %w", err)
	}
	return rollup.Result(now, recent, keys, days, keyDays), nil
}
