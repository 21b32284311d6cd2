//! The blocking executor: the lock machine's answers carried out over the handle's
//! backend ([`Conn`]: one sync connection, which the handle's threads and its background
//! thread take turns on, each call bounded from its start, with the async
//! [`Backend`](crate::exec::backend::Backend)'s verbs) and the handle's one background
//! thread ([`worker`]: renewals, background releases). Waits are timed by the OS
//! ([`block_within`]); release notifications come from [`BlockingNotifications`].

mod conn;
mod multi;
mod worker;

use std::sync::{Arc, OnceLock};
use std::time::Instant;

pub(crate) use self::conn::{Conn, Tune, read_each};
pub(crate) use self::worker::Worker;
use crate::LockError;
use crate::exec::block::block_within;
use crate::exec::notify::BlockingNotifications;
use crate::exec::queue::LocalQueue;
use crate::exec::waiting::Waiting;
use crate::machine::acquire::{Acquire, Next, Wake};
use crate::machine::call::Owner;
use crate::machine::grant::Abandoned;
use crate::machine::grant::Granted;
use crate::machine::lease::LeaseState;
use crate::machine::native::NativeCommands;
use crate::machine::settings::Settings;

/// Everything a blocking handle is: its connection and background thread, its settings
/// and its notifications. Cheap to clone; clones share all of it.
pub struct Engine<C> {
    pub(crate) shared: Arc<Shared<C>>,
    pub(crate) settings: Arc<Settings>,
    pub(crate) notifications: Option<Arc<BlockingNotifications>>,
}

impl<C> Clone for Engine<C> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
            settings: Arc::clone(&self.settings),
            notifications: self.notifications.clone(),
        }
    }
}

/// What the clones of a handle and its guards share: the connection and the thread.
pub(crate) struct Shared<C> {
    pub(crate) conn: Arc<Conn<C>>,
    pub(crate) worker: OnceLock<Option<Arc<Worker>>>,
    /// The local queue: the handle's threads take turns at a lock, and a release hands it
    /// to the waiting head.
    pub(crate) queue: Arc<LocalQueue>,
    /// The server refused a multi-lock's names of several slots in one call (a Redis
    /// Cluster): this handle's multi-locks go one slot at a time.
    pub(crate) split: std::sync::atomic::AtomicBool,
}

impl<C: redis::ConnectionLike + Send + 'static> Shared<C> {
    /// What a handle and its clones share, over `conn`: the background thread (started
    /// on first use) asks the server what it offers when a lease call finds that
    /// question open.
    pub(crate) fn new(conn: Conn<C>) -> Arc<Self> {
        let shared = Arc::new(Self {
            conn: Arc::new(conn),
            worker: OnceLock::new(),
            queue: Arc::default(),
            split: std::sync::atomic::AtomicBool::new(false),
        });
        let weak = Arc::downgrade(&shared);
        shared.conn.asked_by(Box::new(move |question, timeout| {
            let Some(shared) = weak.upgrade() else {
                return;
            };
            match shared.worker() {
                Some(worker) => worker.ask(question, timeout),
                // Nobody to ask: scripts, which every server runs.
                None => (shared.conn.offered).answered(question, NativeCommands::default()),
            }
        }));
        shared
    }

    /// The background thread, started on first use.
    pub(crate) fn worker(&self) -> Option<&Arc<Worker>> {
        self.worker
            .get_or_init(|| Worker::start(Arc::clone(&self.conn)))
            .as_ref()
    }

    /// Has the background thread renew `lease` (from now on, or again after an extend).
    pub(crate) fn watch(&self, lease: &Arc<LeaseState>) {
        if let Some(Some(worker)) = self.worker.get() {
            worker.watch(lease);
        }
    }

    /// Stops the background thread's renewals of `lease`.
    pub(crate) fn forget(&self, lease: &Arc<LeaseState>) {
        if let Some(Some(worker)) = self.worker.get() {
            worker.forget(lease);
        }
    }

    /// Releases a grant nobody owns in the background, as `settings` say (their
    /// delivery); its TTL frees it if that fails.
    pub(crate) fn release_in_background(&self, abandoned: Abandoned, settings: &Arc<Settings>) {
        if let Some(worker) = self.worker() {
            worker.release(abandoned, Arc::clone(settings));
        } else {
            tracing::debug!("no background thread; the ttl frees the lock");
        }
    }
}

