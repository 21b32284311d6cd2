//! The async lock engine: acquiring, waiting, handing over and releasing in the
//! background, written once for every async face ([`crate::Locks`] on one server or a
//! Cluster, [`crate::Redlock`] on N masters) over a [`Backend`].
//!
//! It carries out the plain rules of [`crate::machine::grant`] (a fresh token per attempt,
//! nothing orphaned, late grants refused) and [`crate::machine::wait`] (the wait loop), with the
//! local queue (first come first served within a handle, and handover), the release
//! notifications and the watchdog.

use std::sync::Arc;
use std::time::Instant;

use tracing::Instrument;

use crate::LockError;
use crate::exec::backend::Backend;
use crate::exec::node::bounded;
use crate::exec::notify::Notifications;
use crate::exec::queue::LocalQueue;
use crate::exec::waiting::Waiting;
use crate::exec::watchdog::Watchdog;
use crate::machine::acquire::{Acquire, Next, Wake};
use crate::machine::call::Owner;
use crate::machine::grant::Abandoned;
use crate::machine::grant::Granted;
use crate::machine::key::Kind;
use crate::machine::settings::Settings;

/// Everything an async handle is: its servers, settings, local queue, notifications
/// and watchdog. Cheap to clone; clones share all of it.
pub struct Engine<B> {
    pub(crate) backend: B,
    pub(crate) settings: Arc<Settings>,
    pub(crate) notifications: Option<Arc<Notifications>>,
    pub(crate) queue: Arc<LocalQueue>,
    pub(crate) watchdog: Arc<Watchdog<B>>,
    /// The server refused a multi-lock's names of several slots in one call (a Redis
    /// Cluster): this handle's multi-locks go one slot at a time.
    pub(crate) split: Arc<std::sync::atomic::AtomicBool>,
}

impl<B: Clone> Clone for Engine<B> {
    fn clone(&self) -> Self {
        Self {
            backend: self.backend.clone(),
            settings: Arc::clone(&self.settings),
            notifications: self.notifications.clone(),
            queue: Arc::clone(&self.queue),
            watchdog: Arc::clone(&self.watchdog),
            split: Arc::clone(&self.split),
        }
    }
}

impl<B: Backend> Engine<B> {
    pub(crate) fn new(backend: B, settings: Settings) -> Self {
        Self {
            watchdog: Arc::new(Watchdog::new(backend.clone())),
            backend,
            settings: Arc::new(settings),
            notifications: None,
            queue: Arc::default(),
            split: Arc::default(),
        }
    }

    /// One attempt at a grant of `kind`: the grant, or `None` when it cannot be granted
    /// now (held, or others wait first).
    pub(crate) async fn attempt_grant(
        &self,
        name: &str,
        kind: Kind,
    ) -> Result<Option<Granted>, LockError> {
        self.validate()?;
        let machine = Acquire::for_try(&self.settings, name, kind, Instant::now())?;
        self.run(machine).await
    }

    /// Waits for a grant of `kind` until `wait_timeout`; `watchdog` says whether the
    /// lease is renewed.
    pub(crate) async fn wait_grant(
        &self,
        name: &str,
        kind: Kind,
        watchdog: bool,
    ) -> Result<Granted, LockError> {
        self.validate()?;
        let span = tracing::debug_span!("lock.acquire", lock = %name);
        let prefix = &self.settings.prefix;
        let channel =
            (self.notifications.as_ref()).map(|n| move || Some(n.handoff_channel(prefix)));
        let now = Instant::now();
        let machine = Acquire::for_lock(
            &self.settings,
            name,
            kind,
            watchdog,
            channel,
            B::HANDOVER,
            now,
        )?;
        let granted = self.run(machine).instrument(span).await?;
        granted.ok_or_else(|| LockError::InvalidSettings("internal: a wait ended held".into()))
    }

    /// Whether this backend can do what the settings ask (the machine checks the rest).
    fn validate(&self) -> Result<(), LockError> {
        self.backend.validate(&self.settings)?;
        if self.settings.fair && !B::FAIR {
            return Err(LockError::InvalidSettings(
                "fair mode needs one server or one Redis Cluster, where the lock's queue \
                 lives: a Redlock quorum has no single queue; turn fair off for Redlock"
                    .to_owned(),
            ));
        }
        Ok(())
    }

