//! The model's world: clients of one lock name, each running the real lock machine
//! (through lockscript's model executor), the calls between them and the model server,
//! and one clock that moves in ticks.
//!
//! Every client calls `lock()` at time 0 (and again when a release returns or a `lock()`
//! fails, while it has rounds left). From there a state changes by one [`Action`] at a
//! time, and every action the world allows in a state is one branch of the search: the
//! server runs one pending request; an answer reaches its caller; a caller gives up on a
//! call whose bound has passed (the request may still run later, until [`Config::late`]);
//! a sleeper wakes; the watchdog sends a due renewal; a holder releases; a background
//! release sends its compare-and-delete; the server restarts without its data; the clock
//! ticks.
//!
//! Some of these are faults, each counted against [`Config::faults`] and switchable in
//! [`super::Events`]: a tick that leaves an answer short of its caller's bound (a
//! timeout), a request run ahead of one its handle sent earlier (another connection), a
//! tick while a watchdog lets a due renewal wait (a pause), a restart. Everything else
//! comes at any time and in any order at no cost.
//!
//! After every action each lease is looked at on its holder's clock, as `is_lost()` and
//! the watchdog do; the properties read the world then.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use lockscript::__private::model::{
    Acquisition, Ask, Belief, Call as AttemptCall, Command, Handle, Heard, Holder, Orphan, Out,
    Question, Reply,
};
use lockscript::LockError;

use super::Config;
use super::fingerprint::Fingerprint;
use super::server::{Answer, Server};

/// One tick of the model's clock.
pub const TICK: Duration = Duration::from_millis(100);

/// One step of the world. Calls are named by their number in the run (the same in
/// every replay of one history).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// The clock moves one tick.
    Tick,
    /// The server runs the request of call `id`.
    Run(u32),
    /// The answer of call `id` reaches its caller.
    Deliver(u32),
    /// The caller of call `id` gives up on it (its bound has passed: a timeout, a reset,
    /// a reply lost); the request may still run.
    GiveUp(u32),
    /// Client `c`'s sleeping `lock()` wakes (a release notification, its nap's end).
    Wake(u8),
    /// The watchdog of client `c` sends the renewal due on its lease `slot`.
    Renew(u8, u8),
    /// Client `c` releases its lease `slot`.
    Release(u8, u8),
    /// Client `c`'s background release `job` sends its compare-and-delete.
    Retry(u8, u8),
    /// The server restarts without its data.
    Restart,
    /// Client `c` drops its `lock()` or `try_lock()` midway (a cancelled future, a
    /// timeout around the call).
    Cancel(u8),
    /// Client `c` calls `extend` on its lease `slot`.
    Extend(u8, u8),
    /// Client `c` drops the guard of its lease `slot` without a release.
    Drop(u8, u8),
    /// The server restarts with its data (an append-only file synced on every write);
    /// connections drop.
    RestartKeeping,
    /// The server is replaced by an older one with its data (a failover to a replica of
    /// an older version, a rolling downgrade): native commands are unknown from now on;
    /// connections drop.
    Downgrade,
    /// The server's wall clock steps back [`Events::clock_back`](super::Events) ticks
    /// (NTP, an operator): its keys live longer, `TIME` goes back.
    ClockBack,
    /// The server's wall clock jumps [`Events::clock_ahead`](super::Events) ticks ahead:
    /// its keys expire early.
    ClockAhead,
    /// Client `c`'s wall clock steps [`Events::wall_ahead`](super::Events) ticks ahead
    /// (its monotonic clock, the model's, does not).
    WallAhead(u8),
    /// The lock user's ACL changes (an operator, a rollout of ACL files): it refuses from
    /// now what [`Events::acl_to`](super::Events) says, or, changed back, what it refused
    /// at the start ([`Config::denied`](super::Config)).
    AclChange,
}

/// A request on its way to the server.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Request {
    /// One of an attempt's calls: the script, the clock question, the transaction, the
    /// raise.
    Attempt(AttemptCall),
    /// renew.lua, or `SET … IFEQ … PX` (`native`).
    Renew {
        token: String,
        ttl: Duration,
        native: bool,
    },
    /// compare-del.lua, or `DELIFEQ` and `PUBLISH` (`native`).
    Delete { token: String, native: bool },
    /// `COMMAND DOCS SET DELEX DELIFEQ`, asked beside a lease call.
    Docs { question: Question },
}

impl Request {
    fn token(&self) -> Option<&str> {
        match self {
            Request::Attempt(
                AttemptCall::Acquire { token } | AttemptCall::Transaction { token, .. },
            )
            | Request::Renew { token, .. }
            | Request::Delete { token, .. } => Some(token),
            Request::Attempt(
                AttemptCall::Time | AttemptCall::Raise { .. } | AttemptCall::Script { .. },
            )
            | Request::Docs { .. } => None,
        }
    }
}

/// Where a call's request and answer are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Flight {
    /// Not run yet.
    Pending,
    /// Run; the answer is on its way back.
    Answered(Answer),
    /// Neither the request nor an answer will come (a restart cut the connection).
    Dropped,
}

/// Who waits for a call's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Waiter {
    /// The client's `lock()`.
    Attempt,
    /// The watchdog, for the renewal of lease `slot`.
    Renewal(u8),
    /// The release of lease `slot`.
    Release(u8),
    /// The caller's `extend` of lease `slot`.
    Extend(u8),
    /// Background release `job`.
    Background(u8),
    /// The handle's question of what the server offers.
    Question,
}

/// A call between a client and the server.
#[derive(Clone)]
struct Call {
    id: u32,
    client: u8,
    request: Request,
    /// The tick it was sent at.
    sent: u32,
    /// When its caller gives up on the answer.
    give_up: Instant,
    flight: Flight,
    /// Who waits for the answer; `None` once the caller gave up (the request may still
    /// run, and its answer goes nowhere).
    waiter: Option<Waiter>,
}

/// What `release()` returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Released {
    /// `Ok(())`.
    Ok,
    /// `Err(NotHeld)`: the lease had been lost.
    NotHeld,
    /// Another error (no reply): the guard's drop releases again in the background.
    Failed,
}

/// Where a lease is in its guard's hands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    /// Its guard holds it.
    Held,
    /// `release()` is on its way.
    Releasing,
    /// `release()` returned.
    Released(Released),
    /// Its guard was dropped without a release.
    Dropped,
}

/// A lease a client was granted, kept after its release for the properties.
pub struct Slot {
    /// The guard's lease, as the machine keeps it.
    pub holder: Holder,
    /// The server's epoch when the grant ran.
    pub epoch: u32,
    /// Where its guard is.
    pub stage: Stage,
    /// What its holder found at the last look.
    pub belief: Belief,
    renewing: bool,
    /// The caller's `extend` is on its way.
    extending: bool,
    /// A fault touched its calls: one (a renewal, an `extend`, its release) got no answer
    /// within its bound or was cut by a restart, its watchdog let a due renewal wait, or
    /// its caller called `extend`.
    pub touched: bool,
}

/// A grant nobody owns, being released in the background.
pub struct Job {
    orphan: Orphan,
    /// When it sends next; `None` while a try is on its way, or once it is over.
    next: Option<Instant>,
    done: bool,
    /// It ended on the server's answer (not on an error or a missing reply).
    settled: bool,
}

impl Job {
    /// The grant's owner token.
    pub fn token(&self) -> &str {
        self.orphan.token()
    }

