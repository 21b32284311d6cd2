//! lockscript's own test harness, not published: what lockscript-test offers users (its
//! whole API, re-exported here under the same name, so that our suites read
//! `lockscript_test::server` and `#[lockscript_test::test]` as a user's tests do), and
//! what only our suites need: the guide's lock user ([`acl`]), clusters ([`cluster`]), a fault proxy ([`proxy`]),
//! PostgreSQL for the fencing tests ([`postgres`]), contenders in other processes
//! ([`contenders`]), histories checked for overlaps ([`history`]), every face of the lock
//! behind one interface ([`faces`]), a pool of connections as a handle's connection
//! ([`pool`]), the scripts of the tests ([`fixtures`]), with the `chaos` feature the
//! chaos checker, and with the `model` feature the model checker.

// Test support fails loudly by design: every helper panics with the reason.
#![allow(clippy::missing_panics_doc)]

pub mod acl;
#[cfg(feature = "chaos")]
pub mod chaos;
pub mod cluster;
pub mod contenders;
pub mod faces;
pub mod fixtures;
pub mod history;
#[cfg(feature = "model")]
pub mod model;
pub mod pool;
pub mod postgres;
pub mod proxy;

pub use published::{
    __private, AsyncTestArg, TestArg, TestRedis, URL_ENV, command_calls, commands,
    flush_scripts_and_reset_stats, has_functions, load_scripts, matrix, reset_stats, server, test,
};

/// A command that runs one `#[ignore]`d test of the running test binary in a child
/// process (for tests whose actors must be separate processes: frozen with SIGSTOP,
/// killed), with its output not captured, so it can print what the parent reads.
///
/// ```no_run
/// let child = lockscript_test::ignored_test_process("holder_process").spawn().unwrap();
/// ```
pub fn ignored_test_process(test: &str) -> std::process::Command {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("the test binary's path: {e}"));
    let mut command = std::process::Command::new(exe);
    command.args([
        test,
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    command
}

/// `cargo` (the one running the tests, or `$CARGO`) for a test that runs cargo itself,
/// without the variables cargo sets for the test process (`CARGO_MANIFEST_DIR`,
/// `CARGO_PKG_*`...): a build script that watches one of them (ring's does) would make the
/// inner build redo what the outer one just built.
///
/// ```no_run
/// let status = lockscript_test::cargo().args(["build", "--examples"]).status().unwrap();
/// ```
pub fn cargo() -> std::process::Command {
    let mut command =
        std::process::Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        let set_for_the_test = name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_BIN_EXE_")
            || matches!(
                &*name,
                "CARGO_MANIFEST_DIR"
                    | "CARGO_MANIFEST_PATH"
                    | "CARGO_CRATE_NAME"
                    | "CARGO_BIN_NAME"
                    | "CARGO_PRIMARY_PACKAGE"
                    | "CARGO_TARGET_TMPDIR"
                    | "CARGO_RUSTC_CURRENT_DIR"
            );
        if set_for_the_test {
            command.env_remove(&*name);
        }
    }
    command
}
