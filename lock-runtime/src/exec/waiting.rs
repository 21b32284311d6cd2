//! What a waiting caller holds and listens to, for both executors: its turn in the
//! handle's local queue, its release subscription, its standing handover offer and its
//! fair mailbox. [`Waiting::woken`] is the one future of a sleeping waiter's wake-up;
//! the async executor bounds it with a tokio timer, the blocking one with the OS's
//! ([`crate::exec::block::block_within`]), so both wake for exactly the same events.
//!
//! Everything here is tokio's runtime-free synchronisation (`Notify`, `oneshot`, a fair
//! `Mutex`): a blocking thread waits on it without any runtime.

use std::sync::Arc;
use std::time::Duration;

use crate::LockError;
use crate::exec::notify::{Mailbox, Subscription};
use crate::exec::queue::{LocalQueue, Standing, Turn};
use crate::machine::acquire::{Handover, Wake};
use crate::machine::grant::Granted;
use crate::machine::key::Keys;
use crate::machine::token::Token;

/// A waiting caller's registrations; dropping it withdraws each (its offer, its place
/// in the local queue, its subscriptions).
#[derive(Default)]
pub(crate) struct Waiting {
    pub(crate) turn: Option<Turn>,
    pub(crate) subscription: Option<Subscription>,
    pub(crate) standing: Option<Standing>,
    pub(crate) mailbox: Option<Mailbox>,
}

impl Waiting {
    /// The turn came: keeps it, with `subscription` if the lock's channel is live
    /// already; whether the previous head got the lock a moment ago (then an attempt now
    /// would only be refused).
    pub(crate) fn turned(&mut self, mut turn: Turn, subscription: Option<Subscription>) -> bool {
        let just_granted = subscription.is_some() && turn.follows_a_grant();
        self.turn = Some(turn);
        self.subscription = subscription;
        just_granted
    }

    /// Keeps the mailbox of a fair ticket (the previous ticket's goes); whether its
    /// channel is live.
    pub(crate) fn enter(&mut self, mailbox: Option<Mailbox>) -> bool {
        self.mailbox = mailbox;
        self.mailbox.as_ref().is_some_and(Mailbox::is_live)
    }

    /// Stands the offer of `token` (when given), for a handover of `keys` with lease
    /// `ttl`.
    pub(crate) fn stand(
        &mut self,
        queue: &Arc<LocalQueue>,
        keys: &Keys,
        token: Option<Token>,
        ttl: Duration,
    ) {
        if let Some(token) = token {
            self.standing = Some(queue.offer(&keys.name, &keys.lock, &token, ttl));
        }
    }

    /// The acquisition ended with `done`; a grant is told to the next local head.
    pub(crate) fn done(
        &mut self,
        done: Result<Option<Granted>, LockError>,
    ) -> Result<Option<Granted>, LockError> {
        if let (Ok(Some(_)), Some(turn)) = (&done, &mut self.turn) {
            turn.granted();
        }
        done
    }

    /// Resolves at the next wake-up other than the nap's end: a handover (or its
    /// failure), a fair handoff letter, or a release notification. Pending forever
    /// when the caller listens to nothing; cancel-safe.
    pub(crate) async fn woken(&mut self) -> Wake {
        enum Got {
            Handed(Option<crate::exec::queue::Handed>),
            Letter(crate::machine::fair::Letter),
            Released,
        }
        let Self {
            subscription,
            standing,
            mailbox,
            ..
        } = self;
        let got = tokio::select! {
            biased;
            handed = async {
                match standing.as_mut() {
                    Some(standing) => standing.handed().await,
                    None => std::future::pending().await,
                }
            } => Got::Handed(handed),
            letter = async {
                match mailbox.as_mut() {
                    Some(mailbox) => mailbox.letter().await,
                    None => std::future::pending().await,
                }
            } => Got::Letter(letter),
            () = async {
                match subscription.as_ref() {
                    Some(subscription) => subscription.released().await,
                    None => std::future::pending().await,
                }
            } => Got::Released,
        };
        match got {
            Got::Handed(handed) => {
                *standing = None;
                Wake::Handed(handed.map(|h| {
                    let h = h.claim();
                    Handover {
                        fence: h.fence,
                        sent: h.sent,
                        streak: h.streak,
                    }
                }))
            }
            Got::Letter(letter) => Wake::Letter(letter),
            Got::Released => Wake::Nap,
        }
    }
}
