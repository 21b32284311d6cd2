//! What the async engine asks of the servers that hold its locks: one server (or a
//! Cluster), or N independent masters (Redlock). Each call is bounded: by the handle's
//! response timeout on one server, by the node timeout per round for Redlock.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;

use crate::Invocation;
use crate::LockError;
use crate::exec::queue::Offer;
use crate::machine::call::Owner;
use crate::machine::fair::Ticket;
use crate::machine::grant::{Abandoned, Outcome};
use crate::machine::key::Keys;
use crate::machine::lease::{LeaseState, Sending};
use crate::machine::reply::Confirmed;
use crate::machine::settings::Settings;

/// Where [`Backend::renew_all`] hands each lease's answer: its place among the
/// renewals, and what [`Backend::renew`] would have answered.
pub type Answered<'a> = dyn Fn(usize, Result<Option<Instant>, LockError>) + Sync + 'a;

/// The server side of the lock protocol, for the async engine.
pub trait Backend: Clone + Send + Sync + 'static {
    /// The handle's name in its `Debug` output.
    const FACE: &'static str;

    /// Its guard's name in their `Debug` output.
    const GUARD: &'static str;

    /// Whether a release can hand the lock to a waiter of the same handle in one step
    /// (handover.lua).
    const HANDOVER: bool;

    /// Whether a grant lives on one server (one node, or one Cluster slot), so that a
    /// guarded script there can check it; not so for a Redlock quorum.
    const ONE_NODE: bool;

    /// Whether this backend can work with `settings` (checked at every lock call).
    fn validate(&self, settings: &Settings) -> Result<(), LockError> {
        let _ = settings;
        Ok(())
    }

    /// One attempt to take `keys` for `token` with the settings' ttl. An error that
    /// [may have run](LockError::may_have_run) the script may have granted it.
    fn acquire(&self, of: Owner<'_>) -> impl Future<Output = Result<Outcome, LockError>> + Send;

    /// What a fresh grant must pass before it is handed to the caller (e.g. `WAIT` for
    /// replicas), within `left` of the attempt's response timeout (plus the `WAIT`
    /// timeout). On an error the grant is released again.
    fn confirm(
        &self,
        of: Owner<'_>,
        left: Duration,
    ) -> impl Future<Output = Result<(), LockError>> + Send {
        let _ = (of, left);
        async { Ok(()) }
    }

    /// Sets the lease to `ttl` if `token` still holds the lock: `Some(from)` with the
    /// instant the new lease counts from, `None` if the lock is not ours.
    fn renew(
        &self,
        of: Owner<'_>,
        ttl: Duration,
    ) -> impl Future<Output = Result<Option<Instant>, LockError>> + Send;

    /// The renewals of several leases (`Sending` says each one's ttl), in as few round
    /// trips as the backend can; each lease's own answer, as [`renew`](Self::renew)
    /// gives it, handed to `answered(i, answer)` (`i` its place in `due`) once, as soon
    /// as it is known. One failed, refused or slow renewal hides or delays no other's.
    fn renew_all(
        &self,
        due: &[(Arc<LeaseState>, Sending)],
        answered: &Answered<'_>,
    ) -> impl Future<Output = ()> + Send {
        let mut each: FuturesUnordered<_> = (due.iter().enumerate())
            .map(|(i, (lease, sending))| async move {
                (i, self.renew(lease.owner(), sending.ttl).await)
            })
            .collect();
        async move {
            while let Some((i, reply)) = each.next().await {
                answered(i, reply);
            }
        }
    }

    /// Deletes the lock if `token` holds it (waking waiters); whether it did.
    fn release(&self, of: Owner<'_>) -> impl Future<Output = Result<bool, LockError>> + Send;

    /// Releases a grant nobody owns (see [`crate::machine::grant::Abandoned`]); whether it did.
    fn release_abandoned(
        &self,
        settings: &Settings,
        abandoned: &Abandoned,
    ) -> impl Future<Output = Result<bool, LockError>> + Send {
        async move {
            self.release(Owner::new(settings, &abandoned.keys, &abandoned.token))
                .await
        }
    }

    /// Whether the lock's waiter queue lives on the server (fair mode, fair-queue.lua):
    /// one server or one Cluster slot, not a quorum.
    const FAIR: bool = false;

    /// fair-queue.lua's `acquire` for `ticket`: take the lock, or queue (or renew) the
    /// ticket. Only called when [`FAIR`](Self::FAIR) is true.
    fn fair_acquire(
        &self,
        settings: &Settings,
        keys: &Keys,
        ticket: &Ticket,
    ) -> impl Future<Output = Result<(i64, i64, i64, i64), LockError>> + Send {
        let _ = (settings, keys, ticket);
        async {
            Err(LockError::InvalidSettings(
                "fair mode needs one server or one Redis Cluster".to_owned(),
            ))
        }
    }

    /// Runs a script call answered by `1` (done) or `0` on the lock's server (a
    /// read/write lock's downgrade). Only called when [`FAIR`](Self::FAIR) is true.
    fn check(
        &self,
        settings: &Settings,
        call: Invocation<Confirmed>,
    ) -> impl Future<Output = Result<bool, LockError>> + Send {
        let _ = (settings, call);
        async {
            Err(LockError::InvalidSettings(
                "read/write locks need one server or one Redis Cluster".to_owned(),
            ))
        }
    }

    /// Runs a script call on the server of its keys (one server, or the Cluster slot of
    /// its first key) within the response timeout, retried within it while the server
    /// refuses it for now: a multi-lock's group. Not offered by a Redlock quorum.
    fn run_script<R: redis::FromRedisValue + Send + 'static>(
        &self,
        settings: &Settings,
        call: Invocation<R>,
    ) -> impl Future<Output = Result<R, LockError>> + Send {
        let _ = (settings, call);
        async {
            Err(LockError::InvalidSettings(
                "multi-locks need one server or one Redis Cluster, where one script call \
                 takes several names at once; a Redlock quorum has none"
                    .to_owned(),
            ))
        }
    }

    /// proclaim.lua for the leader `of` in `term`: whether it still held the lock and
    /// wrote its record (on a Redlock quorum: on a majority of masters).
    fn proclaim(
        &self,
        of: Owner<'_>,
        term: u64,
        value: &str,
    ) -> impl Future<Output = Result<bool, LockError>> + Send;

    /// leader.lua: who leads the election of `keys` (on a Redlock quorum: what a
    /// majority of masters agree on).
    fn leader(
        &self,
        settings: &Settings,
        keys: &Keys,
    ) -> impl Future<Output = Result<crate::machine::elect::Seen, LockError>> + Send;

    /// Whether `token` holds the lock.
    fn holds(&self, of: Owner<'_>) -> impl Future<Output = Result<bool, LockError>> + Send;

    /// Passes the lock from `of` to the waiter of `offer` (its token, with its lease):
    /// the next holder's fencing token, or `None` if `of` did not hold it. Only called
    /// when [`HANDOVER`](Self::HANDOVER) is true.
    fn hand_over(
        &self,
        of: Owner<'_>,
        offer: &Offer,
    ) -> impl Future<Output = Result<Option<u64>, LockError>> + Send {
        let _ = (of, offer);
        async { Ok(None) }
    }
}
