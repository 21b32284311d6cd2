//! The queue's world: clients of one name whose grants wait in the name's queue on the
//! server (fair locks, readers and writers, semaphore permits, and kinds mixed on one
//! name), each running the real lock machine through lockscript's model executor,
//! against the model's Redis running fair-queue.lua itself ([`super::store`]).
//!
//! Every client calls `lock()` at time 0 for its kind ([`QueueConfig::grants`]), holds
//! the grant with the watchdog renewing it, and releases it. From there a state changes
//! by one [`QueueAction`] at a time, every action the world allows being one branch of
//! the search: the server runs a pending request (each client's in the order sent); an
//! answer reaches its caller; a caller gives up on a call whose bound has passed (the
//! request may still run later, until [`QueueConfig::late`]); a sleeper wakes at its
//! nap's end or with the handoff letter waiting in its mailbox; the watchdog sends a
//! due renewal; a holder releases; a background release sends its call; the clock
//! ticks.
//!
//! The faults, each counted against [`QueueConfig::faults`] and switchable in
//! [`QueueEvents`]: a tick that leaves an answer short of its caller's bound (a timeout,
//! a lost reply), a handoff letter lost (a dropped notification), a tick while a
//! watchdog lets a due renewal wait (a pause, past the lease too), a `lock()` dropped
//! midway, the server restarted with or without its data. Without a fault nothing
//! waits: a sleeper wakes by its nap's end, a letter reaches a sleeping waiter before the
//! clock moves, answers come within their bounds.
//!
//! The properties ([`QueueProperty`]), each checked after every action:
//! - **kinds**: leases valid by their holders' own clocks never break the name's rule: a
//!   lock or a writer alone, readers together, at most `n` permits, two kinds never
//!   together;
//! - **fences**: a lock's or a writer's fencing token above every token granted before
//!   it, a reader's or permit's above every writer's before it;
//! - **first come first served**: the server grants no waiter while one that queued
//!   before it still waits for a grant (a waiter's place counts from its first queue
//!   call the server ran; a restart without data empties the queue and the places);
//! - **no lost wake-up**, as bounds, in spans without a fault: a waiter the server
//!   granted knows it within [`QueueWorld::bound`] ticks; the name is never free for
//!   that long while a waiter stands queued.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::time::Instant;

use lockscript::__private::model::{
    Acquisition, Ask, Belief, Call as AttemptCall, Grants, HANDOFF, Handle, Heard, Holder, Orphan,
    Out, Reply, confirmed,
};
use redis::Value;

use super::explore::Searched;
use super::store::{Patch, Reply as Said, Store};
use super::world::TICK;

/// The names the clients lock ([`QueueConfig::names`]).
const NAMES: [&str; 2] = ["m", "n"];

/// Name `n`'s lock key, or the key fair-queue.lua keeps beside it with `suffix`.
fn key(n: u8, suffix: &str) -> Vec<u8> {
    let name = NAMES[usize::from(n) % NAMES.len()];
    format!("lock:{{{name}}}{suffix}").into_bytes()
}
/// The server's clock at the model's time 0, in microseconds (an ordinary wall clock).
const EPOCH_US: u64 = 1_700_000_000_000_000;
/// The server's wait before it drops a waiter's ticket (fair-queue.lua's `ARGV[7]`,
/// the executors' `WAITER_LEASE`), and how often a waiter renews it at most.
const REFRESH_MS: u64 = 666;

/// The world's events, each switchable.
#[derive(Clone, Debug)]
#[allow(clippy::struct_excessive_bools)]
pub struct QueueEvents {
    /// An answer may miss its caller's bound: the caller gives up, the request may
    /// still run later.
    pub timeouts: bool,
    /// A client's request may run ahead of one it sent earlier (two connections of one
    /// handle: a pool, a reconnect); else each client's requests run in the order sent.
    pub reorder: bool,
    /// A handoff letter may be lost (a dropped notification, a subscription cut).
    pub lost_letters: bool,
    /// A watchdog may let a due renewal wait while the clock moves.
    pub pauses: bool,
    /// A client may drop its `lock()` midway.
    pub cancels: bool,
    /// Restarts of the server without its data, at most.
    pub restarts: u32,
    /// Restarts of the server with its data (connections drop), at most.
    pub restarts_keeping: u32,
}

impl Default for QueueEvents {
    /// Every event on, one restart of each kind.
    fn default() -> Self {
        Self {
            timeouts: true,
            reorder: true,
            lost_letters: true,
            pauses: true,
            cancels: true,
            restarts: 1,
            restarts_keeping: 1,
        }
    }
}

/// A defect planted in fair-queue.lua as the model's server runs it, for the checker's
/// own tests: each breaks one property's rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Defect {
    /// The queue served from its end: the last waiter first.
    ServeLast,
    /// One permit more than the semaphore has.
    PermitOver,
    /// A writer admitted beside readers.
    WriterBesideReaders,
    /// A release that passes the name to nobody, and a queue call that serves nobody: a
    /// queued waiter is never woken.
    NoHandoff,
    /// A handoff nobody is told of: no letter, and the waiter's own queue call answered
    /// as if it still waited.
    HandoffUnannounced,
    /// The fencing counter not raised by a grant: a token repeats.
    FenceRepeats,
    /// A reader's or permit's kind not checked against the kind holding the name.
    KindsMixed,
}

impl Defect {
    /// Every defect, in the order `./run model --defect K` numbers them.
    pub const ALL: [Defect; 7] = [
        Defect::ServeLast,
        Defect::PermitOver,
        Defect::WriterBesideReaders,
        Defect::NoHandoff,
        Defect::HandoffUnannounced,
        Defect::FenceRepeats,
        Defect::KindsMixed,
    ];

