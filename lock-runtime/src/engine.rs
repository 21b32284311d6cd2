//! The async lock engine: acquiring, waiting, handing over and releasing in the
//! background, written once for every async face ([`crate::Locks`] on one server or a
//! Cluster, [`crate::Redlock`] on N masters) over a [`Backend`].
//!
//! It carries out the plain rules of [`crate::grant`] (a fresh token per attempt,
//! nothing orphaned, late grants refused) and [`crate::wait`] (the wait loop), with the
//! local queue (first come first served within a handle, and handover), the release
//! notifications and the watchdog.

use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use tracing::Instrument;

use crate::LockError;
use crate::backend::Backend;
use crate::fair::{self, Place, Ticket, Turn};
use crate::grant::{Abandoned, Attempted, Grant, Outcome, Pending};
use crate::key::{Keys, Kind};
use crate::limit::validity;
use crate::node::bounded;
use crate::notify::{Letter, Notifications, Subscription};
use crate::queue::{Handed, LocalQueue, Standing};
use crate::settings::Settings;
use crate::token::Token;
use crate::wait::{Progress, Step, Wait};
use crate::watchdog::Watchdog;

/// Everything an async handle is: its servers, settings, local queue, notifications
/// and watchdog. Cheap to clone; clones share all of it.
pub(crate) struct Engine<B> {
    pub(crate) backend: B,
    pub(crate) settings: Arc<Settings>,
    pub(crate) notifications: Option<Arc<Notifications>>,
    pub(crate) queue: Arc<LocalQueue>,
    pub(crate) watchdog: Arc<Watchdog<B>>,
}

impl<B: Clone> Clone for Engine<B> {
    fn clone(&self) -> Self {
        Self {
            backend: self.backend.clone(),
            settings: Arc::clone(&self.settings),
            notifications: self.notifications.clone(),
            queue: Arc::clone(&self.queue),
            watchdog: Arc::clone(&self.watchdog),
        }
    }
}

/// A grant made to a caller of this handle, before it becomes a guard.
pub(crate) struct Granted {
    pub(crate) keys: Keys,
    pub(crate) token: Token,
    pub(crate) grant: Grant,
    /// When the caller's call began.
    pub(crate) started: Instant,
    /// Whether the watchdog renews the lease.
    pub(crate) watchdog: bool,
}

impl Granted {
    fn new(keys: Keys, token: Token, grant: Grant, started: Instant, watchdog: bool) -> Self {
        Self {
            keys,
            token,
            grant,
            started,
            watchdog,
        }
    }
}

/// A waiter's standing offer, with the owner token a handed grant will have.
struct Offer {
    token: Token,
    standing: Standing,
}

/// A grant handed over by a release, claimed by its waiter.
struct HandedGrant {
    token: Token,
    handed: Handed,
}