    /// Whether it is over, and ended on the server's answer: the releaser believes
    /// there is nothing left of the grant.
    pub fn settled(&self) -> bool {
        self.done && self.settled
    }

    /// Whether it is still going.
    pub fn live(&self) -> bool {
        !self.done
    }
}

/// A `lock()` in progress.
struct Acquiring {
    machine: Acquisition,
    /// The tick it went to sleep at, while it sleeps. A nap lasts a few milliseconds at
    /// least, so it wakes at a later tick (this model's waiters have no release
    /// notifications that could wake them sooner).
    slept: Option<u32>,
    /// The server's epoch of the last grant answered to it.
    epoch: u32,
}

/// One client: a task that calls `lock()` (or `try_lock()`), holds, releases, `rounds`
/// times.
pub struct Client {
    handle: Handle,
    /// Its calls are `try_lock()`s.
    tries: bool,
    rounds: u8,
    acquiring: Option<Acquiring>,
    /// Every lease it was granted, in order.
    pub slots: Vec<Slot>,
    /// Its background releases, in order.
    pub jobs: Vec<Job>,
    /// Errors `lock()` returned.
    failed: u8,
    /// For the readable history: how many tokens it has drawn.
    tokens: u32,
}

/// A rule the machine (or the model driving it) broke outright, seen while acting.
#[derive(Clone, Debug)]
pub struct Broken {
    /// Which of the machine's steps.
    pub what: &'static str,
    /// What it did.
    pub detail: String,
}

/// The whole world at one state.
pub struct World<'c> {
    /// The world's settings and bounds.
    pub config: &'c Config,
    base: Instant,
    /// Ticks since the start.
    pub time: u32,
    /// The model server.
    pub server: Server,
    /// The clients, A first.
    pub clients: Vec<Client>,
    calls: Vec<Call>,
    next_call: u32,
    /// Faults spent so far (see [`Config::faults`]).
    faults: u32,
    /// Restarts that kept the data so far.
    kept: u32,
    /// Downgrades so far.
    downgraded: u32,
    /// How far the server's wall clock was stepped from the model's, in milliseconds.
    server_step_ms: i64,
    /// A clock (the server's or a client's wall clock) has stepped: once a history.
    clock_stepped: bool,
    /// Times the ACL changed so far.
    acl_changed: u32,
    /// Set when an action found the machine asking for something it must not.
    pub broken: Option<Broken>,
    /// The readable history, when kept (to print a trace).
    log: Option<Vec<String>>,
    /// Readable names of tokens, for the history.
    labels: HashMap<String, String>,
}

impl<'c> World<'c> {
    /// The world at time 0: every client idle, the server empty. `base` is the instant
    /// time 0 stands for; every run of one search uses the same, so that the machine's
    /// instants are equal in equal states.
    pub fn new(config: &'c Config, base: Instant, log: bool) -> Self {
        let ms = |ticks: u32| TICK * ticks;
        let clients = (0..config.clients)
            .map(|c| Client {
                tries: c >= config.clients.saturating_sub(config.try_locks),
                handle: Handle::new(
                    "m",
                    ms(config.ttl),
                    ms(config.response_timeout),
                    ms(config.wait_timeout),
                    ms(config.fence_retention),
                    config.native,
                )
                .unwrap_or_else(|e| panic!("the model's settings: {e}"))
                // Its wall clock, which a plain attempt needs to go as the acquire
                // transaction (with native commands on, as the faces send it).
                .clock(base),
                rounds: config.rounds,
                acquiring: None,
                slots: Vec::new(),
                jobs: Vec::new(),
                failed: 0,
                tokens: 0,
            })
            .collect();
        let mut server = Server::default();
        server.offers = config.native;
        server.denied = config.denied;
        let mut world = Self {
            config,
            base,
            time: 0,
            server,
            clients,
            calls: Vec::new(),
            next_call: 0,
            faults: 0,
            kept: 0,
            downgraded: 0,
            server_step_ms: 0,
            clock_stepped: false,
            acl_changed: 0,
            broken: None,
            log: log.then(Vec::new),
            labels: HashMap::new(),
        };
        for c in 0..config.clients {
            world.start(u8::try_from(c).unwrap_or(u8::MAX));
        }
        world
    }

    /// Client `c` calls `lock()`, if it has a round left. Clients call it at time 0 and
    /// again as soon as a release returns or a `lock()` fails: a client that calls later
    /// is one whose attempts come later, which its sleeps already cover.
    fn start(&mut self, c: u8) {
        let now = self.now();
        let client = &mut self.clients[usize::from(c)];
        if client.rounds == 0 {
            return;
        }
        client.rounds -= 1;
        let (machine, call) = if client.tries {
            (client.handle.try_lock(now), "try_lock()")
        } else {
            (client.handle.lock(now), "lock()")
        };
        client.acquiring = Some(Acquiring {
            machine,
            slept: None,
            epoch: 0,
        });
        self.note(|| format!("{} calls {call}", name(c)));
        self.drive(c);
    }

    /// The instant a client's clock shows (every clock is the model's in this model).
    pub fn now(&self) -> Instant {
        self.at(self.time)
    }

    fn at(&self, tick: u32) -> Instant {
        self.base + TICK * tick
    }

    /// The server's clock in milliseconds: the model's, stepped as the server's was.
    /// When it may step back, it starts that far ahead of the model's, so that a step
    /// back at time 0 goes back as far as any other.
    pub fn server_ms(&self) -> u64 {
        let tick = i64::try_from(millis(TICK)).unwrap_or(i64::MAX);
        let model = i64::from(self.time + self.config.events.clock_back) * tick;
        u64::try_from(model + self.server_step_ms).unwrap_or(0)
    }

    /// What may happen next, in a fixed order (the search's, and so which of the
    /// shortest traces it finds).
    pub fn enabled(&self) -> Vec<Action> {
        let mut actions = Vec::new();
        let now = self.now();
        for (c, client) in self.clients.iter().enumerate() {
            let c = u8::try_from(c).unwrap_or(u8::MAX);
            if (client.acquiring.as_ref()).is_some_and(|a| a.slept.is_some_and(|t| t < self.time)) {
                actions.push(Action::Wake(c));
            }
            for (i, slot) in client.slots.iter().enumerate() {
                let i = u8::try_from(i).unwrap_or(u8::MAX);
                if slot.stage == Stage::Held {
                    if !slot.renewing && slot.holder.renewal_due(now) {
                        actions.push(Action::Renew(c, i));
                    }
                    actions.push(Action::Release(c, i));
                    let events = &self.config.events;
                    if events.extends && !slot.extending && self.affords(Some(1)) {
                        actions.push(Action::Extend(c, i));
                    }
                    if events.drops && self.affords(Some(1)) {
                        actions.push(Action::Drop(c, i));
                    }
                }
            }
            for (j, job) in client.jobs.iter().enumerate() {
                if !job.done && job.next.is_some_and(|at| at <= now) {
                    actions.push(Action::Retry(c, u8::try_from(j).unwrap_or(u8::MAX)));
                }
            }
        }
        for call in &self.calls {
            match call.flight {
                Flight::Pending if self.affords(self.run_cost(call)) => {
                    actions.push(Action::Run(call.id));
                }
                Flight::Answered(_) if call.waiter.is_some() => {
                    actions.push(Action::Deliver(call.id));
                }
                _ => {}
            }
            if call.waiter.is_some() && now >= call.give_up {
                actions.push(Action::GiveUp(call.id));
            }
        }
        if self.config.events.cancels && self.affords(Some(1)) {
            for (c, client) in self.clients.iter().enumerate() {
                if client.acquiring.is_some() {
                    actions.push(Action::Cancel(u8::try_from(c).unwrap_or(u8::MAX)));
                }
            }
        }
        // A restart that forgets the counter restarts it from the server's clock: the
        // guide promises nothing when that clock stepped back meanwhile (see
        // `Events::clock_back`), so a history has one or the other.
        let stepped_back = self.server_step_ms < 0;
        if self.server.epoch < self.config.events.restarts && !stepped_back && self.affords(Some(1))
        {
            actions.push(Action::Restart);
        }
        if self.kept < self.config.events.restarts_keeping && self.affords(Some(1)) {
            actions.push(Action::RestartKeeping);
        }
        if self.downgraded < self.config.events.downgrades && self.affords(Some(1)) {
            actions.push(Action::Downgrade);
        }
        let events = &self.config.events;
        if self.acl_changed < events.acl_changes && self.affords(Some(1)) {
            actions.push(Action::AclChange);
        }
        if !self.clock_stepped && self.affords(Some(1)) {
            if events.clock_back > 0 && self.server.epoch == 0 {
                actions.push(Action::ClockBack);
            }
            if events.clock_ahead > 0 {
                actions.push(Action::ClockAhead);
            }
            if events.wall_ahead > 0 {
                for c in 0..self.clients.len() {
                    actions.push(Action::WallAhead(u8::try_from(c).unwrap_or(u8::MAX)));
                }
            }
        }
        if self.time < self.config.horizon && self.affords(self.tick_cost()) {
            actions.push(Action::Tick);
        }
        actions
    }

