//! Release notifications: one pub/sub connection per handle, kept by one background
//! task; one subscription per lock that has local waiters; one waiter woken per release.
//!
//! compare-del.lua publishes on `lock:{name}:released` when it deletes a lock. Waiters
//! of this handle for that name share one subscription; each message wakes one of them
//! (`Notify::notify_one`, which keeps the wake-up as a permit if that waiter is between
//! attempts), so a release costs one attempt here, not one per waiter.
//!
//! **No waiter ever waits on the server here.** Connecting, subscribing and
//! unsubscribing happen in the task, each bounded by a timeout; a waiter registers
//! (no I/O) and, at most for its own nap, waits for the subscription to be confirmed.
//! A node that accepts the connection and never answers only makes waiters poll with
//! their retry policy; the task gives that connection up after the subscribe timeout
//! and tries again (the next node, on a Cluster).
//!
//! A channel stays subscribed half a second after its last waiter left, so the next
//! waiter of a busy lock finds it live. After the connection drops, every channel is
//! re-subscribed and every waiter woken once, because releases may have been missed.
//!
//! On Redis Cluster, `PUBLISH` reaches every node, so the connection may go to any one
//! of them: the task is given several nodes, starts at a random one (spreading the
//! subscribers of many processes), and when its node fails it moves on to the next.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

#[cfg(feature = "blocking")]
use crate::exec::block::block_within;
use crate::machine::fair::Letter;
use futures_util::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// How long a channel stays subscribed after its last waiter left.
const LINGER: Duration = Duration::from_millis(500);

/// How long opening the pub/sub connection to one node may take before the next is
/// tried (redis-rs sets no connect timeout on pub/sub connections).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// How long the server may take to confirm a SUBSCRIBE or UNSUBSCRIBE before the
/// connection is given up as broken.
const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(1);

/// How long a channel the server refused (an ACL without it) goes unasked on the same
/// connection: rights given back are found this late, and a user that never has them
/// costs one refused `SUBSCRIBE` per channel this often.
const REFUSED_RETRY: Duration = Duration::from_secs(5);

/// The servers the task may subscribe on: one, or any node of a Redis Cluster.
struct Nodes {
    clients: Vec<redis::Client>,
    /// The node to try first: the one last connected to.
    next: usize,
}

impl Nodes {
    fn new(clients: Vec<redis::Client>) -> Self {
        let len = u64::try_from(clients.len()).unwrap_or(1).max(1);
        let start = getrandom::u64().unwrap_or(0) % len;
        Self {
            clients,
            next: usize::try_from(start).unwrap_or(0),
        }
    }

    /// Opens a pub/sub connection to the node last used or, failing that, to each other
    /// node in turn; the error of the last node tried if none answers.
    async fn connect(&mut self) -> redis::RedisResult<redis::aio::PubSub> {
        let mut last = redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "no server to subscribe on",
        ));
        for step in 0..self.clients.len() {
            let i = (self.next + step) % self.clients.len();
            match tokio::time::timeout(CONNECT_TIMEOUT, self.clients[i].get_async_pubsub()).await {
                Ok(Ok(pubsub)) => {
                    if step > 0 {
                        tracing::info!(
                            node = %self.clients[i].get_connection_info().addr(),
                            "release notifications: subscribed on another node"
                        );
                    }
                    self.next = i;
                    return Ok(pubsub);
                }
                Ok(Err(e)) => last = e,
                Err(_) => {
                    last = redis::RedisError::from(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "opening the pub/sub connection timed out",
                    ));
                }
            }
        }
        // The next round starts at the node after the last one tried.
        self.next = (self.next + 1) % self.clients.len().max(1);
        Err(last)
    }
}

