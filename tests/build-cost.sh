#!/usr/bin/env bash
# What a minimal app pays to depend on lockscript: one async lock on one server, built
# cold (a fresh target directory, crates already downloaded) in release mode, with the
# default features and with every feature. Prints crates compiled and wall time.
#   tests/build-cost.sh            # both
set -euo pipefail
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
  end=$(date +%s.%N)
  crates=$(grep -c '^ *Compiling ' "$work/build.log")
  printf '%-8s features: %3d crates compiled, %5.1f s\n' "$features" "$crates" "$(awk "BEGIN { print $end - $start }")"
done
