//! One Redis server (or one Redis Cluster) as the async engine's [`Backend`]: the lock
//! scripts over one connection, each call bounded by the response timeout.
//!
//! A reply that proves the script did not run and says "try again shortly" (`MOVED`,
//! `TRYAGAIN`, `CLUSTERDOWN`, `READONLY`, `LOADING`... while a server or a Cluster fails
//! over or migrates a slot) is retried within that same bound (a batch's refused calls
//! together, in one round trip). Nothing else is ever re-sent but a native command the
//! server refused, as its script: after an I/O error or a timeout the script may have
//! run, and the grant protocol deals with that.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;

use redis::FromRedisValue;

use crate::exec::backend::{Answered, Backend};
use crate::exec::queue::Offer;
use crate::machine::call::{LeaseCall, LeaseCalls, Owner, RETRY_LATER, renewal};
use crate::machine::elect::Seen;
use crate::machine::fair::Ticket;
use crate::machine::grant::{Abandoned, Outcome};
use crate::machine::key::Keys;
use crate::machine::lease::{LeaseState, Sending};
use crate::machine::native::{NativeCommands, Offered};
use crate::machine::reply::Confirmed;
use crate::machine::settings::Settings;
use crate::machine::transact::{self, ClockQuestion, Read, Transaction};
use crate::{Invocation, LockError};

/// One server, or a Cluster through one cluster connection.
#[derive(Clone)]
pub struct Node<C> {
    pub(crate) conn: C,
    /// What the server offers besides scripts, asked beside the first lease call (on a
    /// Cluster, what every primary offers, asked again after a redirection; a node that
    /// lacks a command all the same refuses it, and the call is sent again as the
    /// script).
    pub(crate) offered: Arc<Offered>,
    /// The connection refused a pipeline across slots (a Cluster): batched calls go
    /// one by one, concurrently.
    one_by_one: Arc<AtomicBool>,
}

