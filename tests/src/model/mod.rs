//! The model checker (issue 42): the real lock machine driven through every
//! order of events a small world allows, and the guide's promises checked in every state
//! it reaches.
//!
//! `cargo test -p lockscript-harness --features model --test model_checker` runs the
//! bounded search CI runs (`./run tests` includes it); `./run model --depth N` a deeper
//! one by hand (the `model` binary, in release).
//!
//! # What is modelled
//!
//! - **Clients** of one lock name (2 by default), each a task that calls `lock()`
//!   (attempts, sleeps, its deadline) or `try_lock()` ([`Config::try_locks`]), holds the
//!   lease with the watchdog renewing it, and releases it, `rounds` times; each runs lockscript's own machine through its model
//!   executor (`lockscript::__private::model`): the same `Acquire`, `LeaseState`, guard
//!   ownership and background releases of grants nobody owns as the async and blocking
//!   faces, fed replies and the model's clock. No rule of the lock is written again here.
//! - **The server** ([`server`]): the lock key and the fencing counter with their TTLs on
//!   the server's clock; acquire-with-retry.lua, renew.lua and compare-del.lua each one
//!   atomic step; the counter restarting from the server's clock in microseconds. With
//!   [`Config::native`] it has `SET … IFEQ` and `DELIFEQ` (each one step too) and
//!   answers `COMMAND DOCS`; the handles ask it beside their first lease call, as the
//!   executors do, and go native once answered. [`Config::denied`]: the lock user's ACL
//!   refuses the native commands, or `PUBLISH` (beside a native release, and inside
//!   compare-del.lua). Its steps are checked against the scripts themselves: a property
//!   test runs them beside the model's Redis ([`store`]: lockscript's own scripts in Lua
//!   5.1 on a small Redis, itself checked against a real one by
//!   `store_matches_redis.rs`), answer by answer. The store is the server of the
//!   queue's world ([`queue`]: fair locks, readers and writers, permits, kinds mixed on
//!   one name), which runs fair-queue.lua itself (too large to write again by hand).
//! - **The world's events** ([`world`]), each switchable in [`Events`] and each a fault
//!   counted against a budget ([`Config::faults`]): an answer that misses its caller's
//!   bound (a timeout, a reset, a lost reply), the request still able to run later; a
//!   request run ahead of one its handle sent earlier (two connections of one handle: a
//!   pool, a reconnect); a watchdog that lets a due renewal wait while the clock moves (a
//!   GC pause, SIGSTOP), past the lease too; the server restarted without its data; a
//!   caller dropping its `lock()` or `try_lock()` midway (a cancelled future, a timeout
//!   around the call); an older server taking over with the data ([`Events::downgrades`]),
//!   which refuses the native commands the handles found (`ERR unknown command`); a
//!   clock stepping, once a history: the server's wall clock back
//!   ([`Events::clock_back`]: its keys live longer, `TIME` goes back) or ahead
//!   ([`Events::clock_ahead`], beyond the drift margin: for the checker's own tests), a
//!   client's wall clock ahead ([`Events::wall_ahead`]; its monotonic clock, the
//!   model's, does not step); the lock user's ACL changed midway
//!   ([`Events::acl_changes`]: rights revoked, and restored).
//!   Within their bounds answers come in any order and at any time, sleepers wake at any
//!   later tick, holders release at any time: those are not faults.
//! - **The properties** ([`property`]): exclusion by the holders' own clocks; the server
//!   holding what a holder believes; fences rising in grant order; a lease released with
//!   `Ok` never reported lost; `lost` by the validity end; no counter restarted more than
//!   2 ms ahead of the server's clock (what keeps fences rising across later restarts);
//!   nothing orphaned (a grant nobody owns is never a guard's, and is gone from the
//!   server once its background release has ended on the server's answer); a lease no
//!   fault touched is never reported lost (what a refused native command must not
//!   cost).
//!
//! Release notifications and their loss are covered without being modelled: a sleeper
//! wakes at any later tick, which is what a notification (soon) and its loss (the nap's
//! end) both give. Not yet: clocks drifting, and steps within the drift margin (the
//! margin is 1% of the lease and 2 ms, smaller than a tick: every instant the model
//! visits is a tick's), handover between callers of one handle, Redlock, and the
//! executors' own timing (the chaos checker and the bounds tests keep that). The queued
//! kinds have a world of their own ([`queue`]), with its own properties (first come
//! first served, no lost wake-up, kinds and counts).
//!
//! # Why a search of its own
//!
//! `stateright` (0.30 on docs.rs) explores a model whose state is a value: its
//! `Model::next_state` makes a new state from a borrowed one for every branch, and its
//! checkers keep the states they have yet to expand, compared by `Hash` and `Eq`. The
//! machine's state is not such a value: a lease is an `Arc<LeaseState>` whose times sit
//! behind a `Mutex` beside tokio's `Notify` and a `Condvar`, an acquisition keeps
//! `LockError`s (a `redis::RedisError` inside, not `Clone`), and owner tokens are drawn
//! at random, so two equal situations are never equal values. A copy of the machine made
//! for the model would check the copy.
//!
//! So the model executor gives each machine object two things, with the `model` feature
//! only: a `fork` (a copy that goes on alone: a new lease with a copy of its times, errors
//! copied as the executors copy them) and a `digest` (everything a later call can depend
//! on, the random tokens left out). This search keeps no state in memory, only the way to
//! each (its parent and the action from it: 14 bytes a state, so millions fit): when a
//! state's turn comes it is rebuilt by running its history again on fresh machine
//! objects (the machine is deterministic given its inputs and the instants it is fed;
//! the naps it draws at random are not kept: the model decides when a sleeper wakes),
//! and each branch from it is a fork. States are told apart by a 64-bit
//! [`fingerprint`] of the world: the model's own data and each machine object's digest,
//! owner tokens named by where they are first met, calls walked in an order of what they
//! are, and the clients (all alike) in an order of their own digests, so that histories
//! that reach the same situation by different orders, with different random tokens or
//! with the clients' parts swapped, count once. Breadth first, the first violation comes
//! with a shortest history, printed as a readable trace.
//!
//! Time moves in ticks of [`world::TICK`] (100 ms): leases of three ticks, renewals due
//! every tick, calls bounded at one, so that a lease running out, a renewal due, a call
//! given up and a key expiring all happen within a short history.