impl HandedGrant {
    fn into_grant(self, attempts: u32) -> (Token, Grant) {
        let grant = Grant {
            fence: self.handed.fence,
            sent: self.handed.sent,
            lease: None,
            attempts,
            handovers: self.handed.streak,
        };
        (self.token, grant)
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
        }
    }

    /// One attempt at a grant of `kind`: a guard, or `None` when it cannot be granted
    /// now (held, or others wait first).
    pub(crate) async fn attempt_grant(
        &self,
        name: &str,
        kind: Kind,
    ) -> Result<Option<Granted>, LockError> {
        self.validate(kind)?;
        let keys = self.settings.keys_of(name, kind)?;
        let started = Instant::now();
        match self.attempt(&keys, self.settings.response_timeout).await? {
            Attempted::Granted { token, grant } => {
                let watchdog = self.settings.watchdog;
                Ok(Some(Granted::new(keys, token, grant, started, watchdog)))
            }
            Attempted::Held { .. } => Ok(None),
        }
    }

    /// Waits for a grant of `kind` until `wait_timeout`; `watchdog` says whether the
    /// lease is renewed.
    pub(crate) async fn wait_grant(
        &self,
        name: &str,
        kind: Kind,
        watchdog: bool,
    ) -> Result<Granted, LockError> {
        self.validate(kind)?;
        self.settings.validate_wait()?;
        let keys = self.settings.keys_of(name, kind)?;
        let span = tracing::debug_span!("lock.acquire", lock = %keys.name);
        self.wait_for(keys, watchdog).instrument(span).await
    }

    async fn wait_for(&self, keys: Keys, watchdog: bool) -> Result<Granted, LockError> {
        if self.settings.queued(&keys) {
            return self.wait_fair(keys, watchdog).await;
        }
        let started = Instant::now();
        let settings = &self.settings;
        let mut wait = Wait::new(&keys.name, started, settings, self.notifications.is_some());
        let deadline = tokio::time::Instant::from_std(wait.deadline());
        let Ok(mut turn) = tokio::time::timeout_at(deadline, self.queue.turn(&keys.name)).await
        else {
            return Err(wait.give_up(Instant::now()));
        };
        // Joining a channel that is still subscribed (the previous head of the queue just
        // left it) costs nothing, and then no extra attempt is needed to cover the gap
        // before subscribing.
        let mut subscription: Option<Subscription> = self
            .notifications
            .as_ref()
            .and_then(|n| n.join(&keys.channel));
        let just_granted = subscription.is_some() && turn.follows_a_grant();
        // From the first refusal on, the waiter stands an offer that a guard of this
        // handle releasing the lock takes to hand it over (handover.lua). It stands
        // through the waiter's own attempts too, so no release finds it missing.
        let mut offer: Option<Offer> = None;
        let mut step = wait.start(Instant::now(), just_granted);
        let (token, grant) = loop {
            step = match step {
                Step::Attempt => {
                    let now = Instant::now();
                    let Some(limit) = wait.budget(now) else {
                        step = Step::GiveUp(wait.give_up(now));
                        continue;
                    };
                    let result = self.attempt(&keys, limit).await;
                    match wait.attempted(result, Instant::now())? {
                        Progress::Granted(token, grant) => {
                            // Withdrawn without waiting for a releaser that took the
                            // offer: its handover cannot succeed (it needs the key to
                            // hold the releaser's token; the key was free for our
                            // acquire, and is ours now), and its answer may take up to
                            // its response timeout, longer than our lease may last. A
                            // handed grant that came anyway is released when dropped.
                            drop(offer.take());
                            break (token, grant);
                        }
                        Progress::Next(step) => match self.handed_now(&keys, &mut offer) {
                            Some(handed) => break handed.into_grant(wait.attempts()),
                            None => step,
                        },
                    }
                }
                Step::Subscribe { within } => {
                    if let Some(sub) = self
                        .notifications
                        .as_ref()
                        .and_then(|n| n.subscribe(&keys.channel))
                    {
                        sub.live_within(within).await;
                        subscription = Some(sub);
                    }
                    wait.attempt()
                }
                Step::Sleep { nap } => {
                    if B::HANDOVER && offer.is_none() {
                        offer = self.stand_offer(&keys);
                    }
                    tracing::trace!(?nap, attempts = wait.attempts(), "lock held; waiting");
                    if let Some(handed) = self
                        .nap(&keys, subscription.as_ref(), &mut offer, nap)
                        .await
                    {
                        break handed.into_grant(wait.attempts());
                    }
                    wait.attempt()
                }
                Step::GiveUp(e) => {
                    tracing::debug!(attempts = wait.attempts(), "lock wait ended: {e}");
                    return Err(e);
                }
            };
        };
        turn.granted();
        Ok(Granted::new(keys, token, grant, started, watchdog))
    }

    /// The settings, and whether this backend can do what they ask for grants of `kind`.
    fn validate(&self, kind: Kind) -> Result<(), LockError> {
        self.settings.validate_kind(kind)?;
        if self.settings.fair && !B::FAIR {
            return Err(LockError::InvalidSettings(
                "fair mode needs one server or one Redis Cluster, where the lock's queue \
                 lives: a Redlock quorum has no single queue; turn fair off for Redlock"
                    .to_owned(),
            ));
        }
        Ok(())
    }

    /// `lock()` in fair mode (see [`crate::fair`]): a ticket in the lock's queue on the
    /// server, renewed while it waits, until the lock is handed to it (or found free with
    /// it first in line). A wait that ends without the grant (timeout, error, or this
    /// future dropped) takes its ticket out in the background, and passes on a grant
    /// made to it meanwhile.
    async fn wait_fair(&self, keys: Keys, watchdog: bool) -> Result<Granted, LockError> {
        let started = Instant::now();
        let settings = &self.settings;
        let mut place = self.enter(&keys, fair::claim(settings.ttl, watchdog))?;
        // The handle's channel is subscribed on its first fair wait and stays so.
        if let (Some(within), Some(mailbox)) = (place.go_live_within(settings), &place.mailbox) {
            mailbox.live_within(within).await;
        }
        let mut wait = place.wait(started, settings);
        let mut step = wait.attempt();
        let grant = loop {
            step = match step {
                Step::Attempt => match self.fair_attempt(&mut place, &mut wait).await? {
                    Progress::Granted(_, grant) => break grant,
                    Progress::Next(step) => step,
                },
                Step::Subscribe { within } => {
                    if let Some(mailbox) = &place.mailbox {
                        mailbox.live_within(within).await;
                    }
                    wait.attempt()
                }
                Step::Sleep { nap } => {
                    let letter = async {
                        match place.mailbox.as_mut() {
                            Some(mailbox) => mailbox.letter().await,
                            None => std::future::pending().await,
                        }
                    };
                    let letter = tokio::select! {
                        letter = letter => Some(letter),
                        () = tokio::time::sleep(nap) => None,
                    };
                    if let Some(grant) = letter.and_then(|l| self.handed(&mut place, &l, &wait)) {
                        break grant;
                    }
                    wait.attempt()
                }
                Step::GiveUp(e) => {
                    tracing::debug!(attempts = wait.attempts(), "fair lock wait ended: {e}");
                    return Err(e);
                }
            };
        };
        let token = place.claimed();
        Ok(Granted::new(keys, token, grant, started, watchdog))
    }

    /// One call of a fair waiter: it takes the lock, finds it handed over already, or
    /// queues (renews) the ticket.
    async fn fair_attempt(
        &self,
        place: &mut Place,
        wait: &mut Wait,
    ) -> Result<Progress, LockError> {
        let sent = Instant::now();
        let Some(limit) = wait.budget(sent) else {
            return Ok(Progress::Next(Step::GiveUp(wait.give_up(sent))));
        };
        let call = self
            .backend
            .fair_acquire(&self.settings, &place.keys, &place.ticket);
        let result = match bounded(limit, call).await {
            Ok(reply) => match place.called(reply, sent, wait.attempts(), Instant::now()) {
                Turn::Granted(grant) => {
                    return Ok(Progress::Granted(place.ticket.token.clone(), grant));
                }
                Turn::Late => {
                    tracing::debug!(lock = %place.keys.name, "fair grant arrived after its validity; passed on");
                    self.reenter(place)?;
                    return Ok(Progress::Next(wait.attempt()));
                }
                Turn::Queued(pttl) => Ok(Attempted::Held { remaining: pttl }),
            },
            Err(e) => Err(crate::grant::kind_refused(e, &place.keys)),
        };
        wait.attempted(result, Instant::now())
    }

    /// The grant a handoff message makes, if it is still valid (else the grant goes on
    /// to the next waiter, and this one queues again).
    fn handed(&self, place: &mut Place, letter: &Letter, wait: &Wait) -> Option<Grant> {
        if let Turn::Granted(grant) = place.handed(letter, wait.attempts(), Instant::now())? {
            tracing::debug!(lock = %place.keys.name, fence = grant.fence, "lock handed over by the queue");
            return Some(grant);
        }
        tracing::debug!(lock = %place.keys.name, "handoff arrived after its validity; passed on");
        self.reenter(place).ok()?;
        None
    }

    /// A fresh place at the end of the queue, the old one given up.
    fn reenter(&self, place: &mut Place) -> Result<(), LockError> {
        *place = self.enter(&place.keys, place.claim)?;
        Ok(())
    }

    /// A new place in the fair queue of `keys`: a fresh ticket whose handoff gives a
    /// `claim` lease, and its mailbox.
    fn enter(&self, keys: &Keys, claim: Duration) -> Result<Place, LockError> {
        let channel = self
            .notifications
            .as_ref()
            .map(|n| (n, n.handoff_channel(&self.settings.prefix)));
        let ticket = Ticket::new(
            Token::new()?,
            claim,
            keys.kind,
            channel.as_ref().map_or("-", |(_, c)| c.as_str()),
        );
        let mailbox = channel.and_then(|(n, c)| n.mailbox(&c, ticket.token.as_str()));
        let engine = self.clone();
        Ok(Place::new(
            keys.clone(),
            ticket,
            claim,
            self.settings.ttl,
            mailbox,
            move |abandoned| engine.release_in_background(abandoned),
        ))
    }

    /// Stands the offer of this waiter (with a fresh owner token for the handed grant).
    fn stand_offer(&self, keys: &Keys) -> Option<Offer> {
        let token = Token::new().ok()?;
        let standing = self
            .queue
            .offer(&keys.name, &keys.lock, &token, self.settings.ttl);
        Some(Offer { token, standing })
    }

    /// A handover that already happened to the standing offer, if any. An offer whose
    /// releaser finished is gone afterwards either way (the next refusal stands another).
    fn handed_now(&self, keys: &Keys, offer: &mut Option<Offer>) -> Option<HandedGrant> {
        let Poll::Ready(handed) = offer.as_mut()?.standing.try_handed() else {
            return None;
        };
        let Offer { token, .. } = offer.take()?;
        self.claim(keys, token, handed?)
    }

    /// Takes a handed grant over, unless it arrived after its validity: then it is
    /// released in the background (dropped unclaimed) and does not count.
    fn claim(&self, keys: &Keys, token: Token, handed: Handed) -> Option<HandedGrant> {
        if Instant::now() >= handed.sent + validity(self.settings.ttl) {
            tracing::debug!(lock = %keys.name, "handover arrived after its validity; released");
            return None;
        }
        tracing::debug!(lock = %keys.name, fence = handed.fence, "lock handed over");
        Some(HandedGrant {
            token,
            handed: handed.claim(),
        })
    }

    /// Sleeps until the release notification, `nap`, or a handover from a guard of this
    /// handle releasing the lock, whichever comes first; the handed grant if there was
    /// one.
    async fn nap(
        &self,
        keys: &Keys,
        subscription: Option<&Subscription>,
        offer: &mut Option<Offer>,
        nap: Duration,
    ) -> Option<HandedGrant> {
        let released = async {
            match subscription {
                Some(sub) => sub.released().await,
                None => std::future::pending().await,
            }
        };
        let handed = async {
            match offer.as_mut() {
                Some(offer) => offer.standing.handed().await,
                None => std::future::pending().await,
            }
        };
        let handed = tokio::select! {
            () = released => return None,
            () = tokio::time::sleep(nap) => return None,
            handed = handed => handed,
        };
        let Offer { token, .. } = offer.take()?;
        self.claim(keys, token, handed?)
    }

    /// One attempt with a fresh owner token. A grant that may exist without an owner
    /// (the reply was lost, came too late, failed its confirmation, or this future was
    /// dropped) is released in the background with that token.
    async fn attempt(&self, keys: &Keys, limit: Duration) -> Result<Attempted, LockError> {
        let settings = &self.settings;
        let token = Token::new()?;
        let started = Instant::now();
        let outcome = {
            let mut pending = Pending::new(keys, &token, started, settings.ttl, |a| {
                self.release_in_background(a);
            });
            let acquire = self.backend.acquire(settings, keys, &token);
            // The backend bounds its call by the response timeout; a shorter budget (the
            // end of `lock()`'s wait is near) cuts it, and the grant it may have made is
            // released in the background like any other nobody owns.
            let reply = if limit >= settings.response_timeout {
                acquire.await
            } else {
                tokio::time::timeout(limit, acquire)
                    .await
                    .unwrap_or_else(|_| Err(LockError::no_reply(limit)))
            };
            let Some(outcome) = pending.read(reply, settings.ttl)? else {
                return Ok(Attempted::Held { remaining: None });
            };
            if let Outcome::Granted { .. } = outcome {
                // The confirmation shares the attempt's response timeout (plus its own
                // WAIT timeout), and a grant that ran out meanwhile is no grant either.
                let left = limit
                    .min(settings.response_timeout)
                    .saturating_sub(started.elapsed())
                    .max(Duration::from_millis(1));
                self.backend.confirm(settings, keys, &token, left).await?;
                if outcome.is_late(settings.ttl, Instant::now()) {
                    tracing::debug!(lock = %keys.name, "grant confirmed after its validity; released");
                    return Ok(Attempted::Held { remaining: None });
                }
            }
            pending.disarm();
            outcome
        };
        Ok(Attempted::new(keys, token, Some(outcome)))
    }

    /// Releases a grant nobody owns, retrying compare-and-delete with its own token until
    /// its TTL would free it anyway. Without a runtime to run on, the TTL frees it.
    pub(crate) fn release_in_background(&self, abandoned: Abandoned) {
        let backend = self.backend.clone();
        let settings = Arc::clone(&self.settings);
        let spawned = self.watchdog.spawn(async move {
            let mut failures = 0;
            loop {
                let reply = backend.release_abandoned(&settings, &abandoned).await;
                match reply {
                    Ok(released) => {
                        tracing::debug!(lock = %abandoned.keys.name, released, "released in the background");
                        return;
                    }
                    Err(e) if e.is_transient() => {
                        let Some(at) = abandoned.next_try(failures, Instant::now()) else {
                            tracing::debug!(lock = %abandoned.keys.name, error = %e, "background release failed; the ttl frees it");
                            return;
                        };
                        failures += 1;
                        tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
                    }
                    Err(e) => {
                        tracing::debug!(lock = %abandoned.keys.name, error = %e, "background release refused; the ttl frees it");
                        return;
                    }
                }
            }
        });
        if !spawned {
            tracing::debug!("no tokio runtime to release on; the ttl frees the lock");
        }
    }
}
