# Sourced by ./run and tests/compat.sh: `nextest` succeeds when the tests are to run under
# cargo-nextest (installed, and LOCKSCRIPT_CARGO_TEST=1 not set), else `cargo test` runs
# them. nextest runs the tests of every binary side by side, a process each, and no
# doctests.
nextest() {
  [ "${LOCKSCRIPT_CARGO_TEST:-}" != 1 ] && cargo nextest --version >/dev/null 2>&1
}