pub mod explore;
pub mod fingerprint;
pub mod property;
pub mod queue;
pub mod server;
pub mod store;
pub mod world;

pub use explore::{Report, Violation, explore};
pub use property::Property;

/// The world's events, each switchable.
#[derive(Clone, Debug)]
#[allow(clippy::struct_excessive_bools)]
pub struct Events {
    /// An answer may miss its caller's bound (a slow or lost request or reply, a reset):
    /// the caller gives up, and the request may still run later.
    pub timeouts: bool,
    /// A client's request may run ahead of one its handle sent earlier (two connections
    /// of one handle: a pool, a reconnect); else requests run in the order sent.
    pub reorder: bool,
    /// A watchdog may let a due renewal wait while the clock moves (a GC pause, SIGSTOP),
    /// for as long as the faults allow.
    pub pauses: bool,
    /// Restarts of the server without its data, at most.
    pub restarts: u32,
    /// A client may drop its `lock()` or `try_lock()` midway (a cancelled future, a
    /// timeout around the call).
    pub cancels: bool,
    /// A holder may call `extend` (for [`Config::extend_ttl`]) beside its watchdog's
    /// renewals.
    pub extends: bool,
    /// A holder may drop its guard without a release (an early return, a panic).
    pub drops: bool,
    /// Restarts of the server with its data (connections drop), at most.
    pub restarts_keeping: u32,
    /// Times the server is replaced by an older one with its data, at most (a failover
    /// to a replica of an older version, a rolling downgrade): from then on it refuses
    /// the native commands a handle found before (`ERR unknown command`); connections
    /// drop. Only with [`Config::native`].
    pub downgrades: u32,
    /// Ticks the server's wall clock may step back, once a history (0: never; with the
    /// others below, one clock step a history in all). Within the promise while less than
    /// a fencing counter's idle time (its lease and the retention): its keys live
    /// longer, and a counter that idled out restarts from a clock that went back. Not in a
    /// history with a restart that forgot the data: a counter so lost restarts at once,
    /// with no idle time to cover the step, and the guide promises nothing then.
    pub clock_back: u32,
    /// Ticks the server's wall clock may jump ahead, once a history (0: never). Any tick
    /// is beyond the drift margin, which the exclusion promise excludes: for the
    /// checker's own tests.
    pub clock_ahead: u32,
    /// Ticks a client's wall clock may step ahead, once a history (0: never); its
    /// monotonic clock does not step.
    pub wall_ahead: u32,
    /// Times the lock user's ACL may change in a history (0: never), each time between
    /// what it refused at the start ([`Config::denied`]) and [`acl_to`](Self::acl_to):
    /// rights revoked midway, and restored.
    pub acl_changes: u32,
    /// What the ACL refuses once changed.
    pub acl_to: server::Denied,
}