/// The waiters of one channel.
struct Channel {
    waiters: usize,
    wake: Arc<Notify>,
    /// Counts the channel's messages (and the connection's drops, when messages may
    /// have been missed), for observers that want every one, not one waiter's share
    /// (an election's observers; see [`Subscription::messages`]).
    seen: tokio::sync::watch::Sender<u64>,
    /// The server confirmed the subscription on the current connection: a release
    /// published from now on reaches these waiters.
    live: bool,
    /// When the last waiter left, while nobody waits.
    idle_since: Option<Instant>,
    /// Kept subscribed while the handle lives (its fair handoff channel).
    pinned: bool,
    /// The server refused the subscription on the current connection (an ACL without
    /// the channel), at this instant: its waiters poll, and nobody waits for it to go
    /// live; asked again [`REFUSED_RETRY`] later.
    refused: Option<Instant>,
}

/// What the task and the waiters share.
struct Shared {
    channels: Mutex<HashMap<String, Channel>>,
    /// Wakes the task: a channel needs (un)subscribing.
    kick: Notify,
    /// Wakes waiters waiting for their channel to go live.
    live_changed: Notify,
    /// Fair waiters expecting a handoff, by owner token.
    letters: Mutex<HashMap<String, tokio::sync::oneshot::Sender<Letter>>>,
}