    /// Whether the faults left pay for `cost` (`None`: not allowed at all).
    fn affords(&self, cost: Option<u32>) -> bool {
        cost.is_some_and(|cost| self.faults + cost <= self.config.faults)
    }

    /// What running `call` now costs: nothing when it is its client's oldest pending
    /// request, else one fault (a handle's second connection overtaking the first), when
    /// the world reorders.
    fn run_cost(&self, call: &Call) -> Option<u32> {
        let overtakes = self.calls.iter().any(|other| {
            other.client == call.client && other.id < call.id && other.flight == Flight::Pending
        });
        match (overtakes, self.config.events.reorder) {
            (false, _) => Some(0),
            (true, true) => Some(1),
            (true, false) => None,
        }
    }

    /// What moving the clock costs: a fault for each call whose answer has not reached
    /// its caller by the caller's bound (a timeout: the request or the reply was slow or
    /// lost), when the world has timeouts; and one for each lease whose watchdog lets a
    /// due renewal wait (a pause), when it has pauses.
    fn tick_cost(&self) -> Option<u32> {
        let late = self.overdue().count();
        let paused = self.paused().count();
        if (late > 0 && !self.config.events.timeouts) || (paused > 0 && !self.config.events.pauses)
        {
            return None;
        }
        u32::try_from(late + paused).ok()
    }

    /// The calls whose answers will not have reached their callers by their bounds once
    /// the clock moves on.
    fn overdue(&self) -> impl Iterator<Item = &Call> {
        let next = self.at(self.time + 1);
        (self.calls.iter())
            .filter(move |c| c.waiter.is_some() && c.flight != Flight::Dropped && next >= c.give_up)
    }

    /// The held leases whose renewal is due and not sent: (client, slot, fence).
    fn paused(&self) -> impl Iterator<Item = (u8, u8, u64)> {
        let now = self.now();
        self.clients
            .iter()
            .enumerate()
            .flat_map(move |(c, client)| {
                let c = u8::try_from(c).unwrap_or(u8::MAX);
                (client.slots.iter().enumerate())
                    .filter(move |(_, s)| {
                        s.stage == Stage::Held && !s.renewing && s.holder.renewal_due(now)
                    })
                    .map(move |(i, s)| (c, u8::try_from(i).unwrap_or(u8::MAX), s.holder.fence()))
            })
    }

    /// A fault touched the lease whose call `waiter` of client `c` is (a renewal's, an
    /// extension's or its release's).
    fn touch(&mut self, c: u8, waiter: Option<Waiter>) {
        if let Some(Waiter::Renewal(i) | Waiter::Extend(i) | Waiter::Release(i)) = waiter
            && let Some(slot) = self.clients[usize::from(c)].slots.get_mut(usize::from(i))
        {
            slot.touched = true;
        }
    }

    /// A copy of this state that goes on alone: the model's data copied, each machine
    /// object forked (its own lease, its own waiters).
    #[must_use]
    pub fn fork(&self) -> Self {
        let clients = self
            .clients
            .iter()
            .map(|client| Client {
                handle: client.handle.fork(),
                tries: client.tries,
                rounds: client.rounds,
                acquiring: client.acquiring.as_ref().map(|a| Acquiring {
                    machine: a.machine.fork(),
                    slept: a.slept,
                    epoch: a.epoch,
                }),
                slots: (client.slots.iter())
                    .map(|slot| Slot {
                        holder: slot.holder.fork(),
                        epoch: slot.epoch,
                        stage: slot.stage,
                        belief: slot.belief,
                        renewing: slot.renewing,
                        extending: slot.extending,
                        touched: slot.touched,
                    })
                    .collect(),
                jobs: (client.jobs.iter())
                    .map(|job| Job {
                        orphan: job.orphan.fork(),
                        next: job.next,
                        done: job.done,
                        settled: job.settled,
                    })
                    .collect(),
                failed: client.failed,
                tokens: client.tokens,
            })
            .collect();
        Self {
            config: self.config,
            base: self.base,
            time: self.time,
            server: self.server.clone(),
            clients,
            calls: self.calls.clone(),
            next_call: self.next_call,
            faults: self.faults,
            kept: self.kept,
            downgraded: self.downgraded,
            server_step_ms: self.server_step_ms,
            clock_stepped: self.clock_stepped,
            acl_changed: self.acl_changed,
            broken: self.broken.clone(),
            log: self.log.clone(),
            labels: self.labels.clone(),
        }
    }

