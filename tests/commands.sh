#!/usr/bin/env bash
# ./run commands [--check]
#
# Regenerates lock-audit/src/commands/table.rs and lock-audit/src/globals/table.rs, the
# command and globals tables the lint of #[lock_script] and `lockscript audit` checks
# scripts against, from what each server of the matrix reports
# (tests/lockscript-test/servers.sh): each is started on a free port in a temp dir and
# read by tests/src/bin/gen-commands.rs (COMMAND, COMMAND DOCS, a probe of what a
# `#!lua flags=no-writes` script may call, and what a script's `_G` holds).
# --check writes the tables to temp files instead and fails with a diff when a
# committed one differs (CI).
# Exit status: 0 done (or no difference), 1 a table differs or a server failed.
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/lockscript-test/servers.sh

table=lock-audit/src/commands/table.rs
globals=lock-audit/src/globals/table.rs
check=false
case "${1:-}" in
  --check) check=true ;;
  "") ;;
  *) echo "usage: tests/commands.sh [--check]" >&2; exit 2 ;;
esac

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

# Ports 22768-32767: below the ephemeral range (32768 up), above the ports the test
# harness draws (below 32768 - 10000, leaving room for cluster bus ports), so a test run
# or a soak on the same machine is not disturbed. A server that cannot bind its port exits;
# then another port is tried. Ready means its own log says so while it is alive, so the
# generator never reads another process's server.
addresses=()
for name in "${SERVERS[@]}"; do
  bin=$(binary "$name")
  ready=false
  for attempt in 1 2 3 4 5 6 7 8; do
    port=$((22768 + RANDOM % 10000))
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then continue; fi
    sdir="$work/$name-$attempt"
    mkdir -p "$sdir"
    "$bin" --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
      --dir "$sdir" --logfile "$sdir/server.log" >"$sdir/output" 2>&1 &
    pid=$!
    pids+=("$pid")
    for _ in $(seq 200); do
      if ! kill -0 "$pid" 2>/dev/null; then break; fi
      if grep -q "Ready to accept connections" "$sdir/server.log" 2>/dev/null; then
        ready=true
        break
      fi
      sleep 0.05
    done
    if $ready; then break; fi
    kill "$pid" 2>/dev/null || true
  done
  if ! $ready; then
    echo "$name ($bin) did not start; its last log:" >&2
    tail -n 20 "$sdir/server.log" "$sdir/output" >&2 || true
    exit 1
  fi
  addresses+=("$name=127.0.0.1:$port")
done

out="$work/table.rs"
globals_out="$work/globals.rs"
cargo run --quiet -p lockscript-harness --bin gen-commands -- --out "$out" \
  --globals "$globals_out" "${addresses[@]}"

if $check; then
  # The table names the exact versions it was read from; other versions (a distribution's
  # point release) would differ in those names alone or in more: say so, not a failure.
  if [ "$(sed -n 3p "$table")" != "$(sed -n 3p "$out")" ]; then
    echo "$table was read from$(sed -n 3p "$table" | cut -c4-)" >&2
    echo "  but these servers are$(sed -n 3p "$out" | cut -c4-): not compared;" \
         "run ./run commands to regenerate it from them" >&2
    exit 0
  fi
  differs=false
  for pair in "$table:$out" "$globals:$globals_out"; do
    committed=${pair%%:*} fresh=${pair#*:}
    if [ -f "$committed" ] && diff -u "$committed" "$fresh"; then
      echo "$committed is what the servers report"
    else
      echo "$committed differs from what the servers report (above); run ./run commands" >&2
      differs=true
    fi
  done
  if $differs; then exit 1; fi
else
  mkdir -p "$(dirname "$table")" "$(dirname "$globals")"
  cp "$out" "$table"
  cp "$globals_out" "$globals"
  echo "wrote $table and $globals"
fi
