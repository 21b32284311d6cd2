//! Leader election on the blocking face: [`Election`], [`Leadership`], [`Observer`], the
//! async ones' surface without async (see [`crate::Election`]). The rules are the lock's
//! and [`crate::machine::elect`]'s.

use std::fmt;

use super::guard::LockGuard;
use super::locks::Locks;
use crate::LockError;
use crate::exec::notify::Watch;
use crate::machine::elect::{self, Follow, Leader, Seen, poll};
use crate::machine::key::{Keys, Kind};

impl<C> Locks<C>
where
    C: redis::ConnectionLike + Send + 'static,
{
    /// The election of `name`: its leader is the holder of the lock `name`, its term that
    /// grant's fencing token (see [`crate::Locks::election`]).
    ///
    /// ```no_run
    /// # fn demo(locks: lockscript::blocking::Locks) -> Result<(), lockscript::LockError> {
    /// let leadership = locks.election("billing").campaign("10.0.0.7:8080")?;
    /// println!("leading in term {}", leadership.term());
    /// leadership.resign()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn election(&self, name: &str) -> Election<C> {
        Election {
            locks: self.clone(),
            name: name.to_owned(),
        }
    }
}

/// An election on the blocking face ([`Locks::election`]); see [`crate::Election`].
///
/// ```no_run
/// # fn demo(locks: lockscript::blocking::Locks) -> Result<(), lockscript::LockError> {
/// let mut observer = locks.election("billing").observe();
/// while let Some(leader) = observer.change()? {
///     println!("{} leads in term {}", leader.value, leader.term);
/// }
/// # Ok(())
/// # }
/// ```
pub struct Election<C = redis::Connection> {
    locks: Locks<C>,
    name: String,
}

impl<C> Clone for Election<C> {
    fn clone(&self) -> Self {
        Self {
            locks: self.locks.clone(),
            name: self.name.clone(),
        }
    }
}

impl<C> fmt::Debug for Election<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl<C> Election<C>
where
    C: redis::ConnectionLike + Send + 'static,
{
    /// The election's name.
    ///
    /// ```no_run
    /// # fn f(e: lockscript::blocking::Election) { println!("{}", e.name()); }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    fn keys(&self) -> Result<Keys, LockError> {
        self.locks.engine.settings.keys_of(&self.name, Kind::Lock)
    }

    /// Waits to lead, however long it takes, then proclaims `value` (see
    /// [`crate::ElectionOf::campaign`]): rounds of [`lock`](Locks::lock), each up to
    /// `wait_timeout`, until one grants; any error but a timeout ends it.
    ///
    /// ```no_run
    /// # fn demo(e: lockscript::blocking::Election) -> Result<(), lockscript::LockError> {
    /// let leadership = e.campaign("10.0.0.7:8080")?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn campaign(&self, value: &str) -> Result<Leadership<C>, LockError> {
        loop {
            let guard = match self.locks.lock(&self.name) {
                Ok(guard) => guard,
                Err(LockError::Timeout { .. }) => continue,
                Err(e) => return Err(e),
            };
            if let Some(leadership) = self.install(guard, value)? {
                return Ok(leadership);
            }
        }
    }

    /// One attempt to lead: the leadership, or `None` while another leads.
    ///
    /// ```no_run
    /// # fn demo(e: lockscript::blocking::Election) -> Result<(), lockscript::LockError> {
    /// if let Some(leadership) = e.try_campaign("10.0.0.7:8080")? { leadership.resign()?; }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_campaign(&self, value: &str) -> Result<Option<Leadership<C>>, LockError> {
        match self.locks.try_lock(&self.name)? {
            Some(guard) => self.install(guard, value),
            None => Ok(None),
        }
    }

    fn install(
        &self,
        guard: LockGuard<C>,
        value: &str,
    ) -> Result<Option<Leadership<C>>, LockError> {
        let leadership = Leadership {
            guard,
            election: self.clone(),
        };
        match leadership.proclaim(value) {
            Ok(()) => Ok(Some(leadership)),
            Err(LockError::NotHeld { .. }) => Ok(None),
            Err(e) => {
                let _ = leadership.resign();
                Err(e)
            }
        }
    }

    /// Who leads now (see [`crate::ElectionOf::leader`]).
    ///
    /// ```no_run
    /// # fn demo(e: lockscript::blocking::Election) -> Result<(), lockscript::LockError> {
    /// if let Some(leader) = e.leader()? { println!("{} leads", leader.value) }
    /// # Ok(())
    /// # }
    /// ```
    pub fn leader(&self) -> Result<Option<Leader>, LockError> {
        Ok(self.seen()?.leader().cloned())
    }

    fn seen(&self) -> Result<Seen, LockError> {
        let engine = &self.locks.engine;
        let call = engine.settings.leader_call(&self.keys()?);
        Seen::read(engine.shared.conn.script(&engine.settings, &call)?)
    }

    /// Every change of leader (see [`crate::ElectionOf::observe`]).
    ///
    /// ```no_run
    /// # fn demo(e: lockscript::blocking::Election) -> Result<(), lockscript::LockError> {
    /// let mut observer = e.observe();
    /// let now = observer.change()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn observe(&self) -> Observer<C> {
        Observer {
            election: self.clone(),
            follow: Follow::default(),
            listening: None,
        }
    }

    /// Campaigns, runs `work` as the leader, then resigns; [`LockError::Lost`] when the
    /// leadership was lost by the time `work` returned (a blocking call cannot be
    /// cancelled: `work` should check [`is_lost`](crate::Lease::is_lost) between its steps).
    ///
    /// ```no_run
    /// # fn demo(e: lockscript::blocking::Election) -> Result<(), lockscript::LockError> {
    /// let term = e.lead("10.0.0.7:8080", |leadership| leadership.term())?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lead<T>(
        &self,
        value: &str,
        work: impl FnOnce(&Leadership<C>) -> T,
    ) -> Result<T, LockError> {
        let leadership = self.campaign(value)?;
        let value = work(&leadership);
        if leadership.is_lost() {
            return Err(LockError::Lost {
                name: self.name.clone(),
            });
        }
        crate::machine::lease::after_work(&self.name, leadership.resign(), value)
    }
}

