//! Typed, audited Redis Lua scripts, and the distributed locks built on them.
//!
//! A script is a plain `.lua` file that reviewers read. `#[lock_script]` embeds it,
//! hashes it at compile time, checks it against the Rust signature, and generates a
//! typed function that returns an [`Invocation`]: EVALSHA with the compiled digest,
//! EVAL with the embedded source on a `NOSCRIPT` reply and only then.
//!
//! ```no_run
//! use lock_runtime::lock_script;
//!
//! /// Deletes the lock only while it still holds our token.
//! #[lock_script("../scripts/compare-del.lua")]
//! pub fn compare_del(#[key] lock: &str, token: &str) -> i64;
//!
//! # fn main() -> Result<(), lock_runtime::LockError> {
//! let client = redis::Client::open("redis://127.0.0.1:6390/")?;
//! let mut conn = client.get_connection()?;
//! let deleted: i64 = compare_del("lock:{orders}", "token").invoke(&mut conn)?;
//! println!("{} {deleted}", compare_del("x", "y").script().sha1());
//! # Ok(())
//! # }
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

// The macro names `::lock_runtime::...`; this makes that path work inside the crate too.
extern crate self as lock_runtime;

mod backend;
mod batch;
pub mod blocking;
pub mod builtin;
mod engine;
mod error;
mod grant;
mod guard;
mod lease;
mod locks;
mod mutants;
mod node;
mod notify;
mod queue;
mod redlock;
mod registry;
mod schedule;
mod script;
mod settings;
mod token;
mod wait;
mod watchdog;

pub use batch::PipelineExt;
pub use error::LockError;
pub use lease::Lease;
pub use lock_macros::lock_script;
pub use locks::{LockGuard, Locks};
pub use redlock::{DEFAULT_NODE_TIMEOUT, Redlock, RedlockGuard};
pub use registry::{load_scripts, load_scripts_async, scripts};
pub use script::{Arity, Invocation, Script};
pub use settings::{
    DEFAULT_RESPONSE_TIMEOUT, MAX_HOLD, MAX_NAME_LEN, MAX_RETRY_DELAY, MAX_TTL, MAX_WAIT, MIN_TTL,
    RetryPolicy,
};

/// Not public API: what `#[lock_script]` expands to. May change in any release.
#[doc(hidden)]
pub mod __private {
    pub use crate::registry::SCRIPTS;
    pub use crate::script::{Invocation, Script};
    pub use linkme;
    /// Known bugs put back, for the chaos checker's own tests (feature `mutants`).
    #[cfg(feature = "mutants")]
    pub mod mutants {
        pub use crate::mutants::set_no_deadline;
    }
    pub use redis::ToRedisArgs;
}
