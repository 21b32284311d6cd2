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
//! | `metrics`  |         | [`metrics`]: waits, attempts, time held, losses, renewals, handovers through the `metrics` facade |
//!
//! ```toml
//! [dependencies]
//! lockscript = { version = "0.1", features = ["cluster"] }
//! redis = "1.8"
//! ```
//!
//! # The guide
//!
//! The reference lives in [`guide`], one page per topic, every example a doctest: start
//! with [locks and what they promise](guide::locks).
#![cfg_attr(docsrs, feature(doc_cfg))]

// The macro names `::lockscript::...`; this makes that path work inside the crate too.
extern crate self as lockscript;

// The layers, each a folder (CONTRIBUTING.md draws them): the scripts always; the lock
// machine's rules for either face; the executors and the faces behind their features.
mod error;
mod script;

#[cfg(any(feature = "tokio", feature = "blocking"))]
mod exec;
mod faces;
#[cfg(any(feature = "tokio", feature = "blocking"))]
mod machine;

#[cfg(feature = "blocking")]
#[doc(inline)]
pub use faces::blocking;
#[doc(inline)]
pub use faces::sql;
#[cfg(all(feature = "metrics", any(feature = "tokio", feature = "blocking")))]
#[doc(inline)]
pub use machine::metrics;
#[doc(inline)]
pub use script::builtin;

pub use error::LockError;
#[cfg(feature = "cluster")]
pub use exec::cluster::ClusterConnection;
#[cfg(feature = "tokio")]
pub use faces::election::{Election, ElectionOf, Leadership, LeadershipOf, Observer, ObserverOf};
#[cfg(feature = "redlock")]
pub use faces::election::{RedlockElection, RedlockLeadership, RedlockObserver};
#[cfg(any(feature = "tokio", feature = "blocking"))]
pub use faces::guarded::Guarded;
#[cfg(any(feature = "tokio", feature = "blocking"))]
pub use faces::handle::Handle;
#[cfg(feature = "tokio")]
pub use faces::locks::{Face, LeaseGuard, LockGuard, Locks};
#[cfg(feature = "tokio")]
pub use faces::multi::MultiGuard;
#[cfg(feature = "redlock")]
pub use faces::redlock::{Redlock, RedlockGuard};
#[cfg(feature = "tokio")]
pub use faces::rw::{Permit, ReadGuard, RwLocks, Semaphores, WriteGuard};
pub use lockscript_macros::lock_script;
#[cfg(any(feature = "tokio", feature = "blocking"))]
pub use machine::elect::{Leader, OBSERVE_POLL};
#[cfg(any(feature = "tokio", feature = "blocking"))]
pub use machine::lease::Lease;
#[cfg(feature = "redlock")]
pub use machine::limit::DEFAULT_NODE_TIMEOUT;
#[cfg(any(feature = "tokio", feature = "blocking"))]
pub use machine::limit::{
    DEFAULT_FENCE_RETENTION, DEFAULT_RESPONSE_TIMEOUT, FENCE_RETENTION_RANGE, MAX_HOLD,
    MAX_NAME_LEN, MAX_RETRY_DELAY, MAX_TTL, MAX_WAIT, MIN_TTL,
};
#[cfg(any(feature = "tokio", feature = "blocking"))]
pub use machine::multi::MAX_NAMES;
#[cfg(any(feature = "tokio", feature = "blocking"))]
pub use machine::native::NativeCommands;
#[cfg(any(feature = "tokio", feature = "blocking"))]
pub use machine::retry::RetryPolicy;
pub use script::batch::PipelineExt;
#[cfg(feature = "tokio")]
pub use script::functions::load_functions_async;
pub use script::functions::{Delivery, Function, Library, functions_library, load_functions};
pub use script::invocation::{Invocation, ScriptArg, ScriptReply};
#[cfg(feature = "tokio")]
pub use script::registry::load_scripts_async;
pub use script::registry::{load_scripts, scripts};
pub use script::script::{Arity, Script};

