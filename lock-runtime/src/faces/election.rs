//! Leader election on the async faces: [`Election`] (from [`Locks::election`](crate::Locks::election)) and
//! [`RedlockElection`] (from [`Redlock::election`](crate::Redlock::election)), with their
//! leaderships and observers, written once over the engine's backend. The rules are the
//! lock's and [`crate::machine::elect`]'s; this is the surface.

use std::fmt;

use redis::aio::ConnectionManager;

use crate::LockError;
use crate::exec::engine::Engine;
use crate::exec::node::Node;
use crate::exec::notify::Watch;
use crate::faces::handle::Handle;
use crate::faces::locks::{Face, LeaseGuard};
use crate::machine::elect::{self, Follow, Leader, Seen, poll};
use crate::machine::key::{Keys, Kind};

/// An election on one server or a Redis Cluster ([`Locks::election`](crate::Locks::election)).
pub type Election<C = ConnectionManager> = ElectionOf<Node<C>>;

/// The leadership of an [`Election`].
pub type Leadership<C = ConnectionManager> = LeadershipOf<Node<C>>;

/// Follows an [`Election`]'s leader.
pub type Observer<C = ConnectionManager> = ObserverOf<Node<C>>;

/// An election on a Redlock quorum ([`Redlock::election`](crate::Redlock::election)).
#[cfg(feature = "redlock")]
pub type RedlockElection<C = ConnectionManager> = ElectionOf<crate::exec::quorum::Quorum<C>>;

/// The leadership of a [`RedlockElection`].
#[cfg(feature = "redlock")]
pub type RedlockLeadership<C = ConnectionManager> = LeadershipOf<crate::exec::quorum::Quorum<C>>;

/// Follows a [`RedlockElection`]'s leader.
#[cfg(feature = "redlock")]
pub type RedlockObserver<C = ConnectionManager> = ObserverOf<crate::exec::quorum::Quorum<C>>;

impl<B: Face> Handle<Engine<B>> {
    /// The election of `name`: its leader is the holder of the lock `name` (with this
    /// handle's ttl, watchdog, fairness and timeouts), and its term is that grant's
    /// fencing token. A bad name is reported by the first call.
    ///
    /// ```no_run
    /// # async fn demo(locks: lockscript::Locks) -> Result<(), lockscript::LockError> {
    /// let election = locks.election("billing");
    /// let leadership = election.campaign("10.0.0.7:8080").await?;
    /// println!("leading in term {}", leadership.term());
    /// leadership.resign().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn election(&self, name: &str) -> ElectionOf<B> {
        ElectionOf {
            locks: self.clone(),
            name: name.to_owned(),
        }
    }
}

/// An election among the processes that campaign for `name` ([`Locks::election`](crate::Locks::election), or
/// [`Redlock::election`](crate::Redlock::election) on a quorum, where the lock, the record
/// and the reads are a majority's). Use it through its names [`Election`] and
/// [`RedlockElection`]. Leading is holding the lock `name`: never two leaders at once
/// within the lock's promises, and a leader paused past its lease has a lower term than
/// the next one, which a fenced store refuses. Cheap to clone.
///
/// ```no_run
/// # async fn demo(locks: lockscript::Locks) -> Result<(), lockscript::LockError> {
/// let election = locks.election("billing");
/// let mut observer = election.observe();
/// while let Some(leader) = observer.next().await? {
///     println!("{} leads in term {}", leader.value, leader.term);
/// }
/// # Ok(())
/// # }
/// ```
pub struct ElectionOf<B: Face> {
    locks: Handle<Engine<B>>,
    name: String,
}

impl<B: Face> Clone for ElectionOf<B> {
    fn clone(&self) -> Self {
        Self {
            locks: self.locks.clone(),
            name: self.name.clone(),
        }
    }
}

impl<B: Face> fmt::Debug for ElectionOf<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.name)
            .field("locks", &self.locks)
            .finish()
    }
}