impl Default for Events {
    /// Every event on, one restart.
    fn default() -> Self {
        Self {
            timeouts: true,
            reorder: true,
            pauses: true,
            restarts: 1,
            cancels: true,
            extends: true,
            drops: true,
            restarts_keeping: 1,
            downgrades: 0,
            clock_back: 0,
            clock_ahead: 0,
            wall_ahead: 0,
            acl_changes: 0,
            acl_to: server::Denied::Nothing,
        }
    }
}

/// The world to search, and how far.
#[derive(Clone, Debug)]
pub struct Config {
    /// Clients of the one lock name.
    pub clients: usize,
    /// How many of them (the last ones) call `try_lock()` instead of `lock()`.
    pub try_locks: usize,
    /// `lock()` calls each client makes, one after the other.
    pub rounds: u8,
    /// The lease, in ticks.
    pub ttl: u32,
    /// The ttl a holder's `extend` asks for, in ticks.
    pub extend_ttl: u32,
    /// The bound on one call's answer, in ticks.
    pub response_timeout: u32,
    /// How long `lock()` waits at most, in ticks.
    pub wait_timeout: u32,
    /// How long a fencing counter outlives its grant's lease, in ticks.
    pub fence_retention: u32,
    /// The latest a request may run after it was sent, in ticks; later it never does.
    pub late: u32,
    /// The clock stops here (ticks).
    pub horizon: u32,
    /// Histories are cut at this many actions.
    pub depth: usize,
    /// What the world may do (each a fault, counted against [`faults`](Self::faults)).
    pub events: Events,
    /// Faults a history may have: each answer that misses its caller's bound, each
    /// request run ahead of one its handle sent earlier, each tick a due renewal waits,
    /// each restart. The callers' own calls beyond `lock()` and `release()` (a dropped
    /// `lock()`, an `extend`, a dropped guard) count too, to keep the search bounded.
    /// Within their bound answers come in any order and at any time, sleepers wake at
    /// any tick, holders release at any time: none of that is a fault.
    pub faults: u32,
    /// A defect planted in the model server, for the fence check's own test: a counter
    /// that restarts from 1 instead of the server's clock.
    pub counter_from_one: bool,
    /// The server starts with `SET … IFEQ` and `DELIFEQ` (Valkey 9), and the handles
    /// use them where they found them (`native_commands`, on by default in the faces):
    /// renewals and releases go native once a handle's question (`COMMAND DOCS`, asked
    /// beside the first lease call) is answered, and scripts before. Off: every handle
    /// forces scripts, as on Redis 7.0.
    pub native: bool,
    /// What the lock user's ACL refuses at the start (and for the whole search, unless
    /// [`Events::acl_changes`]).
    pub denied: server::Denied,
    /// The properties checked.
    pub properties: Vec<Property>,
}

impl Default for Config {
    /// The bounded search CI runs: two clients, one `lock()` each, 300 ms leases, calls
    /// bounded at 100 ms and run up to 200 ms after they were sent, `lock()` waiting up
    /// to 500 ms, the clock stopping at 800 ms; every world event on (`extend` asks for
    /// 200 ms), two faults a history (a restart with or without data among them); every
    /// history of up to 16 actions.
    fn default() -> Self {
        Self {
            clients: 2,
            try_locks: 0,
            rounds: 1,
            ttl: 3,
            extend_ttl: 2,
            response_timeout: 1,
            wait_timeout: 5,
            fence_retention: 1,
            late: 2,
            horizon: 8,
            depth: 16,
            events: Events::default(),
            faults: 2,
            counter_from_one: false,
            native: false,
            denied: server::Denied::Nothing,
            properties: Property::ALL.to_vec(),
        }
    }
}