    fn patch(self) -> Patch {
        let edits = match self {
            Defect::ServeLast => vec![(
                "redis.call('ZRANGE', KEYS[3], 0, 0)[1]",
                "redis.call('ZRANGE', KEYS[3], -1, -1)[1]",
            )],
            Defect::PermitOver => vec![(
                "redis.call('ZCARD', KEYS[5]) < limit",
                "redis.call('ZCARD', KEYS[5]) <= limit",
            )],
            Defect::WriterBesideReaders => {
                vec![("return redis.call('ZCARD', KEYS[5]) == 0", "return true")]
            }
            Defect::NoHandoff => vec![
                ("local _, served = serve()", "local served = false"),
                ("local fence = serve()", "local fence = nil"),
            ],
            Defect::HandoffUnannounced => vec![
                (
                    "redis.call('PUBLISH', w[5], ",
                    "redis.call('PUBLISH', 'nowhere', ",
                ),
                ("return {2, fence, left, now}", "return {0, 0, left, now}"),
            ],
            Defect::FenceRepeats => {
                vec![("return tonumber(counter) + 1", "return tonumber(counter)")]
            }
            Defect::KindsMixed => vec![("if holding and holding ~= kind then", "if false then")],
        };
        Patch {
            file: "fair-queue.lua",
            edits,
        }
    }
}

/// A rule the queue's world is held to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueProperty {
    /// Leases valid by their holders' clocks: a lock or writer alone, readers together,
    /// permits within their count, two kinds never together.
    Kinds,
    /// A lock's or writer's fencing token above every one before it; a reader's or
    /// permit's above every writer's before it.
    Fences,
    /// No waiter granted while one queued before it still waits.
    FirstComeFirstServed,
    /// A granted waiter knows it within the bound; the name never free that long while
    /// a waiter stands queued (in spans without a fault).
    NoLostWakeUp,
}

impl QueueProperty {
    /// Every property.
    pub const ALL: [QueueProperty; 4] = [
        QueueProperty::Kinds,
        QueueProperty::Fences,
        QueueProperty::FirstComeFirstServed,
        QueueProperty::NoLostWakeUp,
    ];

    /// The property's name, as a violation reports it.
    pub fn name(self) -> &'static str {
        match self {
            QueueProperty::Kinds => "kinds and counts",
            QueueProperty::Fences => "fences rise",
            QueueProperty::FirstComeFirstServed => "first come first served",
            QueueProperty::NoLostWakeUp => "no lost wake-up",
        }
    }
}

/// The queue's world to search, and how far.
#[derive(Clone, Debug)]
pub struct QueueConfig {
    /// Each client's kind of grant, A first.
    pub grants: Vec<Grants>,
    /// Each client's name, A first (0: `m`, 1: `n`; all `m` unless set): two names
    /// share the handles' handoff channel, as one handle's waiters on two names do.
    pub names: Vec<u8>,
    /// The lease, in ticks.
    pub ttl: u32,
    /// The bound on one call's answer, in ticks.
    pub response_timeout: u32,
    /// How long `lock()` waits at most, in ticks.
    pub wait_timeout: u32,
    /// The latest a request may run after it was sent, in ticks.
    pub late: u32,
    /// The clock stops here (ticks).
    pub horizon: u32,
    /// Histories are cut at this many actions.
    pub depth: usize,
    /// What the world may do.
    pub events: QueueEvents,
    /// Faults a history may have.
    pub faults: u32,
    /// A defect planted in fair-queue.lua (the checker's own tests).
    pub defect: Option<Defect>,
    /// The properties checked.
    pub properties: Vec<QueueProperty>,
}

impl QueueConfig {
    /// Clients of `grants` with the bounded search's settings: 300 ms leases, calls
    /// bounded at 100 ms and run up to 200 ms after they were sent, `lock()` waiting up
    /// to 1 s, the clock stopping at 1 s, one fault a history, every history of up to
    /// 14 actions.
    pub fn of(grants: &[Grants]) -> Self {
        Self {
            grants: grants.to_vec(),
            names: vec![0; grants.len()],
            ttl: 3,
            response_timeout: 1,
            wait_timeout: 10,
            late: 2,
            horizon: 10,
            depth: 14,
            events: QueueEvents::default(),
            faults: 1,
            defect: None,
            properties: QueueProperty::ALL.to_vec(),
        }
    }
}

/// One step of the queue's world. Calls are named by their number in the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueAction {
    /// The clock moves one tick.
    Tick,
    /// The server runs the request of call `id`.
    Run(u32),
    /// The answer of call `id` reaches its caller.
    Deliver(u32),
    /// The caller of call `id` gives up on it (its bound has passed).
    GiveUp(u32),
    /// Client `c`'s sleeping `lock()` wakes: with the letter in its mailbox, or at its
    /// nap's end.
    Wake(u8),
    /// Client `c`'s handoff letter is lost.
    LoseLetter(u8),
    /// Client `c`'s watchdog sends its due renewal.
    Renew(u8),
    /// Client `c` releases its grant.
    Release(u8),
    /// Client `c`'s background release `job` sends its call.
    Retry(u8, u8),
    /// Client `c` drops its `lock()` midway.
    Cancel(u8),
    /// The server restarts without its data.
    Restart,
    /// The server restarts with its data; connections drop.
    RestartKeeping,
}

/// Who waits for a call's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Waiter {
    Attempt,
    Renew,
    Release,
    Orphan(u8),
}

/// Where a call's request and answer are.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Flight {
    Pending,
    Answered(Said),
    /// A restart cut the connection: neither the request nor an answer will come.
    Dropped,
}

#[derive(Clone, Debug)]
struct Call {
    id: u32,
    client: u8,
    waiter: Waiter,
    words: Vec<Vec<u8>>,
    sent: u32,
    give_up: u32,
    flight: Flight,
    /// The caller gave up on it; the request may still run, unheard.
    abandoned: bool,
}

/// Where a client's one `lock()` stands.
enum Stage {
    Waiting(Box<Acquisition>),
    Holding {
        holder: Holder,
        /// The release is on its way.
        releasing: bool,
    },
    /// Released, failed or dropped; the holder kept for what it believes.
    Done(Option<Holder>),
}

/// A background release of a grant nobody owns.
struct Job {
    id: u8,
    orphan: Orphan,
    /// When its next call is due (ticks); `None` while one is on its way.
    due: Option<u32>,
}

struct Client {
    grants: Grants,
    /// Which name it locks.
    name: u8,
    handle: Handle,
    stage: Stage,
    asleep: bool,
    /// A handoff letter for the waiter's ticket, not read yet.
    mailbox: Option<Vec<u8>>,
    jobs: Vec<Job>,
    next_job: u8,
    /// The waiter's ticket token, and the server step its first queue call ran at.
    ticket: Option<String>,
    arrived: Option<u64>,
    /// When the server granted the waiter's ticket (ticks).
    granted_at: Option<u32>,
    /// The server's restarts without data before that grant: grants of two such epochs
    /// are not held to exclusion (a restart that forgets the data forgets the lock).
    epoch: u32,
}

