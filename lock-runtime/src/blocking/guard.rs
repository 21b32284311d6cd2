//! The blocking guard and its watchdog thread.
//!
//! The same rules as the async monitor (see `watchdog.rs`): renew every ttl/3 while the
//! guard lives, validity counted from before each command minus a drift allowance,
//! loss fired on a refused renewal or when validity passes; release stops and joins the
//! thread before compare-del, so no renewal follows a release.

use std::fmt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::Shared;
use crate::settings::{Keys, Settings, check_ttl, millis, validity};
use crate::token::Token;
use crate::{LockError, builtin};

/// What [`super::Locks`] hands over when an attempt succeeds.
pub(crate) struct Grant {
    pub(crate) keys: Keys,
    pub(crate) token: Token,
    pub(crate) fence: u64,
    pub(crate) sent: Instant,
    pub(crate) waited: Duration,
    pub(crate) attempts: u32,
    pub(crate) watchdog: bool,
}

struct LeaseTimes {
    valid_until: Instant,
    sent: Instant,
    ttl: Duration,
    lost: bool,
    stopping: bool,
}

/// The lease, shared by the guard and its watchdog thread.
struct Lease {
    keys: Keys,
    fence: u64,
    state: Mutex<LeaseTimes>,
    /// Wakes the watchdog (stop, extension) and anyone waiting for the loss.
    changed: Condvar,
}

impl Lease {
    fn state(&self) -> MutexGuard<'_, LeaseTimes> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn renewed(&self, sent: Instant, ttl: Duration) {
        let mut state = self.state();
        if sent >= state.sent {
            state.valid_until = sent + validity(ttl);
            state.sent = sent;
            state.ttl = ttl;
        }
        self.changed.notify_all();
    }

    fn mark_lost(&self, why: &str) {
        let mut state = self.state();
        if !state.lost {
            state.lost = true;
            tracing::warn!(lock = %self.keys.name, fence = self.fence, reason = why, "lock lost");
        }
        self.changed.notify_all();
    }

    fn stop(&self) {
        self.state().stopping = true;
        self.changed.notify_all();
    }
}

/// Ownership of one lock acquired through [`super::Locks`].
///
/// Dropping it without [`release`](Self::release) stops its watchdog and releases the
/// lock from a short-lived thread; the lease's TTL frees it in every case. Its `Debug`
/// never shows the owner token.
///
/// ```no_run
/// # fn f(locks: lock_runtime::blocking::Locks) -> Result<(), lock_runtime::LockError> {
/// let guard = locks.lock("orders:42")?;
/// if guard.is_held()? { /* write with guard.fencing_token() */ }
/// guard.release()?;
/// # Ok(())
/// # }
/// ```
pub struct LockGuard<C = redis::Connection>
where
    C: redis::ConnectionLike + Send + 'static,
{
    lease: Arc<Lease>,
    token: Token,
    shared: Arc<Shared<C>>,
    watchdog: Option<JoinHandle<()>>,
    released: bool,
    waited: Duration,
    attempts: u32,
}