/// The guide: one page per topic, moved here from the README so it is versioned with
/// the code it describes and its examples compile as doctests.
///
/// | page | what it answers |
/// |---|---|
/// | [`locks`](guide::locks) | taking, holding and releasing a lock; defaults, limits and keys; what a lock promises, with its bounds |
/// | [`fair`](guide::fair) | fair locks, read/write locks and semaphores |
/// | [`multi`](guide::multi) | multi-locks: several names at once, all or nothing, without deadlock |
/// | [`elections`](guide::elections) | leader election: campaign, terms, proclaim, observe, resign |
/// | [`fencing`](guide::fencing) | fencing that reaches the data: guarded scripts, one fence per lock in SQL |
/// | [`cluster`](guide::cluster) | Redis Cluster, Redlock, and what each topology guarantees |
/// | [`servers`](guide::servers) | the servers we test on, Redis Functions, the least ACL a lock user needs |
/// | [`scripts`](guide::scripts) | `#[lock_script]`: signatures, checks, `@include` modules |
/// | [`testing`](guide::testing) | testing your scripts with `lockscript-test`, across servers |
/// | [`auditing`](guide::auditing) | `lockscript audit` and `verify`: matching files to the digests a server runs |
/// | [`reliability`](guide::reliability) | the chaos checker and its soaks, the model checker and its searches, and every fault with its test |
/// | [`performance`](guide::performance) | the bench, its floors and where the time goes |
/// | [`operations`](guide::operations) | `lockscript inspect`: who holds a lock, with which token, who waits |
pub mod guide {
    #[doc = include_str!("../guide/locks.md")]
    pub mod locks {}
    #[doc = include_str!("../guide/fair.md")]
    pub mod fair {}
    #[doc = include_str!("../guide/multi.md")]
    pub mod multi {}
    #[doc = include_str!("../guide/elections.md")]
    pub mod elections {}
    #[doc = include_str!("../guide/fencing.md")]
    pub mod fencing {}
    #[doc = include_str!("../guide/cluster.md")]
    pub mod cluster {}
    #[doc = include_str!("../guide/servers.md")]
    pub mod servers {}
    #[doc = include_str!("../guide/scripts.md")]
    pub mod scripts {}
    #[doc = include_str!("../guide/testing.md")]
    pub mod testing {}
    #[doc = include_str!("../guide/auditing.md")]
    pub mod auditing {}
    #[doc = include_str!("../guide/reliability.md")]
    pub mod reliability {}
    #[doc = include_str!("../guide/performance.md")]
    pub mod performance {}
    #[doc = include_str!("../guide/operations.md")]
    pub mod operations {}
}

/// Not public API: what `#[lock_script]` expands to. May change in any release.
#[doc(hidden)]
pub mod __private {
    /// The lock machine driven by a model world, for the model checker (feature `model`).
    #[cfg(feature = "model")]
    pub use crate::exec::model;
    #[cfg(any(feature = "tokio", feature = "blocking"))]
    pub use crate::faces::guarded::GuardRef;
    pub use crate::script::invocation::Invocation;
    pub use crate::script::registry::SCRIPTS;
    pub use crate::script::script::Script;
    pub use linkme;
    /// Known bugs put back, for the chaos checker's and the model checker's own tests
    /// (feature `mutants`).
    #[cfg(all(feature = "mutants", any(feature = "tokio", feature = "blocking")))]
    pub mod mutants {
        pub use crate::machine::mutants::{
            set_attempt_release_from_its_start, set_clock_learnt_at_the_send,
            set_last_look_by_its_answer, set_native_refusal_unseen, set_no_deadline,
            set_notification_error_is_the_calls, set_orphan_release_stops_at_nothing,
            set_overlap_ignored, set_refusal_after_stop_loses, set_shorter_extend_trusted,
            set_wall_clock_estimate,
        };
    }
}
