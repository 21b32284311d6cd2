//! Release notifications: one pub/sub connection per `Locks`, one subscription per
//! lock that has local waiters, and one waiter woken per release.
//!
//! compare-del.lua publishes on `lock:{name}:released` when it deletes a lock. Waiters
//! of this process for that name share one subscription; each message wakes one of
//! them (`Notify::notify_one`, which keeps the wake-up as a permit if that waiter is
//! between attempts), so a release costs one attempt here, not one per waiter. A
//! channel is subscribed while it has waiters and unsubscribed half a second after the
//! last one leaves, so subscriptions never pile up.
//!
//! The connection is re-opened after it drops; every channel is then re-subscribed and
//! every waiter woken once, because releases may have been missed meanwhile. While it
//! is down, waiters fall back to their retry policy.
//!
//! On Redis Cluster, `PUBLISH` reaches every node, so the connection may go to any one
//! of them: the notifier is given several nodes, starts at a random one (spreading the
//! subscribers of many processes), and when its node is unreachable it moves on to the
//! next.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
use tokio::sync::{Notify, OnceCell};
use tokio::task::JoinHandle;

/// How long a channel stays subscribed after its last waiter left.
const LINGER: Duration = Duration::from_millis(500);

/// How long opening the pub/sub connection to one node may take before the next is
/// tried (redis-rs sets no connect timeout on pub/sub connections).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The servers a notifier may subscribe on: one, or any node of a Redis Cluster.
#[derive(Clone)]
struct Nodes {
    clients: Arc<[redis::Client]>,
    /// The node to try first: the one last connected to.
    next: usize,
}

impl Nodes {
    fn new(clients: Vec<redis::Client>) -> Self {
        let len = u64::try_from(clients.len()).unwrap_or(1).max(1);
        let start = getrandom::u64().unwrap_or(0) % len;
        Self {
            clients: clients.into(),
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
        Err(last)
    }
}

/// The waiters of one channel.
struct Channel {
    waiters: usize,
    wake: Arc<Notify>,
    /// The server confirmed the subscription on the current connection: a release
    /// published from now on reaches these waiters.
    live: bool,
}

/// What the dispatcher and the waiters share.
struct Shared {
    channels: Mutex<HashMap<String, Channel>>,
    /// The current connection's sink and what it is subscribed to. A tokio mutex:
    /// (un)subscribing awaits the server while holding it, which keeps the two in step.
    sink: tokio::sync::Mutex<SinkState>,
}

#[derive(Default)]
struct SinkState {
    sink: Option<PubSubSink>,
    subscribed: HashSet<String>,
}

impl Shared {
    fn channels(&self) -> std::sync::MutexGuard<'_, HashMap<String, Channel>> {
        self.channels.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn waiters(&self, channel: &str) -> usize {
        self.channels().get(channel).map_or(0, |c| c.waiters)
    }

    /// Subscribes or unsubscribes `channel` so that it matches whether it has waiters,
    /// and forgets a channel nobody waits on.
    async fn sync_subscription(&self, channel: &str) {
        let mut state = self.sink.lock().await;
        let SinkState { sink, subscribed } = &mut *state;
        let wanted = self.waiters(channel) > 0;
        if let Some(sink) = sink.as_mut() {
            if wanted && !subscribed.contains(channel) {
                match sink.subscribe(channel).await {
                    Ok(()) => {
                        subscribed.insert(channel.to_owned());
                        if let Some(c) = self.channels().get_mut(channel) {
                            c.live = true;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "release notifications: subscribe failed; waiters poll");
                    }
                }
            } else if !wanted
                && subscribed.remove(channel)
                && let Err(e) = sink.unsubscribe(channel).await
            {
                tracing::debug!(error = %e, "release notifications: unsubscribe failed");
            }
        }
        if !wanted {
            let mut channels = self.channels();
            if channels.get(channel).is_some_and(|c| c.waiters == 0) {
                channels.remove(channel);
            }
        }
    }

    /// The connection dropped: no subscription is live any more.
    async fn disconnected(&self) {
        let mut state = self.sink.lock().await;
        state.sink = None;
        state.subscribed.clear();
        for channel in self.channels().values_mut() {
            channel.live = false;
        }
    }
}

/// Release notifications for a `Locks` handle: connected on first contention, shared by
/// every clone.
pub(crate) struct Notifications {
    nodes: Nodes,
    notifier: OnceCell<Notifier>,
}

impl Notifications {
    pub(crate) fn new(client: redis::Client) -> Self {
        Self::any_of(vec![client])
    }

    /// Notifications from whichever of `clients` answers (the nodes of one Redis
    /// Cluster, where every node hears every `PUBLISH`). `clients` must not be empty.
    pub(crate) fn any_of(clients: Vec<redis::Client>) -> Self {
        Self {
            nodes: Nodes::new(clients),
            notifier: OnceCell::new(),
        }
    }

    /// The notifier if it is already connected.
    pub(crate) fn started(&self) -> Option<&Notifier> {
        self.notifier.get()
    }