    /// Carries `action` out, then looks at every lease.
    pub fn apply(&mut self, action: Action) {
        match action {
            Action::Tick => self.tick(),
            Action::Wake(c) => {
                let now = self.now();
                if let Some(a) = &mut self.clients[usize::from(c)].acquiring {
                    a.slept = None;
                    a.machine.woke(now);
                }
                self.note(|| format!("{} wakes from its nap", name(c)));
                self.drive(c);
            }
            Action::Run(id) => {
                let call = self.calls.iter().find(|c| c.id == id);
                if let Some(call) = call.filter(|c| self.run_cost(c) == Some(1)) {
                    let c = call.client;
                    self.fault(|| {
                        format!(
                            "{}'s #{id} overtakes a request its handle sent earlier (another \
                             connection)",
                            name(c)
                        )
                    });
                }
                self.run(id);
            }
            Action::Deliver(id) => self.deliver(id, None),
            Action::GiveUp(id) => self.deliver(id, Some(())),
            Action::Renew(c, i) => {
                let now = self.now();
                let client = &mut self.clients[usize::from(c)];
                let slot = &mut client.slots[usize::from(i)];
                let Some(out) = slot.holder.begin_renewal(&client.handle, now) else {
                    self.broke(
                        "renewal",
                        "the watchdog found a due renewal that did not go".into(),
                    );
                    return;
                };
                slot.renewing = true;
                let token = slot.holder.token().to_owned();
                self.send_out(c, token, &out, Waiter::Renewal(i), |id| {
                    format!("{}'s watchdog renews (#{id})", name(c))
                });
            }
            Action::Release(c, i) => {
                let now = self.now();
                let client = &mut self.clients[usize::from(c)];
                let slot = &mut client.slots[usize::from(i)];
                let out = slot.holder.release(&client.handle, now);
                slot.stage = Stage::Releasing;
                let token = slot.holder.token().to_owned();
                self.send_out(c, token, &out, Waiter::Release(i), |id| {
                    format!("{} calls release() (#{id})", name(c))
                });
            }
            Action::Retry(c, j) => {
                let now = self.now();
                let client = &mut self.clients[usize::from(c)];
                let job = &mut client.jobs[usize::from(j)];
                job.next = None;
                let out = job.orphan.sending(&client.handle, now);
                let token = job.orphan.token().to_owned();
                let label = self.label(&token);
                self.send_out(c, token, &out, Waiter::Background(j), |id| {
                    format!(
                        "{}'s background release of {label} sends compare-del (#{id})",
                        name(c)
                    )
                });
            }
            Action::Restart | Action::RestartKeeping | Action::Downgrade => self.restart(action),
            Action::ClockBack | Action::ClockAhead | Action::WallAhead(_) => self.step(action),
            Action::AclChange => {
                self.acl_changed += 1;
                let (start, to) = (self.config.denied, self.config.events.acl_to);
                let now = if self.server.denied == start {
                    to
                } else {
                    start
                };
                self.fault(|| format!("the lock user's ACL changes: it refuses {now:?}"));
                self.server.denied = now;
            }
            Action::Cancel(c) => self.cancel(c),
            Action::Extend(c, i) => self.extend(c, i),
            Action::Drop(c, i) => {
                self.fault(|| format!("{} drops its guard without a release", name(c)));
                let now = self.now();
                let slot = &mut self.clients[usize::from(c)].slots[usize::from(i)];
                slot.stage = Stage::Dropped;
                if let Some(orphan) = slot.holder.drop_guard(now) {
                    self.background(c, orphan);
                }
                self.start(c);
            }
        }
        self.observe();
    }

    /// The server restarts: without its data, with it, or as an older server with it.
    fn restart(&mut self, action: Action) {
        match action {
            Action::Restart => {
                self.fault(|| "the server restarts".into());
                self.server.restart_empty();
                self.drop_connections();
                self.note(|| "the server restarts without its data; connections drop".into());
            }
            Action::RestartKeeping => {
                self.fault(|| "the server restarts".into());
                self.kept += 1;
                self.drop_connections();
                self.note(|| "the server restarts with its data; connections drop".into());
            }
            Action::Downgrade => {
                self.fault(|| "the server is replaced by an older one".into());
                self.downgraded += 1;
                self.server.downgrade();
                self.drop_connections();
                self.note(|| {
                    "an older server, without SET IFEQ and DELIFEQ, takes over with the \
                     data; connections drop"
                        .into()
                });
            }
            _ => {}
        }
    }

    /// A wall clock steps: the server's back or ahead, or a client's ahead.
    fn step(&mut self, action: Action) {
        let events = &self.config.events;
        let tick_ms = i64::try_from(millis(TICK)).unwrap_or(i64::MAX);
        self.clock_stepped = true;
        match action {
            Action::ClockBack | Action::ClockAhead => {
                let (ticks, way) = if action == Action::ClockBack {
                    (events.clock_back, "back")
                } else {
                    (events.clock_ahead, "ahead")
                };
                let by = i64::from(ticks) * tick_ms;
                self.fault(|| format!("the server's clock steps {way} {by} ms"));
                self.server_step_ms += if action == Action::ClockBack { -by } else { by };
                let now_ms = self.server_ms();
                self.server.stepped(now_ms, action == Action::ClockBack);
                self.note(|| format!("the server's clock now reads {now_ms} ms"));
            }
            Action::WallAhead(c) => {
                let by = TICK * events.wall_ahead;
                self.fault(|| {
                    format!("{}'s wall clock steps {} ms ahead", name(c), by.as_millis())
                });
                self.clients[usize::from(c)].handle.step_wall(by);
            }
            _ => {}
        }
    }

    /// The clock moves one tick: keys expire, and requests that can no longer arrive
    /// (older than the latest a request may run) are gone.
    fn tick(&mut self) {
        let late: Vec<(u8, u32, Option<Waiter>)> = (self.overdue())
            .map(|c| (c.client, c.id, c.waiter))
            .collect();
        let paused: Vec<(u8, u8, u64)> = self.paused().collect();
        self.time += 1;
        self.note(|| "the clock ticks".into());
        for (c, id, waiter) in late {
            self.touch(c, waiter);
            self.fault(|| format!("{}'s #{id} got no answer within its bound", name(c)));
        }
        for (c, i, fence) in paused {
            self.touch(c, Some(Waiter::Renewal(i)));
            self.fault(|| {
                format!(
                    "{}'s watchdog lets the due renewal of fence {fence} wait",
                    name(c)
                )
            });
        }
        let now_ms = self.server_ms();
        self.server.expire(now_ms);
        let (time, late) = (self.time, self.config.late);
        for call in &mut self.calls {
            if call.flight == Flight::Pending && time > call.sent + late {
                call.flight = Flight::Dropped;
            }
        }
        self.calls
            .retain(|c| c.waiter.is_some() || c.flight == Flight::Pending);
    }

    fn send(&mut self, c: u8, request: Request, give_up: Instant, waiter: Waiter) -> u32 {
        let id = self.next_call;
        self.next_call += 1;
        self.calls.push(Call {
            id,
            client: c,
            request,
            sent: self.time,
            give_up,
            flight: Flight::Pending,
            waiter: Some(waiter),
        });
        id
    }

    /// Sends a lease call of client `c` for `token`, and the question beside it if the
    /// call found it open (on its own bound).
    /// `what` says it in the history.
    fn send_out(
        &mut self,
        c: u8,
        token: String,
        out: &Out,
        waiter: Waiter,
        what: impl FnOnce(u32) -> String,
    ) -> u32 {
        let request = match out.command {
            Command::Renew { ttl, native } => Request::Renew { token, ttl, native },
            Command::Delete { native } => Request::Delete { token, native },
        };
        let id = self.send(c, request, out.give_up, waiter);
        self.note(|| what(id));
        if let Some(question) = out.question {
            let give_up = self.now() + TICK * self.config.response_timeout;
            let asked = self.send(c, Request::Docs { question }, give_up, Waiter::Question);
            self.note(|| format!("{} asks the server what it offers (#{asked})", name(c)));
        }
        id
    }

