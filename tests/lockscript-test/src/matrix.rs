//! The server matrix: which `redis-server` binaries a test runs on.
//!
//! [`BIN_ENV`] (`REDIS_SERVER_BIN`) names one binary, or several separated as in `PATH`
//! (`:` on Unix). With several, every `#[lockscript_test::test]` runs once per binary, in
//! that order, each run on a clean server of that binary, and a failure names the server
//! it failed on ("on Valkey 9.1.2 (/opt/valkey/bin/valkey-server): ..."). Unset, the test
//! runs once, on `redis-server` from `PATH`.
//!
//! ```sh
//! REDIS_SERVER_BIN=/usr/bin/redis-server:/opt/redis-8.2/redis-server:/opt/valkey/valkey-server \
//!     cargo test
//! ```
//!
//! `servers.sh`, shipped with this crate, fetches the exact servers lockscript is tested
//! on and prints that setting (see the crate's README).

use std::cell::RefCell;
use std::path::{Path, PathBuf};

/// The variable that names the server binaries: one path, or several joined as in `PATH`.
pub const BIN_ENV: &str = "REDIS_SERVER_BIN";
/// The binary run when [`BIN_ENV`] is not set: `redis-server`, looked up in `PATH`.
pub const DEFAULT_BIN: &str = "redis-server";

thread_local! {
    /// The binary of the run in progress on this thread (set by [`each_server`]).
    static CURRENT: RefCell<Option<PathBuf>> = const { RefCell::new(None) };
}

/// The binaries [`BIN_ENV`] names, in order (empty entries skipped); `redis-server` alone
/// when it is unset or empty.
///
/// ```no_run
/// for bin in lockscript_test::matrix::servers() {
///     println!("{}", bin.display());
/// }
/// ```
pub fn servers() -> Vec<PathBuf> {
    let listed: Vec<PathBuf> = std::env::var_os(BIN_ENV)
        .map(|value| {
            std::env::split_paths(&value)
                .filter(|p| !p.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default();
    if listed.is_empty() {
        vec![PathBuf::from(DEFAULT_BIN)]
    } else {
        listed
    }
}

/// The binary a server started now runs: the one of the matrix run in progress on this
/// thread, otherwise the first of [`servers`].
pub(crate) fn current() -> PathBuf {
    CURRENT
        .with(|current| current.borrow().clone())
        .unwrap_or_else(|| servers().swap_remove(0))
}

/// Runs `run` once for each server of the matrix, each time on a clean
/// [`TestRedis`](crate::TestRedis) of that server; stops at the first failure (a panic,
/// or an `Err` returned), which it reports naming the server. What
/// `#[lockscript_test::test]` expands to (through `__private`, not public API); with
/// `LOCKSCRIPT_TEST_URL` set, runs once on that server.
#[doc(hidden)]
pub fn each_server<T: crate::__private::Outcome>(mut run: impl FnMut(crate::TestRedis) -> T) -> T {
    let remote = std::env::var(crate::URL_ENV).is_ok_and(|url| !url.is_empty());
    let servers = servers();
    if remote || servers.len() == 1 {
        return run(crate::TestRedis::start());
    }
    let mut outcome = None;
    for bin in servers {
        let _current = Current::set(&bin);
        let redis = crate::TestRedis::start();
        let server = redis.describe();
        // The INFO that named the server is not the test's doing: count from here.
        redis.reset_stats();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(redis))) {
            Ok(out) if out.failed() => {
                eprintln!("the test failed on {server}");
                return out;
            }
            Ok(out) => outcome = Some(out),
            Err(payload) => {
                let message = payload
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| payload.downcast_ref::<&str>().copied())
                    .unwrap_or("the test panicked");
                panic!("on {server}: {message}");
            }
        }
    }
    outcome.unwrap_or_else(|| unreachable!("the matrix has at least one server"))
}

/// The binary of the run in progress on this thread, until dropped.
struct Current;

impl Current {
    fn set(bin: &Path) -> Current {
        CURRENT.with(|current| *current.borrow_mut() = Some(bin.to_path_buf()));
        Current
    }
}

impl Drop for Current {
    fn drop(&mut self) {
        CURRENT.with(|current| *current.borrow_mut() = None);
    }
}
