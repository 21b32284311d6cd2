//! The faces users see: [`handle`] (the builder every lock handle shares), [`locks`] (`Locks`, `LockGuard`), [`rw`] (`RwLocks`,
//! `Semaphores`), [`redlock`], [`blocking`], guarded scripts ([`guarded`]) and SQL
//! fencing ([`sql`]). Each is a thin wrapper over an executor.

#[cfg(feature = "blocking")]
pub mod blocking;
#[cfg(feature = "tokio")]
pub(crate) mod election;
#[cfg(any(feature = "tokio", feature = "blocking"))]
pub(crate) mod guarded;
#[cfg(any(feature = "tokio", feature = "blocking"))]
pub(crate) mod handle;
#[cfg(feature = "tokio")]
pub(crate) mod locks;
#[cfg(feature = "tokio")]
pub(crate) mod multi;
#[cfg(feature = "redlock")]
pub(crate) mod redlock;
#[cfg(feature = "tokio")]
pub(crate) mod rw;
pub mod sql;