    /// The server runs call `id`'s request.
    fn run(&mut self, id: u32) {
        let now_ms = self.server_ms();
        let ttl = millis(self.clients[0].handle.ttl());
        let fence = millis(self.clients[0].handle.fence_lifetime());
        let restart_from_one = self.config.counter_from_one;
        let Some(at) = self.calls.iter().position(|c| c.id == id) else {
            return;
        };
        let request = self.calls[at].request.clone();
        let answer = match &request {
            Request::Attempt(AttemptCall::Acquire { token }) => {
                self.server
                    .acquire(token, ttl, fence, now_ms, restart_from_one)
            }
            Request::Renew { token, ttl, native } => {
                self.server.renew_as(token, millis(*ttl), now_ms, *native)
            }
            Request::Delete { token, native } => self.server.delete_as(token, now_ms, *native),
            Request::Docs { .. } => Answer::Docs(self.server.offers),
            Request::Attempt(AttemptCall::Time) => self.server.time(now_ms),
            Request::Attempt(AttemptCall::Transaction { token, start_us }) => {
                (self.server).transact(token, ttl, fence, *start_us, now_ms, restart_from_one)
            }
            Request::Attempt(AttemptCall::Raise { floor }) => {
                self.server.raise(*floor, fence, now_ms)
            }
            // Only the queued kinds send scripts by their words (the queue world's).
            Request::Attempt(AttemptCall::Script { .. }) => Answer::Unknown,
        };
        let label = request.token().map(|t| self.label(t)).unwrap_or_default();
        let what = || {
            let command = match &request {
                Request::Attempt(AttemptCall::Acquire { .. }) => format!("acquire({label})"),
                Request::Renew { native: true, .. } => format!("SET IFEQ({label})"),
                Request::Renew { .. } => format!("renew({label})"),
                Request::Delete { native: true, .. } => format!("DELIFEQ({label})"),
                Request::Delete { .. } => format!("compare-del({label})"),
                Request::Docs { .. } => "COMMAND DOCS".to_owned(),
                Request::Attempt(AttemptCall::Time) => "TIME".to_owned(),
                Request::Attempt(AttemptCall::Transaction { start_us, .. }) => {
                    format!("MULTI acquire({label}, counter from {start_us}) EXEC")
                }
                Request::Attempt(AttemptCall::Raise { floor }) => format!("raise-fence({floor})"),
                Request::Attempt(AttemptCall::Script { .. }) => "a script".to_owned(),
            };
            format!("{command}: {}", said(answer))
        };
        let call = &mut self.calls[at];
        if call.waiter.is_some() {
            call.flight = Flight::Answered(answer);
        } else {
            self.calls.remove(at);
        }
        self.note(|| format!("the server runs #{id} {}", what()));
    }

    /// The answer of call `id` reaches its caller, or (`gave_up`) the caller gives up on
    /// it and hears "no reply".
    fn deliver(&mut self, id: u32, gave_up: Option<()>) {
        let Some(at) = self.calls.iter().position(|c| c.id == id) else {
            return;
        };
        let call = &mut self.calls[at];
        let (client, waiter, flight) = (call.client, call.waiter.take(), call.flight);
        let request = call.request.clone();
        if gave_up.is_none() || flight != Flight::Pending {
            self.calls.remove(at);
        }
        let Some(waiter) = waiter else {
            return;
        };
        let answer = match (gave_up, flight) {
            (None, Flight::Answered(answer)) => Some(answer),
            _ => None,
        };
        let heard = || answer.map_or_else(|| "no reply (gives up)".to_owned(), said);
        self.note(|| format!("{} hears #{id}: {}", name(client), heard()));
        self.heard(client, waiter, &request, answer);
    }

    /// Client `client`'s `waiter` hears `answer` (`None`: no reply) to `request`.
    fn heard(&mut self, client: u8, waiter: Waiter, request: &Request, answer: Option<Answer>) {
        let now = self.now();
        let c = usize::from(client);
        let token = request.token().unwrap_or_default().to_owned();
        let again = |world: &mut Self, out: Out, waiter: Waiter| {
            world.send_out(client, token, &out, waiter, |id| {
                format!("{} sends it again as its script (#{id})", name(client))
            });
        };
        if waiter == Waiter::Attempt {
            return self.attempt_heard(client, request, answer);
        }
        let Client {
            handle,
            slots,
            jobs,
            ..
        } = &mut self.clients[c];
        match waiter {
            Waiter::Attempt => {}
            Waiter::Question => {
                let Request::Docs { question } = *request else {
                    return;
                };
                let offers = match answer {
                    Some(Answer::Docs(offers)) => Some(offers),
                    _ => None,
                };
                handle.asked(question, offers);
            }
            Waiter::Renewal(i) => {
                let slot = &mut slots[usize::from(i)];
                match slot.holder.renewal_done(handle, done(answer), now) {
                    Heard::Again(out) => again(self, out, waiter),
                    Heard::Done(()) => slot.renewing = false,
                }
            }
            Waiter::Release(i) => {
                let slot = &mut slots[usize::from(i)];
                let (returned, orphan) = match slot.holder.released(handle, done(answer), now) {
                    Heard::Again(out) => return again(self, out, waiter),
                    Heard::Done(outcome) => outcome,
                };
                let released = match &returned {
                    Ok(()) => Released::Ok,
                    Err(LockError::NotHeld { .. }) => Released::NotHeld,
                    Err(_) => Released::Failed,
                };
                slot.stage = Stage::Released(released);
                let said = || match &returned {
                    Ok(()) => "Ok".to_owned(),
                    Err(e) => format!("Err({e})"),
                };
                self.note(|| format!("{}'s release() returns {}", name(client), said()));
                if let Some(orphan) = orphan {
                    self.background(client, orphan);
                }
                self.start(client);
            }
            Waiter::Extend(i) => {
                let slot = &mut slots[usize::from(i)];
                let returned = match slot.holder.extended(handle, done(answer), now) {
                    Heard::Again(out) => return again(self, out, waiter),
                    Heard::Done(returned) => returned,
                };
                slot.extending = false;
                self.note(|| match returned {
                    Ok(()) => format!("{}'s extend returns Ok", name(client)),
                    Err(e) => format!("{}'s extend returns Err({e})", name(client)),
                });
            }
            Waiter::Background(j) => {
                let job = &mut jobs[usize::from(j)];
                job.next = match job.orphan.released(handle, done(answer), now) {
                    Heard::Again(out) => return again(self, out, waiter),
                    Heard::Done(next) => next,
                };
                job.done = job.next.is_none();
                job.settled = matches!(answer, Some(Answer::Done(_) | Answer::Unnotified(_)));
                let done = job.done;
                if done {
                    self.note(|| format!("{}'s background release is over", name(client)));
                }
            }
        }
    }

    /// Client `client`'s `lock()` hears `answer` (`None`: no reply) to its attempt's
    /// `request` (the script, the clock question, the transaction or the raise).
    fn attempt_heard(&mut self, client: u8, request: &Request, answer: Option<Answer>) {
        let now = self.now();
        let Client {
            handle, acquiring, ..
        } = &mut self.clients[usize::from(client)];
        let Some(acquiring) = acquiring else {
            return;
        };
        let machine = &mut acquiring.machine;
        match (request, answer) {
            (Request::Attempt(AttemptCall::Time), answer) => {
                let reply = match answer {
                    Some(Answer::Time(us)) => Reply::Answered(us),
                    Some(_) => Reply::Refused,
                    None => Reply::NoReply,
                };
                machine.timed(handle, reply, now);
            }
            (Request::Attempt(AttemptCall::Transaction { .. }), answer) => {
                let reply = match answer {
                    Some(Answer::Transacted(t, epoch)) => {
                        acquiring.epoch = epoch;
                        Reply::Answered(t)
                    }
                    Some(_) => Reply::Refused,
                    None => Reply::NoReply,
                };
                machine.transacted(handle, reply, now);
            }
            (Request::Attempt(AttemptCall::Raise { .. }), answer) => {
                let reply = match answer {
                    Some(Answer::Raised(v)) => {
                        Reply::Answered(i64::try_from(v).unwrap_or(i64::MAX))
                    }
                    Some(_) => Reply::Refused,
                    None => Reply::NoReply,
                };
                machine.raised(handle, reply, now);
            }
            (_, answer) => {
                let reply = match answer {
                    Some(Answer::Acquire(acquired, value, epoch)) => {
                        acquiring.epoch = epoch;
                        Reply::Answered((acquired, value))
                    }
                    Some(_) => Reply::Refused,
                    None => Reply::NoReply,
                };
                machine.attempted(handle, reply, now);
            }
        }
        self.drive(client);
    }

