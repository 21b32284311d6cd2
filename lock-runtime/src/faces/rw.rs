//! Read/write locks and semaphores with owned permits, on one Redis server or a Redis
//! Cluster: [`RwLocks`] and [`Semaphores`], made from a [`Locks`] handle and sharing its
//! connection, settings, notifications and watchdog.
//!
//! Both are built on the fair queue (see [`Locks::fair`]): the waiters of every
//! process stand in one queue per name on the server and are served in arrival order
//! by direct handoff. Every holder (each reader, the writer, each permit) has its own
//! owner token, lease, watchdog, loss signal and fencing token: a crashed holder's
//! share comes back when its lease ends.
//!
//! The rules the server keeps are in `scripts/fair-queue.lua`; the ones a handle keeps
//! are here: an upgrade (a write lock asked for by the task that holds the read lock)
//! is refused with [`LockError::Upgrade`] instead of waiting for itself.

use std::fmt;
use std::sync::Arc;

use redis::aio::ConnectionManager;

use crate::LockError;
use crate::exec::engine::Engine;
use crate::exec::guard::Guard;
use crate::exec::node::Node;
use crate::faces::locks::{LockGuard, Locks};
use crate::machine::key::Kind;
use crate::machine::readers::{ReadMark, Readers};

/// Read/write locks: many readers or one writer per name, served in arrival order, a
/// waiting writer stopping the readers that come after it (writer preference). Made by
/// [`Locks::rw`]; cheap to clone.
///
/// Fencing tokens order every grant of a name: a writer's token is higher than every
/// earlier reader's and writer's, so a store can refuse a write from a holder that a
/// later writer followed. A write lock can be [downgraded](WriteGuard::downgrade) to a
/// read lock; the opposite, asked for by the task holding the read lock, is refused
/// with [`LockError::Upgrade`].
///
/// ```no_run
/// # async fn demo() -> Result<(), lockscript::LockError> {
/// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
/// let rw = lockscript::Locks::connect(&client).await?.rw();
/// let reader = rw.read("catalog").await?;
/// // ... many readers at once ...
/// reader.release().await?;
/// let writer = rw.write("catalog").await?;
/// // ... alone: write with writer.fencing_token() ...
/// writer.release().await?;
/// # Ok(())
/// # }
/// ```
pub struct RwLocks<C = ConnectionManager> {
    engine: Engine<Node<C>>,
    readers: Arc<Readers>,
}

impl<C: Clone> Clone for RwLocks<C> {
    fn clone(&self) -> Self {
        Self {
            engine: self.engine.clone(),
            readers: Arc::clone(&self.readers),
        }
    }
}

impl<C> fmt::Debug for RwLocks<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLocks")
            .field("settings", &self.engine.settings)
            .finish_non_exhaustive()
    }
}

impl<C> RwLocks<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    pub(crate) fn new(engine: Engine<Node<C>>) -> Self {
        Self {
            engine,
            readers: Arc::default(),
        }
    }

    /// Waits for the read lock of `name`, as [`Locks::lock`] waits (same bounds, same
    /// cancel-safety), behind any writer that holds it or waits for it.
    ///
    /// ```no_run
    /// # async fn f(rw: lockscript::RwLocks) -> Result<(), lockscript::LockError> {
    /// let guard = rw.read("catalog").await?;
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn read(&self, name: &str) -> Result<ReadGuard<C>, LockError> {
        let watchdog = self.engine.settings.watchdog;
        let inner = self.engine.grant(name, Kind::Read, watchdog).await?;
        Ok(self.reader(inner))
    }

    /// One attempt at the read lock: `None` when a writer holds it or anyone waits.
    ///
    /// ```no_run
    /// # async fn f(rw: lockscript::RwLocks) -> Result<(), lockscript::LockError> {
    /// if let Some(guard) = rw.try_read("catalog").await? { guard.release().await?; }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_read(&self, name: &str) -> Result<Option<ReadGuard<C>>, LockError> {
        let inner = self.engine.try_grant(name, Kind::Read).await?;
        Ok(inner.map(|inner| self.reader(inner)))
    }

    /// Waits for the write lock of `name`: until no reader or writer holds it and every
    /// waiter that came before is served. [`LockError::Upgrade`] at once if this task
    /// holds the read lock of `name` through this handle.
    ///
    /// ```no_run
    /// # async fn f(rw: lockscript::RwLocks) -> Result<(), lockscript::LockError> {
    /// let guard = rw.write("catalog").await?;
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn write(&self, name: &str) -> Result<WriteGuard<C>, LockError> {
        self.readers.refuse_upgrade(name)?;
        let watchdog = self.engine.settings.watchdog;
        let inner = self.engine.grant(name, Kind::Write, watchdog).await?;
        Ok(WriteGuard {
            inner: LockGuard::from_grant(inner),
            readers: Arc::clone(&self.readers),
        })
    }

    /// One attempt at the write lock: `None` when anyone holds it or waits.
    /// [`LockError::Upgrade`] if this task holds its read lock through this handle.
    ///
    /// ```no_run
    /// # async fn f(rw: lockscript::RwLocks) -> Result<(), lockscript::LockError> {
    /// if let Some(guard) = rw.try_write("catalog").await? { guard.release().await?; }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_write(&self, name: &str) -> Result<Option<WriteGuard<C>>, LockError> {
        self.readers.refuse_upgrade(name)?;
        let inner = self.engine.try_grant(name, Kind::Write).await?;
        Ok(inner.map(|inner| WriteGuard {
            inner: LockGuard::from_grant(inner),
            readers: Arc::clone(&self.readers),
        }))
    }

    fn reader(&self, inner: Guard<Node<C>>) -> ReadGuard<C> {
        let mark = self.readers.mark(&inner.owned.held.lease.keys.name);
        ReadGuard {
            inner: LockGuard::from_grant(inner),
            _mark: mark,
        }
    }
}

