#!/usr/bin/env bash
# bench/headers.sh: what the number of header keys costs net/http itself.
# A bare net/http server (bench/headers) answers with the 422-byte body of
# GET /api/v1/markets/global and the header keys of a Coinpulse market
# answer: 4 (limits off), 8, 8 padded to 9's bytes, and 9 (limits on).
# Throughput under wrk, in alternating rounds, as a ratio to 4 keys.
#
#   bash bench/headers.sh                  # from the repo root
#   DURATION=15s ROUNDS=5 bash bench/headers.sh
#
# Environment: DURATION (8s), CONNS (64), THREADS (2), ROUNDS (4).
# See bench/README.md.
set -euo pipefail

DURATION=${DURATION:-8s}
CONNS=${CONNS:-64}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-4}
# name:flags; the first is the baseline.
CONFIGS=("4:-keys 4" "8:-keys 8" "8-padded:-keys 8 -same-bytes" "9:-keys 9")

cd "$(dirname "${BASH_SOURCE[0]}")/.."
log() { printf '[headers.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }

TMP=$(mktemp -d -t coinpulse-headers.XXXXXX)
PID=""
cleanup() {
	[[ -n $PID ]] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
	rm -rf "$TMP"
}
trap cleanup EXIT

if ! command -v wrk >/dev/null 2>&1; then
	log "installing wrk from Debian"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >&2 ||
		{ apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >&2; }
fi
log "building bench/headers"
go build -o "$TMP/headers" ./bench/headers

PORT=$((20000 + RANDOM % 40000))
URL=http://127.0.0.1:$PORT/api/v1/markets/global

# pass NAME FLAGS ROUND: one server, one wrk pass; prints requests/s.
pass() {
	local name=$1 flags=$2 round=$3 rps
	# shellcheck disable=SC2086 # FLAGS are words
	"$TMP/headers" -addr "127.0.0.1:$PORT" $flags >"$TMP/server.out" 2>&1 &
	PID=$!
	for _ in $(seq 100); do curl -s -o /dev/null "$URL" && break; sleep 0.05; done
	curl -s -D "$TMP/h-$name.txt" -o /dev/null "$URL" || die "$name: the server did not answer"
	wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" "$URL" >"$TMP/wrk-$name-$round.txt" 2>&1 || die "wrk failed"
	kill "$PID"
	wait "$PID" 2>/dev/null || true
	PID=""
	rps=$(awk '/^Requests\/sec:/ { print $2 }' "$TMP/wrk-$name-$round.txt")
	[[ -n $rps ]] || die "$name: no Requests/sec in wrk's output"
	echo "$rps" >>"$TMP/rps-$name.txt"
	log "round $round, $name keys: $rps requests/s"
}

for round in $(seq "$ROUNDS"); do
	for c in "${CONFIGS[@]}"; do pass "${c%%:*}" "${c#*:}" "$round"; done
done

best() { sort -g "$TMP/rps-$1.txt" | tail -n 1; }
base=$(best 4)
echo "== net/http and the number of header keys  $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "machine: $(nproc) CPUs, $(uname -sr); $(go version | cut -d' ' -f3); wrk -t$THREADS -c$CONNS -d$DURATION, best of $ROUNDS alternating rounds"
printf '%-10s %6s %12s %8s  %s\n' keys bytes "requests/s" ratio "each round"
for c in "${CONFIGS[@]}"; do
	name=${c%%:*}
	bytes=$(wc -c <"$TMP/h-$name.txt")
	printf '%-10s %6s %12s %8.3f  %s\n' "$name" "$bytes" "$(best "$name")" \
		"$(awk -v a="$(best "$name")" -v b="$base" 'BEGIN { print a / b }')" "$(paste -sd' ' "$TMP/rps-$name.txt")"
done
printf '9 against 8-padded (the ninth key alone): %.3f\n' \
	"$(awk -v a="$(best 9)" -v b="$(best 8-padded)" 'BEGIN { print a / b }')"
