package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"coinpulse"
	"coinpulse/internal/histchunk"
)

// upsertRows is how many chunk rows one INSERT statement of PutHistory
// writes: a statement per row would spend more time in the driver than in
// SQLite.
const upsertRows = 100

// upsertSQL returns the statement writing n chunk rows of one interval:
// parameter 1 is the interval, then come coin_id, bucket_start and data of
// each row.
func upsertSQL(n int) string {
	var b strings.Builder
	b.WriteString("INSERT INTO price_history (coin_id, interval, bucket_start, data) VALUES ")
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "(?%d, ?1, ?%d, ?%d)", 2+3*i, 3+3*i, 4+3*i)
	}
	b.WriteString(" ON CONFLICT (coin_id, interval, bucket_start) DO UPDATE SET data = excluded.data")
	return b.String()
}

// PutHistory stores the points of every series at interval, replacing any
// point stored at the same coin and timestamp, all in one transaction:
// each touched chunk is read, merged and written back. It returns a
// VALIDATION_ERROR (and stores nothing) when interval is unknown, a
// timestamp is not a multiple of the interval's step, or a value is not a
// finite number; and the database's error otherwise.
func (db *DB) PutHistory(ctx context.Context, interval coinpulse.Interval, series []coinpulse.Series) error {
	coins, err := histchunk.GroupSeries(interval, series)
	if err != nil {
		return err
	}
	if len(coins) == 0 {
		return nil
	}
	err = db.Transact(ctx, func(tx *sql.Tx) error {
		sel, err := tx.PrepareContext(ctx, `
			SELECT bucket_start, data FROM price_history
			WHERE coin_id = ? AND interval = ? AND bucket_start BETWEEN ? AND ?`)
		if err != nil {
			return err
		}
		defer sel.Close()
		upsert, err := tx.PrepareContext(ctx, upsertSQL(upsertRows))
		if err != nil {
			return err
		}
		defer upsert.Close()

		// args holds the parameters of the rows not yet written: the
		// interval, then coin_id, bucket_start, data for each row.
		args := make([]any, 1, 1+3*upsertRows)
		args[0] = interval
		flush := func() error {
			n := (len(args) - 1) / 3
			var err error
			if n == upsertRows {
				_, err = upsert.ExecContext(ctx, args...)
			} else if n > 0 {
				_, err = tx.ExecContext(ctx, upsertSQL(n), args...)
			}
			args = args[:1]
			return err
		}
		for _, c := range coins {
			first, last := c.Chunks[0].Bucket.Unix(), c.Chunks[len(c.Chunks)-1].Bucket.Unix()
			existing, err := readChunks(ctx, sel, c.CoinID, interval, first, last)
			if err != nil {
				return fmt.Errorf("%s: %w", c.CoinID, err)
			}
			for _, ch := range c.Chunks {
				blob, err := histchunk.Merge(interval, ch.Bucket, existing[ch.Bucket.Unix()], ch.Points)
				if err != nil {
					return fmt.Errorf("%s at %s: %w", c.CoinID, ch.Bucket.Format(time.RFC3339), err)
				}
				args = append(args, c.CoinID, ch.Bucket.Unix(), blob)
				if len(args) == cap(args) {
					if err := flush(); err != nil {
						return err
					}
				}
			}
		}
		return flush()
	})
	if err != nil {
		return fmt.Errorf("sqlite: put history: %w", err)
	}
	return nil
}

// readChunks returns the stored blobs of one coin with bucket_start in
// [first, last], by bucket_start.
func readChunks(ctx context.Context, sel *sql.Stmt, coinID string, interval coinpulse.Interval, first, last int64) (map[int64][]byte, error) {
	rows, err := sel.QueryContext(ctx, coinID, interval, first, last)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	existing := make(map[int64][]byte)
	for rows.Next() {
		var bucket int64
		var data []byte
		if err := rows.Scan(&bucket, &data); err != nil {
			return nil, err
		}
		existing[bucket] = data
	}
	return existing, rows.Err()
}

