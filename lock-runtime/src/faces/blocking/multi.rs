//! Multi-locks on the blocking face: [`Locks::lock_all`], [`Locks::try_lock_all`] and
//! [`MultiGuard`], the async ones' surface without async (see [`crate::MultiGuard`]).

use std::fmt;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::guard::LockGuard;
use super::locks::Locks;
use crate::LockError;
use crate::machine::multi::Held;
use crate::machine::multi::MultiAcquire;

impl<C> Locks<C>
where
    C: redis::ConnectionLike + Send + 'static,
{
    /// Takes every one of `names` at once, all or nothing, waiting as
    /// [`lock`](Locks::lock) does until `wait_timeout`; see
    /// [`crate::Locks::lock_all`] for the order, the calls and the bounds.
    ///
    /// ```no_run
    /// # fn demo(locks: lockscript::blocking::Locks) -> Result<(), lockscript::LockError> {
    /// let both = locks.lock_all(&["account:1", "account:2"])?;
    /// println!("fences {:?} and {:?}", both.fencing_token("account:1"), both.fencing_token("account:2"));
    /// both.release()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock_all<S: AsRef<str>>(&self, names: &[S]) -> Result<MultiGuard<C>, LockError> {
        let guard = self.grant_all(names, true)?;
        guard.ok_or_else(|| {
            LockError::InvalidSettings("internal: a multi-lock's wait ended held".into())
        })
    }

    /// One attempt at every one of `names`: the guard, or `Ok(None)` when one of them is
    /// held, and then nothing is held.
    ///
    /// ```no_run
    /// # fn demo(locks: lockscript::blocking::Locks) -> Result<(), lockscript::LockError> {
    /// if let Some(both) = locks.try_lock_all(&["account:1", "account:2"])? { both.release()?; }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_lock_all<S: AsRef<str>>(
        &self,
        names: &[S],
    ) -> Result<Option<MultiGuard<C>>, LockError> {
        self.grant_all(names, false)
    }

    fn grant_all<S: AsRef<str>>(
        &self,
        names: &[S],
        wait: bool,
    ) -> Result<Option<MultiGuard<C>>, LockError> {
        let engine = &self.engine;
        let (shared, settings) = (&engine.shared, &engine.settings);
        let notifications = engine.notifications.as_deref();
        let split = shared.split.load(Ordering::Relaxed);
        let now = Instant::now();
        let machine =
            MultiAcquire::new(settings, names, wait, notifications.is_some(), split, now)?;
        // The guards taken so far: kept as each group is granted, released together when
        // one of them is lost midway or the call fails.
        let guards = std::cell::RefCell::new(Vec::with_capacity(names.len()));
        let keep = |granted| (guards.borrow_mut()).push(LockGuard::of(shared, granted, settings));
        let lost = || guards.borrow().iter().any(|g: &LockGuard<C>| g.is_lost());
        let release = || {
            for guard in guards.take() {
                let _ = guard.release();
            }
        };
        let done = shared.run_all(settings, notifications, machine, keep, lost, release);
        match done {
            Ok(true) => Ok(Some(MultiGuard {
                guards: guards.into_inner(),
            })),
            done => {
                release();
                done.map(|_| None)
            }
        }
    }
}

/// Several locks held together on the blocking face ([`Locks::lock_all`]); see
/// [`crate::MultiGuard`]. Dropped without [`release`](Self::release), every name is
/// released in the background.
///
/// ```no_run
/// # fn demo(locks: lockscript::blocking::Locks) -> Result<(), lockscript::LockError> {
/// let both = locks.lock_all(&["a", "b"])?;
/// if both.is_lost() { eprintln!("lost one of them: stop") }
/// both.release()?;
/// # Ok(())
/// # }
/// ```
pub struct MultiGuard<C = redis::Connection>
where
    C: redis::ConnectionLike + Send + 'static,
{
    guards: Vec<LockGuard<C>>,
}

