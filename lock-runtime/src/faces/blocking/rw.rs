//! Read/write locks and semaphores without async: the blocking faces of
//! [`crate::RwLocks`] and [`crate::Semaphores`], over a [`super::Locks`] handle. Their
//! guards are [`super::LockGuard`]s (through `Deref`) with a kind-specific release.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use super::guard::LockGuard;
use super::locks::Locks;
use crate::LockError;
use crate::machine::key::Kind;
use crate::machine::readers::{ReadMark, Readers};

/// Read/write locks without async; see [`crate::RwLocks`] for the rules. Made by
/// [`Locks::rw`]; cheap to clone.
///
/// ```no_run
/// # fn main() -> Result<(), lockscript::LockError> {
/// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
/// let rw = lockscript::blocking::Locks::connect(&client)?.rw();
/// let reader = rw.read("catalog")?;
/// reader.release()?;
/// # Ok(())
/// # }
/// ```
pub struct RwLocks<C = redis::Connection> {
    locks: Locks<C>,
    readers: Arc<Readers>,
}

impl<C> Clone for RwLocks<C> {
    fn clone(&self) -> Self {
        Self {
            locks: self.locks.clone(),
            readers: Arc::clone(&self.readers),
        }
    }
}

impl<C> fmt::Debug for RwLocks<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("blocking::RwLocks")
            .field("locks", &self.locks)
            .finish_non_exhaustive()
    }
}

impl<C> RwLocks<C>
where
    C: redis::ConnectionLike + Send + 'static,
{
    /// Blocks until the read lock of `name` is granted; see [`crate::RwLocks::read`].
    ///
    /// ```no_run
    /// # fn f(rw: lockscript::blocking::RwLocks) -> Result<(), lockscript::LockError> {
    /// rw.read("catalog")?.release()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn read(&self, name: &str) -> Result<ReadGuard<C>, LockError> {
        let guard = self
            .locks
            .grant(name, Kind::Read, self.locks.engine.settings.watchdog)?;
        Ok(self.reader(guard))
    }

    /// One attempt at the read lock; see [`crate::RwLocks::try_read`].
    ///
    /// ```no_run
    /// # fn f(rw: lockscript::blocking::RwLocks) -> Result<(), lockscript::LockError> {
    /// if let Some(guard) = rw.try_read("catalog")? { guard.release()?; }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_read(&self, name: &str) -> Result<Option<ReadGuard<C>>, LockError> {
        let guard = self.locks.try_grant(name, Kind::Read)?;
        Ok(guard.map(|g| self.reader(g)))
    }

    /// Blocks until the write lock of `name` is granted; see [`crate::RwLocks::write`].
    /// [`LockError::Upgrade`] at once if this thread holds its read lock.
    ///
    /// ```no_run
    /// # fn f(rw: lockscript::blocking::RwLocks) -> Result<(), lockscript::LockError> {
    /// rw.write("catalog")?.release()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn write(&self, name: &str) -> Result<WriteGuard<C>, LockError> {
        self.readers.refuse_upgrade(name)?;
        let guard = self
            .locks
            .grant(name, Kind::Write, self.locks.engine.settings.watchdog)?;
        Ok(WriteGuard {
            guard,
            readers: Arc::clone(&self.readers),
        })
    }

    /// One attempt at the write lock; see [`crate::RwLocks::try_write`].
    ///
    /// ```no_run
    /// # fn f(rw: lockscript::blocking::RwLocks) -> Result<(), lockscript::LockError> {
    /// if let Some(guard) = rw.try_write("catalog")? { guard.release()?; }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_write(&self, name: &str) -> Result<Option<WriteGuard<C>>, LockError> {
        self.readers.refuse_upgrade(name)?;
        let guard = self.locks.try_grant(name, Kind::Write)?;
        Ok(guard.map(|guard| WriteGuard {
            guard,
            readers: Arc::clone(&self.readers),
        }))
    }

    fn reader(&self, guard: LockGuard<C>) -> ReadGuard<C> {
        let mark = self.readers.mark(guard.name());
        ReadGuard { guard, _mark: mark }
    }
}

/// Semaphores without async; see [`crate::Semaphores`] for the rules. Made by
/// [`Locks::semaphore`]; cheap to clone.
///
/// ```no_run
/// # fn main() -> Result<(), lockscript::LockError> {
/// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
/// let pool = lockscript::blocking::Locks::connect(&client)?.semaphore(4);
/// pool.acquire("encoder")?.release()?;
/// # Ok(())
/// # }
/// ```
pub struct Semaphores<C = redis::Connection> {
    locks: Locks<C>,
    permits: u32,
}

impl<C> Clone for Semaphores<C> {
    fn clone(&self) -> Self {
        Self {
            locks: self.locks.clone(),
            permits: self.permits,
        }
    }
}

impl<C> fmt::Debug for Semaphores<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("blocking::Semaphores")
            .field("permits", &self.permits)
            .field("locks", &self.locks)
            .finish_non_exhaustive()
    }
}