/// The leadership of a blocking [`Election`]; see [`crate::Leadership`]. It derefs to the
/// [`Lease`](crate::Lease).
///
/// ```no_run
/// # fn demo(e: lockscript::blocking::Election) -> Result<(), lockscript::LockError> {
/// let leadership = e.campaign("10.0.0.7:8080")?;
/// println!("term {}", leadership.term());
/// leadership.resign()?;
/// # Ok(())
/// # }
/// ```
pub struct Leadership<C = redis::Connection>
where
    C: redis::ConnectionLike + Send + 'static,
{
    guard: LockGuard<C>,
    election: Election<C>,
}

impl<C> Leadership<C>
where
    C: redis::ConnectionLike + Send + 'static,
{
    /// The term: this leadership's fencing token.
    ///
    /// ```no_run
    /// # fn f(l: lockscript::blocking::Leadership) { println!("{}", l.term()); }
    /// ```
    pub fn term(&self) -> u64 {
        self.guard.fencing_token()
    }

    /// Publishes `value` as the leader's; [`LockError::NotHeld`] if the leadership was
    /// lost (see [`crate::LeadershipOf::proclaim`]).
    ///
    /// ```no_run
    /// # fn demo(l: lockscript::blocking::Leadership) -> Result<(), lockscript::LockError> {
    /// l.proclaim("10.0.0.8:8080")?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn proclaim(&self, value: &str) -> Result<(), LockError> {
        let lease = self.guard.owned.lease();
        elect::may_proclaim(lease)?;
        let engine = &self.election.locks.engine;
        let call = (engine.settings).proclaim_call(&lease.keys, &lease.token, self.term(), value);
        let written = engine.shared.conn.script(&engine.settings, &call)? == 1;
        elect::proclaimed(lease, written)
    }

    /// Steps down at once (see [`crate::LeadershipOf::resign`]).
    ///
    /// ```no_run
    /// # fn demo(l: lockscript::blocking::Leadership) -> Result<(), lockscript::LockError> {
    /// l.resign()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn resign(self) -> Result<(), LockError> {
        self.guard.release()
    }

    /// The lock's guard.
    ///
    /// ```no_run
    /// # fn f(l: lockscript::blocking::Leadership) { println!("{}", l.guard().name()); }
    /// ```
    pub fn guard(&self) -> &LockGuard<C> {
        &self.guard
    }
}