impl Shared {
    fn channels(&self) -> MutexGuard<'_, HashMap<String, Channel>> {
        self.channels.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn letters(&self) -> MutexGuard<'_, HashMap<String, tokio::sync::oneshot::Sender<Letter>>> {
        self.letters.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A message on `channel`: a handoff goes to the one waiter it names; anything else
    /// (a release) wakes one waiter of the channel.
    fn dispatch(&self, channel: &str, payload: &[u8]) {
        if let Some(letter) = Letter::parse(payload) {
            if let Some(to) = self.letters().remove(&letter.token) {
                let _ = to.send(letter);
            }
        } else if let Some(channel) = self.channels().get(channel) {
            channel.wake.notify_one();
            channel.seen.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// What to subscribe and unsubscribe given what the connection has, and when the
    /// next lingering channel is due to go.
    fn plan(
        &self,
        subscribed: &HashSet<String>,
        now: Instant,
    ) -> (Vec<String>, Vec<String>, Option<Instant>) {
        let mut channels = self.channels();
        let (mut add, mut remove, mut next) = (Vec::new(), Vec::new(), None::<Instant>);
        channels.retain(|name, channel| {
            let lingering_until = channel.idle_since.map(|idle| idle + LINGER);
            let wanted = channel.pinned
                || channel.waiters > 0
                || lingering_until.is_some_and(|until| now < until);
            let has = subscribed.contains(name);
            let retry = channel.refused.map(|at| at + REFUSED_RETRY);
            if let Some(at) = retry.filter(|at| wanted && now < *at) {
                next = Some(next.map_or(at, |n| n.min(at)));
            } else if wanted && !has {
                add.push(name.clone());
            } else if !wanted && has {
                remove.push(name.clone());
            }
            if wanted && let Some(until) = lingering_until {
                next = Some(next.map_or(until, |n| n.min(until)));
            }
            // A channel nobody wants and the connection does not have is forgotten.
            wanted || has
        });
        (add, remove, next)
    }

    fn set_live(&self, channel: &str, live: bool) {
        if let Some(c) = self.channels().get_mut(channel) {
            c.live = live;
            c.refused = None;
        }
        self.live_changed.notify_waiters();
    }

    /// The server refused `channel` at `now`: its waiters stop waiting for it to go live.
    /// Whether it was not refused before (the refusal is news, worth a warning).
    fn set_refused(&self, channel: &str, now: Instant) -> bool {
        let news = self
            .channels()
            .get_mut(channel)
            .is_some_and(|c| c.refused.replace(now).is_none());
        self.live_changed.notify_waiters();
        news
    }

    /// The connection dropped: no subscription is live, and releases may have been
    /// missed, so every waiter is woken to try once.
    fn disconnected(&self) {
        for channel in self.channels().values_mut() {
            channel.live = false;
            // A new connection asks again (the rights may be back).
            channel.refused = None;
            channel.wake.notify_waiters();
            channel.seen.send_modify(|n| *n = n.wrapping_add(1));
        }
        self.live_changed.notify_waiters();
    }
}

/// The task and what it shares with waiters; dropping it stops the task.
struct Started {
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Drop for Started {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Release notifications for a handle: the task starts on first contention, and is
/// shared by every clone.
pub(crate) struct Notifications {
    clients: Vec<redis::Client>,
    started: OnceLock<Started>,
    /// Names this handle's handoff channel (fair mode).
    id: u64,
}

impl Notifications {
    pub(crate) fn new(client: redis::Client) -> Self {
        Self::any_of(vec![client])
    }

    /// Notifications from whichever of `clients` answers (the nodes of one Redis
    /// Cluster, where every node hears every `PUBLISH`). `clients` must not be empty.
    pub(crate) fn any_of(clients: Vec<redis::Client>) -> Self {
        Self {
            clients,
            started: OnceLock::new(),
            id: getrandom::u64().unwrap_or_else(|_| u64::from(std::process::id())),
        }
    }

    /// The channel this handle's fair waiters receive their handoffs on.
    pub(crate) fn handoff_channel(&self, prefix: &str) -> String {
        channel(prefix, self.id)
    }

    /// Expects the handoff of a lock to `token` on `channel` (this handle's): subscribes
    /// it as [`subscribe`](Self::subscribe) does, for as long as the handle lives (one
    /// channel per handle, so the next waiter finds it live), and registers the token.
    /// `None` outside a tokio runtime.
    pub(crate) fn mailbox(&self, channel: &str, token: &str) -> Option<Mailbox> {
        let subscription = self.subscribe(channel)?;
        if let Some(c) = subscription.shared.channels().get_mut(channel) {
            c.pinned = true;
        }
        let (to, letter) = tokio::sync::oneshot::channel();
        subscription.shared.letters().insert(token.to_owned(), to);
        Some(Mailbox {
            subscription,
            token: token.to_owned(),
            letter: Some(letter),
        })
    }

    /// The task's shared state, starting the task on first use (on the current tokio
    /// runtime, which the caller provides).
    fn shared(&self) -> Option<&Arc<Shared>> {
        if let Some(started) = self.started.get() {
            return Some(&started.shared);
        }
        let handle = tokio::runtime::Handle::try_current().ok()?;
        let started = self.started.get_or_init(|| {
            let shared = Arc::new(Shared {
                channels: Mutex::new(HashMap::new()),
                kick: Notify::new(),
                live_changed: Notify::new(),
                letters: Mutex::new(HashMap::new()),
            });
            let nodes = Nodes::new(self.clients.clone());
            let task = handle.spawn(run(nodes, Arc::clone(&shared)));
            Started { shared, task }
        });
        Some(&started.shared)
    }

    /// Registers a waiter for `channel` if the channel is live already (another local
    /// waiter has it, or had it a moment ago): no round trip, and a release published
    /// after this returns is not missed.
    pub(crate) fn join(&self, channel: &str) -> Option<Subscription> {
        let shared = &self.started.get()?.shared;
        let wake = {
            let mut channels = shared.channels();
            let entry = channels.get_mut(channel).filter(|c| c.live)?;
            entry.waiters += 1;
            entry.idle_since = None;
            Arc::clone(&entry.wake)
        };
        Some(Subscription {
            shared: Arc::clone(shared),
            channel: channel.to_owned(),
            wake,
        })
    }

    /// Registers a waiter for `channel` and asks the task to subscribe it. Returns at
    /// once; [`Subscription::live_within`] waits for the confirmation. `None` outside a
    /// tokio runtime.
    pub(crate) fn subscribe(&self, channel: &str) -> Option<Subscription> {
        let shared = self.shared()?;
        let (wake, live) = {
            let mut channels = shared.channels();
            let entry = channels
                .entry(channel.to_owned())
                .or_insert_with(|| Channel {
                    waiters: 0,
                    wake: Arc::new(Notify::new()),
                    seen: tokio::sync::watch::Sender::new(0),
                    live: false,
                    idle_since: None,
                    pinned: false,
                    refused: None,
                });
            entry.waiters += 1;
            entry.idle_since = None;
            (Arc::clone(&entry.wake), entry.live)
        };
        if !live {
            shared.kick.notify_one();
        }
        Some(Subscription {
            shared: Arc::clone(shared),
            channel: channel.to_owned(),
            wake,
        })
    }
}

/// One waiter's registration; dropping it unregisters (and, after a linger, the task
/// unsubscribes a channel nobody waits on).
pub(crate) struct Subscription {
    shared: Arc<Shared>,
    channel: String,
    wake: Arc<Notify>,
}

impl Subscription {
    fn is_live(&self) -> bool {
        self.shared
            .channels()
            .get(&self.channel)
            .is_some_and(|c| c.live)
    }

    /// `Some(true)` once the server confirmed the subscription, `Some(false)` once it
    /// refused it (nothing to wait for), `None` while it may still come.
    fn state(&self) -> Option<bool> {
        let channels = self.shared.channels();
        let c = channels.get(&self.channel)?;
        if c.live {
            Some(true)
        } else {
            c.refused.map(|_| false)
        }
    }

    /// Waits at most `within` for the server to confirm the subscription (or to refuse
    /// it: then at once); whether it is live. From then on, no release is missed.
    pub(crate) async fn live_within(&self, within: Duration) -> bool {
        let give_up = tokio::time::Instant::now() + within;
        loop {
            let changed = self.shared.live_changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            match self.state() {
                Some(live) => return live,
                None if tokio::time::timeout_at(give_up, changed).await.is_err() => {
                    return self.is_live();
                }
                None => {}
            }
        }
    }

    /// Every message on the channel from now on (and every drop of the connection, when
    /// messages may have been missed) as a change of the receiver: for an observer that
    /// must see each one, where [`released`](Self::released) wakes one waiter per message.
    pub(crate) fn messages(&self) -> tokio::sync::watch::Receiver<u64> {
        match self.shared.channels().get(&self.channel) {
            Some(c) => c.seen.subscribe(),
            None => tokio::sync::watch::Sender::new(0).subscribe(),
        }
    }

    /// Resolves at the next release of this lock that no other local waiter took.
    pub(crate) async fn released(&self) {
        self.wake.notified().await;
    }

    /// [`live_within`](Self::live_within) for a thread outside the runtime: blocks it at
    /// most `within`, timed by the OS, not by the runtime's timers (a timer made from
    /// outside the runtime may fire only when the runtime's thread next wakes, which
    /// made blocking waiters oversleep by most of a second).
    #[cfg(feature = "blocking")]
    pub(crate) fn live_within_blocking(&self, within: Duration) -> bool {
        let give_up = Instant::now() + within;
        loop {
            let changed = self.shared.live_changed.notified();
            let mut changed = std::pin::pin!(changed);
            changed.as_mut().enable();
            if let Some(live) = self.state() {
                return live;
            }
            let left = give_up.saturating_duration_since(Instant::now());
            if left.is_zero() || block_within(changed, left).is_none() {
                return self.is_live();
            }
        }
    }
}

/// A fair waiter's registration for its handoff: the handle's channel, subscribed,
/// and the letter for its token; dropping it unregisters both.
pub(crate) struct Mailbox {
    subscription: Subscription,
    token: String,
    /// Until the letter came (a receiver must not be polled after it completed).
    letter: Option<tokio::sync::oneshot::Receiver<Letter>>,
}

impl Mailbox {
    /// Whether the channel is subscribed: a handoff published from now on arrives.
    pub(crate) fn is_live(&self) -> bool {
        self.subscription.is_live()
    }

    /// See [`Subscription::live_within`].
    pub(crate) async fn live_within(&self, within: Duration) -> bool {
        self.subscription.live_within(within).await
    }

    /// Resolves with the handoff to this waiter, once (never, if none comes, or after it
    /// came: a handoff that could not be used is found by the waiter's next call).
    /// Cancel-safe.
    pub(crate) async fn letter(&mut self) -> Letter {
        if let Some(receiver) = &mut self.letter {
            let letter = receiver.await;
            self.letter = None;
            if let Ok(letter) = letter {
                return letter;
            }
        }
        std::future::pending().await
    }

    /// See [`Subscription::live_within_blocking`].
    #[cfg(feature = "blocking")]
    pub(crate) fn live_within_blocking(&self, within: Duration) -> bool {
        self.subscription.live_within_blocking(within)
    }
}

impl Drop for Mailbox {
    fn drop(&mut self) {
        self.subscription.shared.letters().remove(&self.token);
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let idle = {
            let mut channels = self.shared.channels();
            match channels.get_mut(&self.channel) {
                Some(entry) => {
                    entry.waiters -= 1;
                    if entry.waiters == 0 {
                        entry.idle_since = Some(Instant::now());
                    }
                    entry.waiters == 0
                }
                None => false,
            }
        };
        // A wake-up delivered to a waiter that is dropped before using it is passed on
        // by tokio's `Notified` itself.
        if idle {
            self.shared.kick.notify_one();
        }
    }
}

/// Every message of a few channels, for an observer that must see each one (an
/// election's): their subscriptions, kept for as long as it watches, and each channel's
/// message counter.
pub(crate) struct Watch {
    subscriptions: Vec<Subscription>,
    messages: Vec<tokio::sync::watch::Receiver<u64>>,
}

impl Watch {
    /// Watches the channels of `subscriptions`.
    pub(crate) fn of(subscriptions: Vec<Subscription>) -> Self {
        let messages = subscriptions.iter().map(Subscription::messages).collect();
        Self {
            subscriptions,
            messages,
        }
    }

    /// From now on, a message on any of the channels is news to [`changed`](Self::changed).
    pub(crate) fn mark(&mut self) {
        for rx in &mut self.messages {
            rx.borrow_and_update();
        }
    }

    /// Resolves at the first message since the last [`mark`](Self::mark) (or a dropped
    /// connection, which may have lost one).
    pub(crate) async fn changed(&mut self) {
        if self.messages.is_empty() {
            return std::future::pending().await;
        }
        let each = self.messages.iter_mut().map(|rx| Box::pin(rx.changed()));
        let _ = futures_util::future::select_all(each).await;
    }

    /// Waits at most `within` for every subscription to be confirmed; whether all are.
    pub(crate) async fn live_within(&self, within: Duration) -> bool {
        for sub in &self.subscriptions {
            if !sub.live_within(within).await {
                return false;
            }
        }
        true
    }

    /// [`live_within`](Self::live_within) for a thread outside the runtime.
    #[cfg(feature = "blocking")]
    pub(crate) fn live_within_blocking(&self, within: Duration) -> bool {
        (self.subscriptions.iter()).all(|sub| sub.live_within_blocking(within))
    }

    /// [`changed`](Self::changed) for a thread outside the runtime, for at most `nap`.
    #[cfg(feature = "blocking")]
    pub(crate) fn changed_within_blocking(&mut self, nap: Duration) {
        let _ = block_within(self.changed(), nap);
    }
}

/// Keeps a pub/sub connection to one of `nodes` and its subscriptions in step with
/// the channels waiters want, forever (until the handle is dropped).
async fn run(mut nodes: Nodes, shared: Arc<Shared>) {
    let mut delay = Duration::from_millis(50);
    let mut reported = false;
    loop {
        match nodes.connect().await {
            Ok(pubsub) => {
                delay = Duration::from_millis(50);
                reported = false;
                let (mut sink, mut stream) = pubsub.split();
                session(&shared, &mut sink, &mut stream).await;
                tracing::warn!(
                    "release notifications: connection lost; reconnecting (waiters poll meanwhile)"
                );
                shared.disconnected();
            }
            Err(e) => {
                if !reported {
                    tracing::warn!(error = %e, "release notifications: cannot connect; waiters poll meanwhile");
                    reported = true;
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
            }
        }
    }
}

/// One connection's life: (un)subscribes as waiters come and go and dispatches release
/// messages, until the connection drops or stops answering.
async fn session(shared: &Shared, sink: &mut PubSubSink, stream: &mut PubSubStream) {
    let mut subscribed = HashSet::new();
    loop {
        // Channels the server refused (an ACL without them) are left out of `add` for a
        // while; their waiters poll.
        let (add, remove, linger) = shared.plan(&subscribed, Instant::now());
        for channel in add {
            match tokio::time::timeout(SUBSCRIBE_TIMEOUT, sink.subscribe(&channel)).await {
                Ok(Ok(())) => {
                    subscribed.insert(channel.clone());
                    shared.set_live(&channel, true);
                }
                Ok(Err(e)) if !e.is_io_error() => {
                    if shared.set_refused(&channel, Instant::now()) {
                        tracing::warn!(error = %e, %channel, "release notifications: subscribe refused; waiters poll");
                    }
                }
                _ => return,
            }
        }
        for channel in remove {
            let unsubscribed =
                tokio::time::timeout(SUBSCRIBE_TIMEOUT, sink.unsubscribe(&channel)).await;
            if !matches!(unsubscribed, Ok(Ok(()))) {
                return;
            }
            subscribed.remove(&channel);
            shared.set_live(&channel, false);
        }
        let linger = async {
            match linger {
                Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            msg = stream.next() => match msg {
                Some(msg) => shared.dispatch(msg.get_channel_name(), msg.get_payload_bytes()),
                None => return,
            },
            () = shared.kick.notified() => {}
            () = linger => {}
        }
    }
}

/// The pub/sub channel a handle's waiters receive their handoffs on.
pub(crate) fn channel(prefix: &str, handle: u64) -> String {
    format!("{prefix}handoff:{handle:016x}")
}

/// The blocking face's release notifications: this machinery, run on a private one-thread runtime
/// that starts on first contention.
#[cfg(feature = "blocking")]
pub(crate) struct BlockingNotifications {
    pub(crate) client: redis::Client,
    pub(crate) started: OnceLock<Option<(tokio::runtime::Runtime, Notifications)>>,
}

/// Dropped where blocking is not allowed (the last clone of a blocking handle dropped by
/// async code), the runtime is shut down without waiting for its pub/sub task, which
/// would panic there.
#[cfg(feature = "blocking")]
impl Drop for BlockingNotifications {
    fn drop(&mut self) {
        if let Some(Some((runtime, _))) = self.started.take() {
            runtime.shutdown_background();
        }
    }
}

#[cfg(feature = "blocking")]
impl BlockingNotifications {
    pub(crate) fn started(&self) -> Option<&(tokio::runtime::Runtime, Notifications)> {
        self.started
            .get_or_init(|| {
                match tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .thread_name("lockscript-notify")
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => Some((runtime, Notifications::new(self.client.clone()))),
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot start the notification thread; waiters poll");
                        None
                    }
                }
            })
            .as_ref()
    }

    /// Subscribes to `channel`, waiting at most `within` for the confirmation; whether
    /// it is live.
    pub(crate) fn subscribe(
        &self,
        channel: &str,
        within: Duration,
    ) -> (Option<Subscription>, bool) {
        let Some((runtime, notifications)) = self.started() else {
            return (None, false);
        };
        let subscription = {
            let _entered = runtime.enter();
            notifications.subscribe(channel)
        };
        let live = subscription
            .as_ref()
            .is_some_and(|s| s.live_within_blocking(within));
        (subscription, live)
    }

    /// A waiter for `channel` if it is live already.
    pub(crate) fn join(&self, channel: &str) -> Option<Subscription> {
        self.started.get()?.as_ref()?.1.join(channel)
    }

    /// The mailbox of the fair ticket of `token`, on the handle's handoff channel.
    pub(crate) fn mailbox(&self, prefix: &str, token: &str) -> Option<Mailbox> {
        let (runtime, notifications) = self.started()?;
        let _entered = runtime.enter();
        notifications.mailbox(&notifications.handoff_channel(prefix), token)
    }
}