impl Client {
    fn waiting(&self) -> Option<&Acquisition> {
        match &self.stage {
            Stage::Waiting(a) => Some(a),
            _ => None,
        }
    }

    fn holder(&self) -> Option<&Holder> {
        match &self.stage {
            Stage::Holding { holder, .. } | Stage::Done(Some(holder)) => Some(holder),
            _ => None,
        }
    }
}

/// The whole queue world at one state.
pub struct QueueWorld<'c> {
    config: &'c QueueConfig,
    base: Instant,
    /// Ticks since the start.
    time: u32,
    store: Store,
    /// The microsecond the last server step ran at (each step at its own).
    step_us: u64,
    /// Server steps run so far.
    steps: u64,
    clients: Vec<Client>,
    calls: Vec<Call>,
    next_call: u32,
    faults: u32,
    restarts: u32,
    kept: u32,
    /// The tick of the last fault (the wake-up bounds hold from there on).
    last_fault: Option<u32>,
    /// Since when each name has been free on the server while a waiter stands queued.
    free_since: [Option<u32>; 2],
    /// Fencing tokens of the grants learned so far, by name: the highest of any kind,
    /// and of the exclusive kinds.
    highest: [(u64, u64); 2],
    /// The first broken rule found.
    broken: Option<(&'static str, String)>,
    log: Option<Vec<String>>,
    /// Owner tokens by their readable names, in the order met.
    tokens: Vec<String>,
}

fn name(c: u8) -> char {
    char::from(b'A' + c)
}

fn exclusive(grants: Grants) -> bool {
    matches!(grants, Grants::Lock | Grants::FairLock | Grants::Write)
}

/// The server's reply as a connection reads it.
fn value(said: &Said) -> Value {
    match said {
        Said::Nil => Value::Nil,
        Said::Int(n) => Value::Int(*n),
        Said::Bulk(b) => Value::BulkString(b.clone()),
        Said::Status(s) if s == "OK" => Value::Okay,
        Said::Status(s) => Value::SimpleString(s.clone()),
        Said::Array(items) => Value::Array(items.iter().map(value).collect()),
        Said::Error(e) => redis::parse_redis_value(format!("-{e}\r\n").as_bytes())
            .unwrap_or_else(|_| Value::SimpleString(e.clone())),
    }
}

/// A lease call's answer as the model executor takes it.
fn lease_reply(said: &Said) -> Reply<bool> {
    match said {
        Said::Error(_) => Reply::Refused,
        other => confirmed(value(other)).map_or(Reply::Refused, Reply::Answered),
    }
}

/// The model's server as it starts, empty: running fair-queue.lua with `config`'s defect
/// planted, if any (at the world's start and after a restart without data).
fn fresh_store(config: &QueueConfig) -> Store {
    let store = Store::default();
    match config.defect {
        Some(defect) => store.planted(defect.patch()),
        None => store,
    }
}

impl<'c> QueueWorld<'c> {
    /// The world at time 0: every client calling `lock()`, the server empty.
    ///
    /// # Panics
    ///
    /// If a client's settings are refused (the configuration is wrong).
    pub fn new(config: &'c QueueConfig, base: Instant, log: bool) -> Self {
        let ms = |ticks: u32| TICK * ticks;
        let store = fresh_store(config);
        let clients = (config.grants.iter().enumerate())
            .map(|(c, &grants)| {
                let name = config.names.get(c).copied().unwrap_or(0) % 2;
                let handle = Handle::of(
                    grants,
                    NAMES[usize::from(name)],
                    ms(config.ttl),
                    ms(config.response_timeout),
                    ms(config.wait_timeout),
                )
                .expect("the model's settings are valid");
                let acquisition = handle.wait(base).expect("an owner token");
                Client {
                    grants,
                    name,
                    handle,
                    stage: Stage::Waiting(Box::new(acquisition)),
                    asleep: false,
                    mailbox: None,
                    jobs: Vec::new(),
                    next_job: 0,
                    ticket: None,
                    arrived: None,
                    granted_at: None,
                    epoch: 0,
                }
            })
            .collect();
        let mut world = Self {
            config,
            base,
            time: 0,
            store,
            step_us: EPOCH_US,
            steps: 0,
            clients,
            calls: Vec::new(),
            next_call: 0,
            faults: 0,
            restarts: 0,
            kept: 0,
            last_fault: None,
            free_since: [None; 2],
            highest: [(0, 0); 2],
            broken: None,
            log: log.then(Vec::new),
            tokens: Vec::new(),
        };
        for c in 0..world.clients.len() {
            world.drive(u8::try_from(c).unwrap_or(u8::MAX));
        }
        world
    }

    /// The bound, in ticks, within which a granted waiter knows it and a free name goes
    /// to a queued waiter: the waiter's refresh nap (a third of its claim lease at most,
    /// [`REFRESH_MS`] at most), one call's bound, and one tick.
    pub fn bound(&self) -> u32 {
        let claim_ms = u64::from(self.config.ttl) * 100;
        let nap_ms = REFRESH_MS.min(claim_ms.min(2_000) / 2);
        let nap = u32::try_from(nap_ms.div_ceil(100)).unwrap_or(u32::MAX);
        nap + self.config.response_timeout + 1
    }

    fn instant(&self, tick: u32) -> Instant {
        self.base + TICK * tick
    }

    fn now(&self) -> Instant {
        self.instant(self.time)
    }

    /// The first tick not before `at`.
    fn tick_of(&self, at: Instant) -> u32 {
        let since = at.saturating_duration_since(self.base).as_micros();
        let tick = since.div_ceil(TICK.as_micros());
        u32::try_from(tick).unwrap_or(u32::MAX)
    }

    fn server_ms(&self) -> u64 {
        (EPOCH_US + u64::from(self.time) * 100_000) / 1_000
    }

    fn note(&mut self, line: impl FnOnce() -> String) {
        if let Some(log) = &mut self.log {
            log.push(line());
        }
    }