    /// Carries client `c`'s `lock()` on until it waits for something.
    fn drive(&mut self, c: u8) {
        let now = self.now();
        let time = self.time;
        loop {
            let client = &mut self.clients[usize::from(c)];
            let ask = match &mut client.acquiring {
                Some(acquiring) => acquiring.machine.next(&client.handle, now),
                None => return,
            };
            match ask {
                Ask::Call { call, give_up } => {
                    let label = match &call {
                        AttemptCall::Acquire { token } | AttemptCall::Transaction { token, .. } => {
                            self.name_token(c, token)
                        }
                        AttemptCall::Time
                        | AttemptCall::Raise { .. }
                        | AttemptCall::Script { .. } => String::new(),
                    };
                    let what = match &call {
                        AttemptCall::Acquire { .. } => format!("sends acquire({label})"),
                        AttemptCall::Time => "asks the server's clock".to_owned(),
                        AttemptCall::Transaction { .. } => {
                            format!("sends the acquire transaction({label})")
                        }
                        AttemptCall::Raise { floor } => format!("raises the counter to {floor}"),
                        AttemptCall::Script { .. } => "sends a script".to_owned(),
                    };
                    let id = self.send(c, Request::Attempt(call), give_up, Waiter::Attempt);
                    self.note(|| format!("{} {what} (#{id})", name(c)));
                    return;
                }
                Ask::Sleep => {
                    if let Some(acquiring) = &mut self.clients[usize::from(c)].acquiring {
                        acquiring.slept = Some(time);
                    }
                    self.note(|| format!("{} sleeps before its next attempt", name(c)));
                    return;
                }
                Ask::Release(orphan) => self.background(c, orphan),
                Ask::Granted(holder) => {
                    let client = &mut self.clients[usize::from(c)];
                    let epoch = client.acquiring.take().map_or(0, |a| a.epoch);
                    let belief = holder.belief(now);
                    let (fence, label) = (holder.fence(), self.label(holder.token()));
                    self.clients[usize::from(c)].slots.push(Slot {
                        holder,
                        epoch,
                        stage: Stage::Held,
                        belief,
                        renewing: false,
                        extending: false,
                        touched: false,
                    });
                    let belief = self.describe(belief);
                    self.note(|| {
                        format!(
                            "{}'s lock() returns a guard: token {label}, fence {fence}, {belief}",
                            name(c)
                        )
                    });
                    return;
                }
                Ask::Held => {
                    self.clients[usize::from(c)].acquiring = None;
                    self.note(|| format!("{}'s try_lock() returns Ok(None): held", name(c)));
                    self.start(c);
                    return;
                }
                Ask::Failed(e) => {
                    let client = &mut self.clients[usize::from(c)];
                    client.acquiring = None;
                    client.failed += 1;
                    self.note(|| format!("{}'s lock() returns Err({e})", name(c)));
                    if e.to_string().contains("internal") {
                        self.broke("lock()", format!("the machine failed: {e}"));
                    }
                    self.start(c);
                    return;
                }
            }
        }
    }

    /// A grant nobody owns goes to client `c`'s background releaser, which sends at once.
    fn background(&mut self, c: u8, orphan: Orphan) {
        let label = self.label(orphan.token());
        self.note(|| format!("{} hands {label} to a background release", name(c)));
        let now = self.now();
        self.clients[usize::from(c)].jobs.push(Job {
            orphan,
            next: Some(now),
            done: false,
            settled: false,
        });
    }

    /// Every connection drops: no request still on its way runs, no answer still on its
    /// way arrives (each caller gives up when its bound passes).
    fn drop_connections(&mut self) {
        let cut: Vec<(u8, Option<Waiter>)> = (self.calls.iter())
            .map(|call| (call.client, call.waiter))
            .collect();
        for (c, waiter) in cut {
            self.touch(c, waiter);
        }
        self.calls.retain_mut(|call| {
            call.flight = Flight::Dropped;
            call.waiter.is_some()
        });
    }

    /// Client `c` calls `extend` on its lease `slot`, for [`Config::extend_ttl`].
    fn extend(&mut self, c: u8, i: u8) {
        self.fault(|| format!("{} calls extend", name(c)));
        let now = self.now();
        let ttl = TICK * self.config.extend_ttl;
        let client = &mut self.clients[usize::from(c)];
        let slot = &mut client.slots[usize::from(i)];
        slot.touched = true;
        match slot.holder.begin_extend(&client.handle, ttl, now) {
            Ok(out) => {
                slot.extending = true;
                let token = slot.holder.token().to_owned();
                let ms = ttl.as_millis();
                self.send_out(c, token, &out, Waiter::Extend(i), |id| {
                    format!("{} calls extend({ms} ms) (#{id})", name(c))
                });
            }
            Err(e) => self.note(|| format!("{}'s extend returns Err({e}) at once", name(c))),
        }
    }

    /// Client `c` drops its `lock()` midway: the answer of its attempt in flight goes
    /// nowhere, every grant that may exist without an owner goes to its background
    /// releaser, and it makes its next call.
    fn cancel(&mut self, c: u8) {
        let now = self.now();
        let Some(acquiring) = self.clients[usize::from(c)].acquiring.take() else {
            return;
        };
        self.fault(|| format!("{} drops its call midway", name(c)));
        self.calls.retain_mut(|call| {
            if call.client == c && call.waiter == Some(Waiter::Attempt) {
                call.waiter = None;
            }
            call.waiter.is_some() || call.flight == Flight::Pending
        });
        for orphan in acquiring.machine.cancel(now) {
            self.background(c, orphan);
        }
        self.start(c);
    }

    /// Every lease looked at on its holder's clock, as `is_lost()` and the watchdog do.
    fn observe(&mut self) {
        let now = self.now();
        let mut changes = Vec::new();
        for (c, client) in self.clients.iter_mut().enumerate() {
            for slot in &mut client.slots {
                let belief = slot.holder.belief(now);
                let was = std::mem::replace(&mut slot.belief, belief);
                if std::mem::discriminant(&was) != std::mem::discriminant(&belief) {
                    changes.push((c, slot.holder.fence(), belief));
                }
            }
        }
        for (c, fence, belief) in changes {
            let c = u8::try_from(c).unwrap_or(u8::MAX);
            let belief = self.describe(belief);
            self.note(|| format!("{}'s lease (fence {fence}) is now {belief}", name(c)));
        }
    }

    /// Spends one of the world's faults on `what`.
    fn fault(&mut self, what: impl FnOnce() -> String) {
        self.faults += 1;
        let (used, budget) = (self.faults, self.config.faults);
        self.note(|| format!("[fault {used} of {budget}] {}", what()));
    }

    fn broke(&mut self, what: &'static str, detail: String) {
        self.broken.get_or_insert(Broken { what, detail });
    }