impl<C: 'static> Node<C> {
    pub(crate) fn new(conn: C) -> Self {
        #[cfg(feature = "cluster")]
        if (&conn as &dyn std::any::Any).is::<redis::cluster_async::ClusterConnection>()
            || (&conn as &dyn std::any::Any).is::<crate::ClusterConnection>()
        {
            return Self {
                conn,
                offered: Arc::new(Offered::cluster()),
                one_by_one: Arc::default(),
            };
        }
        Self {
            conn,
            offered: Arc::default(),
            one_by_one: Arc::default(),
        }
    }
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
    /// Runs `call`, bounded by the response timeout. A failure that a reconnect or a
    /// failover explains makes the next lease call ask the server what it offers.
    async fn run<R: FromRedisValue>(
        &self,
        settings: &Settings,
        call: Invocation<R>,
    ) -> Result<R, LockError> {
        let mut conn = self.conn.clone();
        let reply = bounded(settings.response_timeout, async move {
            loop {
                match call.invoke_async(&mut conn).await {
                    Err(e) if e.is_retry_later() => {
                        self.offered.met(&e);
                        tokio::time::sleep(RETRY_LATER).await;
                    }
                    reply => return reply,
                }
            }
        })
        .await;
        self.met(reply)
    }

    /// One attempt for `token`: a plain lock's as the acquire transaction where it
    /// goes (see [`crate::machine::transact`]: the server's clock asked first on a new
    /// connection, a restarted counter raised before the grant counts, the script at
    /// once when the server refuses the transaction), any other as its script. All of
    /// it within one response timeout, retried within it while the server refuses it
    /// for now.
    pub(crate) async fn attempt(
        &self,
        settings: &Settings,
        keys: &Keys,
        token: &str,
    ) -> Result<Outcome, LockError> {
        let sent = Instant::now();
        let attempt = self.attempt_unbounded(settings, keys, token, sent);
        self.met(bounded(settings.response_timeout, attempt).await)
    }

    async fn attempt_unbounded(
        &self,
        settings: &Settings,
        keys: &Keys,
        token: &str,
        sent: Instant,
    ) -> Result<Outcome, LockError> {
        let mut conn = self.conn.clone();
        if let Some((question, time)) =
            ClockQuestion::new(settings, keys, &self.offered, transact::local_us())
        {
            let answer = time.query_async(&mut conn).await;
            question.answered(answer.ok().as_ref(), transact::local_us(), &self.offered);
        }
        if let Some(txn) =
            Transaction::new(settings, keys, token, &self.offered, transact::local_us())
        {
            loop {
                let replies = txn.pipe().query_async(&mut conn).await;
                let read_at = (sent, Instant::now(), transact::local_us());
                match txn.read(
                    replies.map_err(LockError::from),
                    keys,
                    read_at,
                    &self.offered,
                ) {
                    Read::Outcome(Err(e)) if e.is_retry_later() => {
                        self.offered.met(&e);
                        tokio::time::sleep(RETRY_LATER).await;
                    }
                    Read::Outcome(outcome) => return outcome,
                    Read::Raise { floor } => {
                        let raise = settings.raise_fence_call(keys, floor);
                        return Ok(transact::raised(raise.invoke_async(&mut conn).await, sent));
                    }
                    Read::Refused => break,
                }
            }
        }
        let call = settings.acquire_call(keys, token);
        loop {
            match call.invoke_async(&mut conn).await {
                Err(e) if e.is_retry_later() => {
                    self.offered.met(&e);
                    tokio::time::sleep(RETRY_LATER).await;
                }
                reply => return Ok(Outcome::from_reply(reply?, sent)),
            }
        }
    }

    /// `reply`, noted: see [`Offered::met`].
    fn met<T>(&self, reply: Result<T, LockError>) -> Result<T, LockError> {
        if let Err(e) = &reply {
            self.offered.met(e);
        }
        reply
    }

    /// Asks the server what it offers besides scripts, if `settings` allow native
    /// commands and the question is open ([`Offered::claim`]): in a task of its own,
    /// bounded by the response timeout on its own, so the lease call that found it open
    /// goes at once with what is known. Its outcome is remembered whatever it is: a
    /// server (or a Cluster primary) that stalls is not asked again by every call.
    fn ask_beside(&self, settings: &Settings) {
        let Some(question) = self.offered.claim(settings.native) else {
            return;
        };
        let (mut conn, offered) = (self.conn.clone(), Arc::clone(&self.offered));
        let bound = settings.response_timeout;
        tokio::spawn(async move {
            let found = tokio::time::timeout(bound, ask(&mut conn)).await;
            offered.answered(question, found.unwrap_or_default());
        });
    }

    /// A plain lock's renewal or release (`make` builds it for what the server offers),
    /// bounded by the response timeout: see [`lease_calls`](Self::lease_calls).
    pub(crate) async fn lease_call(
        &self,
        settings: &Settings,
        make: impl Fn(NativeCommands) -> LeaseCall,
    ) -> Result<Confirmed, LockError> {
        let mut replies = self
            .lease_calls(settings, 1, |_, native| make(native))
            .await;
        replies
            .pop()
            .unwrap_or_else(|| Err(LockError::no_reply(settings.response_timeout)))
    }

    /// `n` lease calls, each answer in its place: see
    /// [`lease_calls_each`](Self::lease_calls_each).
    pub(crate) async fn lease_calls(
        &self,
        settings: &Settings,
        n: usize,
        make: impl Fn(usize, NativeCommands) -> LeaseCall,
    ) -> Vec<Result<Confirmed, LockError>> {
        let mut replies: Vec<Option<Result<Confirmed, LockError>>> =
            std::iter::repeat_with(|| None).take(n).collect();
        self.lease_calls_each(settings, n, make, |i, reply| {
            if let Some(place) = replies.get_mut(i) {
                *place = Some(reply);
            }
        })
        .await;
        let unanswered = || Err(LockError::no_reply(settings.response_timeout));
        (replies.into_iter())
            .map(|reply| reply.unwrap_or_else(unanswered))
            .collect()
    }

    /// `n` lease calls (`make(i, offered)` builds the `i`th, native where `settings`
    /// allow and the server was found to offer it), all within `settings`' response
    /// timeout, each answer handed to `each(i, answer)` as soon as it is final: sends
    /// them in one round trip (asking the server what it offers beside them if the
    /// question is open, see [`ask_beside`](Self::ask_beside)); the calls refused as
    /// native commands or refused for now go again together ([`LeaseCalls`]) until each
    /// has its answer or the timeout passes. A connection that refuses a pipeline across
    /// slots (a Cluster) gets each call of a round alone, concurrently, from then on,
    /// each answer handed out as it comes: a Cluster primary that stalls, or whose slots
    /// answer `MOVED` until the bound while it is down, costs only the calls sent to it,
    /// never the time of the others' answers.
    pub(crate) async fn lease_calls_each(
        &self,
        settings: &Settings,
        n: usize,
        make: impl Fn(usize, NativeCommands) -> LeaseCall,
        mut each: impl FnMut(usize, Result<Confirmed, LockError>) + Send,
    ) {
        let native = settings.native;
        let mut calls = LeaseCalls::new(n, true);
        let mut conn = self.conn.clone();
        self.ask_beside(settings);
        let rounds = async {
            loop {
                let round = calls.round(self.offered.usable(native), &make);
                if round.is_empty() {
                    return;
                }
                self.send_round(&mut conn, &mut calls, round, &mut each)
                    .await;
                if calls.retrying() {
                    tokio::time::sleep(RETRY_LATER).await;
                }
            }
        };
        // Cut at the bound, the calls on their way are answered by the timeout: no reply,
        // which a reconnect or a failover explains, like any other call's.
        if tokio::time::timeout(settings.response_timeout, rounds)
            .await
            .is_err()
        {
            self.offered
                .met(&LockError::no_reply(settings.response_timeout));
        }
        for (i, reply) in calls.rest(settings.response_timeout) {
            each(i, reply);
        }
    }

    /// Sends one round of `calls` and reads it, handing each final answer to `each`:
    /// one call alone; several in one pipeline, or each alone concurrently on a
    /// connection that takes no pipeline across slots.
    async fn send_round(
        &self,
        conn: &mut C,
        calls: &mut LeaseCalls,
        mut round: Vec<(usize, LeaseCall)>,
        each: &mut (impl FnMut(usize, Result<Confirmed, LockError>) + Send),
    ) {
        let offered = &*self.offered;
        let mut hand_out = |calls: &mut LeaseCalls| {
            for (i, reply) in calls.take_answered() {
                each(i, reply);
            }
        };
        if round.len() == 1
            && let Some((i, call)) = round.pop()
        {
            let reply = send(conn, &call, offered).await;
            calls.answered(i, reply, offered);
            return hand_out(calls);
        }
        if !self.one_by_one.load(Ordering::Relaxed) {
            let sent = match LeaseCalls::pipeline(round) {
                Ok((pipe, placed)) => match pipe.query_async(conn).await {
                    Ok(replies) => {
                        calls.read(&placed, replies, offered);
                        return hand_out(calls);
                    }
                    Err(e) => LockError::from(e),
                },
                Err(e) => e,
            };
            if !sent.is_cross_slot() {
                calls.failed(&sent, offered);
                return hand_out(calls);
            }
            self.one_by_one.store(true, Ordering::Relaxed);
            calls.unsent();
            return;
        }
        let mut alone: FuturesUnordered<_> = (round.iter())
            .map(|(i, call)| {
                let mut conn = conn.clone();
                async move { (*i, send(&mut conn, call, offered).await) }
            })
            .collect();
        // Each answer handed out as it comes: a call still waiting (on a primary that
        // stalls, or one refused for now until the bound) holds no other's.
        while let Some((i, reply)) = alone.next().await {
            calls.answered(i, reply, offered);
            hand_out(calls);
        }
    }
}