/// Semaphores with owned permits: at most `permits` holders per name, each with its own
/// owner token, lease, watchdog, loss signal and fencing token, served in arrival
/// order. A crashed holder's permit comes back when its lease ends. Made by
/// [`Locks::semaphore`]; cheap to clone.
///
/// The number of permits travels with every call: every handle of a name should use
/// the same. It can change at run time: calls with a new number admit holders while
/// fewer than that many hold a permit (permits already held are kept until released,
/// so lowering it takes effect as holders leave).
///
/// ```no_run
/// # async fn demo() -> Result<(), lockscript::LockError> {
/// let client = redis::Client::open("redis://127.0.0.1:6390/")?;
/// let pool = lockscript::Locks::connect(&client).await?.semaphore(4);
/// let permit = pool.acquire("encoder").await?; // at most 4 at once, across processes
/// permit.release().await?;
/// # Ok(())
/// # }
/// ```
pub struct Semaphores<C = ConnectionManager> {
    engine: Engine<Node<C>>,
    permits: u32,
}

impl<C: Clone> Clone for Semaphores<C> {
    fn clone(&self) -> Self {
        Self {
            engine: self.engine.clone(),
            permits: self.permits,
        }
    }
}

impl<C> fmt::Debug for Semaphores<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphores")
            .field("permits", &self.permits)
            .field("settings", &self.engine.settings)
            .finish_non_exhaustive()
    }
}

impl<C> Semaphores<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    pub(crate) fn new(engine: Engine<Node<C>>, permits: u32) -> Self {
        Self { engine, permits }
    }

    /// The number of permits per name.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Waits for a permit of `name`, as [`Locks::lock`] waits (same bounds, same
    /// cancel-safety). [`LockError::InvalidSettings`] if the semaphore has 0 permits.
    ///
    /// ```no_run
    /// # async fn f(pool: lockscript::Semaphores) -> Result<(), lockscript::LockError> {
    /// let permit = pool.acquire("encoder").await?;
    /// permit.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire(&self, name: &str) -> Result<Permit<C>, LockError> {
        let watchdog = self.engine.settings.watchdog;
        let kind = Kind::Permit(self.permits);
        let inner = self.engine.grant(name, kind, watchdog).await?;
        Ok(Permit {
            inner: LockGuard::from_grant(inner),
        })
    }

    /// One attempt: `None` when every permit is held or anyone waits.
    ///
    /// ```no_run
    /// # async fn f(pool: lockscript::Semaphores) -> Result<(), lockscript::LockError> {
    /// if let Some(permit) = pool.try_acquire("encoder").await? { permit.release().await?; }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_acquire(&self, name: &str) -> Result<Option<Permit<C>>, LockError> {
        let kind = Kind::Permit(self.permits);
        let inner = self.engine.try_grant(name, kind).await?;
        Ok(inner.map(|inner| Permit {
            inner: LockGuard::from_grant(inner),
        }))
    }
}