    /// A digest of the state: equal for states that behave alike, whatever the owner
    /// tokens drawn (a token is named by where it is first met in a fixed walk of the
    /// state), whatever the calls' numbers (calls are walked in an order of what they
    /// are, not of when they were made), and whichever client is which (the clients are
    /// alike: they are walked in the order of their own digests, and where two have the
    /// same, the least digest over their orders counts).
    pub fn digest(&self) -> u64 {
        let own: Vec<u64> = (0..self.clients.len())
            .map(|c| self.own_digest(c))
            .collect();
        let mut order: Vec<usize> = (0..own.len()).collect();
        order.sort_by_key(|&c| own[c]);
        let ties = own.len() - own.iter().collect::<std::collections::HashSet<_>>().len();
        if ties == 0 {
            return self.digest_as(&order);
        }
        let mut least = u64::MAX;
        permutations(order, &mut |order| {
            let sorted = order.windows(2).all(|w| own[w[0]] <= own[w[1]]);
            if sorted {
                least = least.min(self.digest_as(order));
            }
        });
        least
    }

    /// Client `c`'s state alone, its tokens left out: what orders the clients.
    fn own_digest(&self, c: usize) -> u64 {
        let mut h = Fingerprint::default();
        self.client_digest(c, &mut h, &mut |_| 0);
        let mut calls: Vec<&Call> = (self.calls.iter())
            .filter(|call| usize::from(call.client) == c)
            .collect();
        if self.config.events.reorder {
            calls.sort_by_key(|c| (c.sent, c.give_up, c.waiter, c.id));
        }
        for call in calls {
            (call.sent, call.give_up, call.flight, call.waiter).hash(&mut h);
        }
        h.finish()
    }

    fn client_digest<'a>(
        &'a self,
        c: usize,
        h: &mut Fingerprint,
        name: &mut impl FnMut(&'a str) -> u32,
    ) {
        let client = &self.clients[c];
        (client.tries, client.rounds, client.failed).hash(h);
        client.handle.digest(h);
        match &client.acquiring {
            Some(a) => {
                let woken = a.slept.map(|t| t < self.time);
                (1u8, woken, a.epoch).hash(h);
                a.machine.digest(h);
            }
            None => 0u8.hash(h),
        }
        for slot in &client.slots {
            name(slot.holder.token()).hash(h);
            (
                slot.epoch,
                slot.stage,
                slot.belief,
                slot.renewing,
                slot.extending,
                slot.touched,
            )
                .hash(h);
            slot.holder.digest(h);
        }
        for job in &client.jobs {
            name(job.orphan.token()).hash(h);
            (job.next, job.done, job.settled).hash(h);
            job.orphan.digest(h);
        }
    }

    /// The digest with the clients taken in `order`.
    fn digest_as(&self, order: &[usize]) -> u64 {
        let mut names: Vec<&str> = Vec::new();
        let mut name = |token| -> u32 {
            let at = names
                .iter()
                .position(|&known| known == token)
                .unwrap_or_else(|| {
                    names.push(token);
                    names.len() - 1
                });
            u32::try_from(at).unwrap_or(u32::MAX)
        };
        let mut place = vec![0u8; order.len()];
        for (position, &c) in order.iter().enumerate() {
            place[c] = u8::try_from(position).unwrap_or(u8::MAX);
        }
        let mut h = Fingerprint::default();
        (self.time, self.faults, self.kept, self.downgraded).hash(&mut h);
        (self.server_step_ms, self.clock_stepped, self.acl_changed).hash(&mut h);
        for &c in order {
            self.client_digest(c, &mut h, &mut name);
        }
        let mut calls: Vec<&Call> = self.calls.iter().collect();
        // Without reordering, the order of a client's requests is part of the state.
        if self.config.events.reorder {
            calls.sort_by_key(|c| {
                (
                    place[usize::from(c.client)],
                    c.sent,
                    c.give_up,
                    c.waiter,
                    c.id,
                )
            });
        } else {
            calls.sort_by_key(|c| (place[usize::from(c.client)], c.id));
        }
        for call in calls {
            let client = place[usize::from(call.client)];
            (client, call.sent, call.give_up, call.flight, call.waiter).hash(&mut h);
            let kind = match &call.request {
                Request::Attempt(_) => (0u8, Duration::ZERO, false),
                Request::Renew { ttl, native, .. } => (1, *ttl, *native),
                Request::Delete { native, .. } => (2, Duration::ZERO, *native),
                Request::Docs { .. } => (3, Duration::ZERO, false),
            };
            kind.hash(&mut h);
            if let Request::Attempt(attempt) = &call.request {
                let (which, value) = match attempt {
                    AttemptCall::Acquire { .. } => (0u8, 0u64),
                    AttemptCall::Time => (1, 0),
                    AttemptCall::Transaction { start_us, .. } => (2, *start_us),
                    AttemptCall::Raise { floor } => (3, *floor),
                    AttemptCall::Script { .. } => (4, 0),
                };
                (which, value).hash(&mut h);
            }
            if let Request::Docs { question } = &call.request {
                question.hash(&mut h);
            }
            call.request.token().map(&mut name).hash(&mut h);
        }
        self.server.digest(&mut h, &mut name);
        h.finish()
    }

    /// A lease's state in words.
    fn describe(&self, belief: Belief) -> String {
        if !self.logging() {
            return String::new();
        }
        match belief {
            Belief::Held { valid_until } => {
                let ms = valid_until.saturating_duration_since(self.base).as_millis();
                format!("held until {ms} ms")
            }
            Belief::Lost => "lost".to_owned(),
            Belief::Released => "released".to_owned(),
        }
    }

    /// Names a fresh token of client `c` for the history: its letter and number.
    fn name_token(&mut self, c: u8, token: &str) -> String {
        if self.log.is_none() {
            return String::new();
        }
        let client = &mut self.clients[usize::from(c)];
        client.tokens += 1;
        let label = format!("{}{}", name(c).to_lowercase(), client.tokens);
        self.labels.insert(token.to_owned(), label.clone());
        label
    }

    fn label(&self, token: &str) -> String {
        if !self.logging() {
            return String::new();
        }
        self.labels.get(token).cloned().unwrap_or_default()
    }

    /// Adds the line `line` makes to the readable history, if one is kept (made only
    /// then: the search runs without).
    fn note(&mut self, line: impl FnOnce() -> String) {
        let ms = u64::from(self.time) * millis(TICK);
        if let Some(log) = &mut self.log {
            let mut entry = String::new();
            let _ = write!(entry, "{ms:>5} ms  {}", line());
            log.push(entry);
        }
    }

    fn logging(&self) -> bool {
        self.log.is_some()
    }

    /// The readable history so far.
    pub fn history(&self) -> &[String] {
        self.log.as_deref().unwrap_or_default()
    }
}

/// Calls `each` with every order of `items` (Heap's algorithm).
fn permutations(mut items: Vec<usize>, each: &mut impl FnMut(&[usize])) {
    fn heap(k: usize, items: &mut [usize], each: &mut impl FnMut(&[usize])) {
        if k <= 1 {
            each(items);
            return;
        }
        heap(k - 1, items, each);
        for i in 0..k - 1 {
            if k.is_multiple_of(2) {
                items.swap(i, k - 1);
            } else {
                items.swap(0, k - 1);
            }
            heap(k - 1, items, each);
        }
    }
    let n = items.len();
    heap(n, &mut items, each);
}

/// Client `c`'s name in a history: A, B, C...
pub fn name(c: u8) -> String {
    char::from(b'A' + c).to_string()
}

