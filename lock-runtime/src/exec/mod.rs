//! The executors: they carry the lock machine's answers out, doing the I/O and the
//! timing and nothing else. The async one ([`engine`], [`guard`], [`watchdog`]) runs on
//! tokio over a [`backend::Backend`] (one server or a Cluster: [`node`]; N masters:
//! [`quorum`]); the blocking one ([`blocking`]) over the same verbs on a sync connection,
//! and the handle's one background thread. Both share the local queue ([`queue`]), what a
//! waiter waits on ([`waiting`]) and the release notifications ([`notify`]). With the
//! `model` feature a third one, `model`, hands every call to a model world as data, for
//! the model checker of lockscript's own tests.

#[cfg(feature = "tokio")]
pub(crate) mod backend;
#[cfg(feature = "blocking")]
pub(crate) mod block;
#[cfg(feature = "blocking")]
pub(crate) mod blocking;
#[cfg(feature = "cluster")]
pub(crate) mod cluster;
#[cfg(feature = "tokio")]
pub(crate) mod engine;
#[cfg(feature = "tokio")]
pub(crate) mod guard;
#[cfg(feature = "model")]
pub mod model;
#[cfg(feature = "tokio")]
pub(crate) mod multi;
#[cfg(feature = "tokio")]
pub(crate) mod node;
pub(crate) mod notify;
pub(crate) mod owned;
pub(crate) mod queue;
#[cfg(feature = "redlock")]
pub(crate) mod quorum;
pub(crate) mod waiting;
#[cfg(feature = "tokio")]
pub(crate) mod watchdog;
