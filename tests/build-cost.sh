#!/usr/bin/env bash
# What a minimal app pays to depend on lockscript, built cold (a fresh target directory,
# crates already downloaded). Prints crates compiled and wall time.
#   tests/build-cost.sh app     one async lock on one server, `cargo build --release`, with
#                               lockscript's default features and with every feature
#   tests/build-cost.sh tests   the same app's script tests, `cargo test --no-run`: with
#                               lockscript alone (plain #[test]s and their own server) and
#                               with lockscript-test as a dev-dependency
#   tests/build-cost.sh         both
set -euo pipefail
what=${1:-all}
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/app/src"
cat > "$work/app/src/main.rs" <<'RS'
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lockscript::LockError> {
    let url = std::env::args().nth(1).unwrap_or_else(|| "redis://127.0.0.1:6379/".into());
    let locks = lockscript::Locks::connect(&redis::Client::open(url)?).await?;
    let guard = locks.lock("orders:42").await?;
    println!("fencing token {}", guard.fencing_token());
    guard.release().await
}
RS
# Prints one line: label, crates compiled (from the log $2), seconds since $3.
report() {
  local end crates
  end=$(date +%s.%N)
  crates=$(grep -c '^ *Compiling ' "$2")
  printf '%-28s %3d crates compiled, %5.1f s\n' "$1" "$crates" "$(awk "BEGIN { print $end - $3 }")"
}

if [ "$what" = app ] || [ "$what" = all ]; then
for features in default all; do
  if [ "$features" = default ]; then dep="{ path = \"$root/lock-runtime\" }"
  else dep="{ path = \"$root/lock-runtime\", features = [\"blocking\", \"cluster\", \"redlock\", \"tls\"] }"; fi
  cat > "$work/app/Cargo.toml" <<TOML
[package]
name = "minimal-app"
version = "0.0.0"
edition = "2024"
publish = false
[dependencies]
lockscript = $dep
redis = { version = "1.8", default-features = false }
tokio = { version = "1", features = ["rt", "macros"] }
[workspace]
TOML
  rm -rf "$work/target"
  (cd "$work/app" && cargo fetch --quiet)
  start=$(date +%s.%N)
  (cd "$work/app" && cargo build --release --target-dir "$work/target" 2> "$work/build.log")
  report "$features features" "$work/build.log" "$start"
done
fi

if [ "$what" = tests ] || [ "$what" = all ]; then
# A script and its test, as a new app writes them: with lockscript alone the test starts
# nothing and needs a server at REDIS_URL; with lockscript-test it gets a private one.
rm -rf "$work/app"
mkdir -p "$work/app/src" "$work/app/lua" "$work/app/tests"
echo "return redis.call('INCRBY', KEYS[1], ARGV[1])" > "$work/app/lua/bump.lua"
cat > "$work/app/src/lib.rs" <<'RS'
#[lockscript::lock_script("lua/bump.lua")]
pub fn bump(#[key] counter: &str, by: i64) -> i64;
RS
for with in lockscript lockscript-test; do
  if [ "$with" = lockscript ]; then
    dev=""
    cat > "$work/app/tests/bump.rs" <<'RS'
#[test]
fn bump_adds() {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
    assert_eq!(app::bump("c", 2).invoke(&mut conn).unwrap(), 2);
}
RS
  else
    dev="lockscript-test = { path = \"$root/tests/lockscript-test\" }"
    cat > "$work/app/tests/bump.rs" <<'RS'
#[lockscript_test::test]
fn bump_adds(conn: &mut redis::Connection) {
    assert_eq!(app::bump("c", 2).invoke(conn).unwrap(), 2);
}

#[lockscript_test::test]
async fn bump_adds_async(mut conn: redis::aio::MultiplexedConnection) {
    assert_eq!(app::bump("c", 2).invoke_async(&mut conn).await.unwrap(), 2);
}
RS
  fi
  cat > "$work/app/Cargo.toml" <<TOML
[package]
name = "app"
version = "0.0.0"
edition = "2024"
publish = false
[dependencies]
lockscript = { path = "$root/lock-runtime" }
redis = { version = "1.8", default-features = false }
tokio = { version = "1", features = ["rt", "macros"] }
[dev-dependencies]
$dev
[workspace]
TOML
  rm -rf "$work/target"
  (cd "$work/app" && cargo fetch --quiet)
  start=$(date +%s.%N)
  (cd "$work/app" && cargo test --no-run --target-dir "$work/target" 2> "$work/build.log")
  report "tests with $with" "$work/build.log" "$start"
done
fi