impl<C> LockGuard<C>
where
    C: redis::ConnectionLike + Send + 'static,
{
    pub(crate) fn start(shared: Arc<Shared<C>>, settings: &Settings, grant: Grant) -> Self {
        let ttl = settings.ttl;
        let lease = Arc::new(Lease {
            keys: grant.keys,
            fence: grant.fence,
            state: Mutex::new(LeaseTimes {
                valid_until: grant.sent + validity(ttl),
                sent: grant.sent,
                ttl,
                lost: false,
                stopping: false,
            }),
            changed: Condvar::new(),
        });
        let plan = Plan {
            renew: grant.watchdog,
            renew_until: settings.max_hold.map(|cap| grant.sent + cap),
        };
        let watchdog = {
            let lease = Arc::clone(&lease);
            let shared = Arc::clone(&shared);
            let token = grant.token.as_str().to_owned();
            std::thread::Builder::new()
                .name("lockscript-watchdog".to_owned())
                .spawn(move || watch(&lease, &shared, &token, &plan))
                .ok()
        };
        if watchdog.is_none() {
            tracing::warn!(lock = %lease.keys.name, "cannot start a watchdog thread; the lease will not be renewed");
        }
        Self {
            lease,
            token: grant.token,
            shared,
            watchdog,
            released: false,
            waited: grant.waited,
            attempts: grant.attempts,
        }
    }

    /// The lock's name.
    ///
    /// ```no_run
    /// # fn f(guard: lock_runtime::blocking::LockGuard) { println!("{}", guard.name()); }
    /// ```
    pub fn name(&self) -> &str {
        &self.lease.keys.name
    }

    /// This grant's fencing token; see [`crate::LockGuard::fencing_token`].
    ///
    /// ```no_run
    /// # fn f(guard: lock_runtime::blocking::LockGuard) { println!("{}", guard.fencing_token()); }
    /// ```
    pub fn fencing_token(&self) -> u64 {
        self.lease.fence
    }

    /// How long `lock()` waited for this grant.
    ///
    /// ```no_run
    /// # fn f(guard: lock_runtime::blocking::LockGuard) { println!("{:?}", guard.waited()); }
    /// ```
    pub fn waited(&self) -> Duration {
        self.waited
    }

    /// How many attempts this grant took.
    ///
    /// ```no_run
    /// # fn f(guard: lock_runtime::blocking::LockGuard) { println!("{}", guard.attempts()); }
    /// ```
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// How long the lease can still be relied on, by this process's clock.
    ///
    /// ```no_run
    /// # fn f(guard: lock_runtime::blocking::LockGuard) { println!("{:?}", guard.remaining()); }
    /// ```
    pub fn remaining(&self) -> Duration {
        self.lease
            .state()
            .valid_until
            .saturating_duration_since(Instant::now())
    }

    /// Whether the loss signal has fired; see [`crate::LockGuard::lost`].
    ///
    /// ```no_run
    /// # fn f(guard: lock_runtime::blocking::LockGuard) { assert!(!guard.is_lost()); }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.lease.state().lost
    }

    /// Blocks until the lease is known lost, or `timeout` passes; returns whether it
    /// was lost.
    ///
    /// ```no_run
    /// # fn f(guard: lock_runtime::blocking::LockGuard) {
    /// if guard.lost_within(std::time::Duration::from_secs(1)) { eprintln!("stop"); }
    /// # }
    /// ```
    pub fn lost_within(&self, timeout: Duration) -> bool {
        let state = self.lease.state();
        let (state, _) = self
            .lease
            .changed
            .wait_timeout_while(state, timeout, |s| !s.lost)
            .unwrap_or_else(PoisonError::into_inner);
        state.lost
    }

    /// Asks the server whether the lock still holds this guard's token; see
    /// [`crate::LockGuard::is_held`].
    ///
    /// ```no_run
    /// # fn f(guard: lock_runtime::blocking::LockGuard) -> Result<(), lock_runtime::LockError> {
    /// if !guard.is_held()? { eprintln!("lost"); }
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_held(&self) -> Result<bool, LockError> {
        let value: Option<String> = self
            .shared
            .with(|conn| redis::cmd("GET").arg(&self.lease.keys.lock).query(conn))?;
        let ours = value.as_deref() == Some(self.token.as_str());
        if !ours {
            self.lease.mark_lost("the key changed owner or vanished");
        }
        Ok(ours && !self.is_lost())
    }

    /// Sets the lease to `ttl` from now if the lock is still ours; see
    /// [`crate::LockGuard::extend`].
    ///
    /// ```no_run
    /// # fn f(guard: lock_runtime::blocking::LockGuard) -> Result<(), lock_runtime::LockError> {
    /// guard.extend(std::time::Duration::from_secs(60))?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn extend(&self, ttl: Duration) -> Result<(), LockError> {
        check_ttl(ttl)?;
        if self.is_lost() {
            return Err(self.not_held());
        }
        let sent = Instant::now();
        let renewed = self.shared.with(|conn| {
            builtin::renew(&self.lease.keys.lock, self.token.as_str(), millis(ttl)).invoke(conn)
        })?;
        if renewed == 1 {
            self.lease.renewed(sent, ttl);
            Ok(())
        } else {
            self.lease.mark_lost("the key changed owner or vanished");
            Err(self.not_held())
        }
    }

    /// Stops and joins the watchdog, then deletes the lock if it still holds this
    /// guard's token; see [`crate::LockGuard::release`].
    ///
    /// ```no_run
    /// # fn f(guard: lock_runtime::blocking::LockGuard) -> Result<(), lock_runtime::LockError> {
    /// guard.release()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn release(mut self) -> Result<(), LockError> {
        self.lease.stop();
        if let Some(watchdog) = self.watchdog.take() {
            let _ = watchdog.join();
        }
        let lost_before = self.is_lost();
        let released = self.shared.with(|conn| {
            builtin::compare_del(&self.lease.keys.lock, self.token.as_str()).invoke(conn)
        })?;
        self.released = true;
        if released == 1 && !lost_before {
            tracing::debug!(lock = %self.name(), fence = self.lease.fence, "lock released");
            Ok(())
        } else {
            self.lease
                .mark_lost("released after the key changed owner or vanished");
            Err(self.not_held())
        }
    }

    fn not_held(&self) -> LockError {
        LockError::NotHeld {
            name: self.lease.keys.name.clone(),
        }
    }
}

