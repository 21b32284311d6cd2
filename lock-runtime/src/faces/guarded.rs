//! Owner-guarded script calls: what `#[lock_script("...", guarded)]` needs from a guard.
//!
//! The macro sends the script wrapped by `lockscript_audit::guarded::wrap`: in one atomic
//! step the server checks that the lock key still holds the guard's owner token and that
//! the lock's fencing counter has not passed the guard's fencing token, and only then runs
//! the script. This is etcd's `If(IsOwner())` for data that lives in Redis: a holder that
//! was paused past its lease can no longer write, whatever it believes.

use std::sync::Arc;

use crate::machine::lease::LeaseState;
use crate::script::invocation::CallGuard;
use crate::{Invocation, LockError, Script};

/// A holder of a lease that a guarded script can check: the guards of [`Locks`] and
/// [`blocking::Locks`], and their [`Lease`](crate::Lease) views. Sealed: it cannot be
/// implemented outside this crate. (A Redlock grant lives on several masters, and one
/// script call reaches one of them, so `RedlockGuard` is not one, and a guarded call with
/// a Redlock grant's `Lease` fails with `LockError::InvalidSettings` before anything is
/// sent.)
///
/// [`Locks`]: crate::Locks
/// [`blocking::Locks`]: crate::faces::blocking::Locks
///
/// ```no_run
/// use lockscript::lock_script;
///
/// /// Credits an account at most once per transfer id (its file has two keys, two args).
/// #[lock_script("examples/scripts/credit.lua", guarded)]
/// fn credit(#[key] balance: &str, #[key] applied: &str, transfer: &str, amount: i64) -> i64;
///
/// # async fn demo(locks: lockscript::Locks, mut conn: redis::aio::MultiplexedConnection)
/// #     -> Result<(), lockscript::LockError> {
/// let guard = locks.lock("account:7").await?;
/// // Runs only while `guard` holds the lock; Err(NotHeld) or Err(Stale) otherwise. The
/// // data keys carry the lock's name as hash tag, for Redis Cluster.
/// let balance = credit(&guard, "{account:7}:balance", "{account:7}:applied", "t-1", 10)
///     .invoke_async(&mut conn)
///     .await?;
/// # Ok(())
/// # }
/// ```
pub trait Guarded: sealed::Sealed {
    /// Not public API: the lease the guarded call checks.
    #[doc(hidden)]
    fn __guard(&self) -> GuardRef<'_>;
}

mod sealed {
    pub trait Sealed {}
}

/// Not public API: a borrowed lease, for the code `#[lock_script(..., guarded)]` writes.
#[doc(hidden)]
#[derive(Clone, Copy)]
pub struct GuardRef<'a>(pub(crate) &'a Arc<LeaseState>);

impl sealed::Sealed for crate::Lease {}
impl Guarded for crate::Lease {
    fn __guard(&self) -> GuardRef<'_> {
        GuardRef(&self.lease)
    }
}

#[cfg(feature = "tokio")]
impl<C> sealed::Sealed for crate::LockGuard<C> where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static
{
}
#[cfg(feature = "tokio")]
impl<C> Guarded for crate::LockGuard<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    fn __guard(&self) -> GuardRef<'_> {
        GuardRef(&self.grant().owned.held.lease)
    }
}

#[cfg(feature = "blocking")]
impl<C> sealed::Sealed for crate::faces::blocking::LockGuard<C> where
    C: redis::ConnectionLike + Send + 'static
{
}
#[cfg(feature = "blocking")]
impl<C> Guarded for crate::faces::blocking::LockGuard<C>
where
    C: redis::ConnectionLike + Send + 'static,
{
    fn __guard(&self) -> GuardRef<'_> {
        GuardRef(self.owned.lease())
    }
}

impl<R> Invocation<R> {
    /// Not public API: starts a guarded call with `numkeys` keys of the script's own,
    /// after the lock key and its fencing counter.
    #[doc(hidden)]
    pub fn __guarded(script: &'static Script, guard: GuardRef<'_>, numkeys: usize) -> Self {
        Self::guarded_by(script, Arc::clone(guard.0) as Arc<dyn CallGuard>, numkeys)
    }
}

/// A lease as a guarded [`Invocation`] checks it: its keys and tokens, and what the
/// refusals of its check mean (the loss they prove is signalled).
impl CallGuard for LeaseState {
    fn keys(&self) -> [&str; 2] {
        [&self.keys.lock, &self.keys.fence]
    }

    fn token(&self) -> &str {
        self.token.as_str()
    }

    fn fence(&self) -> u64 {
        self.fence
    }

    fn unusable(&self, script: &'static str) -> Option<LockError> {
        (!self.one_node).then(|| {
            LockError::InvalidSettings(format!(
                "script `{script}` cannot be guarded by this lease (lock `{}`): a Redlock \
                 grant lives on several masters, and a script runs on one; a reader or a \
                 permit shares its name with other holders; guard data with a lock or a \
                 write lock of Locks or blocking::Locks",
                self.keys.name
            ))
        })
    }

    fn refusal(&self, code: &str, detail: Option<&str>) -> Option<LockError> {
        if code == lockscript_audit_codes::NOT_HELD {
            self.refused("a guarded script found the key gone or owned by another");
            return Some(self.not_held());
        }
        if code == lockscript_audit_codes::STALE {
            self.refused("a guarded script found a later grant");
            let newer = detail
                .and_then(|d| d.trim().parse().ok())
                .unwrap_or_default();
            return Some(LockError::Stale {
                name: self.keys.name.clone(),
                fence: self.fence,
                newer,
            });
        }
        None
    }
}

/// The error codes of `lockscript_audit::guarded`, kept equal by a test (the runtime does
/// not depend on the audit crate).
pub(crate) mod lockscript_audit_codes {
    pub(crate) const NOT_HELD: &str = "LOCKSCRIPT_NOTHELD";
    pub(crate) const STALE: &str = "LOCKSCRIPT_STALE";
}
