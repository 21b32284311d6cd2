//! The Redlock quorum: the [`Backend`] over N independent Redis masters that the
//! [`Redlock`](crate::Redlock) face runs the engine on.
//!
//! The algorithm of the Redis "Distributed Locks with Redis" page. An attempt runs
//! on every master in parallel (the acquire transaction, or acquire-with-retry.lua
//! where a master refuses it: [`crate::machine::transact`]), each bounded by a per-node
//! timeout much smaller than the TTL, so a node that is down or stalled costs at most
//! that timeout. The attempt succeeds when a majority (N/2+1) granted it and the lease
//! is still valid: validity = ttl − elapsed − (ttl·1% + 2 ms), counted on this
//! process's monotonic clock from before the first command was sent. Otherwise the
//! attempt is undone on every master (including the ones that seemed to fail: their
//! reply may have been lost, not their write), and `lock()` retries after a random
//! delay within `wait_timeout`. Extension needs a majority within the validity too,
//! and the lease is lost when the validity passes without one.
//!
//! Fencing tokens: each master keeps its own counter, so no single counter orders all
//! grants. After a majority granted, the client takes the highest counter value it saw
//! as the grant's token and raises the counter to that value on the granting masters
//! (raise-fence.lua), and the grant only stands if a majority confirmed the raise
//! within the validity. Any later grant needs a majority too, which shares at least
//! one master with that one; on it, the later grant's INCR runs after this grant's key
//! there was released or expired, so after the raise, and returns more than this
//! token. Tokens therefore rise strictly across grants, under Redlock's own timing
//! assumptions (bounded clock drift and pauses shorter than the validity margin).
//! There are no release notifications across masters: waiters pace themselves with
//! the retry policy.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;

use crate::LockError;
use crate::exec::backend::{Answered, Backend};
use crate::exec::node::Node;
use crate::machine::call::Owner;
use crate::machine::call::renewal;
use crate::machine::grant::Outcome;
use crate::machine::lease::{LeaseState, Sending};
use crate::machine::limit::validity;
use crate::machine::reply::Confirmed;
use crate::machine::settings::Settings;

/// N independent masters, each through its own connection.
pub struct Quorum<C> {
    pub(crate) nodes: Arc<[Node<C>]>,
}

impl<C> Clone for Quorum<C> {
    fn clone(&self) -> Self {
        Self {
            nodes: Arc::clone(&self.nodes),
        }
    }
}

/// What each master answered in one round (`None`: an error or no reply in time).
struct Round<T> {
    replies: Vec<Option<T>>,
}

impl<T> Round<T> {
    fn count(&self, ok: impl Fn(&T) -> bool) -> usize {
        self.replies.iter().flatten().filter(|r| ok(r)).count()
    }

    fn answered(&self) -> usize {
        self.replies.iter().flatten().count()
    }
}

/// Redlock's rule: a grant stands when a majority confirmed it and its validity, `ttl`
/// minus the time since `start` (before the first command) minus the drift allowance, is
/// still positive at `now`.
fn stands(confirmed: usize, quorum: usize, start: Instant, now: Instant, ttl: Duration) -> bool {
    confirmed >= quorum && now < start + validity(ttl)
}

/// The error of a round that too few masters answered in time. The scripts may have
/// run on the others.
fn too_few_answered(answered: usize, of: usize) -> LockError {
    LockError::Redis(redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::NotConnected,
        format!("only {answered} of {of} Redlock masters answered within the node timeout"),
    )))
}

