package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"coinpulse"
	"coinpulse/internal/histchunk"
)

// putBatchRows is about how many chunk rows PutHistory reads and writes per
// statement.
const putBatchRows = 5000

// PutHistory stores the points of every series at interval, replacing any
// point stored at the same coin and timestamp, all in one transaction that
// holds the history advisory lock: the touched chunks are read, merged and
// written back a few thousand at a time. It returns a VALIDATION_ERROR (and
// stores nothing) when interval is unknown, a timestamp is not a multiple
// of the interval's step, or a value is not a finite number; and the
// database's error otherwise.
func (db *DB) PutHistory(ctx context.Context, interval coinpulse.Interval, series []coinpulse.Series) error {
	coins, err := histchunk.GroupSeries(interval, series)
	if err != nil {
		return err
	}
	if len(coins) == 0 {
		return nil
	}
	return db.Transact(ctx, func(tx pgx.Tx) error {
		if err := lock(ctx, tx, historyLock); err != nil {
			return fmt.Errorf("postgres: put history: %w", err)
		}
		for len(coins) > 0 {
			n, rows := 0, 0
			for n < len(coins) && (n == 0 || rows+len(coins[n].Chunks) <= putBatchRows) {
				rows += len(coins[n].Chunks)
				n++
			}
			if err := putChunks(ctx, tx, interval, coins[:n]); err != nil {
				return fmt.Errorf("postgres: put history: %w", err)
			}
			coins = coins[n:]
		}
		return nil
	})
}

// putChunks merges the chunks of coins into those stored, with one
// statement to read and one to write.
func putChunks(ctx context.Context, tx pgx.Tx, interval coinpulse.Interval, coins []histchunk.SeriesChunks) error {
	ids := make([]string, len(coins))
	first, last := coins[0].Chunks[0].Bucket.Unix(), coins[0].Chunks[0].Bucket.Unix()
	for i, c := range coins {
		ids[i] = c.CoinID
		first = min(first, c.Chunks[0].Bucket.Unix())
		last = max(last, c.Chunks[len(c.Chunks)-1].Bucket.Unix())
	}

	type key struct {
		coinID string
		bucket int64
	}
	existing := make(map[key][]byte)
	rows, err := tx.Query(ctx, `
		SELECT coin_id, bucket_start, data FROM price_history
		WHERE interval = $1 AND coin_id = ANY($2) AND bucket_start BETWEEN $3 AND $4`,
		interval, ids, first, last)
	if err != nil {
		return err
	}
	for rows.Next() {
		var k key
		var data []byte
		if err := rows.Scan(&k.coinID, &k.bucket, &data); err != nil {
			rows.Close()
			return err
		}
		existing[k] = data
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}

	var coinIDs []string
	var buckets []int64
	var blobs [][]byte
	for _, c := range coins {
		for _, ch := range c.Chunks {
			b := ch.Bucket.Unix()
			blob, err := histchunk.Merge(interval, ch.Bucket, existing[key{c.CoinID, b}], ch.Points)
			if err != nil {
				return fmt.Errorf("%s at %s: %w", c.CoinID, ch.Bucket.Format(time.RFC3339), err)
			}
			coinIDs = append(coinIDs, c.CoinID)
			buckets = append(buckets, b)
			blobs = append(blobs, blob)
		}
	}
	_, err = tx.Exec(ctx, `
		INSERT INTO price_history (coin_id, interval, bucket_start, data)
		SELECT v.coin_id, $1, v.bucket_start, v.data
		FROM unnest($2::text[], $3::bigint[], $4::bytea[]) AS v (coin_id, bucket_start, data)
		ON CONFLICT (coin_id, interval, bucket_start) DO UPDATE SET data = excluded.data`,
		interval, coinIDs, buckets, blobs)
	return err
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
	rows, err := db.pool.Query(ctx, `
		SELECT bucket_start, data FROM price_history
		WHERE coin_id = $1 AND interval = $2 AND bucket_start BETWEEN $3 AND $4
		ORDER BY bucket_start`,
		coinID, interval, histchunk.Bucket(interval, from).Unix(), histchunk.Bucket(interval, to).Unix())
	if err != nil {
		return nil, fmt.Errorf("postgres: history of %s: %w", coinID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var bucket int64
		var data []byte
		if err := rows.Scan(&bucket, &data); err != nil {
			return nil, fmt.Errorf("postgres: history of %s: %w", coinID, err)
		}
		chunk, err := histchunk.Decode(interval, time.Unix(bucket, 0).UTC(), data)
		if err != nil {
			return nil, fmt.Errorf("postgres: history of %s: %w", coinID, err)
		}
		for _, p := range chunk {
			if !p.Timestamp.Before(from) && !p.Timestamp.After(to) {
				points = append(points, p)
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: history of %s: %w", coinID, err)
	}
	return points, nil
}

// PruneHistory deletes every point at interval older than before, of
// every coin, in one transaction that holds the history advisory lock:
// chunks that end by before are deleted, and the chunks holding before are
// rewritten without their older points. It returns a VALIDATION_ERROR for
// an unknown interval, and an error when a stored chunk is corrupt or the
// database fails.
func (db *DB) PruneHistory(ctx context.Context, interval coinpulse.Interval, before time.Time) error {
	if err := histchunk.Check(interval); err != nil {
		return err
	}
	cut := histchunk.Bucket(interval, before)
	err := db.Transact(ctx, func(tx pgx.Tx) error {
		if err := lock(ctx, tx, historyLock); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM price_history WHERE interval = $1 AND bucket_start < $2`, interval, cut.Unix())
		if err != nil {
			return err
		}
		if before.Equal(cut) {
			return nil // no chunk straddles before
		}
		rows, err := tx.Query(ctx, `SELECT coin_id, data FROM price_history WHERE interval = $1 AND bucket_start = $2`, interval, cut.Unix())
		if err != nil {
			return err
		}
		var keepIDs, dropIDs []string
		var keepBlobs [][]byte
		for rows.Next() {
			var coinID string
			var data []byte
			if err := rows.Scan(&coinID, &data); err != nil {
				rows.Close()
				return err
			}
			blob, n, err := histchunk.TrimBefore(interval, cut, data, before)
			if err != nil {
				rows.Close()
				return fmt.Errorf("%s: %w", coinID, err)
			}
			if n == 0 {
				dropIDs = append(dropIDs, coinID)
			} else {
				keepIDs = append(keepIDs, coinID)
				keepBlobs = append(keepBlobs, blob)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM price_history WHERE interval = $1 AND bucket_start = $2 AND coin_id = ANY($3)`,
			interval, cut.Unix(), dropIDs)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `
			UPDATE price_history AS p SET data = v.data
			FROM unnest($3::text[], $4::bytea[]) AS v (coin_id, data)
			WHERE p.interval = $1 AND p.bucket_start = $2 AND p.coin_id = v.coin_id`,
			interval, cut.Unix(), keepIDs, keepBlobs)
		return err
	})
	if err != nil {
		return fmt.Errorf("postgres: prune history: %w", err)
	}
	return nil
}