    fn fault_left(&self) -> bool {
        self.faults < self.config.faults
    }

    fn fault(&mut self) {
        self.faults += 1;
        self.last_fault = Some(self.time);
    }

    /// A token's readable name (`t1`, `t2`, ... in the order met).
    fn label(&mut self, token: &str) -> String {
        let k = self
            .tokens
            .iter()
            .position(|t| t == token)
            .unwrap_or_else(|| {
                self.tokens.push(token.to_owned());
                self.tokens.len() - 1
            });
        format!("t{}", k + 1)
    }

    /// `text` with every owner token met so far named.
    fn renamed(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for (k, token) in self.tokens.iter().enumerate() {
            text = text.replace(token.as_str(), &format!("t{}", k + 1));
        }
        text
    }

    fn send(&mut self, c: u8, words: Vec<Vec<u8>>, give_up: Instant, waiter: Waiter) -> u32 {
        let id = self.next_call;
        self.next_call += 1;
        // Name the tokens the call carries, in the order met (the script's digest, the
        // word after `EVALSHA`, is not one).
        for word in words.iter().skip(2) {
            if word.len() >= 16 && word.iter().all(u8::is_ascii_hexdigit) {
                self.label(&String::from_utf8_lossy(word));
            }
        }
        let give_up = self.tick_of(give_up);
        self.calls.push(Call {
            id,
            client: c,
            waiter,
            words,
            sent: self.time,
            give_up,
            flight: Flight::Pending,
            abandoned: false,
        });
        id
    }

    fn send_out(&mut self, c: u8, out: Out, waiter: Waiter) -> u32 {
        self.send(c, out.words, out.give_up, waiter)
    }

    fn op(words: &[Vec<u8>]) -> String {
        // EVALSHA sha numkeys keys... op token ticket ...
        let numkeys = words
            .get(2)
            .and_then(|n| std::str::from_utf8(n).ok()?.parse::<usize>().ok())
            .unwrap_or(0);
        let script = match numkeys {
            6 => "fair-queue",
            _ => "script",
        };
        let arg = |k: usize| {
            words
                .get(3 + numkeys + k)
                .map(|w| String::from_utf8_lossy(w).into_owned())
                .unwrap_or_default()
        };
        if numkeys == 6 {
            format!("{script} {}({})", arg(0), arg(1))
        } else {
            format!("{script}({})", arg(0))
        }
    }

    /// Client `c`'s `lock()` goes on until it waits for something.
    fn drive(&mut self, c: u8) {
        let now = self.now();
        loop {
            let client = &mut self.clients[usize::from(c)];
            let Stage::Waiting(acquisition) = &mut client.stage else {
                return;
            };
            let ticket = acquisition.ticket_token().map(str::to_owned);
            if ticket != client.ticket {
                // A new place (the first, or a fresh one after a late grant).
                client.ticket.clone_from(&ticket);
                client.arrived = None;
                client.granted_at = None;
                client.mailbox = None;
            }
            let ask = acquisition.next(&client.handle, now);
            match ask {
                Ask::Call {
                    call: AttemptCall::Script { words },
                    give_up,
                } => {
                    let what = Self::op(&words);
                    let id = self.send(c, words, give_up, Waiter::Attempt);
                    if self.log.is_some() {
                        let what = self.renamed(&what);
                        self.note(|| format!("{} sends {what} (#{id})", name(c)));
                    }
                    return;
                }
                Ask::Call { .. } => {
                    self.broken = Some(("the machine", "a queued kind sent a plain call".into()));
                    return;
                }
                Ask::Sleep => {
                    self.clients[usize::from(c)].asleep = true;
                    self.note(|| format!("{} sleeps", name(c)));
                    return;
                }
                Ask::Release(orphan) => {
                    let label = self.label(orphan.token());
                    let client = &mut self.clients[usize::from(c)];
                    let id = client.next_job;
                    client.next_job += 1;
                    client.jobs.push(Job {
                        id,
                        orphan,
                        due: Some(self.time),
                    });
                    self.note(|| format!("{} hands {label} to the background release", name(c)));
                }
                Ask::Granted(holder) => {
                    let label = self.label(holder.token());
                    let fence = holder.fence();
                    let grants = self.clients[usize::from(c)].grants;
                    self.note(|| format!("{} holds {label} with fence {fence}", name(c)));
                    self.learned(c, grants, fence);
                    self.clients[usize::from(c)].stage = Stage::Holding {
                        holder,
                        releasing: false,
                    };
                    return;
                }
                Ask::Held => {
                    self.clients[usize::from(c)].stage = Stage::Done(None);
                    return;
                }
                Ask::Failed(e) => {
                    self.note(|| format!("{} lock() fails: {e}", name(c)));
                    self.clients[usize::from(c)].stage = Stage::Done(None);
                    return;
                }
            }
        }
    }

    /// Client `c` learned a grant of `grants` with `fence`: the fences rule.
    fn learned(&mut self, c: u8, grants: Grants, fence: u64) {
        let n = usize::from(self.clients[usize::from(c)].name);
        let (any, exclusive_before) = self.highest[n];
        let above = if exclusive(grants) {
            any
        } else {
            exclusive_before
        };
        if fence <= above && self.broken_unset(QueueProperty::Fences) {
            self.broken = Some((
                QueueProperty::Fences.name(),
                format!(
                    "{} ({grants:?}) was granted fence {fence}, not above {above} granted before",
                    name(c)
                ),
            ));
        }
        self.highest[n].0 = any.max(fence);
        if exclusive(grants) {
            self.highest[n].1 = exclusive_before.max(fence);
        }
    }

    fn broken_unset(&self, property: QueueProperty) -> bool {
        self.broken.is_none() && self.config.properties.contains(&property)
    }

    /// The owner tokens holding name `n` on the server now.
    fn holding(&mut self, n: u8) -> Vec<String> {
        let now_us = self.step_us;
        let mut tokens = Vec::new();
        let get = self.store.command(&[b"GET".to_vec(), key(n, "")], now_us);
        if let Said::Bulk(token) = get {
            tokens.push(String::from_utf8_lossy(&token).into_owned());
        }
        let holders = self.members(n, ":holders");
        tokens.extend(
            holders
                .iter()
                .map(|m| String::from_utf8_lossy(m).into_owned()),
        );
        tokens
    }