impl<B: Face> ElectionOf<B> {
    /// The election's name.
    ///
    /// ```no_run
    /// # fn f(e: lockscript::Election) { println!("{}", e.name()); }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    fn keys(&self) -> Result<Keys, LockError> {
        self.locks.engine.settings.keys_of(&self.name, Kind::Lock)
    }

    /// Waits to lead, however long it takes, then proclaims `value`: the leadership.
    /// Each round waits as [`lock`](crate::Locks::lock) does (release notifications, the
    /// leader's lease, the backoff; first come first served on a handle with
    /// `fair(true)`); a round that times out because another leads starts the next.
    /// Any other error ends it (an unreachable server, a refused permission). Dropped
    /// midway, it leaves nothing held.
    ///
    /// ```no_run
    /// # async fn demo(e: lockscript::Election) -> Result<(), lockscript::LockError> {
    /// let leadership = e.campaign("10.0.0.7:8080").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn campaign(&self, value: &str) -> Result<LeadershipOf<B>, LockError> {
        let engine = &self.locks.engine;
        loop {
            let grant = engine.grant(&self.name, Kind::Lock, engine.settings.watchdog);
            let guard = match grant.await {
                Ok(inner) => LeaseGuard { inner },
                Err(LockError::Timeout { .. }) => continue,
                Err(e) => return Err(e),
            };
            if let Some(leadership) = self.install(guard, value).await? {
                return Ok(leadership);
            }
        }
    }

    /// One attempt to lead: the leadership (with `value` proclaimed), or `None` while
    /// another leads.
    ///
    /// ```no_run
    /// # async fn demo(e: lockscript::Election) -> Result<(), lockscript::LockError> {
    /// if let Some(leadership) = e.try_campaign("10.0.0.7:8080").await? {
    ///     leadership.resign().await?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_campaign(&self, value: &str) -> Result<Option<LeadershipOf<B>>, LockError> {
        match self.locks.engine.try_grant(&self.name, Kind::Lock).await? {
            Some(inner) => self.install(LeaseGuard { inner }, value).await,
            None => Ok(None),
        }
    }

    /// A fresh grant proclaims `value`; `None` if the lease was already lost.
    async fn install(
        &self,
        guard: LeaseGuard<B>,
        value: &str,
    ) -> Result<Option<LeadershipOf<B>>, LockError> {
        let leadership = LeadershipOf {
            guard,
            election: self.clone(),
        };
        match leadership.proclaim(value).await {
            Ok(()) => Ok(Some(leadership)),
            Err(LockError::NotHeld { .. }) => Ok(None),
            Err(e) => {
                // The grant is released (the guard's drop releases it in the background).
                let _ = leadership.resign().await;
                Err(e)
            }
        }
    }

    /// Who leads now: the leader's value and term, or `None` when nobody leads (or the
    /// one who holds the lock has not proclaimed yet: one round trip after its grant).
    /// Within one response timeout.
    ///
    /// ```no_run
    /// # async fn demo(e: lockscript::Election) -> Result<(), lockscript::LockError> {
    /// if let Some(leader) = e.leader().await? { println!("{} leads", leader.value) }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn leader(&self) -> Result<Option<Leader>, LockError> {
        Ok(self.seen().await?.leader().cloned())
    }

    async fn seen(&self) -> Result<Seen, LockError> {
        let engine = &self.locks.engine;
        engine.backend.leader(&engine.settings, &self.keys()?).await
    }

    /// Every change of leader, as it happens: [`ObserverOf::next`] gives the current leader
    /// first, then each new one (or `None` when nobody leads).
    ///
    /// ```no_run
    /// # async fn demo(e: lockscript::Election) -> Result<(), lockscript::LockError> {
    /// let mut observer = e.observe();
    /// let now = observer.next().await?;
    /// let next = observer.next().await?; // waits for a change
    /// # Ok(())
    /// # }
    /// ```
    pub fn observe(&self) -> ObserverOf<B> {
        ObserverOf {
            election: self.clone(),
            follow: Follow::default(),
            listening: None,
        }
    }

    /// Campaigns, then runs `work` as the leader, cancelling it the moment the
    /// leadership is known lost ([`LockError::Lost`]); resigns when `work` ends. `work`
    /// gets the leadership's lease: its [`fencing_token`](crate::Lease::fencing_token) is
    /// the term.
    ///
    /// ```no_run
    /// # async fn demo(e: lockscript::Election) -> Result<(), lockscript::LockError> {
    /// e.lead("10.0.0.7:8080", |lease| async move {
    ///     println!("leading in term {}", lease.fencing_token());
    /// })
    /// .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lead<T, F, Fut>(&self, value: &str, work: F) -> Result<T, LockError>
    where
        F: FnOnce(crate::Lease) -> Fut,
        Fut: Future<Output = T>,
    {
        let leadership = self.campaign(value).await?;
        let lease = leadership.guard.lease();
        let outcome = tokio::select! {
            biased;
            () = leadership.lost() => None,
            value = work(lease) => Some(value),
        };
        let Some(value) = outcome else {
            return Err(LockError::Lost {
                name: self.name.clone(),
            });
        };
        crate::machine::lease::after_work(&self.name, leadership.resign().await, value)
    }
}

/// The leadership of an election ([`ElectionOf::campaign`]): the lock's guard, with the
/// term and the leader's record. It derefs to the [`Lease`](crate::Lease): `lost()`,
/// `is_suspect()`, `valid_until()` say what they say for a lock. Use it through its names
/// [`Leadership`] and [`RedlockLeadership`]. Dropped without
/// [`resign`](Self::resign), the lock is released in the background.
///
/// ```no_run
/// # async fn demo(e: lockscript::Election) -> Result<(), lockscript::LockError> {
/// let leadership = e.campaign("10.0.0.7:8080").await?;
/// tokio::select! {
///     () = leadership.lost() => eprintln!("deposed: stop acting as leader now"),
///     () = tokio::time::sleep(std::time::Duration::from_secs(5)) => leadership.resign().await?,
/// }
/// # Ok(())
/// # }
/// ```
pub struct LeadershipOf<B: Face> {
    guard: LeaseGuard<B>,
    election: ElectionOf<B>,
}