impl<C> MultiGuard<C>
where
    C: redis::ConnectionLike + Send + 'static,
{
    /// The names, in the order they were taken.
    ///
    /// ```no_run
    /// # fn f(both: lockscript::blocking::MultiGuard) { println!("{:?}", both.names()); }
    /// ```
    pub fn names(&self) -> Vec<&str> {
        self.held().names()
    }

    /// The names' leases, as one.
    fn held(&self) -> Held<'_, impl Iterator<Item = &crate::Lease> + Clone> {
        Held(self.guards.iter().map(|g| &**g))
    }

    /// The fencing token of `name`; `None` if `name` is not one of them.
    ///
    /// ```no_run
    /// # fn f(both: lockscript::blocking::MultiGuard) { println!("{:?}", both.fencing_token("a")); }
    /// ```
    pub fn fencing_token(&self, name: &str) -> Option<u64> {
        self.held().fencing_token(name)
    }

    /// Each name's guard, in order.
    ///
    /// ```no_run
    /// # fn f(both: lockscript::blocking::MultiGuard) { for g in both.guards() { println!("{}", g.name()) } }
    /// ```
    pub fn guards(&self) -> &[LockGuard<C>] {
        &self.guards
    }

    /// Whether any name's lease is known lost.
    ///
    /// ```no_run
    /// # fn f(both: lockscript::blocking::MultiGuard) { assert!(!both.is_lost()); }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.held().is_lost()
    }

    /// Blocks until any name's lease is known lost or `timeout` passes; whether it was.
    /// It wakes on the earliest validity end (or a refused renewal of that name) at once,
    /// and sees another name's refused renewal within 10 ms.
    ///
    /// ```no_run
    /// # fn f(both: lockscript::blocking::MultiGuard) { both.lost_within(std::time::Duration::from_secs(1)); }
    /// ```
    pub fn lost_within(&self, timeout: Duration) -> bool {
        const STEP: Duration = Duration::from_millis(10);
        let end = Instant::now() + timeout;
        let earliest = self.guards.iter().min_by_key(|g| g.valid_until());
        loop {
            if self.is_lost() {
                return true;
            }
            let left = end.saturating_duration_since(Instant::now());
            let Some(earliest) = earliest.filter(|_| !left.is_zero()) else {
                return false;
            };
            earliest.lost_within(left.min(STEP));
        }
    }

    /// Whether any name's lease is suspect (a renewal is overdue).
    ///
    /// ```no_run
    /// # fn f(both: lockscript::blocking::MultiGuard) { if both.is_suspect() { eprintln!("pause") } }
    /// ```
    pub fn is_suspect(&self) -> bool {
        self.held().is_suspect()
    }

    /// The end of the earliest name's validity.
    ///
    /// ```no_run
    /// # fn f(both: lockscript::blocking::MultiGuard) { println!("{:?}", both.valid_until()); }
    /// ```
    pub fn valid_until(&self) -> Instant {
        self.held().valid_until()
    }

    /// How long the earliest name's validity has left.
    ///
    /// ```no_run
    /// # fn f(both: lockscript::blocking::MultiGuard) { println!("{:?}", both.remaining()); }
    /// ```
    pub fn remaining(&self) -> Duration {
        self.valid_until().saturating_duration_since(Instant::now())
    }

    /// Asks the server whether every name still holds this guard's token.
    ///
    /// ```no_run
    /// # fn f(both: lockscript::blocking::MultiGuard) -> Result<(), lockscript::LockError> {
    /// assert!(both.is_held()?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_held(&self) -> Result<bool, LockError> {
        self.guards
            .iter()
            .try_fold(true, |all, g| Ok(all && g.is_held()?))
    }

    /// Sets every name's lease to `ttl` from now; the first error if any name's failed.
    ///
    /// ```no_run
    /// # fn f(both: lockscript::blocking::MultiGuard) -> Result<(), lockscript::LockError> {
    /// both.extend(std::time::Duration::from_secs(30))?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn extend(&self, ttl: Duration) -> Result<(), LockError> {
        let each: Vec<_> = self.guards.iter().map(|g| g.extend(ttl)).collect();
        each.into_iter().collect()
    }

    /// Releases every name whatever the others answer; the first error if any failed
    /// ([`LockError::NotHeld`] for a lease that had been lost).
    ///
    /// ```no_run
    /// # fn f(both: lockscript::blocking::MultiGuard) -> Result<(), lockscript::LockError> {
    /// both.release()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn release(self) -> Result<(), LockError> {
        let each: Vec<_> = self.guards.into_iter().map(LockGuard::release).collect();
        each.into_iter().collect()
    }

    /// The names' guards, to release one by one.
    ///
    /// ```no_run
    /// # fn f(both: lockscript::blocking::MultiGuard) -> Result<(), lockscript::LockError> {
    /// for guard in both.into_guards() { guard.release()?; }
    /// # Ok(())
    /// # }
    /// ```
    pub fn into_guards(self) -> Vec<LockGuard<C>> {
        self.guards
    }
}

impl<C> fmt::Debug for MultiGuard<C>
where
    C: redis::ConnectionLike + Send + 'static,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.guards).finish()
    }
}
