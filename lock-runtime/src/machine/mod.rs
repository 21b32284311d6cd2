//! The lock machine: every rule of a lock as plain state, fed replies and the clock,
//! with no I/O and no waiting primitive of its own. Each rule has one home:
//!
//! | rule | home |
//! |---|---|
//! | what one acquisition does next: attempts, confirmation, fair queue calls, handover offers, late grants, grants nobody owns | [`acquire`] |
//! | the wait loop's pacing, its bound and its error | [`wait`], with [`retry`] |
//! | what an attempt's reply means; a grant; a grant nobody owns and its release's pace | [`grant`] |
//! | fair tickets, the server's clock mapped onto ours, the claim lease, downgrades | [`fair`] |
//! | a lease's validity, drift, renewal pacing, commands in flight, loss | [`lease`] |
//! | limits on settings; validity = ttl - drift | [`limit`] |
//! | the settings of a handle, key names and kinds, the protocol's script calls and replies | [`settings`], [`key`], [`call`], [`reply`] |
//! | when the watchdog acts | [`schedule`] |
//! | readers and permits of a shared grant | [`readers`] |
//! | a server's native renew and release commands: asking for them, falling back | [`native`] |
//! | a plain lock's acquire as one `MULTI`/`EXEC`: its replies, the counter's restart | [`transact`] |
//! | an election: the leader's record, what a read says, an observer's pace | [`elect`] |
//! | a multi-lock's names, their order and groups, its attempts and wait | [`multi`] |
//! | a Redis Cluster's routing: the slot of a key, a command, a pipeline; which primary serves it; redirections | [`slots`] |
//! | owner tokens | [`token`] |
//! | what is counted and timed (feature `metrics`) | [`metrics`] |

pub(crate) mod acquire;
pub(crate) mod call;
pub(crate) mod elect;
pub(crate) mod fair;
pub(crate) mod grant;
pub(crate) mod key;
pub(crate) mod lease;
pub(crate) mod limit;
pub mod metrics;
pub(crate) mod multi;
pub(crate) mod mutants;
pub(crate) mod native;
pub(crate) mod readers;
pub(crate) mod reply;
pub(crate) mod retry;
pub(crate) mod schedule;
pub(crate) mod settings;
#[cfg_attr(not(feature = "cluster"), allow(dead_code))]
pub(crate) mod slots;
pub(crate) mod token;
#[cfg_attr(not(any(feature = "tokio", feature = "blocking")), allow(dead_code))]
pub(crate) mod transact;
pub(crate) mod wait;
