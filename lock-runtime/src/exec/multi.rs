//! The async executor of a multi-lock ([`crate::machine::multi`]): it sends each group's
//! call, waits where the machine says, makes every granted group a set of guards at
//! once (so the watchdog renews them while later groups are waited for), and releases
//! what it holds when the call fails or finds a name held.

use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::LockError;
use crate::exec::backend::Backend;
use crate::exec::engine::Engine;
use crate::exec::guard::Guard;
use crate::exec::node::bounded;
use crate::exec::notify::Subscription;
use crate::machine::grant::Pending;
use crate::machine::multi::{MultiAcquire, Next};

impl<B: Backend> Engine<B> {
    /// Takes every one of `names` (waiting when `wait`, until `wait_timeout`): a guard
    /// per name in the order they were taken, or `None` when a try found one held.
    /// Nothing is held when it returns without them.
    pub(crate) async fn grant_all<S: AsRef<str>>(
        &self,
        names: &[S],
        wait: bool,
    ) -> Result<Option<Vec<Guard<B>>>, LockError> {
        self.backend.validate(&self.settings)?;
        let settings = &*self.settings;
        let split = self.split.load(Ordering::Relaxed);
        let notifications = self.notifications.is_some();
        let now = Instant::now();
        let mut machine = MultiAcquire::new(settings, names, wait, notifications, split, now)?;
        let mut held: Vec<Guard<B>> = Vec::with_capacity(machine.keys().len());
        let mut listening: Option<(String, Subscription)> = None;
        loop {
            if machine.holds_groups() && held.iter().any(|g| g.owned.lease().is_lost()) {
                release_all(std::mem::take(&mut held)).await;
                machine.lost_held();
            }
            match machine.next(Instant::now()) {
                Next::Attempt { group, limit } => {
                    let sent = Instant::now();
                    let call = machine.sending(settings, &group, sent)?;
                    let token = machine.token().cloned();
                    let reply = {
                        let keys = &machine.keys()[group];
                        let mut pending: Vec<_> = (token.iter())
                            .flat_map(|token| keys.iter().map(move |k| (k, token)))
                            .map(|(k, token)| {
                                Pending::new(k, token, sent, settings.ttl, |a| {
                                    self.release_in_background(a);
                                })
                            })
                            .collect();
                        let reply = bounded(limit, self.backend.run_script(settings, call)).await;
                        pending.iter_mut().for_each(Pending::disarm);
                        reply
                    };
                    let answered = machine.attempted(reply, Instant::now());
                    if machine.split() {
                        self.split.store(true, Ordering::Relaxed);
                    }
                    for abandoned in answered.abandoned {
                        self.release_in_background(abandoned);
                    }
                    held.extend(answered.granted.into_iter().map(|g| self.guard(g)));
                }
                Next::Subscribe { channel, within } => {
                    if let Some(sub) = self.listen(&mut listening, &channel) {
                        sub.live_within(within).await;
                    }
                    machine.resumed();
                }
                Next::Sleep { channel, nap } => {
                    match self.listen(&mut listening, &channel) {
                        Some(sub) => {
                            let _ = tokio::time::timeout(nap, sub.released()).await;
                        }
                        None => tokio::time::sleep(nap).await,
                    }
                    machine.resumed();
                }
                Next::Done(Ok(true)) => return Ok(Some(held)),
                Next::Done(done) => {
                    release_all(held).await;
                    return done.map(|_| None);
                }
            }
        }
    }

    /// The subscription to `channel`, made when the one held is for another channel.
    fn listen<'a>(
        &self,
        listening: &'a mut Option<(String, Subscription)>,
        channel: &str,
    ) -> Option<&'a Subscription> {
        if listening.as_ref().is_none_or(|(c, _)| c != channel) {
            *listening = (self.notifications.as_ref())
                .and_then(|n| n.subscribe(channel))
                .map(|sub| (channel.to_owned(), sub));
        }
        listening.as_ref().map(|(_, sub)| sub)
    }
}

/// Releases every guard together (each release is bounded by the response timeout),
/// whatever each answers: what a multi-lock took before it failed.
async fn release_all<B: Backend>(held: Vec<Guard<B>>) {
    let _ = futures_util::future::join_all(held.into_iter().map(Guard::release)).await;
}
