//! Test support for lockscript: users' script tests under a real Redis
//! ([`TestRedis`], [`#[lockscript_test::test]`](macro@test), fixture files of redis-cli
//! commands in [`commands`]), and the harness of lockscript's own suites (a private
//! `redis-server` per test in [`server`], clusters, a fault proxy, the chaos checker).
//!
//! ```no_run
//! use lockscript_test::TestRedis;
//!
//! #[lockscript::lock_script("lua/bump.lua")]
//! fn bump(#[key] counter: &str, by: i64) -> i64;
//!
//! #[lockscript_test::test]
//! fn bump_counts(conn: &mut redis::Connection) {
//!     assert_eq!(bump("c", 2).invoke(conn).unwrap(), 2);
//! }
//!
//! #[lockscript_test::test]
//! async fn bump_counts_async(mut conn: redis::aio::MultiplexedConnection) {
//!     assert_eq!(bump("c", 2).invoke_async(&mut conn).await.unwrap(), 2);
//! }
//!
//! #[lockscript_test::test]
//! fn bump_calls_incrby_once(redis: &TestRedis) {
//!     bump("c", 1).invoke(&mut redis.connection()).unwrap();
//!     assert_eq!(redis.command_calls("incrby"), 1);
//! }
//! ```

// Test support fails loudly by design: every helper panics with the reason.
#![allow(clippy::missing_panics_doc)]

#[cfg(feature = "chaos")]
pub mod chaos;
pub mod cluster;
pub mod commands;
pub mod contenders;
pub mod faces;
pub mod fixtures;
pub mod history;
pub mod postgres;
pub mod proxy;
pub mod server;
mod test_redis;

pub use lockscript_macros::test;
pub use test_redis::{AsyncTestArg, TestArg, TestRedis, URL_ENV};

/// Not public API: what `#[lockscript_test::test]` expands to. May change in any release.
#[doc(hidden)]
pub mod __private {
    /// The runtime of an async test: current-thread unless `flavor = "multi_thread"`.
    ///
    /// # Panics
    ///
    /// If the OS refuses the runtime's threads or timers.
    #[must_use]
    pub fn runtime(multi_thread: bool) -> tokio::runtime::Runtime {
        let mut builder = if multi_thread {
            tokio::runtime::Builder::new_multi_thread()
        } else {
            tokio::runtime::Builder::new_current_thread()
        };
        builder
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("cannot build the test's tokio runtime: {e}"))
    }
}

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

/// Loads the binary's scripts, as `lockscript::load_scripts` does, except that a server
/// before 7.0 (which cannot parse a `#!lua` shebang) skips the scripts that have one: the
/// tests of those scripts fail there, each for itself, and the others run.
///
/// # Panics
///
/// If a script without a shebang cannot be loaded, or the server reports another digest.
pub fn load_scripts(conn: &mut redis::Connection) {
    for script in lockscript::scripts() {
        let loaded: redis::RedisResult<String> = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(script.source())
            .query(conn);
        match loaded {
            Ok(digest) => assert_eq!(digest, script.sha1(), "{}", script.name()),
            Err(e) if script.source().starts_with("#!") && e.to_string().contains("near '#'") => {}
            Err(e) => panic!("cannot load script {}: {e}", script.name()),
        }
    }
}

/// Whether the server behind `conn` has Redis Functions (7.0+; Redis 6.2 has not).
pub fn has_functions(conn: &mut redis::Connection) -> bool {
    redis::cmd("FUNCTION")
        .arg("STATS")
        .query::<redis::Value>(conn)
        .is_ok()
}

/// Zeroes the server's `INFO commandstats` (and other counters): `CONFIG RESETSTAT`.
pub fn reset_stats(conn: &mut redis::Connection) {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(conn)
        .expect("CONFIG RESETSTAT");
}

/// Empties the server's script cache and zeroes its counters, so a test can count the
/// EVALSHA / EVAL calls a cold cache causes.
pub fn flush_scripts_and_reset_stats(conn: &mut redis::Connection) {
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(conn)
        .expect("SCRIPT FLUSH");
    reset_stats(conn);
}

/// How many times `command` reached the server: `calls` (which include failed calls)
/// plus `rejected_calls`,
/// read from `INFO commandstats`. Commands are lowercase there: `evalsha`, `eval_ro`.
///
/// ```no_run
/// # let server = lockscript_test::server::RedisServer::start();
/// let mut conn = server.connection();
/// assert_eq!(lockscript_test::command_calls(&mut conn, "evalsha"), 0);
/// ```
pub fn command_calls(conn: &mut redis::Connection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(conn)
        .expect("INFO commandstats");
    let prefix = format!("cmdstat_{command}:");
    let Some(line) = info.lines().find(|l| l.starts_with(&prefix)) else {
        return 0;
    };
    line[prefix.len()..]
        .split(',')
        .filter_map(|field| field.split_once('='))
        .filter(|(k, _)| matches!(*k, "calls" | "rejected_calls"))
        .map(|(_, v)| v.parse::<u64>().expect("a count"))
        .sum()
}