/// The server's answer to [`NativeCommands::ask`], read as what it offers; a Redis
/// Cluster's, from every primary at once (see [`NativeCommands::read_every`]).
async fn ask<C: redis::aio::ConnectionLike + 'static>(conn: &mut C) -> NativeCommands {
    #[cfg(feature = "cluster")]
    if let Some(cluster) =
        (conn as &mut dyn std::any::Any).downcast_mut::<crate::ClusterConnection>()
    {
        let answers = cluster.every_primary(&NativeCommands::ask()).await;
        return NativeCommands::read_every(&answers);
    }
    #[cfg(feature = "cluster")]
    if let Some(cluster) =
        (conn as &mut dyn std::any::Any).downcast_mut::<redis::cluster_async::ClusterConnection>()
    {
        let every = NativeCommands::every_primary();
        let answers = cluster.route_command(NativeCommands::ask(), every).await;
        return NativeCommands::read_every(&answers);
    }
    NativeCommands::read(&NativeCommands::ask().query_async(conn).await)
}

/// Sends one lease call: its script, or its native commands in one round trip, each
/// command's reply its own.
async fn send<C: redis::aio::ConnectionLike>(
    conn: &mut C,
    call: &LeaseCall,
    offered: &Offered,
) -> Result<Confirmed, LockError> {
    match call {
        LeaseCall::Script(script) => script.invoke_async(conn).await,
        LeaseCall::Native(cmds) => match LeaseCall::native_pipe(cmds).query_async(conn).await {
            Ok(replies) => LeaseCall::read(replies, offered),
            Err(e) => Err(e.into()),
        },
    }
}

