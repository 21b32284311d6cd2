//! [`Redlock`]: the lock surface over N independent Redis masters, a thin face over the
//! engine with the quorum backend ([`crate::exec::quorum`], where the algorithm is
//! described).

use std::time::Duration;

use redis::aio::ConnectionManager;

use crate::LockError;
use crate::exec::engine::Engine;
use crate::exec::node::Node;
use crate::exec::quorum::Quorum;
use crate::faces::handle::{Configure, Handle};
use crate::faces::locks::{Face, LeaseGuard};
use crate::machine::limit::DEFAULT_NODE_TIMEOUT;
use crate::machine::settings::Settings;

/// The lock surface over N independent Redis masters (use an odd N, 3 or 5). Its
/// builder methods (`ttl`, `wait_timeout`...) are [`Handle`](crate::Handle)'s, shared
/// with [`Locks`](crate::Locks).
///
/// ```no_run
/// # async fn demo() -> Result<(), lockscript::LockError> {
/// let clients: Vec<redis::Client> = ["redis://10.0.0.1/", "redis://10.0.0.2/", "redis://10.0.0.3/"]
///     .into_iter()
///     .map(redis::Client::open)
///     .collect::<Result<_, _>>()?;
/// let redlock = lockscript::Redlock::connect(&clients).await?;
/// let guard = redlock.lock("orders:42").await?;
/// println!("fencing token {}", guard.fencing_token());
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
pub type Redlock<C = ConnectionManager> = Handle<Engine<Quorum<C>>>;

impl Redlock<ConnectionManager> {
    /// One managed connection per master. Connections are made lazily and remade after
    /// failures, so a master that is down now does not stop the others from working.
    ///
    /// ```no_run
    /// # async fn demo(clients: Vec<redis::Client>) -> Result<(), lockscript::LockError> {
    /// let redlock = lockscript::Redlock::connect(&clients).await?;
    /// # Ok(())
    /// # }
    /// ```
    // Async although it awaits nothing: the lazy managers need a tokio runtime to be
    // current, which an async fn guarantees, and connect() reads like Locks::connect.
    #[allow(clippy::unused_async)]
    pub async fn connect(clients: &[redis::Client]) -> Result<Self, LockError> {
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(DEFAULT_NODE_TIMEOUT * 4))
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(20))
            .set_max_delay(Duration::from_millis(200))
            // Every round bounds each master with the node timeout.
            .set_response_timeout(None);
        let nodes = clients
            .iter()
            .map(|client| ConnectionManager::new_lazy_with_config(client.clone(), config.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self::new(nodes))
    }
}

impl<C> Redlock<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Uses the given connections, one per independent master.
    ///
    /// ```no_run
    /// # async fn demo(clients: Vec<redis::Client>) -> Result<(), lockscript::LockError> {
    /// let mut conns = Vec::new();
    /// for client in &clients {
    ///     conns.push(client.get_multiplexed_async_connection().await?);
    /// }
    /// let redlock = lockscript::Redlock::new(conns);
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(nodes: Vec<C>) -> Self {
        let backend = Quorum {
            nodes: nodes.into_iter().map(Node::new).collect(),
        };
        Handle {
            engine: Engine::new(backend, Settings::default()),
        }
    }

    /// What each master was found to offer, in the order of the masters (`None` for
    /// one not asked yet); see [`Locks::offered_commands`](crate::Locks::offered_commands).
    ///
    /// ```no_run
    /// # fn f(redlock: lockscript::Redlock) {
    /// println!("{:?}", redlock.offered_commands());
    /// # }
    /// ```
    #[must_use]
    pub fn offered_commands(&self) -> Vec<Option<crate::NativeCommands>> {
        let nodes = self.engine.backend.nodes.iter();
        nodes.map(|node| node.offered.get()).collect()
    }

    /// How long one master may take to answer before it counts as failed for that
    /// round. Default [`DEFAULT_NODE_TIMEOUT`]; must be above zero and at most a third
    /// of the ttl. An attempt takes at most three rounds (acquire, raise the fencing
    /// counters, undo), so `try_lock` returns within three node timeouts.
    ///
    /// ```no_run
    /// # fn f(r: lockscript::Redlock) -> lockscript::Redlock {
    /// r.node_timeout(std::time::Duration::from_millis(20))
    /// # }
    /// ```
    #[must_use]
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.engine.settings_mut().node_timeout = timeout;
        self
    }

    /// How many masters must agree: N/2+1.
    ///
    /// ```no_run
    /// # fn f(r: lockscript::Redlock) { assert_eq!(r.quorum(), 3); } // with 5 masters
    /// ```
    pub fn quorum(&self) -> usize {
        self.engine.backend.quorum()
    }
}

/// Ownership of one Redlock grant: a [`LeaseGuard`](crate::LeaseGuard) on N masters.
pub type RedlockGuard<C = ConnectionManager> = LeaseGuard<Quorum<C>>;

impl<C> Face for Quorum<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    type Guard = RedlockGuard<C>;

    fn guard(lease: LeaseGuard<Self>) -> RedlockGuard<C> {
        lease
    }
}
