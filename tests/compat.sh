#!/usr/bin/env bash
# ./run compat [NAME...] [-- CARGO_TEST_ARGS...]
#
# Runs the tests that talk to a server against each server of the matrix and prints a
# table: server, version, passed, failed, seconds. NAME picks servers (default: all):
# redis-7.0, redis-6.2, redis-8.2, valkey-9.1 (tests/lockscript-test/servers.sh says where each comes from).
# Arguments after `--` go to `cargo nextest run` where it is installed, else to `cargo test`
# (default: the whole workspace; after a second `--`, `--skip NAME` works with both).
# Exit status: 0 when every server passed, 1 otherwise; logs in target/compat-servers.
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/lockscript-test/servers.sh

names=()
while [ $# -gt 0 ]; do
  case "$1" in
    --) shift; break ;;
    *) names+=("$1"); shift ;;
  esac
done
[ ${#names[@]} -gt 0 ] || names=("${SERVERS[@]}")
test_args=("$@")
[ ${#test_args[@]} -gt 0 ] || test_args=(--workspace)

. tests/nextest.sh

runner="cargo test"
if nextest; then runner="cargo nextest run"; fi

rows=()
status=0
for name in "${names[@]}"; do
  bin=$(binary "$name")
  version=$("$bin" --version | sed -n 's/.* v=\([^ ]*\).*/\1/p')
  log="$dir/$name.log"
  echo "== $name ($version): $runner ${test_args[*]}" >&2
  start=$(date +%s)
  if [ "$runner" = "cargo nextest run" ]; then
    REDIS_SERVER_BIN="$bin" cargo nextest run --no-fail-fast "${test_args[@]}" >"$log" 2>&1 || status=1
    # nextest's last line: `Summary [ 175.2s] 796 tests run: 794 passed, 2 failed, 17 skipped`.
    count() { awk -v what="$1" '/^ *Summary \[/ { for (i = 1; i < NF; i++) { w = $(i + 1); sub(/,$/, "", w)
                                 if (w == what) n = $i } } END { print n + 0 }' "$log"; }
  else
    REDIS_SERVER_BIN="$bin" cargo test --no-fail-fast "${test_args[@]}" >"$log" 2>&1 || status=1
    count() { awk -v what="$1;" '/^test result:/ { for (i = 1; i < NF; i++) if ($(i + 1) == what) n += $i }
                                 END { print n + 0 }' "$log"; }
  fi
  seconds=$(( $(date +%s) - start ))
  passed=$(count passed)
  failed=$(count failed)
  rows+=("$(printf '%-11s %-9s %7s %7s %8s' "$name" "$version" "${passed:-0}" "${failed:-0}" "$seconds")")
  if [ "${failed:-0}" != 0 ]; then
    grep -E '^    [a-z_:]+$|--- FAILED|^ *FAIL \[' "$log" | sed 's/^/    /' | sort -u | head -20 >&2 || true
    # Why, where CI keeps only this output: each failure's panic message, cut short.
    grep -A12 'panicked at' "$log" | cut -c1-400 | head -80 | sed 's/^/      /' >&2 || true
  fi
done

printf '%-11s %-9s %7s %7s %8s\n' server version passed failed seconds
printf '%s\n' "${rows[@]}"
exit $status