impl<B: Face> LeadershipOf<B> {
    /// The term: this leadership's fencing token, higher than every earlier leader's of
    /// the election. Pass it with every write the leader makes, and have the store
    /// refuse a term lower than one it has seen.
    ///
    /// ```no_run
    /// # fn f(l: lockscript::Leadership) { println!("{}", l.term()); }
    /// ```
    pub fn term(&self) -> u64 {
        self.guard.fencing_token()
    }

    /// Publishes `value` as the leader's (followers read it with
    /// [`ElectionOf::leader`], observers are told); [`LockError::NotHeld`] if the
    /// leadership was lost, and then nothing is written. Within one response timeout.
    ///
    /// ```no_run
    /// # async fn demo(l: lockscript::Leadership) -> Result<(), lockscript::LockError> {
    /// l.proclaim("10.0.0.8:8080").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn proclaim(&self, value: &str) -> Result<(), LockError> {
        let lease = self.guard.inner.owned.lease();
        elect::may_proclaim(lease)?;
        let engine = &self.election.locks.engine;
        let written = engine
            .backend
            .proclaim(lease.owner(), self.term(), value)
            .await?;
        elect::proclaimed(lease, written)
    }

    /// Steps down at once: the lock is released (candidates and observers are told), and
    /// the next candidate may lead. [`LockError::NotHeld`] if the leadership had been
    /// lost already.
    ///
    /// ```no_run
    /// # async fn demo(l: lockscript::Leadership) -> Result<(), lockscript::LockError> {
    /// l.resign().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn resign(self) -> Result<(), LockError> {
        self.guard.release().await
    }

    /// The lock's guard.
    ///
    /// ```no_run
    /// # fn f(l: lockscript::Leadership) { println!("{}", l.guard().name()); }
    /// ```
    pub fn guard(&self) -> &LeaseGuard<B> {
        &self.guard
    }
}

impl<B: Face> std::ops::Deref for LeadershipOf<B> {
    type Target = crate::Lease;

    fn deref(&self) -> &crate::Lease {
        &self.guard
    }
}

impl<B: Face> fmt::Debug for LeadershipOf<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.guard.fmt(f)
    }
}

/// Follows an election's leader ([`ElectionOf::observe`]). Use it through its names
/// [`Observer`] and [`RedlockObserver`].
///
/// ```no_run
/// # async fn demo(e: lockscript::Election) -> Result<(), lockscript::LockError> {
/// let mut observer = e.observe();
/// loop {
///     match observer.next().await? {
///         Some(leader) => println!("{} leads in term {}", leader.value, leader.term),
///         None => println!("nobody leads"),
///     }
/// }
/// # }
/// ```
pub struct ObserverOf<B: Face> {
    election: ElectionOf<B>,
    /// What the last call returned.
    follow: Follow,
    /// The proclamation and release channels, watched.
    listening: Option<Watch>,
}

impl<B: Face> ObserverOf<B> {
    /// The current leader at the first call; after that, waits for the leader to
    /// change and returns the new one (`None` when nobody leads any more). With release
    /// notifications, a new leader's proclamation, a resignation and a leader's lease end
    /// are seen within one round trip of the server's message or of the lease's end (see
    /// the election guide for the measured figures); without them, within the handle's
    /// largest backoff. A read that fails is returned as its error; call again to go on.
    ///
    /// ```no_run
    /// # async fn demo(mut o: lockscript::Observer) -> Result<(), lockscript::LockError> {
    /// let leader = o.next().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn next(&mut self) -> Result<Option<Leader>, LockError> {
        let keys = self.election.keys()?;
        let settings = std::sync::Arc::clone(&self.election.locks.engine.settings);
        loop {
            let live = self.listen(&keys).await;
            // Messages from here on wake the wait below.
            if let Some(watch) = &mut self.listening {
                watch.mark();
            }
            let seen = self.election.seen().await?;
            if self.follow.saw(&seen) {
                return Ok(self.follow.current());
            }
            let nap = seen.nap(poll(&settings, live));
            match &mut self.listening {
                Some(watch) => {
                    let _ = tokio::time::timeout(nap, watch.changed()).await;
                }
                None => tokio::time::sleep(nap).await,
            }
        }
    }

    /// Watches the election's channels (proclamations, releases) from the first call;
    /// whether they are live.
    async fn listen(&mut self, keys: &Keys) -> bool {
        if self.listening.is_none() {
            let engine = &self.election.locks.engine;
            let Some(n) = engine.notifications.as_ref() else {
                return false;
            };
            let subs = (n.subscribe(&keys.proclaimed())).zip(n.subscribe(&keys.channel));
            self.listening =
                subs.map(|(proclaimed, released)| Watch::of(vec![proclaimed, released]));
        }
        let within = crate::machine::limit::DEFAULT_RESPONSE_TIMEOUT;
        match &self.listening {
            Some(watch) => watch.live_within(within).await,
            None => false,
        }
    }
}

impl<B: Face> fmt::Debug for ObserverOf<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observer")
            .field("election", &self.election.name)
            .field("follow", &self.follow)
            .finish_non_exhaustive()
    }
}