/// An answer in words, as the history says it where the server runs a request and where
/// its caller hears it.
fn said(answer: Answer) -> String {
    match answer {
        Answer::Acquire(1, fence, _) => format!("granted, fence {fence}"),
        Answer::Acquire(_, pttl, _) => format!("held, {pttl} ms left"),
        Answer::Done(done) => int(done).to_owned(),
        Answer::Unknown => "ERR unknown command".to_owned(),
        Answer::Docs(true) => "SET IFEQ and DELIFEQ offered".to_owned(),
        Answer::Docs(false) => "neither offered".to_owned(),
        Answer::NoPerm => "NOPERM".to_owned(),
        Answer::Unnotified(done) => format!("{}, PUBLISH: NOPERM", int(done)),
        Answer::Time(us) => format!("{us} µs"),
        Answer::Transacted(t, _) if t.granted => format!(
            "granted, fence {}{}, TIME {} µs",
            t.fence,
            if t.started { " (counter started)" } else { "" },
            t.time_us
        ),
        Answer::Transacted(t, _) => format!("held, {} ms left (counter {})", t.pttl, t.fence),
        Answer::Raised(v) => format!("counter {v}"),
    }
}

fn int(done: bool) -> &'static str {
    if done { "1" } else { "0" }
}

/// A renewal's or release's answer as the machine takes it.
fn done(answer: Option<Answer>) -> Reply<bool> {
    match answer {
        Some(Answer::Done(done)) => Reply::Answered(done),
        Some(Answer::Unknown) => Reply::Unknown,
        Some(Answer::NoPerm) => Reply::NoPerm,
        Some(Answer::Unnotified(done)) => Reply::Unnotified(done),
        Some(
            Answer::Acquire(..)
            | Answer::Docs(_)
            | Answer::Time(_)
            | Answer::Transacted(..)
            | Answer::Raised(_),
        ) => Reply::Refused,
        None => Reply::NoReply,
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_alike_up_to_tokens_and_client_names_have_one_digest() {
        let config = Config::default();
        let base = Instant::now();
        // A granted (B's attempt on its way) is B granted (A's on its way), renamed; and
        // every run draws tokens of its own.
        let mut a_first = World::new(&config, base, false);
        a_first.apply(Action::Run(0));
        let mut b_first = World::new(&config, base, false);
        b_first.apply(Action::Run(1));
        assert_eq!(a_first.digest(), b_first.digest());
        let mut again = World::new(&config, base, false);
        again.apply(Action::Run(0));
        assert_eq!(a_first.digest(), again.digest());
        // What differs counts: the answer delivered, a tick later.
        let mut delivered = a_first.fork();
        delivered.apply(Action::Deliver(0));
        assert_ne!(delivered.digest(), a_first.digest());
        let mut later = a_first.fork();
        later.apply(Action::Tick);
        assert_ne!(later.digest(), a_first.digest());
    }

    #[test]
    fn a_fork_goes_on_alone() {
        let config = Config::default();
        let mut world = World::new(&config, Instant::now(), false);
        world.apply(Action::Run(0));
        world.apply(Action::Deliver(0));
        let before = world.digest();
        let mut fork = world.fork();
        assert_eq!(fork.digest(), before);
        fork.apply(Action::Release(0, 0));
        assert_eq!(fork.clients[0].slots[0].belief, Belief::Released);
        assert_eq!(world.digest(), before, "the original is untouched");
        assert!(matches!(
            world.clients[0].slots[0].belief,
            Belief::Held { .. }
        ));
    }

    #[test]
    fn a_grant_both_a_guards_and_a_background_releases_is_an_orphan_violation() {
        use crate::model::Property;
        let config = Config::default();
        let mut world = World::new(&config, Instant::now(), false);
        world.apply(Action::Run(0));
        world.apply(Action::Deliver(0)); // A holds a1.
        world.apply(Action::Release(0, 0)); // #2
        world.apply(Action::Tick);
        world.apply(Action::GiveUp(2)); // No reply: a1 goes to a background release.
        assert_eq!(world.clients[0].jobs.len(), 1);
        assert_eq!(Property::NothingOrphaned.broken(&world), None);
        // The guard's and the releaser's at once: the rule the check keeps.
        world.clients[0].slots[0].stage = Stage::Held;
        let broken = Property::NothingOrphaned.broken(&world);
        assert!(
            broken.is_some_and(|b| b.contains("undoes a grant A's guard holds")),
            "the check sees it"
        );
    }

    #[test]
    fn a_request_overtaking_its_handles_earlier_one_is_a_fault_and_a_late_answer_too() {
        let config = Config::default();
        let mut world = World::new(&config, Instant::now(), false);
        world.apply(Action::Run(0));
        world.apply(Action::Deliver(0));
        world.apply(Action::Tick); // B's attempt #1 got no answer: one fault.
        assert_eq!(world.faults, 1);
        world.apply(Action::Renew(0, 0)); // #2
        world.apply(Action::Release(0, 0)); // #3
        assert!(world.enabled().contains(&Action::Run(3)));
        world.apply(Action::Run(3));
        assert_eq!(world.faults, 2, "the release ran ahead of the renewal");
        assert!(
            !world.enabled().contains(&Action::Restart),
            "no fault left for a restart"
        );
    }

    /// Applies the first enabled action `pick` accepts; panics with the history if none.
    fn step(world: &mut World<'_>, pick: impl Fn(&Action) -> bool) {
        let Some(action) = world.enabled().into_iter().find(|a| pick(a)) else {
            panic!("no such action in:\n{}", world.history().join("\n"));
        };
        world.apply(action);
    }

    #[test]
    fn a_native_renewal_refused_after_a_downgrade_goes_again_as_its_script() {
        let mut config = Config {
            native: true,
            clients: 1,
            ..Config::default()
        };
        config.events.downgrades = 1;
        let mut world = World::new(&config, Instant::now(), true);
        let call = |a: &Action| matches!(a, Action::Run(_) | Action::Deliver(_));
        let tick = |a: &Action| *a == Action::Tick;
        step(&mut world, call); // the connection's clock question runs
        step(&mut world, call); // heard: the acquire transaction goes
        step(&mut world, call); // the attempt runs
        step(&mut world, call); // granted
        step(&mut world, tick);
        step(&mut world, |a| matches!(a, Action::Renew(..))); // a script, and the question
        for _ in 0..4 {
            step(&mut world, call);
        }
        assert!(
            world.clients[0].handle.goes_native(),
            "{}",
            world.history().join("\n")
        );
        step(&mut world, tick);
        step(&mut world, |a| *a == Action::Downgrade);
        step(&mut world, |a| matches!(a, Action::Renew(..))); // native
        step(&mut world, call); // refused
        step(&mut world, call); // heard: sent again as its script
        step(&mut world, call); // the script runs
        step(&mut world, call); // renewed
        let log = world.history().join("\n");
        assert!(log.contains("SET IFEQ(a1): ERR unknown command"), "{log}");
        assert!(log.contains("sends it again as its script"), "{log}");
        assert!(!world.clients[0].handle.goes_native(), "{log}");
        for _ in 0..3 {
            step(&mut world, tick);
            step(&mut world, |a| matches!(a, Action::Renew(..)));
            step(&mut world, call);
            step(&mut world, call);
        }
        let slot = &world.clients[0].slots[0];
        assert!(matches!(slot.belief, Belief::Held { .. }), "{log}");
    }
}
