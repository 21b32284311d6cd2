//! The faces users see: [`locks`] (`Locks`, `LockGuard`), [`rw`] (`RwLocks`,
//! `Semaphores`), [`redlock`], [`blocking`], guarded scripts ([`guarded`]) and SQL
//! fencing ([`sql`]). Each is a thin wrapper over an executor.

#[cfg(feature = "blocking")]
pub mod blocking;
#[cfg(any(feature = "tokio", feature = "blocking"))]
pub(crate) mod guarded;
#[cfg(feature = "tokio")]
pub(crate) mod locks;
#[cfg(feature = "redlock")]
pub(crate) mod redlock;
#[cfg(feature = "tokio")]
pub(crate) mod rw;
pub mod sql;
