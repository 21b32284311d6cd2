//! One Redis server (or one Redis Cluster) as the async engine's [`Backend`]: the lock
//! scripts over one connection, each call bounded by the response timeout.
//!
//! A reply that proves the script did not run and says "try again shortly" (`MOVED`,
//! `TRYAGAIN`, `CLUSTERDOWN`... while a Cluster fails over or migrates a slot) is retried
//! within that same bound. Nothing else is ever re-sent: after an I/O error or a
//! timeout the script may have run, and the grant protocol deals with that.

use std::time::{Duration, Instant};

use redis::FromRedisValue;

use crate::exec::backend::Backend;
use crate::machine::fair::Ticket;
use crate::machine::grant::{Abandoned, Outcome};
use crate::machine::key::Keys;
use crate::machine::reply::Confirmed;
use crate::machine::settings::Settings;
use crate::machine::token::Token;
use crate::{Invocation, LockError};

/// How long to wait before re-sending a script the server refused with a "try again"
/// reply (a Cluster in the middle of a failover or a slot migration).
const RETRY_LATER: Duration = Duration::from_millis(10);

/// One server, or a Cluster through one cluster connection.
#[derive(Clone)]
pub(crate) struct Node<C> {
    pub(crate) conn: C,
}

/// Awaits `fut` for at most `timeout`; [`LockError::no_reply`] after that.
pub(crate) async fn bounded<T>(
    timeout: Duration,
    fut: impl Future<Output = Result<T, LockError>>,
) -> Result<T, LockError> {
    tokio::time::timeout(timeout, fut)
        .await
        .unwrap_or_else(|_| Err(LockError::no_reply(timeout)))
}

impl<C> Node<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Runs `call`, bounded by the response timeout.
    async fn run<R: FromRedisValue>(
        &self,
        settings: &Settings,
        call: Invocation<R>,
    ) -> Result<R, LockError> {
        let mut conn = self.conn.clone();
        bounded(settings.response_timeout, async move {
            loop {
                match call.invoke_async(&mut conn).await {
                    Err(e) if e.is_retry_later() => tokio::time::sleep(RETRY_LATER).await,
                    reply => return reply,
                }
            }
        })
        .await
    }
}

impl<C> Backend for Node<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    const HANDOVER: bool = true;
    const ONE_NODE: bool = true;

    async fn acquire(
        &self,
        settings: &Settings,
        keys: &Keys,
        token: &Token,
    ) -> Result<Outcome, LockError> {
        let sent = Instant::now();
        let call = settings.acquire_call(keys, token.as_str());
        let reply = self.run(settings, call).await?;
        Ok(Outcome::from_reply(reply, sent))
    }

    /// With `wait_for_replicas`: renew.lua and `WAIT` in one pipeline on the connection
    /// that acquired. The renewal is a write that follows the grant in the replication
    /// stream and is sent on the same connection as `WAIT` in the same round trip, so
    /// `WAIT` counts the replicas that have the grant, even on a connection that was
    /// re-made since (a bare `WAIT` there would count nothing and answer at once). On a
    /// cluster connection the pipeline goes to the master that owns the lock's slot.
    async fn confirm(
        &self,
        settings: &Settings,
        keys: &Keys,
        token: &Token,
        left: Duration,
    ) -> Result<(), LockError> {
        let Some((pipe, timeout)) = settings.confirm_pipe(keys, token.as_str())? else {
            return Ok(());
        };
        let mut conn = self.conn.clone();
        let reply = bounded(left + timeout, async {
            Ok(pipe.query_async(&mut conn).await?)
        })
        .await?;
        settings.replicated(keys, reply)
    }

    async fn renew(
        &self,
        settings: &Settings,
        keys: &Keys,
        token: &Token,
        ttl: Duration,
    ) -> Result<Option<Instant>, LockError> {
        let sent = Instant::now();
        let call = settings.renew_call(keys, token.as_str(), ttl);
        Ok(self.run(settings, call).await?.0.then_some(sent))
    }

    async fn release(
        &self,
        settings: &Settings,
        keys: &Keys,
        token: &Token,
    ) -> Result<bool, LockError> {
        let call = settings.release_call(keys, token.as_str());
        Ok(self.run(settings, call).await?.0)
    }

    async fn release_abandoned(
        &self,
        settings: &Settings,
        abandoned: &Abandoned,
    ) -> Result<bool, LockError> {
        Ok(self
            .run(settings, settings.abandoned_call(abandoned))
            .await?
            .0)
    }

    const FAIR: bool = true;

    async fn check(
        &self,
        settings: &Settings,
        call: Invocation<Confirmed>,
    ) -> Result<bool, LockError> {
        Ok(self.run(settings, call).await?.0)
    }

    async fn fair_acquire(
        &self,
        settings: &Settings,
        keys: &Keys,
        ticket: &Ticket,
    ) -> Result<(i64, i64, i64, i64), LockError> {
        let call = settings.fair_call(
            keys,
            "acquire",
            ticket.token.as_str(),
            &ticket.ticket,
            settings.ttl,
        );
        self.run(settings, call).await
    }

    async fn holds(
        &self,
        settings: &Settings,
        keys: &Keys,
        token: &Token,
    ) -> Result<bool, LockError> {
        if let Some(call) = settings.holds_call(keys, token.as_str()) {
            return Ok(self.run(settings, call).await?.0);
        }
        let mut conn = self.conn.clone();
        let value: Option<String> = bounded(settings.response_timeout, async {
            Ok(redis::cmd("GET")
                .arg(&keys.lock)
                .query_async(&mut conn)
                .await?)
        })
        .await?;
        Ok(value.as_deref() == Some(token.as_str()))
    }

    async fn hand_over(
        &self,
        settings: &Settings,
        keys: &Keys,
        token: &Token,
        next: &Token,
        ttl: Duration,
    ) -> Result<Option<u64>, LockError> {
        let call = settings.handover_call(keys, token.as_str(), next.as_str(), ttl);
        let fence = self.run(settings, call).await?;
        Ok(u64::try_from(fence).ok().filter(|f| *f > 0))
    }
}
