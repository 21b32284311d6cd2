//! Test your Redis Lua scripts against a real Redis: each test gets a clean, private
//! `redis-server` ([`TestRedis`]) with every script of the test binary loaded.
//!
//! ```sh
//! cargo add --dev lockscript-test
//! ```
//!
//! [`#[lockscript_test::test]`](macro@test) runs a test once per server of the matrix
//! ([`matrix`]: one binary, or several in `REDIS_SERVER_BIN`), loads its fixture files
//! (redis-cli commands, [`commands`], checked at compile time: a misspelt command or a
//! wrong number of arguments fails the build, naming the file and line), and hands the
//! test what it asks for: the [`TestRedis`] handle, a connection, a client, and with the
//! default `tokio` feature async connections (async tests run on a tokio runtime).
//!
//! ```no_run
//! use lockscript_test::TestRedis;
//!
//! #[lockscript::lock_script("lua/bump.lua")]
//! fn bump(#[key] counter: &str, by: i64) -> i64;
//!
//! #[lockscript_test::test(fixtures("tests/fixtures/counters.redis"))]
//! fn bump_adds_to_an_existing_counter(conn: &mut redis::Connection) {
//!     assert_eq!(bump("counter:{a}", 2).invoke(conn).unwrap(), 42);
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
//!
//! Features: `tokio` (default) for async tests and arguments (`MultiplexedConnection`,
//! `ConnectionManager`, `lockscript::Locks`); `blocking` for `lockscript::blocking::Locks`
//! as an argument. Neither pulls in TLS or a pool.

// Test support fails loudly by design: every helper panics with the reason.
#![allow(clippy::missing_panics_doc)]
#![forbid(unsafe_code)]

pub mod matrix;
pub mod server;
mod test_redis;

use std::collections::HashMap;

pub use lockscript_macros::test;
#[cfg(feature = "tokio")]
pub use test_redis::AsyncTestArg;
pub use test_redis::{TestArg, TestRedis, URL_ENV};

/// Fixture files: one redis-cli command per line (`#` comments, quotes as redis-cli reads
/// them). The attribute checks them at compile time with [`check`](commands::check).
///
/// ```
/// let lines = lockscript_test::commands::parse("SET k 'a b'\n# note\nDEL k").unwrap();
/// assert_eq!(lines.len(), 2);
/// assert_eq!(lines[1].number, 3);
/// assert_eq!(lockscript_test::commands::check("HSETT h f v")[0].line, 1);
/// ```
pub mod commands {
    pub use lockscript_audit::fixture::{Line, LineProblem, check, parse};
}

/// Not public API: what `#[lockscript_test::test]` expands to. May change in any release.
#[doc(hidden)]
pub mod __private {
    pub use crate::matrix::each_server;

    /// Whether a test's run failed without panicking: an `Err` returned.
    pub trait Outcome {
        /// The run failed.
        fn failed(&self) -> bool;
    }

    impl Outcome for () {
        fn failed(&self) -> bool {
            false
        }
    }

    impl<T, E> Outcome for Result<T, E> {
        fn failed(&self) -> bool {
            self.is_err()
        }
    }

    /// The runtime of an async test: current-thread unless `flavor = "multi_thread"`.
    ///
    /// # Panics
    ///
    /// If the OS refuses the runtime's threads or timers.
    #[cfg(feature = "tokio")]
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
/// Loads the binary's scripts, as `lockscript::load_scripts` does, except that a server
/// before 7.0 (which cannot parse a `#!lua` shebang) skips the scripts that have one: the
/// tests of those scripts fail there, each for itself, and the others run.
///
/// Each script is sent as its [`bytes`](lockscript::Script::bytes), the bytes its digest is
/// computed over: a script file that is not UTF-8 is loaded as it is, as it runs.
///
/// ```no_run
/// let server = lockscript_test::server::RedisServer::start();
/// lockscript_test::load_scripts(&mut server.connection());
/// ```
///
/// # Panics
///
/// If a script without a shebang cannot be loaded, or the server reports another digest.
pub fn load_scripts(conn: &mut redis::Connection) {
    for script in lockscript::scripts() {
        let loaded: redis::RedisResult<String> = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(script.bytes())
            .query(conn);
        match loaded {
            Ok(digest) => assert_eq!(digest, script.sha1(), "{}", script.name()),
            Err(e) if script.bytes().starts_with(b"#!") && e.to_string().contains("near '#'") => {}
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
    command_counts(conn).get(command).copied().unwrap_or(0)
}

/// Every command's count in `INFO commandstats` (`calls` plus `rejected_calls`), by
/// lowercase name.
pub(crate) fn command_counts(conn: &mut redis::Connection) -> HashMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(conn)
        .expect("INFO commandstats");
    info.lines()
        .filter_map(|line| line.strip_prefix("cmdstat_")?.split_once(':'))
        .map(|(command, fields)| {
            let count = fields
                .split(',')
                .filter_map(|field| field.split_once('='))
                .filter(|(k, _)| matches!(*k, "calls" | "rejected_calls"))
                .map(|(_, v)| v.parse::<u64>().expect("a count"))
                .sum();
            (command.to_owned(), count)
        })
        .collect()
}