impl<C> Quorum<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    pub(crate) fn quorum(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    /// Runs one call on every master in parallel, each bounded by the node timeout.
    async fn round<T, F, Fut>(&self, settings: &Settings, call: F) -> Round<T>
    where
        F: Fn(Node<C>) -> Fut,
        Fut: Future<Output = Result<T, LockError>>,
    {
        let replies = join_all(self.nodes.iter().map(|node| {
            let fut = call(node.clone());
            async move {
                match tokio::time::timeout(settings.node_timeout, fut).await {
                    Ok(Ok(reply)) => Some(reply),
                    Ok(Err(e)) => {
                        tracing::debug!(error = %e, "redlock: a master failed");
                        None
                    }
                    Err(_) => {
                        tracing::debug!("redlock: a master timed out");
                        None
                    }
                }
            }
        }))
        .await;
        Round { replies }
    }

    /// What a renewal round started at `start` with `ttl` means: renewed by a majority
    /// within the validity, refused by a majority, or neither.
    fn renewed(
        &self,
        round: &Round<Confirmed>,
        start: Instant,
        ttl: Duration,
    ) -> Result<Option<Instant>, LockError> {
        let renewed = round.count(|r| r.0);
        let refused = round.count(|r| !r.0);
        if renewed >= self.quorum() && Instant::now() < start + validity(ttl) {
            Ok(Some(start))
        } else if refused > self.nodes.len() - self.quorum() {
            // A majority no longer holds our token: it cannot come back.
            Ok(None)
        } else {
            Err(too_few_answered(renewed, self.nodes.len()))
        }
    }

    async fn release_round(&self, of: Owner<'_>) -> Round<Confirmed> {
        let (settings, keys, token) = (of.settings, of.keys, of.token);
        self.round(settings, |node| async move {
            node.lease_call(settings, |native| {
                settings.release_call(keys, token.as_str(), native)
            })
            .await
        })
        .await
    }
}