impl<C: redis::ConnectionLike + Send + 'static> Shared<C> {
    /// Carries `machine` out on this thread: its I/O on the handle's connection, its
    /// waits timed by the OS. A thread that unwinds midway releases in the background
    /// what the machine says may be granted without an owner.
    pub(crate) fn run(
        self: &Arc<Self>,
        settings_arc: &Arc<Settings>,
        notifications: Option<&BlockingNotifications>,
        machine: Acquire,
    ) -> Result<Option<Granted>, LockError> {
        let mut run = Running {
            shared: self,
            settings: settings_arc,
            machine,
            waiting: Waiting::default(),
        };
        let (settings, conn, queue) = (&**settings_arc, &self.conn, &self.queue);
        loop {
            let machine = &mut run.machine;
            match machine.next(Instant::now()) {
                Next::Release(abandoned) => {
                    self.release_in_background(abandoned, settings_arc);
                }
                Next::Turn { until } => {
                    let left = until.saturating_duration_since(Instant::now());
                    match block_within(self.queue.turn(&machine.keys().name), left) {
                        Some(turn) => {
                            let live = notifications.and_then(|n| n.join(&machine.keys().channel));
                            machine.turned(run.waiting.turned(turn, live), Instant::now());
                        }
                        None => machine.no_turn(Instant::now()),
                    }
                }
                Next::Attempt { token, limit } => {
                    let reply = conn.acquire(Owner::new(settings, machine.keys(), &token), limit);
                    machine.acquired(reply, Instant::now());
                }
                Next::Confirm { token, left } => {
                    let reply = conn.confirm(Owner::new(settings, machine.keys(), &token), left);
                    machine.confirmed(reply, Instant::now());
                }
                Next::Enter => {
                    let token = machine.ticket().map(|t| t.token.as_str());
                    let mailbox = (notifications.zip(token))
                        .and_then(|(n, token)| n.mailbox(&settings.prefix, token));
                    machine.entered(run.waiting.enter(mailbox));
                }
                Next::Queue { limit } => {
                    let Some(ticket) = machine.ticket() else {
                        continue;
                    };
                    let reply = conn.fair_acquire(settings, machine.keys(), ticket, limit);
                    machine.queued(reply, Instant::now());
                }
                Next::Listen { within, offer } => {
                    run.waiting
                        .stand(queue, machine.keys(), offer, settings.ttl);
                    let live = if let Some(mailbox) = &run.waiting.mailbox {
                        mailbox.live_within_blocking(within)
                    } else if let Some(n) = notifications {
                        let (sub, live) = n.subscribe(&machine.keys().channel, within);
                        run.waiting.subscription = sub.or(run.waiting.subscription.take());
                        live
                    } else {
                        false
                    };
                    machine.listened(live);
                }
                Next::Sleep { nap, offer } => {
                    run.waiting
                        .stand(queue, machine.keys(), offer, settings.ttl);
                    let woken = block_within(run.waiting.woken(), nap);
                    machine.woke(woken.unwrap_or(Wake::Nap), Instant::now());
                }
                Next::Done(done) => return run.waiting.done(done),
            }
        }
    }
}

impl<C> Drop for Shared<C> {
    fn drop(&mut self) {
        if let Some(Some(worker)) = self.worker.get() {
            worker.close();
        }
    }
}

/// A machine being carried out; dropped midway (the thread unwound), it releases what
/// may be granted without an owner.
struct Running<'a, C: redis::ConnectionLike + Send + 'static> {
    shared: &'a Arc<Shared<C>>,
    settings: &'a Arc<Settings>,
    machine: Acquire,
    waiting: Waiting,
}

impl<C: redis::ConnectionLike + Send + 'static> Drop for Running<'_, C> {
    fn drop(&mut self) {
        for abandoned in self.machine.abandon(Instant::now()) {
            self.shared.release_in_background(abandoned, self.settings);
        }
    }
}