impl<C> Backend for Node<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    const FACE: &'static str = "Locks";
    const GUARD: &'static str = "LockGuard";
    const HANDOVER: bool = true;
    const ONE_NODE: bool = true;

    async fn acquire(&self, of: Owner<'_>) -> Result<Outcome, LockError> {
        self.attempt(of.settings, of.keys, of.token.as_str()).await
    }

    /// With `wait_for_replicas`: renew.lua and `WAIT` in one pipeline on the connection
    /// that acquired. The renewal is a write that follows the grant in the replication
    /// stream and is sent on the same connection as `WAIT` in the same round trip, so
    /// `WAIT` counts the replicas that have the grant, even on a connection that was
    /// re-made since (a bare `WAIT` there would count nothing and answer at once). On a
    /// cluster connection the pipeline goes to the master that owns the lock's slot.
    async fn confirm(&self, of: Owner<'_>, left: Duration) -> Result<(), LockError> {
        let (settings, keys, token) = (of.settings, of.keys, of.token);
        let Some((pipe, timeout)) = settings.confirm_pipe(keys, token.as_str())? else {
            return Ok(());
        };
        let mut conn = self.conn.clone();
        let reply = bounded(left + timeout, async {
            Ok(pipe.query_async(&mut conn).await?)
        })
        .await;
        settings.replicated(keys, self.met(reply)?)
    }

    async fn renew(&self, of: Owner<'_>, ttl: Duration) -> Result<Option<Instant>, LockError> {
        let (settings, keys, token) = (of.settings, of.keys, of.token);
        let sent = Instant::now();
        let reply = self
            .lease_call(settings, |native| {
                settings.renew_call(keys, token.as_str(), ttl, native)
            })
            .await?;
        Ok(reply.0.then_some(sent))
    }

    /// Every renewal in one round trip (a pipeline of native renewals or renew.lua
    /// calls); on a Cluster one by one, concurrently, each answer handed to `answered`
    /// as it comes.
    async fn renew_all(&self, due: &[(Arc<LeaseState>, Sending)], answered: &Answered<'_>) {
        let Some((first, _)) = due.first() else {
            return;
        };
        let sent = Instant::now();
        self.lease_calls_each(
            &first.settings,
            due.len(),
            |i, native| renewal(&due[i].0, &due[i].1, native),
            |i, reply| answered(i, reply.map(|r| r.0.then_some(sent))),
        )
        .await;
    }

    async fn release(&self, of: Owner<'_>) -> Result<bool, LockError> {
        let (settings, keys, token) = (of.settings, of.keys, of.token);
        let reply = self
            .lease_call(settings, |native| {
                settings.release_call(keys, token.as_str(), native)
            })
            .await?;
        Ok(reply.0)
    }

    async fn release_abandoned(
        &self,
        settings: &Settings,
        abandoned: &Abandoned,
    ) -> Result<bool, LockError> {
        let reply = self
            .lease_call(settings, |native| {
                settings.abandoned_call(abandoned, native)
            })
            .await?;
        Ok(reply.0)
    }

    const FAIR: bool = true;

    async fn check(
        &self,
        settings: &Settings,
        call: Invocation<Confirmed>,
    ) -> Result<bool, LockError> {
        Ok(self.run(settings, call).await?.0)
    }

    async fn run_script<R: FromRedisValue + Send + 'static>(
        &self,
        settings: &Settings,
        call: Invocation<R>,
    ) -> Result<R, LockError> {
        self.run(settings, call).await
    }

    async fn proclaim(&self, of: Owner<'_>, term: u64, value: &str) -> Result<bool, LockError> {
        let call = of.settings.proclaim_call(of.keys, of.token, term, value);
        Ok(self.run(of.settings, call).await? == 1)
    }

    async fn leader(&self, settings: &Settings, keys: &Keys) -> Result<Seen, LockError> {
        Seen::read(self.run(settings, settings.leader_call(keys)).await?)
    }

    async fn fair_acquire(
        &self,
        settings: &Settings,
        keys: &Keys,
        ticket: &Ticket,
    ) -> Result<(i64, i64, i64, i64), LockError> {
        self.run(settings, settings.queue_call(keys, ticket)).await
    }

    async fn holds(&self, of: Owner<'_>) -> Result<bool, LockError> {
        let (settings, keys, token) = (of.settings, of.keys, of.token);
        if let Some(call) = settings.holds_call(keys, token.as_str()) {
            return Ok(self.run(settings, call).await?.0);
        }
        let mut conn = self.conn.clone();
        let value: Option<String> = self.met(
            bounded(settings.response_timeout, async {
                Ok(redis::cmd("GET")
                    .arg(&keys.lock)
                    .query_async(&mut conn)
                    .await?)
            })
            .await,
        )?;
        Ok(value.as_deref() == Some(token.as_str()))
    }

    async fn hand_over(&self, of: Owner<'_>, offer: &Offer) -> Result<Option<u64>, LockError> {
        let (settings, keys, token) = (of.settings, of.keys, of.token);
        let (next, ttl) = (offer.token.as_str(), offer.ttl);
        let call = settings.handover_call(keys, token.as_str(), next, ttl);
        Ok(self.run(settings, call).await?.0)
    }
}