// History returns coinID's points at interval with from <= timestamp <= to,
// oldest first, in UTC; none is an empty slice. It reads only the chunks
// that overlap the range. It returns a VALIDATION_ERROR for an unknown
// interval, and an error when a stored chunk is corrupt or the database
// fails.
func (db *DB) History(ctx context.Context, coinID string, interval coinpulse.Interval, from, to time.Time) ([]coinpulse.HistoryPoint, error) {
	if err := histchunk.Check(interval); err != nil {
		return nil, err
	}
	points := []coinpulse.HistoryPoint{}
	if to.Before(from) {
		return points, nil
	}
	rows, err := db.db.QueryContext(ctx, `
		SELECT bucket_start, data FROM price_history
		WHERE coin_id = ? AND interval = ? AND bucket_start BETWEEN ? AND ?
		ORDER BY bucket_start`,
		coinID, interval, histchunk.Bucket(interval, from).Unix(), histchunk.Bucket(interval, to).Unix())
	if err != nil {
		return nil, fmt.Errorf("sqlite: history of %s: %w", coinID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var bucket int64
		var data []byte
		if err := rows.Scan(&bucket, &data); err != nil {
			return nil, fmt.Errorf("sqlite: history of %s: %w", coinID, err)
		}
		chunk, err := histchunk.Decode(interval, time.Unix(bucket, 0).UTC(), data)
		if err != nil {
			return nil, fmt.Errorf("sqlite: history of %s: %w", coinID, err)
		}
		for _, p := range chunk {
			if !p.Timestamp.Before(from) && !p.Timestamp.After(to) {
				points = append(points, p)
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: history of %s: %w", coinID, err)
	}
	return points, nil
}

// PruneHistory deletes every point at interval older than before, of
// every coin, in one transaction: chunks that end by before are deleted,
// and the chunk holding before is rewritten without its older points. It
// returns a VALIDATION_ERROR for an unknown interval, and an error when a
// stored chunk is corrupt or the database fails.
func (db *DB) PruneHistory(ctx context.Context, interval coinpulse.Interval, before time.Time) error {
	if err := histchunk.Check(interval); err != nil {
		return err
	}
	cut := histchunk.Bucket(interval, before)
	return db.Transact(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM price_history WHERE interval = ? AND bucket_start < ?`, interval, cut.Unix())
		if err != nil {
			return fmt.Errorf("sqlite: prune history: %w", err)
		}
		if before.Equal(cut) {
			return nil // no chunk straddles before
		}
		type row struct {
			coinID string
			data   []byte
		}
		var straddling []row
		rows, err := tx.QueryContext(ctx, `SELECT coin_id, data FROM price_history WHERE interval = ? AND bucket_start = ?`, interval, cut.Unix())
		if err != nil {
			return fmt.Errorf("sqlite: prune history: %w", err)
		}
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.coinID, &r.data); err != nil {
				rows.Close()
				return fmt.Errorf("sqlite: prune history: %w", err)
			}
			straddling = append(straddling, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("sqlite: prune history: %w", err)
		}
		for _, r := range straddling {
			blob, n, err := histchunk.TrimBefore(interval, cut, r.data, before)
			if err != nil {
				return fmt.Errorf("sqlite: prune history of %s: %w", r.coinID, err)
			}
			if n == 0 {
				_, err = tx.ExecContext(ctx, `DELETE FROM price_history WHERE coin_id = ? AND interval = ? AND bucket_start = ?`,
					r.coinID, interval, cut.Unix())
			} else {
				_, err = tx.ExecContext(ctx, `UPDATE price_history SET data = ? WHERE coin_id = ? AND interval = ? AND bucket_start = ?`,
					blob, r.coinID, interval, cut.Unix())
			}
			if err != nil {
				return fmt.Errorf("sqlite: prune history of %s: %w", r.coinID, err)
			}
		}
		return nil
	})
}
