//! The lock API for code without async: the same surface as [`crate::Locks`], on a
//! sync connection, over the same lease, grant and wait rules.
//!
//! Commands go through one sync connection (any `redis::ConnectionLike + Send`) that
//! the handle's clones and its background thread take turns on, so the server runs a
//! lease's commands in the order they were sent; each call is bounded by the response
//! timeout from its start, its wait for the connection included (set on the socket by
//! [`Locks::connect`]). One background thread per handle renews leases (every renewal
//! due at once in one round trip) and releases abandoned grants: no thread is started
//! per lock. Release notifications, when enabled, come from a pub/sub connection kept
//! by a small private runtime thread; waiters block on them with a timeout.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! # fn main() -> Result<(), lockscript::LockError> {
//! let client = redis::Client::open("redis://127.0.0.1:6390/")?;
//! let locks = lockscript::blocking::Locks::connect(&client)?
//!     .ttl(Duration::from_secs(30))
//!     .wait_timeout(Duration::from_secs(10));
//! let guard = locks.lock("orders:42")?;
//! println!("fencing token {}", guard.fencing_token());
//! guard.release()?;
//! # Ok(())
//! # }
//! ```

mod election;
mod guard;
mod locks;
mod multi;
mod rw;

pub use election::{Election, Leadership, Observer};
pub use guard::LockGuard;
pub use locks::Locks;
pub use multi::MultiGuard;
pub use rw::{Permit, ReadGuard, RwLocks, Semaphores, WriteGuard};