    /// The notifier, connecting it if needed; `None` while it cannot connect (waiters
    /// then poll, and the next contention tries again).
    pub(crate) async fn get(&self) -> Option<&Notifier> {
        match self
            .notifier
            .get_or_try_init(|| Notifier::start(self.nodes.clone()))
            .await
        {
            Ok(notifier) => Some(notifier),
            Err(e) => {
                tracing::warn!(error = %e, "release notifications unavailable; waiters poll");
                None
            }
        }
    }
}

/// Owns the pub/sub connection task; dropping it stops the task.
pub(crate) struct Notifier {
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Drop for Notifier {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Notifier {
    /// Opens the pub/sub connection, then keeps it open in a task on the current tokio
    /// runtime. Fails if the first connection cannot be made.
    async fn start(mut nodes: Nodes) -> redis::RedisResult<Self> {
        let (sink, stream) = nodes.connect().await?.split();
        let shared = Arc::new(Shared {
            channels: Mutex::new(HashMap::new()),
            sink: tokio::sync::Mutex::new(SinkState {
                sink: Some(sink),
                subscribed: HashSet::new(),
            }),
        });
        let task = tokio::spawn(run(nodes, Arc::clone(&shared), stream));
        Ok(Self { shared, task })
    }

    /// Registers a waiter for `channel` if the channel is already subscribed (another
    /// local waiter holds it): no round trip, and a release published after this
    /// returns is not missed.
    pub(crate) fn join(&self, channel: &str) -> Option<Subscription> {
        let wake = {
            let mut channels = self.shared.channels();
            let entry = channels.get_mut(channel).filter(|c| c.live)?;
            entry.waiters += 1;
            Arc::clone(&entry.wake)
        };
        Some(Subscription {
            shared: Arc::clone(&self.shared),
            channel: channel.to_owned(),
            wake,
        })
    }

    /// Registers a waiter for `channel` and makes sure the channel is subscribed before
    /// returning, so a release published after this returns is not missed.
    pub(crate) async fn subscribe(&self, channel: &str) -> Subscription {
        let wake = {
            let mut channels = self.shared.channels();
            let entry = channels
                .entry(channel.to_owned())
                .or_insert_with(|| Channel {
                    waiters: 0,
                    wake: Arc::new(Notify::new()),
                    live: false,
                });
            entry.waiters += 1;
            Arc::clone(&entry.wake)
        };
        // Built before awaiting, so a cancelled subscribe still unregisters.
        let subscription = Subscription {
            shared: Arc::clone(&self.shared),
            channel: channel.to_owned(),
            wake,
        };
        self.shared.sync_subscription(channel).await;
        subscription
    }
}

/// One waiter's registration; dropping it unregisters (and unsubscribes the channel
/// when it was the last waiter).
pub(crate) struct Subscription {
    shared: Arc<Shared>,
    channel: String,
    wake: Arc<Notify>,
}

impl Subscription {
    /// Resolves at the next release of this lock that no other local waiter took.
    pub(crate) async fn released(&self) {
        self.wake.notified().await;
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let last = {
            let mut channels = self.shared.channels();
            match channels.get_mut(&self.channel) {
                Some(entry) => {
                    entry.waiters -= 1;
                    entry.waiters == 0
                }
                None => false,
            }
        };
        // A wake-up delivered to a waiter that is dropped before using it is passed on
        // by tokio's `Notified` itself. Unsubscribing needs the server: it runs as a
        // task, after a short linger, so the next waiter of a busy lock finds the
        // channel still subscribed instead of paying a round trip and an extra attempt.
        if last && let Ok(handle) = tokio::runtime::Handle::try_current() {
            let shared = Arc::clone(&self.shared);
            let channel = std::mem::take(&mut self.channel);
            handle.spawn(async move {
                tokio::time::sleep(LINGER).await;
                shared.sync_subscription(&channel).await;
            });
        }
    }
}

/// Dispatches release messages from `stream`, and re-opens the connection whenever it
/// drops (to the same node if it answers, else to another), forever.
async fn run(mut nodes: Nodes, shared: Arc<Shared>, mut stream: PubSubStream) {
    dispatch(&shared, &mut stream).await;
    let mut delay = Duration::from_millis(50);
    loop {
        tracing::warn!("release notifications: connection lost; reconnecting");
        shared.disconnected().await;
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(2));
        match nodes.connect().await {
            Ok(pubsub) => {
                delay = Duration::from_millis(50);
                let (sink, new_stream) = pubsub.split();
                stream = new_stream;
                let channels: Vec<String> = {
                    let mut state = shared.sink.lock().await;
                    state.sink = Some(sink);
                    state.subscribed.clear();
                    shared.channels().keys().cloned().collect()
                };
                for channel in &channels {
                    shared.sync_subscription(channel).await;
                }
                // Releases may have been missed while disconnected.
                for channel in shared.channels().values() {
                    channel.wake.notify_waiters();
                }
                dispatch(&shared, &mut stream).await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "release notifications: cannot connect; waiters poll meanwhile");
            }
        }
    }
}

/// Wakes one local waiter per release message, until the connection drops.
async fn dispatch(shared: &Shared, stream: &mut PubSubStream) {
    while let Some(msg) = stream.next().await {
        if let Some(channel) = shared.channels().get(msg.get_channel_name()) {
            channel.wake.notify_one();
        }
    }
}