impl<C> Locks<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Read/write locks over this handle (its connection, settings, notifications and
    /// watchdog); see [`RwLocks`].
    ///
    /// ```no_run
    /// # async fn f(locks: lockscript::Locks) -> Result<(), lockscript::LockError> {
    /// let rw = locks.rw();
    /// let guard = rw.read("catalog").await?;
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn rw(&self) -> RwLocks<C> {
        RwLocks::new(self.engine.clone())
    }

    /// Semaphores of `permits` permits per name over this handle; see [`Semaphores`].
    ///
    /// ```no_run
    /// # async fn f(locks: lockscript::Locks) -> Result<(), lockscript::LockError> {
    /// let permit = locks.semaphore(4).acquire("encoder").await?;
    /// permit.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn semaphore(&self, permits: u32) -> Semaphores<C> {
        Semaphores::new(self.engine.clone(), permits)
    }
}

/// Ownership of a read lock: [`RwLocks::read`]. The methods of [`crate::LockGuard`]
/// (fencing token, lease, loss signal, `extend`, `is_held`); release it with
/// [`release`](Self::release), or drop it to release it in the background.
pub struct ReadGuard<C = ConnectionManager>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    inner: LockGuard<C>,
    _mark: ReadMark,
}

impl<C> ReadGuard<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Stops the watchdog and gives the read lock back; when it was the last reader, the
    /// writer first in line gets the lock. [`LockError::NotHeld`] if the lease had been
    /// lost.
    ///
    /// ```no_run
    /// # async fn f(guard: lockscript::ReadGuard) -> Result<(), lockscript::LockError> {
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn release(self) -> Result<(), LockError> {
        self.inner.into_grant().release().await
    }
}

/// Ownership of the write lock: [`RwLocks::write`]. The methods of
/// [`crate::LockGuard`]; release it with [`release`](Self::release), or turn it into a
/// read lock with [`downgrade`](Self::downgrade).
pub struct WriteGuard<C = ConnectionManager>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    inner: LockGuard<C>,
    readers: Arc<Readers>,
}

impl<C> WriteGuard<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Stops the watchdog and gives the write lock to the next in line (a writer, or the
    /// readers first in line together). [`LockError::NotHeld`] if the lease had been
    /// lost.
    ///
    /// ```no_run
    /// # async fn f(guard: lockscript::WriteGuard) -> Result<(), lockscript::LockError> {
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn release(self) -> Result<(), LockError> {
        self.inner.into_grant().release().await
    }

    /// Turns the write lock into a read lock in one step, with no writer in between:
    /// the same owner token and fencing token, a fresh lease, its own watchdog; the
    /// readers first in line come in with it. [`LockError::NotHeld`] if the write lease
    /// was lost. After another error the write lock is released in the background.
    ///
    /// ```no_run
    /// # async fn f(guard: lockscript::WriteGuard) -> Result<(), lockscript::LockError> {
    /// let reader = guard.downgrade().await?;
    /// reader.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn downgrade(self) -> Result<ReadGuard<C>, LockError> {
        let readers = Arc::clone(&self.readers);
        let inner = self.inner.into_grant().downgrade().await?;
        let mark = readers.mark(&inner.owned.held.lease.keys.name);
        Ok(ReadGuard {
            inner: LockGuard::from_grant(inner),
            _mark: mark,
        })
    }
}

/// Ownership of one permit: [`Semaphores::acquire`]. The methods of
/// [`crate::LockGuard`]; release it with [`release`](Self::release), or drop it to
/// release it in the background.
pub struct Permit<C = ConnectionManager>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    inner: LockGuard<C>,
}

impl<C> Permit<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Stops the watchdog and gives the permit back; the first waiter in line gets it.
    /// [`LockError::NotHeld`] if the lease had been lost.
    ///
    /// ```no_run
    /// # async fn f(permit: lockscript::Permit) -> Result<(), lockscript::LockError> {
    /// permit.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn release(self) -> Result<(), LockError> {
        self.inner.into_grant().release().await
    }
}

/// The guards of read/write locks and semaphores are lock guards (their lease, `extend`,
/// `is_held`), with a release of their own kind; and their `Debug` never shows the owner
/// token.
macro_rules! kind_guard {
    ($($ty:ident),*) => {$(
        impl<C> std::ops::Deref for $ty<C>
        where
            C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
        {
            type Target = LockGuard<C>;

            fn deref(&self) -> &LockGuard<C> {
                &self.inner
            }
        }

        impl<C> fmt::Debug for $ty<C>
        where
            C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
        {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.inner.grant().owned.held.lease.debug(f, stringify!($ty))
            }
        }
    )*};
}
kind_guard!(ReadGuard, WriteGuard, Permit);