impl<C> std::ops::Deref for Leadership<C>
where
    C: redis::ConnectionLike + Send + 'static,
{
    type Target = crate::Lease;

    fn deref(&self) -> &crate::Lease {
        &self.guard
    }
}

impl<C> fmt::Debug for Leadership<C>
where
    C: redis::ConnectionLike + Send + 'static,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.guard.fmt(f)
    }
}

/// Follows a blocking [`Election`]'s leader; see [`crate::ObserverOf`].
///
/// ```no_run
/// # fn demo(mut o: lockscript::blocking::Observer) -> Result<(), lockscript::LockError> {
/// let leader = o.change()?;
/// # Ok(())
/// # }
/// ```
pub struct Observer<C = redis::Connection> {
    election: Election<C>,
    follow: Follow,
    /// The proclamation and release channels, watched.
    listening: Option<Watch>,
}

impl<C> Observer<C>
where
    C: redis::ConnectionLike + Send + 'static,
{
    /// The current leader at the first call; after that, blocks until the leader changes
    /// and returns the new one (see [`crate::ObserverOf::next`] for the bounds). The
    /// observer is also an endless [`Iterator`] of these.
    ///
    /// ```no_run
    /// # fn demo(mut o: lockscript::blocking::Observer) -> Result<(), lockscript::LockError> {
    /// let next = o.change()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn change(&mut self) -> Result<Option<Leader>, LockError> {
        let keys = self.election.keys()?;
        let settings = std::sync::Arc::clone(&self.election.locks.engine.settings);
        loop {
            let live = self.listen(&keys);
            if let Some(watch) = &mut self.listening {
                watch.mark();
            }
            let seen = self.election.seen()?;
            if self.follow.saw(&seen) {
                return Ok(self.follow.current());
            }
            let nap = seen.nap(poll(&settings, live));
            match &mut self.listening {
                Some(watch) => watch.changed_within_blocking(nap),
                None => std::thread::sleep(nap),
            }
        }
    }

    /// Watches the election's channels (proclamations, releases) from the first call;
    /// whether they are live.
    fn listen(&mut self, keys: &Keys) -> bool {
        let within = crate::machine::limit::DEFAULT_RESPONSE_TIMEOUT;
        if self.listening.is_none() {
            let Some(n) = self.election.locks.engine.notifications.as_ref() else {
                return false;
            };
            let (proclaimed, _) = n.subscribe(&keys.proclaimed(), within);
            let (released, _) = n.subscribe(&keys.channel, within);
            self.listening = (proclaimed.zip(released))
                .map(|(proclaimed, released)| Watch::of(vec![proclaimed, released]));
        }
        self.listening
            .as_ref()
            .is_some_and(|watch| watch.live_within_blocking(within))
    }
}

/// Every change of leader, as [`Observer::change`] returns them; it never ends.
///
/// ```no_run
/// # fn demo(o: lockscript::blocking::Observer) {
/// for change in o {
///     match change {
///         Ok(Some(leader)) => println!("{} leads", leader.value),
///         Ok(None) => println!("nobody leads"),
///         Err(e) => eprintln!("cannot read the leader: {e}"),
///     }
/// }
/// # }
/// ```
impl<C> Iterator for Observer<C>
where
    C: redis::ConnectionLike + Send + 'static,
{
    type Item = Result<Option<Leader>, LockError>;

    fn next(&mut self) -> Option<Self::Item> {
        Some(self.change())
    }
}

impl<C> fmt::Debug for Observer<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observer")
            .field("election", &self.election.name)
            .field("follow", &self.follow)
            .finish_non_exhaustive()
    }
}
