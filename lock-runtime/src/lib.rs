//! Typed, audited Redis Lua scripts, and the distributed locks built on them.
//!
//! A script is a plain `.lua` file that reviewers read. `#[lock_script]` embeds it,
//! hashes it at compile time, checks it against the Rust signature, and generates a
//! typed function that returns an [`Invocation`]: EVALSHA with the compiled digest; on a
//! `NOSCRIPT` reply and only then, `SCRIPT LOAD` of the embedded source and EVALSHA again
//! (EVAL as the last resort when the load is refused).
//!
//! ```no_run
//! use lockscript::lock_script;
//!
//! /// Deletes the lock only while it still holds our token.
//! #[lock_script("scripts/compare-del.lua")]
//! pub fn compare_del(#[key] lock: &str, token: &str) -> i64;
//!
//! # fn main() -> Result<(), lockscript::LockError> {
//! let client = redis::Client::open("redis://127.0.0.1:6390/")?;
//! let mut conn = client.get_connection()?;
//! let deleted: i64 = compare_del("lock:{orders}", "token").invoke(&mut conn)?;
//! println!("{} {deleted}", compare_del("x", "y").script().sha1());
//! # Ok(())
//! # }
//! ```
//!
//! # Features
//!
//! Pay only for what you use; the scripts (`#[lock_script]`, [`Invocation::invoke`],
//! [`scripts`], [`load_scripts`], [`builtin`]) are always there.
//!
//! | feature    | default | what it adds |
//! |------------|---------|--------------|
//! | `tokio`    | yes     | the async face: `Locks` (fair mode too), `RwLocks`, `Semaphores`, their guards, `Lease`, `Invocation::invoke_async`, `load_scripts_async` |
//! | `blocking` |         | `blocking::Locks`, `blocking::RwLocks`, `blocking::Semaphores` for code without async (their notifications run on a small runtime of their own) |
//! | `cluster`  |         | Redis Cluster: `Locks::connect_cluster`, cluster pipelines (implies `tokio`) |
//! | `redlock`  |         | `Redlock` over N independent masters (implies `tokio`) |
//! | `tls`      |         | `rediss://` through rustls; the application installs a rustls crypto provider |
//!
//! ```toml
//! [dependencies]
//! lockscript = { version = "0.1", features = ["cluster"] }
//! redis = "1.8"
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

// The macro names `::lockscript::...`; this makes that path work inside the crate too.
extern crate self as lockscript;

// What each feature compiles: the scripts always; the lease engine's shared core for either
// face; the async face, Redlock and the blocking face each behind their own feature.
mod batch;
pub mod builtin;
mod error;
mod functions;
mod invocation;
mod registry;
mod script;
pub mod sql;

#[cfg(any(feature = "tokio", feature = "blocking"))]
mod call;
#[cfg(any(feature = "tokio", feature = "blocking"))]
mod fair;
#[cfg(any(feature = "tokio", feature = "blocking"))]
mod grant;
#[cfg(any(feature = "tokio", feature = "blocking"))]
mod guarded;
#[cfg(any(feature = "tokio", feature = "blocking"))]
mod key;
#[cfg(any(feature = "tokio", feature = "blocking"))]
mod lease;
#[cfg(any(feature = "tokio", feature = "blocking"))]
mod limit;
#[cfg(any(feature = "tokio", feature = "blocking"))]
mod mutants;
#[cfg(any(feature = "tokio", feature = "blocking"))]
mod notify;
#[cfg(any(feature = "tokio", feature = "blocking"))]
mod readers;
#[cfg(any(feature = "tokio", feature = "blocking"))]
mod reply;
#[cfg(any(feature = "tokio", feature = "blocking"))]
mod retry;
#[cfg(any(feature = "tokio", feature = "blocking"))]
mod schedule;
#[cfg(any(feature = "tokio", feature = "blocking"))]
mod settings;
#[cfg(any(feature = "tokio", feature = "blocking"))]
mod token;
#[cfg(any(feature = "tokio", feature = "blocking"))]
mod wait;

#[cfg(feature = "tokio")]
mod backend;
#[cfg(feature = "tokio")]
mod engine;
#[cfg(feature = "tokio")]
mod guard;
#[cfg(feature = "tokio")]
mod locks;
#[cfg(feature = "tokio")]
mod node;
#[cfg(feature = "tokio")]
mod queue;
#[cfg(feature = "tokio")]
mod rw;
#[cfg(feature = "tokio")]
mod watchdog;

#[cfg(feature = "blocking")]
pub mod blocking;
#[cfg(feature = "redlock")]
mod redlock;

pub use batch::PipelineExt;
pub use error::LockError;
#[cfg(feature = "tokio")]
pub use functions::load_functions_async;
pub use functions::{Delivery, Function, Library, functions_library, load_functions};
#[cfg(any(feature = "tokio", feature = "blocking"))]
pub use guarded::Guarded;
pub use invocation::{Invocation, ScriptArg, ScriptReply};
#[cfg(any(feature = "tokio", feature = "blocking"))]
pub use lease::Lease;
#[cfg(feature = "redlock")]
pub use limit::DEFAULT_NODE_TIMEOUT;
#[cfg(any(feature = "tokio", feature = "blocking"))]
pub use limit::{
    DEFAULT_FENCE_RETENTION, DEFAULT_RESPONSE_TIMEOUT, FENCE_RETENTION_RANGE, MAX_HOLD,
    MAX_NAME_LEN, MAX_RETRY_DELAY, MAX_TTL, MAX_WAIT, MIN_TTL,
};
#[cfg(feature = "tokio")]
pub use locks::{LockGuard, Locks};
pub use lockscript_macros::lock_script;
#[cfg(feature = "redlock")]
pub use redlock::{Redlock, RedlockGuard};
#[cfg(feature = "tokio")]
pub use registry::load_scripts_async;
pub use registry::{load_scripts, scripts};
#[cfg(any(feature = "tokio", feature = "blocking"))]
pub use retry::RetryPolicy;
#[cfg(feature = "tokio")]
pub use rw::{Permit, ReadGuard, RwLocks, Semaphores, WriteGuard};
pub use script::{Arity, Script};

/// Not public API: what `#[lock_script]` expands to. May change in any release.
#[doc(hidden)]
pub mod __private {
    #[cfg(any(feature = "tokio", feature = "blocking"))]
    pub use crate::guarded::GuardRef;
    pub use crate::invocation::Invocation;
    pub use crate::registry::SCRIPTS;
    pub use crate::script::Script;
    pub use linkme;
    /// Known bugs put back, for the chaos checker's own tests (feature `mutants`).
    #[cfg(all(feature = "mutants", any(feature = "tokio", feature = "blocking")))]
    pub mod mutants {
        pub use crate::mutants::set_no_deadline;
    }
}