impl<C> Backend for Quorum<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    const FACE: &'static str = "Redlock";
    const GUARD: &'static str = "RedlockGuard";
    const HANDOVER: bool = false;
    const ONE_NODE: bool = false;

    fn validate(&self, settings: &Settings) -> Result<(), LockError> {
        if self.nodes.is_empty() {
            return Err(LockError::InvalidSettings(
                "Redlock needs at least one master (use 3 or 5)".to_owned(),
            ));
        }
        let timeout = settings.node_timeout;
        if timeout.is_zero() || timeout > settings.ttl / 3 {
            return Err(LockError::InvalidSettings(format!(
                "node_timeout {timeout:?} must be above zero and at most a third of the ttl {:?}",
                settings.ttl
            )));
        }
        Ok(())
    }

    async fn acquire(&self, of: Owner<'_>) -> Result<Outcome, LockError> {
        let (settings, keys, token) = (of.settings, of.keys, of.token);
        let ttl = settings.ttl;
        let start = Instant::now();
        let acquired = self
            .round(settings, |node| async move {
                node.attempt(settings, keys, token.as_str()).await
            })
            .await;
        let fence_of = |outcome: &Option<Outcome>| match outcome {
            Some(Outcome::Granted { fence, .. }) => Some(*fence),
            _ => None,
        };
        let granted: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| fence_of(&acquired.replies[i]).is_some())
            .collect();
        let fence = (acquired.replies.iter())
            .filter_map(fence_of)
            .max()
            .unwrap_or_default();
        let mut confirmed = 0;
        if granted.len() >= self.quorum() {
            // Raise the counters of the granting masters to the token (see the module
            // docs for why this makes tokens rise across different majorities).
            let raised = join_all(granted.iter().map(|&i| {
                let mut conn = self.nodes[i].conn.clone();
                async move {
                    tokio::time::timeout(
                        settings.node_timeout,
                        settings
                            .raise_fence_call(keys, fence)
                            .invoke_async(&mut conn),
                    )
                    .await
                }
            }))
            .await;
            confirmed = raised
                .iter()
                .filter(|r| matches!(r, Ok(Ok(v)) if u64::try_from(*v).is_ok_and(|v| v >= fence)))
                .count();
        }
        if stands(confirmed, self.quorum(), start, Instant::now(), ttl) {
            tracing::debug!(lock = %keys.name, fence, granted = granted.len(), "redlock acquired");
            return Ok(Outcome::Granted { fence, sent: start });
        }
        // Undo everywhere: a master that seemed to fail may have granted all the same.
        // A master that does not answer the undo either keeps the grant pending: the
        // engine releases it in the background.
        let undone = self.release_round(of).await;
        let answered = acquired.answered();
        if answered < self.quorum() {
            return Err(too_few_answered(answered, self.nodes.len()));
        }
        if undone.answered() < self.nodes.len() {
            return Err(too_few_answered(undone.answered(), self.nodes.len()));
        }
        Ok(Outcome::Held { remaining: None })
    }

    async fn renew(&self, of: Owner<'_>, ttl: Duration) -> Result<Option<Instant>, LockError> {
        let (settings, keys, token) = (of.settings, of.keys, of.token);
        let start = Instant::now();
        let round = self
            .round(settings, |node| async move {
                node.lease_call(settings, |native| {
                    settings.renew_call(keys, token.as_str(), ttl, native)
                })
                .await
            })
            .await;
        self.renewed(&round, start, ttl)
    }

    /// Every renewal in one round trip per master (a pipeline on each, in parallel, each
    /// bounded by the node timeout); each lease then needs its own majority.
    async fn renew_all(&self, due: &[(Arc<LeaseState>, Sending)], answered: &Answered<'_>) {
        let Some((first, _)) = due.first() else {
            return;
        };
        let settings = &first.settings;
        let start = Instant::now();
        let per_node = join_all(self.nodes.iter().map(|node| async move {
            let calls = node.lease_calls(settings, due.len(), |i, native| {
                renewal(&due[i].0, &due[i].1, native)
            });
            tokio::time::timeout(settings.node_timeout, calls)
                .await
                .ok()
        }))
        .await;
        let round_of = |i: usize| Round {
            replies: per_node
                .iter()
                .map(|node| {
                    node.as_ref()
                        .and_then(|replies| replies[i].as_ref().ok().copied())
                })
                .collect(),
        };
        for (i, (_, sending)) in due.iter().enumerate() {
            answered(i, self.renewed(&round_of(i), start, sending.ttl));
        }
    }

    async fn proclaim(&self, of: Owner<'_>, term: u64, value: &str) -> Result<bool, LockError> {
        let round = (self.round(of.settings, |node| async move {
            node.proclaim(of, term, value).await
        }))
        .await;
        let (written, refused) = (round.count(|w| *w), round.count(|w| !*w));
        if written >= self.quorum() {
            Ok(true)
        } else if refused > self.nodes.len() - self.quorum() {
            // A majority no longer holds our token: the leadership is over.
            Ok(false)
        } else {
            Err(too_few_answered(round.answered(), self.nodes.len()))
        }
    }

    async fn leader(
        &self,
        settings: &Settings,
        keys: &crate::machine::key::Keys,
    ) -> Result<crate::machine::elect::Seen, LockError> {
        let round = (self.round(
            settings,
            |node| async move { node.leader(settings, keys).await },
        ))
        .await;
        if round.answered() < self.quorum() {
            return Err(too_few_answered(round.answered(), self.nodes.len()));
        }
        Ok(crate::machine::elect::agreed(&round.replies, self.quorum()))
    }

    async fn release(&self, of: Owner<'_>) -> Result<bool, LockError> {
        let round = self.release_round(of).await;
        let deleted = round.count(|d| d.0);
        if deleted >= self.quorum() {
            Ok(true)
        } else if round.answered() == self.nodes.len() {
            Ok(false)
        } else {
            Err(too_few_answered(round.answered(), self.nodes.len()))
        }
    }

    async fn holds(&self, of: Owner<'_>) -> Result<bool, LockError> {
        let (settings, keys, token) = (of.settings, of.keys, of.token);
        let (lock, token) = (&keys.lock, token.as_str());
        let round = self
            .round(settings, |node| async move {
                let value: Option<String> = redis::cmd("GET")
                    .arg(lock)
                    .query_async(&mut node.conn.clone())
                    .await?;
                Ok(value.as_deref() == Some(token))
            })
            .await;
        let holding = round.count(|ours| *ours);
        let not = round.count(|ours| !*ours);
        if holding >= self.quorum() {
            Ok(true)
        } else if not > self.nodes.len() - self.quorum() {
            Ok(false)
        } else {
            Err(too_few_answered(round.answered(), self.nodes.len()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_stands_only_with_a_majority_within_its_validity() {
        let start = Instant::now();
        let ttl = Duration::from_millis(100);
        let at = |ms| start + Duration::from_millis(ms);
        assert!(stands(3, 3, start, at(96), ttl));
        assert!(!stands(2, 3, start, at(1), ttl), "no majority");
        // 100 ms - 1 ms (1%) - 2 ms: at 97 ms the lease it granted is over.
        assert!(!stands(3, 3, start, at(97), ttl), "majority, but too late");
        assert!(!stands(5, 3, start, at(500), ttl));
    }
}
