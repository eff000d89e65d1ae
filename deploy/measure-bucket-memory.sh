#!/usr/bin/env bash
# Measures how much Redis memory one live token bucket costs.
#
# Starts a throwaway redis-server (no persistence) on a free local port,
# writes N keys shaped like fairgate's tenant buckets,
#   tenant:{t12345}:rate:api  ->  a 16-digit integer (the bucket's TAT in
#                                 microseconds), with a PX TTL
# through `redis-cli --pipe`, and prints the growth of INFO memory
# `used_memory` divided by N. The server is stopped on exit.
#
# Usage: deploy/measure-bucket-memory.sh [N]        (default N=100000)
# Needs redis-server and redis-cli (Debian: redis-server, redis-tools).
#
# A key_prefix adds its length per key; tenant_user / tenant_token buckets
# add the length of the encoded user or token id. Every bucket key of
# fairgate is a plain string with a TTL, so this is the per-bucket cost.
set -euo pipefail

n="${1:-100000}"
for tool in redis-server redis-cli; do
  command -v "$tool" >/dev/null || {
    echo "$tool not found (Debian: apt-get install redis-server redis-tools)" >&2
    exit 1
  }
done

# A free port: nothing answers a TCP connect there.
port=""
for p in $(seq 16379 16479); do
  if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
    port="$p"
    break
  fi
done
[ -n "$port" ] || { echo "no free port in 16379-16479" >&2; exit 1; }

dir="$(mktemp -d)"
pid=""
cleanup() {
  if [ -n "$pid" ]; then
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$dir"
}
trap cleanup EXIT

redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
  --dir "$dir" --logfile "$dir/redis.log" &
pid=$!

cli() { redis-cli -h 127.0.0.1 -p "$port" "$@"; }
for _ in $(seq 100); do
  [ "$(cli ping 2>/dev/null)" = "PONG" ] && break
  sleep 0.05
done
[ "$(cli ping 2>/dev/null)" = "PONG" ] || { echo "redis-server did not start" >&2; exit 1; }

used() { cli info memory | tr -d '\r' | awk -F: '$1 == "used_memory" {print $2}'; }

before="$(used)"
# RESP protocol for: SET tenant:{tNNNNN}:rate:api <16 digits> PX 600000
awk -v n="$n" 'BEGIN {
  now = 1733000000000000
  for (i = 0; i < n; i++) {
    key = sprintf("tenant:{t%05d}:rate:api", i)
    val = sprintf("%d", now + i)
    printf "*5\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n$2\r\nPX\r\n$6\r\n600000\r\n", \
      length(key), key, length(val), val
  }
}' | cli --pipe >"$dir/pipe.log"
keys="$(cli dbsize)"
after="$(used)"

if [ "$keys" != "$n" ]; then
  echo "expected $n keys, found $keys" >&2
  cat "$dir/pipe.log" >&2
  exit 1
fi

echo "redis: $(redis-server --version | awk '{print $3, $5}')"
echo "keys written: $keys (shape tenant:{t00000}:rate:api, 16-digit value, PX TTL)"
echo "used_memory before: $before bytes, after: $after bytes"
awk -v b="$before" -v a="$after" -v n="$n" \
  'BEGIN { printf "bytes per bucket: %.1f\n", (a - b) / n }'