impl<C> Drop for LockGuard<C>
where
    C: redis::ConnectionLike + Send + 'static,
{
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.lease.stop();
        let watchdog = self.watchdog.take();
        let shared = Arc::clone(&self.shared);
        let lock = self.lease.keys.lock.clone();
        let token = self.token.clone();
        let cleanup = move || {
            if let Some(watchdog) = watchdog {
                let _ = watchdog.join();
            }
            let released =
                shared.with(|conn| builtin::compare_del(&lock, token.as_str()).invoke(conn));
            tracing::debug!(lock, ?released, "guard dropped without release; released");
        };
        // A thread, so that drop never blocks on the network.
        if std::thread::Builder::new()
            .name("lockscript-release".to_owned())
            .spawn(cleanup)
            .is_err()
        {
            tracing::debug!("cannot start a release thread; the ttl frees the lock");
        }
    }
}

impl<C> fmt::Debug for LockGuard<C>
where
    C: redis::ConnectionLike + Send + 'static,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("blocking::LockGuard")
            .field("name", &self.lease.keys.name)
            .field("fencing_token", &self.lease.fence)
            .field("lost", &self.is_lost())
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

/// Whether and until when the watchdog renews.
struct Plan {
    renew: bool,
    renew_until: Option<Instant>,
}

/// The watchdog thread: renews as `plan` says, and fires the loss signal as the async
/// monitor does.
fn watch<C: redis::ConnectionLike>(lease: &Lease, shared: &Shared<C>, token: &str, plan: &Plan) {
    let mut next_renewal = {
        let state = lease.state();
        state.sent + state.ttl / 3
    };
    let mut state = lease.state();
    loop {
        if state.stopping || state.lost {
            return;
        }
        // An extension moves the next renewal to a third of the new lease.
        next_renewal = next_renewal.max(state.sent + state.ttl / 3);
        let now = Instant::now();
        let renewing = plan.renew && plan.renew_until.is_none_or(|until| now < until);
        let wake_at = if renewing {
            next_renewal.min(state.valid_until)
        } else {
            state.valid_until
        };
        if now < wake_at {
            state = lease
                .changed
                .wait_timeout(state, wake_at - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            continue;
        }
        if now >= state.valid_until {
            drop(state);
            lease.mark_lost("the lease ran out before it could be renewed");
            return;
        }
        let ttl = state.ttl;
        drop(state);
        let sent = Instant::now();
        let reply =
            shared.with(|conn| builtin::renew(&lease.keys.lock, token, millis(ttl)).invoke(conn));
        match reply {
            Ok(1) => {
                lease.renewed(sent, ttl);
                next_renewal = sent + ttl / 3;
            }
            Ok(_) => {
                lease.mark_lost("the key changed owner or vanished");
                return;
            }
            Err(e) => {
                let retry = (ttl / 12).min(Duration::from_millis(500));
                next_renewal = Instant::now() + retry;
                tracing::warn!(lock = %lease.keys.name, error = %e, retry_in = ?retry, "lease renewal failed");
            }
        }
        state = lease.state();
    }
}
