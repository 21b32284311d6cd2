//! The blocking executor of a multi-lock ([`crate::machine::multi`]), the async one's
//! twin ([`crate::exec::multi`]) on the handle's connection, its waits timed by the OS.

use std::sync::Arc;
use std::time::Instant;

use crate::LockError;
use crate::exec::block::block_within;
use crate::exec::blocking::Shared;
use crate::exec::notify::{BlockingNotifications, Subscription};
use crate::machine::grant::Granted;
use crate::machine::multi::{MultiAcquire, Next};
use crate::machine::settings::Settings;

impl<C: redis::ConnectionLike + Send + 'static> Shared<C> {
    /// Carries a multi-lock's `machine` out: each granted group is handed to `keep` at
    /// once (it becomes guards, so the handle's thread renews it while later groups are
    /// waited for); `lost` says whether any kept guard's lease is lost, and then
    /// `release` releases them all and the call starts over. Whether every group was
    /// granted (`false`: a try found a name held); the caller releases what it kept
    /// unless this is `Ok(true)`.
    pub(crate) fn run_all(
        self: &Arc<Self>,
        settings_arc: &Arc<Settings>,
        notifications: Option<&BlockingNotifications>,
        mut machine: MultiAcquire,
        mut keep: impl FnMut(Granted),
        lost: impl Fn() -> bool,
        release: impl Fn(),
    ) -> Result<bool, LockError> {
        let settings = &**settings_arc;
        let mut listening: Option<(String, Subscription)> = None;
        loop {
            if machine.holds_groups() && lost() {
                release();
                machine.lost_held();
            }
            match machine.next(Instant::now()) {
                Next::Attempt { group, limit } => {
                    let call = machine.sending(settings, &group, Instant::now())?;
                    let reply = self.conn.with(Some(limit), |c| call.invoke(c));
                    let answered = machine.attempted(reply, Instant::now());
                    if machine.split() {
                        self.split.store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                    for abandoned in answered.abandoned {
                        self.release_in_background(abandoned, settings_arc);
                    }
                    answered.granted.into_iter().for_each(&mut keep);
                }
                Next::Subscribe { channel, within } => {
                    if listening.as_ref().is_none_or(|(c, _)| *c != channel) {
                        let sub = notifications.and_then(|n| n.subscribe(&channel, within).0);
                        listening = sub.map(|sub| (channel, sub));
                    }
                    machine.resumed();
                }
                Next::Sleep { channel, nap } => {
                    if listening.as_ref().is_none_or(|(c, _)| *c != channel) {
                        let sub = notifications.and_then(|n| n.join(&channel));
                        listening = sub.map(|sub| (channel, sub));
                    }
                    match &listening {
                        Some((_, sub)) => {
                            let _ = block_within(sub.released(), nap);
                        }
                        None => std::thread::sleep(nap),
                    }
                    machine.resumed();
                }
                Next::Done(done) => return done,
            }
        }
    }
}