impl<C> Semaphores<C>
where
    C: redis::ConnectionLike + Send + 'static,
{
    /// The number of permits per name.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Blocks until a permit of `name` is granted; see [`crate::Semaphores::acquire`].
    ///
    /// ```no_run
    /// # fn f(pool: lockscript::blocking::Semaphores) -> Result<(), lockscript::LockError> {
    /// pool.acquire("encoder")?.release()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn acquire(&self, name: &str) -> Result<Permit<C>, LockError> {
        let kind = Kind::Permit(self.permits);
        let guard = self
            .locks
            .grant(name, kind, self.locks.engine.settings.watchdog)?;
        Ok(Permit { guard })
    }

    /// One attempt at a permit; see [`crate::Semaphores::try_acquire`].
    ///
    /// ```no_run
    /// # fn f(pool: lockscript::blocking::Semaphores) -> Result<(), lockscript::LockError> {
    /// if let Some(permit) = pool.try_acquire("encoder")? { permit.release()?; }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_acquire(&self, name: &str) -> Result<Option<Permit<C>>, LockError> {
        let guard = self.locks.try_grant(name, Kind::Permit(self.permits))?;
        Ok(guard.map(|guard| Permit { guard }))
    }
}

impl<C> Locks<C>
where
    C: redis::ConnectionLike + Send + 'static,
{
    /// Read/write locks over this handle; see [`RwLocks`].
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::blocking::Locks) -> Result<(), lockscript::LockError> {
    /// locks.rw().read("catalog")?.release()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn rw(&self) -> RwLocks<C> {
        RwLocks {
            locks: self.clone(),
            readers: Arc::default(),
        }
    }

    /// Semaphores of `permits` permits per name over this handle; see [`Semaphores`].
    ///
    /// ```no_run
    /// # fn f(locks: lockscript::blocking::Locks) -> Result<(), lockscript::LockError> {
    /// locks.semaphore(4).acquire("encoder")?.release()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn semaphore(&self, permits: u32) -> Semaphores<C> {
        Semaphores {
            locks: self.clone(),
            permits,
        }
    }
}

/// Ownership of a read lock; the methods of [`LockGuard`] through `Deref`.
pub struct ReadGuard<C = redis::Connection>
where
    C: redis::ConnectionLike + Send + 'static,
{
    guard: LockGuard<C>,
    _mark: ReadMark,
}

impl<C: redis::ConnectionLike + Send + 'static> ReadGuard<C> {
    /// Gives the read lock back; see [`crate::ReadGuard::release`].
    ///
    /// ```no_run
    /// # fn f(guard: lockscript::blocking::ReadGuard) -> Result<(), lockscript::LockError> {
    /// guard.release()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn release(self) -> Result<(), LockError> {
        self.guard.release()
    }
}

/// Ownership of the write lock; the methods of [`LockGuard`] through `Deref`.
pub struct WriteGuard<C = redis::Connection>
where
    C: redis::ConnectionLike + Send + 'static,
{
    guard: LockGuard<C>,
    readers: Arc<Readers>,
}

impl<C: redis::ConnectionLike + Send + 'static> WriteGuard<C> {
    /// Gives the write lock to the next in line; see [`crate::WriteGuard::release`].
    ///
    /// ```no_run
    /// # fn f(guard: lockscript::blocking::WriteGuard) -> Result<(), lockscript::LockError> {
    /// guard.release()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn release(self) -> Result<(), LockError> {
        self.guard.release()
    }

    /// Turns the write lock into a read lock in one step; see
    /// [`crate::WriteGuard::downgrade`].
    ///
    /// ```no_run
    /// # fn f(guard: lockscript::blocking::WriteGuard) -> Result<(), lockscript::LockError> {
    /// guard.downgrade()?.release()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn downgrade(self) -> Result<ReadGuard<C>, LockError> {
        let guard = self.guard.downgrade()?;
        let mark = self.readers.mark(guard.name());
        Ok(ReadGuard { guard, _mark: mark })
    }
}

/// Ownership of one permit; the methods of [`LockGuard`] through `Deref`.
pub struct Permit<C = redis::Connection>
where
    C: redis::ConnectionLike + Send + 'static,
{
    guard: LockGuard<C>,
}

impl<C: redis::ConnectionLike + Send + 'static> Permit<C> {
    /// Gives the permit back; see [`crate::Permit::release`].
    ///
    /// ```no_run
    /// # fn f(permit: lockscript::blocking::Permit) -> Result<(), lockscript::LockError> {
    /// permit.release()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn release(self) -> Result<(), LockError> {
        self.guard.release()
    }
}

macro_rules! guard_deref {
    ($($ty:ident),*) => {$(
        impl<C: redis::ConnectionLike + Send + 'static> Deref for $ty<C> {
            type Target = LockGuard<C>;
            fn deref(&self) -> &LockGuard<C> {
                &self.guard
            }
        }

        impl<C: redis::ConnectionLike + Send + 'static> fmt::Debug for $ty<C> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.guard.owned.held.lease.debug(f, concat!("blocking::", stringify!($ty)))
            }
        }
    )*};
}
guard_deref!(ReadGuard, WriteGuard, Permit);