    /// Carries `machine` out on tokio: its I/O through the backend, its waits on tokio's
    /// timers. Dropped midway, it releases in the background what the machine says may
    /// be granted without an owner.
    async fn run(&self, machine: Acquire) -> Result<Option<Granted>, LockError> {
        let mut run = Running {
            engine: self,
            machine,
            waiting: Waiting::default(),
        };
        let (settings, backend, queue) = (&*self.settings, &self.backend, &self.queue);
        loop {
            let machine = &mut run.machine;
            match machine.next(Instant::now()) {
                Next::Release(abandoned) => self.release_in_background(abandoned),
                Next::Turn { until } => {
                    let turn = self.queue.turn(&machine.keys().name);
                    match tokio::time::timeout_at(until.into(), turn).await {
                        Ok(turn) => {
                            let channel = &machine.keys().channel;
                            let live = self.notifications.as_ref().and_then(|n| n.join(channel));
                            machine.turned(run.waiting.turned(turn, live), Instant::now());
                        }
                        Err(_) => machine.no_turn(Instant::now()),
                    }
                }
                Next::Attempt { token, limit } => {
                    let acquire = backend.acquire(Owner::new(settings, machine.keys(), &token));
                    // The backend bounds its call by the response timeout; a shorter
                    // budget (the end of the wait is near) cuts it.
                    let reply = if limit >= settings.response_timeout {
                        acquire.await
                    } else {
                        tokio::time::timeout(limit, acquire)
                            .await
                            .unwrap_or_else(|_| Err(LockError::no_reply(limit)))
                    };
                    machine.acquired(reply, Instant::now());
                }
                Next::Confirm { token, left } => {
                    let reply = backend
                        .confirm(Owner::new(settings, machine.keys(), &token), left)
                        .await;
                    machine.confirmed(reply, Instant::now());
                }
                Next::Enter => {
                    let mailbox = machine.ticket().zip(self.notifications.as_ref()).and_then(
                        |(ticket, n)| {
                            n.mailbox(&n.handoff_channel(&settings.prefix), ticket.token.as_str())
                        },
                    );
                    machine.entered(run.waiting.enter(mailbox));
                }
                Next::Queue { limit } => {
                    let Some(ticket) = machine.ticket() else {
                        continue;
                    };
                    let call = backend.fair_acquire(settings, machine.keys(), ticket);
                    machine.queued(bounded(limit, call).await, Instant::now());
                }
                Next::Listen { within, offer } => {
                    run.waiting
                        .stand(queue, machine.keys(), offer, settings.ttl);
                    let live = if let Some(mailbox) = &run.waiting.mailbox {
                        mailbox.live_within(within).await
                    } else {
                        let channel = &machine.keys().channel;
                        let sub = self
                            .notifications
                            .as_ref()
                            .and_then(|n| n.subscribe(channel));
                        let live = match &sub {
                            Some(sub) => sub.live_within(within).await,
                            None => false,
                        };
                        run.waiting.subscription = sub.or(run.waiting.subscription.take());
                        live
                    };
                    machine.listened(live);
                }
                Next::Sleep { nap, offer } => {
                    run.waiting
                        .stand(queue, machine.keys(), offer, settings.ttl);
                    let woken = tokio::time::timeout(nap, run.waiting.woken()).await;
                    machine.woke(woken.unwrap_or(Wake::Nap), Instant::now());
                }
                Next::Done(done) => return run.waiting.done(done),
            }
        }
    }

    /// Releases a grant nobody owns, retrying compare-and-delete with its own token until
    /// its TTL would free it anyway. Without a runtime to run on, the TTL frees it.
    pub(crate) fn release_in_background(&self, abandoned: Abandoned) {
        let backend = self.backend.clone();
        let settings = Arc::clone(&self.settings);
        let spawned = self.watchdog.spawn(async move {
            for failures in 0.. {
                let sent = Instant::now();
                let reply = backend.release_abandoned(&settings, &abandoned).await;
                let now = Instant::now();
                let replied = reply.as_ref().copied();
                let Some(at) = abandoned.released(replied, failures, sent, now) else {
                    return;
                };
                tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
            }
        });
        if !spawned {
            tracing::debug!("no tokio runtime to release on; the ttl frees the lock");
        }
    }
}

/// A machine being carried out; dropped midway (the caller's future was dropped), it
/// releases what may be granted without an owner.
struct Running<'a, B: Backend> {
    engine: &'a Engine<B>,
    machine: Acquire,
    waiting: Waiting,
}

impl<B: Backend> Drop for Running<'_, B> {
    fn drop(&mut self) {
        for abandoned in self.machine.abandon(Instant::now()) {
            self.engine.release_in_background(abandoned);
        }
    }
}