    /// The members of name `n`'s sorted set `suffix` (`:holders`, `:queue`) on the
    /// server now, in order.
    fn members(&mut self, n: u8, suffix: &str) -> Vec<Vec<u8>> {
        let range = [
            b"ZRANGE".to_vec(),
            key(n, suffix),
            b"0".to_vec(),
            b"-1".to_vec(),
        ];
        match self.store.command(&range, self.step_us) {
            Said::Array(members) => (members.into_iter())
                .filter_map(|m| match m {
                    Said::Bulk(bytes) => Some(bytes),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The owner tokens holding either name.
    fn holding_any(&mut self) -> Vec<String> {
        let mut tokens = self.holding(0);
        tokens.extend(self.holding(1));
        tokens
    }

    /// Whether name `n`'s queue on the server holds a ticket for owner token `token`.
    fn in_queue(&mut self, n: u8, token: &str) -> bool {
        let tickets = self.members(n, ":queue");
        !token.is_empty() && tickets.iter().any(|t| t.starts_with(token.as_bytes()))
    }

    /// Whether name `n`'s queue on the server has any waiter in it.
    fn queued(&mut self, n: u8) -> bool {
        let card = [b"ZCARD".to_vec(), key(n, ":queue")];
        matches!(self.store.command(&card, self.step_us), Said::Int(n) if n > 0)
    }

    fn run(&mut self, id: u32) {
        let Some(at) = self.calls.iter().position(|c| c.id == id) else {
            return;
        };
        let tick_us = EPOCH_US + u64::from(self.time) * 100_000;
        self.step_us = tick_us.max(self.step_us + 1);
        self.steps += 1;
        let before = self.holding_any();
        let words = self.calls[at].words.clone();
        let said = self.store.request(&words, self.step_us);
        let client = self.calls[at].client;
        let waiter = self.calls[at].waiter;
        self.calls[at].flight = Flight::Answered(said.clone());
        if self.calls[at].abandoned {
            self.calls.remove(at);
        }
        // A waiter's place counts from the first queue call that put its ticket in the
        // server's queue.
        let step = self.steps;
        let c = &self.clients[usize::from(client)];
        if waiter == Waiter::Attempt && c.arrived.is_none() && c.waiting().is_some() {
            let (ticket, n) = (c.ticket.clone().unwrap_or_default(), c.name);
            if self.in_queue(n, &ticket) {
                self.clients[usize::from(client)].arrived = Some(step);
            }
        }
        if self.log.is_some() {
            let line = format!("server runs {} (#{id}): {said}", Self::op(&words));
            let line = self.renamed(&line);
            self.note(|| line);
        }
        self.letters();
        let after = self.holding_any();
        let granted: Vec<String> = after.into_iter().filter(|t| !before.contains(t)).collect();
        self.granted(&granted);
    }

    /// The handoff letters the step published, each into its waiter's mailbox.
    fn letters(&mut self) {
        for (channel, message) in std::mem::take(&mut self.store.published) {
            if channel != HANDOFF.as_bytes() {
                continue;
            }
            let text = String::from_utf8_lossy(&message).into_owned();
            let Some(token) = text
                .strip_prefix("grant ")
                .and_then(|t| t.split(' ').next())
            else {
                continue;
            };
            let to = (self.clients.iter()).position(|c| c.ticket.as_deref() == Some(token));
            if let Some(c) = to {
                self.clients[c].mailbox = Some(message);
            }
        }
    }

    /// The server granted `tokens` in the step just run: first come first served.
    fn granted(&mut self, tokens: &[String]) {
        let now = self.time;
        let mut served = Vec::new();
        for token in tokens {
            let Some(c) = (self.clients.iter()).position(|c| c.ticket.as_deref() == Some(token))
            else {
                continue;
            };
            if self.clients[c].granted_at.is_none() {
                self.clients[c].granted_at = Some(now);
                self.clients[c].epoch = self.restarts;
            }
            served.push(c);
        }
        for &c in &served {
            let Some(mine) = self.clients[c].arrived else {
                continue;
            };
            let before = self.clients.iter().enumerate().find(|(k, other)| {
                *k != c
                    && other.name == self.clients[c].name
                    && other.waiting().is_some()
                    && other.granted_at.is_none()
                    && other.arrived.is_some_and(|a| a < mine)
            });
            if let Some((k, _)) = before
                && self.broken_unset(QueueProperty::FirstComeFirstServed)
            {
                let (cx, ck) = (
                    name(u8::try_from(c).unwrap_or(0)),
                    name(u8::try_from(k).unwrap_or(0)),
                );
                self.broken = Some((
                    QueueProperty::FirstComeFirstServed.name(),
                    format!("the server granted {cx} while {ck}, queued before it, still waits"),
                ));
            }
        }
    }

    /// The caller of call `at` hears `reply` (`None`: it gave up; the request may still
    /// run, unheard).
    fn hear(&mut self, at: usize, said: Option<&Said>) {
        let call = if said.is_none() && self.calls[at].flight == Flight::Pending {
            self.calls[at].abandoned = true;
            self.calls[at].clone()
        } else {
            self.calls.remove(at)
        };
        let c = call.client;
        let now = self.now();
        let ci = usize::from(c);
        let whom = name(c);
        match call.waiter {
            Waiter::Attempt => {
                let reply = said
                    .as_ref()
                    .map_or(Reply::NoReply, |s| Reply::Answered(value(s)));
                let client = &mut self.clients[ci];
                if let Stage::Waiting(acquisition) = &mut client.stage {
                    acquisition.answered(&client.handle, reply, now);
                }
                self.drive(c);
            }
            Waiter::Renew => {
                let reply = said.map_or(Reply::NoReply, lease_reply);
                let client = &mut self.clients[ci];
                let again = match &mut client.stage {
                    Stage::Holding { holder, .. } | Stage::Done(Some(holder)) => {
                        match holder.renewal_done(&client.handle, reply, now) {
                            Heard::Again(out) => Some(out),
                            Heard::Done(()) => None,
                        }
                    }
                    _ => None,
                };
                if let Some(out) = again {
                    self.send_out(c, out, Waiter::Renew);
                }
                self.note(|| format!("{whom} hears its renewal: {reply:?}"));
            }
            Waiter::Release => {
                let reply = said.map_or(Reply::NoReply, lease_reply);
                let client = &mut self.clients[ci];
                let Stage::Holding { holder, .. } = &mut client.stage else {
                    return;
                };
                match holder.released(&client.handle, reply, now) {
                    Heard::Again(out) => {
                        self.send_out(c, out, Waiter::Release);
                    }
                    Heard::Done((outcome, orphan)) => {
                        let client = &mut self.clients[ci];
                        let stage = std::mem::replace(&mut client.stage, Stage::Done(None));
                        if let Stage::Holding { holder, .. } = stage {
                            client.stage = Stage::Done(Some(holder));
                        }
                        if let Some(orphan) = orphan {
                            let id = client.next_job;
                            client.next_job += 1;
                            let due = Some(self.time);
                            client.jobs.push(Job { id, orphan, due });
                        }
                        self.note(|| format!("{whom}'s release returns {outcome:?}"));
                    }
                }
            }
            Waiter::Orphan(job) => {
                let reply = said.map_or(Reply::NoReply, lease_reply);
                let client = &mut self.clients[ci];
                let Some(k) = client.jobs.iter().position(|j| j.id == job) else {
                    return;
                };
                match client.jobs[k].orphan.released(&client.handle, reply, now) {
                    Heard::Again(out) => {
                        self.send_out(c, out, Waiter::Orphan(job));
                    }
                    Heard::Done(Some(at)) => {
                        let due = self.tick_of(at);
                        self.clients[ci].jobs[k].due = Some(due);
                    }
                    Heard::Done(None) => {
                        self.clients[ci].jobs.remove(k);
                    }
                }
            }
        }
    }

    /// Whether the clock may move one tick, and whether that costs a fault.
    fn tick_allowed(&self) -> Option<bool> {
        if self.time >= self.config.horizon {
            return None;
        }
        let next = self.instant(self.time + 1);
        let mut fault = false;
        for client in &self.clients {
            if let Some(a) = client.waiting() {
                // A sleeper wakes by its nap's end, and reads a letter before the clock
                // moves.
                if client.asleep
                    && (client.mailbox.is_some() || a.wakes_by().is_some_and(|w| w < next))
                {
                    return None;
                }
            }
            if let Stage::Holding { holder, .. } = &client.stage
                && holder.renewal_due(self.now())
            {
                if !self.config.events.pauses {
                    return None;
                }
                fault = true;
            }
            if client
                .jobs
                .iter()
                .any(|j| j.due.is_some_and(|d| d <= self.time))
            {
                return None;
            }
        }
        // A caller gives up at its call's bound, before the clock moves on.
        if (self.calls.iter()).any(|c| !c.abandoned && c.give_up <= self.time) {
            return None;
        }
        let overdue = (self.calls.iter())
            .any(|c| !c.abandoned && c.flight != Flight::Dropped && c.give_up <= self.time + 1);
        if overdue {
            if !self.config.events.timeouts {
                return None;
            }
            fault = true;
        }
        if fault && !self.fault_left() {
            return None;
        }
        Some(fault)
    }

    /// Whether call `at` is the oldest pending request of its client (one connection).
    fn first_pending(&self, at: usize) -> bool {
        let call = &self.calls[at];
        !(self.calls[..at])
            .iter()
            .any(|c| c.client == call.client && c.flight == Flight::Pending)
    }

    fn tick(&mut self) {
        let fault = self.tick_allowed() == Some(true);
        self.time += 1;
        if fault {
            self.fault();
        }
        let late = self.config.late;
        let time = self.time;
        // A request not run by its lateness bound never runs.
        for call in &mut self.calls {
            if call.flight == Flight::Pending && call.sent + late < time {
                call.flight = Flight::Dropped;
            }
        }
        self.calls
            .retain(|c| !(c.abandoned && c.flight == Flight::Dropped));
        let t = self.time;
        self.note(|| format!("clock: {t}"));
    }

    fn restart(&mut self, keep: bool) {
        if keep {
            self.kept += 1;
        } else {
            self.restarts += 1;
            self.store = fresh_store(self.config);
            // The queue is gone: places count again from the next queue call.
            for client in &mut self.clients {
                client.arrived = None;
            }
        }
        self.fault();
        for call in &mut self.calls {
            call.flight = Flight::Dropped;
        }
        self.note(|| {
            format!(
                "server restarts {}",
                if keep { "with its data" } else { "empty" }
            )
        });
    }

    /// After every action: the rules that read the whole world.
    fn look(&mut self) {
        let now = self.now();
        // Each lease looked at on its holder's clock.
        let mut valid: Vec<(u8, Grants, (u8, u32))> = Vec::new();
        for (c, client) in self.clients.iter().enumerate() {
            if let Some(holder) = client.holder()
                && let Belief::Held { valid_until } = holder.belief(now)
                && now < valid_until
            {
                let on = (client.name, client.epoch);
                valid.push((u8::try_from(c).unwrap_or(0), client.grants, on));
            }
        }
        // By name, and by the server's epoch (a restart that forgot the data forgot
        // the grants before it).
        let why = valid.iter().map(|v| v.2).find_map(|on| {
            let one: Vec<(u8, Grants)> = (valid.iter())
                .filter(|v| v.2 == on)
                .map(|v| (v.0, v.1))
                .collect();
            kinds_broken(&one)
        });
        if self.broken_unset(QueueProperty::Kinds)
            && let Some(why) = why
        {
            self.broken = Some((QueueProperty::Kinds.name(), why));
        }
        if !self
            .config
            .properties
            .contains(&QueueProperty::NoLostWakeUp)
            || self.broken.is_some()
        {
            return;
        }
        let bound = self.bound();
        let quiet_since = |since: u32, last: Option<u32>| last.is_none_or(|f| f < since);
        for (c, client) in self.clients.iter().enumerate() {
            if let (Some(at), Some(_)) = (client.granted_at, client.waiting())
                && self.time >= at + bound
                && quiet_since(at, self.last_fault)
            {
                self.broken = Some((
                    QueueProperty::NoLostWakeUp.name(),
                    format!(
                        "the server granted {} at tick {at}; at tick {} it still waits",
                        name(u8::try_from(c).unwrap_or(0)),
                        self.time
                    ),
                ));
                return;
            }
        }
        for n in 0..2u8 {
            let waiting = (self.clients.iter()).any(|c| {
                c.name == n
                    && c.waiting().is_some()
                    && c.arrived.is_some()
                    && c.granted_at.is_none()
            });
            let free = waiting && self.holding(n).is_empty() && self.queued(n);
            let slot = &mut self.free_since[usize::from(n)];
            *slot = if free {
                Some(slot.unwrap_or(self.time))
            } else {
                None
            };
        }
        let late = self.free_since.iter().enumerate().find_map(|(n, since)| {
            since
                .filter(|&since| self.time >= since + bound && quiet_since(since, self.last_fault))
                .map(|since| (NAMES[n], since))
        });
        if let Some((name, since)) = late {
            self.broken = Some((
                QueueProperty::NoLostWakeUp.name(),
                format!(
                    "name {name} has been free since tick {since} while a waiter stands queued (tick {})",
                    self.time
                ),
            ));
        }
    }
}

/// What breaks the name's rule among the `valid` leases, if anything.
fn kinds_broken(valid: &[(u8, Grants)]) -> Option<String> {
    let list = || {
        valid
            .iter()
            .map(|(c, g)| format!("{} ({g:?})", name(*c)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let &(_, first) = valid.first()?;
    if valid.len() > 1 && valid.iter().any(|(_, g)| exclusive(*g)) {
        return Some(format!("an exclusive grant beside another: {}", list()));
    }
    if valid
        .iter()
        .any(|(_, g)| std::mem::discriminant(g) != std::mem::discriminant(&first))
    {
        return Some(format!("two kinds at once: {}", list()));
    }
    if let Grants::Permits(n) = first
        && valid.len() > usize::try_from(n).unwrap_or(usize::MAX)
    {
        return Some(format!("{} permits of {n} held: {}", valid.len(), list()));
    }
    None
}

impl Searched for QueueWorld<'_> {
    type Action = QueueAction;

    fn enabled(&self) -> Vec<QueueAction> {
        let mut actions = Vec::new();
        let events = &self.config.events;
        if self.tick_allowed().is_some() {
            actions.push(QueueAction::Tick);
        }
        for (at, call) in self.calls.iter().enumerate() {
            let overdue = call.give_up <= self.time;
            match call.flight {
                Flight::Pending
                    if self.first_pending(at) || (events.reorder && self.fault_left()) =>
                {
                    actions.push(QueueAction::Run(call.id));
                }
                Flight::Answered(_) if !overdue => actions.push(QueueAction::Deliver(call.id)),
                _ => {}
            }
            if overdue && !call.abandoned {
                actions.push(QueueAction::GiveUp(call.id));
            }
        }
        let now = self.now();
        let soon = self.instant(self.time + 1);
        for (c, client) in self.clients.iter().enumerate() {
            let c = u8::try_from(c).unwrap_or(u8::MAX);
            match &client.stage {
                Stage::Waiting(a) => {
                    if client.asleep
                        && (client.mailbox.is_some() || a.wakes_by().is_some_and(|w| w < soon))
                    {
                        actions.push(QueueAction::Wake(c));
                    }
                    if client.mailbox.is_some() && events.lost_letters && self.fault_left() {
                        actions.push(QueueAction::LoseLetter(c));
                    }
                    if events.cancels && self.fault_left() {
                        actions.push(QueueAction::Cancel(c));
                    }
                }
                Stage::Holding { holder, releasing } => {
                    if holder.renewal_due(now) {
                        actions.push(QueueAction::Renew(c));
                    }
                    if !releasing {
                        actions.push(QueueAction::Release(c));
                    }
                }
                Stage::Done(_) => {}
            }
            for job in &client.jobs {
                if job.due.is_some_and(|d| d <= self.time) {
                    actions.push(QueueAction::Retry(c, job.id));
                }
            }
        }
        if self.fault_left() {
            if self.restarts < events.restarts {
                actions.push(QueueAction::Restart);
            }
            if self.kept < events.restarts_keeping {
                actions.push(QueueAction::RestartKeeping);
            }
        }
        actions
    }

    fn apply(&mut self, action: QueueAction) {
        let now = self.now();
        match action {
            QueueAction::Tick => self.tick(),
            QueueAction::Run(id) => {
                // A request run ahead of one its client sent earlier: another connection.
                let at = self.calls.iter().position(|c| c.id == id);
                if at.is_some_and(|at| !self.first_pending(at)) {
                    self.fault();
                    self.note(|| {
                        format!("#{id} overtakes a request sent earlier (another connection)")
                    });
                }
                self.run(id);
            }
            QueueAction::Deliver(id) => {
                if let Some(at) = self.calls.iter().position(|c| c.id == id)
                    && let Flight::Answered(said) = self.calls[at].flight.clone()
                {
                    self.hear(at, Some(&said));
                }
            }
            QueueAction::GiveUp(id) => {
                if let Some(at) = self.calls.iter().position(|c| c.id == id) {
                    let whom = name(self.calls[at].client);
                    self.note(|| format!("{whom} gives up on #{id}"));
                    self.hear(at, None);
                }
            }
            QueueAction::Wake(c) => {
                let client = &mut self.clients[usize::from(c)];
                client.asleep = false;
                let letter = client.mailbox.take();
                if let Stage::Waiting(a) = &mut client.stage {
                    match &letter {
                        Some(payload) => a.letter(payload, now),
                        None => a.woke(now),
                    }
                }
                let how = if letter.is_some() {
                    "with its letter"
                } else {
                    "at its nap's end"
                };
                self.note(|| format!("{} wakes {how}", name(c)));
                self.drive(c);
            }
            QueueAction::LoseLetter(c) => {
                self.fault();
                self.clients[usize::from(c)].mailbox = None;
                self.note(|| format!("{}'s handoff letter is lost", name(c)));
            }
            QueueAction::Renew(c) => {
                let client = &mut self.clients[usize::from(c)];
                if let Stage::Holding { holder, .. } = &mut client.stage
                    && let Some(out) = holder.begin_renewal(&client.handle, now)
                {
                    let id = self.send_out(c, out, Waiter::Renew);
                    self.note(|| format!("{}'s watchdog renews (#{id})", name(c)));
                }
            }
            QueueAction::Release(c) => {
                let client = &mut self.clients[usize::from(c)];
                if let Stage::Holding { holder, releasing } = &mut client.stage {
                    *releasing = true;
                    let out = holder.release(&client.handle, now);
                    let id = self.send_out(c, out, Waiter::Release);
                    self.note(|| format!("{} releases (#{id})", name(c)));
                }
            }
            QueueAction::Retry(c, job) => {
                let client = &mut self.clients[usize::from(c)];
                if let Some(j) = client.jobs.iter_mut().find(|j| j.id == job) {
                    j.due = None;
                    let out = j.orphan.sending(&client.handle, now);
                    let id = self.send_out(c, out, Waiter::Orphan(job));
                    self.note(|| format!("{}'s background release sends (#{id})", name(c)));
                }
            }
            QueueAction::Cancel(c) => {
                self.fault();
                let client = &mut self.clients[usize::from(c)];
                let stage = std::mem::replace(&mut client.stage, Stage::Done(None));
                if let Stage::Waiting(a) = stage {
                    for orphan in a.cancel(now) {
                        let id = client.next_job;
                        client.next_job += 1;
                        let due = Some(self.time);
                        client.jobs.push(Job { id, orphan, due });
                    }
                }
                client.asleep = false;
                self.note(|| format!("{} drops its lock()", name(c)));
            }
            QueueAction::Restart => self.restart(false),
            QueueAction::RestartKeeping => self.restart(true),
        }
        self.look();
    }

    fn digest(&self) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.time.hash(&mut h);
        (
            self.faults,
            self.restarts,
            self.kept,
            self.last_fault,
            self.free_since,
        )
            .hash(&mut h);
        self.highest.hash(&mut h);
        // Tokens named by where they are first met in this walk.
        let mut met: HashMap<&str, usize> = HashMap::new();
        let mut named = |text: &str| -> String {
            let mut out = text.to_owned();
            for token in &self.tokens {
                if out.contains(token.as_str()) {
                    let n = met.len();
                    let k = *met.entry(token.as_str()).or_insert(n);
                    out = out.replace(token.as_str(), &format!("#{k}"));
                }
            }
            out
        };
        for client in &self.clients {
            client.asleep.hash(&mut h);
            (client
                .mailbox
                .as_ref()
                .map(|m| named(&String::from_utf8_lossy(m))))
            .hash(&mut h);
            (client.arrived, client.granted_at, client.epoch).hash(&mut h);
            client.ticket.as_deref().map(&mut named).hash(&mut h);
            client.handle.digest(&mut h);
            match &client.stage {
                Stage::Waiting(a) => {
                    0u8.hash(&mut h);
                    a.digest(&mut h);
                    // When its nap ends, at the grain of the ticks (a backoff's jitter
                    // is drawn at random): the tick, and whether exactly on it.
                    let wakes = a.wakes_by().map(|w| {
                        let us = w.saturating_duration_since(self.base).as_micros();
                        let tick = TICK.as_micros();
                        (us / tick, us % tick == 0)
                    });
                    wakes.hash(&mut h);
                }
                Stage::Holding { holder, releasing } => {
                    1u8.hash(&mut h);
                    releasing.hash(&mut h);
                    named(holder.token()).hash(&mut h);
                    holder.digest(&mut h);
                }
                Stage::Done(holder) => {
                    2u8.hash(&mut h);
                    if let Some(holder) = holder {
                        holder.digest(&mut h);
                    }
                }
            }
            for job in &client.jobs {
                (job.id, job.due, named(job.orphan.token())).hash(&mut h);
                job.orphan.digest(&mut h);
            }
        }
        for call in &self.calls {
            (call.client, call.waiter, call.sent, call.give_up).hash(&mut h);
            for word in &call.words {
                named(&String::from_utf8_lossy(word)).hash(&mut h);
            }
            match &call.flight {
                Flight::Pending => 0u8.hash(&mut h),
                Flight::Answered(said) => named(&said.to_string()).hash(&mut h),
                Flight::Dropped => 2u8.hash(&mut h),
            }
        }
        let mut keys = self.store.dump(self.server_ms());
        for line in &mut keys {
            *line = named(line);
        }
        keys.hash(&mut h);
        h.finish()
    }

    fn fork(&self) -> Self {
        let clients = (self.clients.iter())
            .map(|c| Client {
                grants: c.grants,
                name: c.name,
                handle: c.handle.fork(),
                stage: match &c.stage {
                    Stage::Waiting(a) => Stage::Waiting(Box::new(a.fork())),
                    Stage::Holding { holder, releasing } => Stage::Holding {
                        holder: holder.fork(),
                        releasing: *releasing,
                    },
                    Stage::Done(holder) => Stage::Done(holder.as_ref().map(Holder::fork)),
                },
                asleep: c.asleep,
                mailbox: c.mailbox.clone(),
                jobs: (c.jobs.iter())
                    .map(|j| Job {
                        id: j.id,
                        orphan: j.orphan.fork(),
                        due: j.due,
                    })
                    .collect(),
                next_job: c.next_job,
                ticket: c.ticket.clone(),
                arrived: c.arrived,
                granted_at: c.granted_at,
                epoch: c.epoch,
            })
            .collect();
        Self {
            config: self.config,
            base: self.base,
            time: self.time,
            store: self.store.clone(),
            step_us: self.step_us,
            steps: self.steps,
            clients,
            calls: self.calls.clone(),
            next_call: self.next_call,
            faults: self.faults,
            restarts: self.restarts,
            kept: self.kept,
            last_fault: self.last_fault,
            free_since: self.free_since,
            highest: self.highest,
            broken: self.broken.clone(),
            log: self.log.clone(),
            tokens: self.tokens.clone(),
        }
    }

    fn broken(&self) -> Option<(&'static str, String)> {
        self.broken.clone()
    }

    fn history(&self) -> &[String] {
        self.log.as_deref().unwrap_or_default()
    }
}

/// Searches every history of `config`'s queue world up to its depth bound.
pub fn explore_queue(config: &QueueConfig) -> super::Report {
    let base = Instant::now();
    super::explore::search(config.depth, |log| QueueWorld::new(config, base, log))
}
