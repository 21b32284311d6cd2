//! The model checker's executor (feature `model`; for lockscript's own tests, not for
//! applications): the lock machine carried out by a model world instead of a server, a
//! network and a clock.
//!
//! Where the async and blocking executors send a call and wait for its reply, this one
//! hands the call to its caller as data and takes back the reply, or its absence, with
//! the instant it came: the model decides every order of events and every time the
//! machine sees. It does what the other executors do and no more (which machine call
//! follows which reply), so what the model checks is the machine both faces run:
//!
//! - a `lock()` by attempts ([`Handle::lock`]): one caller per handle, so its turn in the
//!   local queue comes at once; no release notifications (a sleeper wakes when the model
//!   says), no handover offers; a `try_lock()` ([`Handle::try_lock`]); a `lock()` dropped
//!   midway ([`Acquisition::cancel`]);
//! - the watchdog's renewals of a held lease ([`Holder::begin_renewal`]), and the
//!   caller's `extend` ([`Holder::begin_extend`]);
//! - `release` ([`Holder::release`]), and the drop of its guard right after, which hands a
//!   release that must be tried again to the background; a guard dropped without a
//!   release ([`Holder::drop_guard`]);
//! - the background release of every grant nobody owns ([`Orphan`]);
//! - for each of those lease calls, what the async executor does around it: native
//!   commands where the handle found the server offers them, the question (`COMMAND
//!   DOCS`) asked beside the call that finds it open ([`Out::question`],
//!   [`Handle::asked`]), a native command the server refuses sent again as its script in
//!   the same call ([`Heard::Again`]), and a failure that a reconnect explains opening
//!   the question again, an acquire's too. It runs the executors' own `LeaseCalls`
//!   and `Offered`, with the replies a connection hands them;
//! - a plain lock's attempt as the acquire transaction, when the handle has a clock
//!   ([`Handle::clock`]): the server's clock asked first on a new connection
//!   ([`Call::Time`]), the transaction ([`Call::Transaction`]) read by the executors' own
//!   `Transaction`, a restarted counter raised ([`Call::Raise`]), the script when the
//!   server refuses it; without a clock, acquire-with-retry.lua ([`Call::Acquire`]).
//!
//! Owner tokens come to the model as strings. Every object has a `digest` (what a later
//! call can depend on, the random tokens left out: the model tells states apart by it)
//! and a `fork` (a copy that goes on alone, its lease a copy too: the model branches
//! without running a history again).
//!
//! ```no_run
//! use std::time::{Duration, Instant};
//! use lockscript::__private::model::{Ask, Call, Handle, Reply};
//!
//! let ms = Duration::from_millis;
//! let handle = Handle::new("m", ms(600), ms(200), ms(1_000), ms(100), true).unwrap();
//! let t0 = Instant::now();
//! let mut lock = handle.lock(t0);
//! let Ask::Call { call: Call::Acquire { token }, .. } = lock.next(&handle, t0) else { panic!() };
//! // ... the model's server runs the attempt for `token`, granting fence 7:
//! lock.attempted(&handle, Reply::Answered((1, 7)), t0);
//! let Ask::Granted(holder) = lock.next(&handle, t0) else { panic!() };
//! assert_eq!(holder.fence(), 7);
//! ```

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use crate::LockError;
use crate::exec::owned::Owned;
use crate::machine::acquire::{Acquire, Next, Wake};
use crate::machine::call::{LeaseCall, LeaseCalls, command_words, renewal};
use crate::machine::fair::Letter;
use crate::machine::grant::{Abandoned, Outcome};
use crate::machine::key::{Keys, Kind};
use crate::machine::lease::{Lease, LeaseState, Sending, Status};
use crate::machine::native::{self, NativeCommands, Offered};
use crate::machine::reply::{Acquired, Confirmed};
use crate::machine::settings::Settings;
use crate::machine::transact::{self, ClockQuestion, Read, Transaction};

/// A handle's settings on one lock name, as the model's clients use them, and what it
/// found its server offers besides scripts.
///
/// ```no_run
/// # use std::time::Duration;
/// let ms = Duration::from_millis;
/// let handle = lockscript::__private::model::Handle::new("m", ms(600), ms(200), ms(1_000), ms(100), true);
/// ```
pub struct Handle {
    settings: Arc<Settings>,
    keys: Keys,
    offered: Offered,
    /// The instant this process's clocks read 0 µs at (the model's clocks agree): with
    /// it, a plain lock's attempts go as the acquire transaction.
    base: Option<Instant>,
    /// How far this process's wall clock was stepped ahead of its monotonic clock.
    wall_ahead: Duration,
}

/// What a handle's grants are: a lock by attempts, or one of the kinds that wait in the
/// name's queue on the server (fair-queue.lua).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Grants {
    /// A lock (`Locks`), by attempts.
    Lock,
    /// A lock in fair mode (`Locks::fair`): first come first served.
    FairLock,
    /// The read side of a read/write lock.
    Read,
    /// The write side of a read/write lock.
    Write,
    /// A permit of a semaphore of this many permits.
    Permits(u32),
}

impl Grants {
    fn kind(self) -> Kind {
        match self {
            Grants::Lock | Grants::FairLock => Kind::Lock,
            Grants::Read => Kind::Read,
            Grants::Write => Kind::Write,
            Grants::Permits(n) => Kind::Permit(n),
        }
    }
}

/// The faces' defaults with a handle's lease, call bound and wait.
fn timed(ttl: Duration, response_timeout: Duration, wait_timeout: Duration) -> Settings {
    Settings {
        ttl,
        wait_timeout,
        response_timeout,
        ..Settings::default()
    }
}

/// The handoff channel every model handle's tickets name: the model delivers what is
/// published there to the waiter whose owner token it names, as a handle's mailbox does.
pub const HANDOFF: &str = "lock:model:handoff";

impl Handle {
    /// A handle on `name` whose grants are `grants`: leases of `ttl` (renewed by the
    /// watchdog), calls cut at `response_timeout`, `lock()` waiting up to
    /// `wait_timeout`; every call a script (the queue's kinds have no native commands).
    /// Refused as the faces refuse these settings.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// use lockscript::__private::model::{Grants, Handle};
    /// let ms = Duration::from_millis;
    /// let readers = Handle::of(Grants::Read, "m", ms(300), ms(100), ms(1_000));
    /// ```
    pub fn of(
        grants: Grants,
        name: &str,
        ttl: Duration,
        response_timeout: Duration,
        wait_timeout: Duration,
    ) -> Result<Self, LockError> {
        let settings = Settings {
            native: false,
            fair: grants == Grants::FairLock,
            ..timed(ttl, response_timeout, wait_timeout)
        };
        Self::with(settings, name, grants.kind())
    }

    fn with(settings: Settings, name: &str, kind: Kind) -> Result<Self, LockError> {
        settings.validate()?;
        settings.validate_kind(kind)?;
        settings.validate_wait()?;
        let keys = settings.keys_of(name, kind)?;
        Ok(Self {
            settings: Arc::new(settings),
            keys,
            offered: Offered::default(),
            base: None,
            wall_ahead: Duration::ZERO,
        })
    }

    /// A handle on lock `name`: leases of `ttl` (renewed by the watchdog), calls cut at
    /// `response_timeout`, `lock()` waiting up to `wait_timeout`, fencing counters kept
    /// `fence_retention` past a grant's lease, native renewals and releases where the
    /// server offers them (`native`, as `native_commands`). Refused as the faces refuse
    /// these settings.
    pub fn new(
        name: &str,
        ttl: Duration,
        response_timeout: Duration,
        wait_timeout: Duration,
        fence_retention: Duration,
        native: bool,
    ) -> Result<Self, LockError> {
        let settings = Settings {
            fence_retention,
            native,
            ..timed(ttl, response_timeout, wait_timeout)
        };
        Self::with(settings, name, Kind::Lock)
    }

    /// This handle's clocks read 0 µs at `base` and move with the model's: its
    /// plain attempts go as the acquire transaction (when `native`, as the faces send
    /// it), which needs a clock to estimate the server's on.
    ///
    /// ```no_run
    /// # fn f(h: lockscript::__private::model::Handle) { let _ = h.clock(std::time::Instant::now()); }
    /// ```
    #[must_use]
    pub fn clock(mut self, base: Instant) -> Self {
        self.base = Some(base);
        self
    }

    /// This process's wall clock steps `by` ahead (NTP correcting a clock that started
    /// behind, an operator); its monotonic clock, the model's, does not. The executors
    /// estimate the server's clock on the monotonic one, so this changes nothing unless
    /// the defect is put back (`mutants::set_wall_clock_estimate`).
    ///
    /// ```no_run
    /// # fn f(mut h: lockscript::__private::model::Handle) { h.step_wall(std::time::Duration::from_secs(1)); }
    /// ```
    pub fn step_wall(&mut self, by: Duration) {
        self.wall_ahead += by;
    }

    /// The lease a grant asks the server for.
    ///
    /// ```no_run
    /// # fn f(handle: lockscript::__private::model::Handle) { println!("{:?}", handle.ttl()); }
    /// ```
    pub fn ttl(&self) -> Duration {
        self.settings.ttl
    }

    /// How long the fencing counter outlives a grant (acquire-with-retry.lua's `ARGV[3]`).
    ///
    /// ```no_run
    /// # fn f(h: lockscript::__private::model::Handle) { println!("{:?}", h.fence_lifetime()); }
    /// ```
    pub fn fence_lifetime(&self) -> Duration {
        Duration::from_millis(self.settings.fence_lifetime(self.settings.ttl))
    }

    /// A `try_lock()` that begins at `now`: one attempt, granted or held.
    ///
    /// ```no_run
    /// # fn f(h: lockscript::__private::model::Handle) { let _ = h.try_lock(std::time::Instant::now()); }
    /// ```
    pub fn try_lock(&self, now: Instant) -> Acquisition {
        self.carry(Acquire::once(self.keys.clone(), &self.settings, now))
    }

    /// A `lock()` that begins at `now`.
    ///
    /// ```no_run
    /// # fn f(h: lockscript::__private::model::Handle) { let _ = h.lock(std::time::Instant::now()); }
    /// ```
    pub fn lock(&self, now: Instant) -> Acquisition {
        let machine = Acquire::wait(
            self.keys.clone(),
            &self.settings,
            self.settings.watchdog,
            false,
            false,
            now,
        );
        self.carry(machine)
    }

    /// A `lock()` that begins at `now`, for any kind of grant: a plain lock by attempts
    /// (as [`lock`](Self::lock)), the others by a ticket in the name's queue on the
    /// server (fair-queue.lua's `acquire`, sent as [`Call::Script`]), woken by handoff
    /// letters ([`Acquisition::letter`]). `Err` only when no owner token can be drawn.
    ///
    /// ```no_run
    /// # fn f(h: lockscript::__private::model::Handle) { let _ = h.wait(std::time::Instant::now()); }
    /// ```
    pub fn wait(&self, now: Instant) -> Result<Acquisition, LockError> {
        if !self.settings.queued(&self.keys) {
            return Ok(self.lock(now));
        }
        let (settings, watchdog) = (&self.settings, self.settings.watchdog);
        let channel = Some(HANDOFF.to_owned());
        let machine = Acquire::fair(self.keys.clone(), settings, watchdog, channel, now)?;
        Ok(self.carry(machine))
    }

    /// `machine` carried out on this handle, nothing sent yet.
    fn carry(&self, machine: Acquire) -> Acquisition {
        Acquisition {
            machine,
            settings: Arc::clone(&self.settings),
            sent: None,
            base: self.base,
            attempt: None,
            queued: None,
            scripted: None,
            wakes: None,
        }
    }

    /// The outcome of `question` ([`Out::question`]): whether the server's answer
    /// documents `SET … IFEQ` and `DELIFEQ` (`Some(true)`), neither (`Some(false)`), or
    /// no answer came within the question's bound (`None`: offers nothing, as the
    /// executors count it).
    pub fn asked(&self, question: Question, offers: Option<bool>) {
        let found = if offers == Some(true) {
            NativeCommands {
                set_ifeq: true,
                delifeq: true,
                delex_ifeq: false,
            }
        } else {
            NativeCommands::default()
        };
        self.offered.answered(question.0, found);
    }

    /// Whether lease calls go native now.
    pub fn goes_native(&self) -> bool {
        self.offered.usable(self.settings.native).renews()
    }

    /// What tells this handle apart from another.
    pub fn digest<H: Hasher>(&self, state: &mut H) {
        self.offered.digest(state);
        self.wall_ahead.hash(state);
    }

    /// A copy that goes on alone from here (the model's branches).
    #[must_use]
    pub fn fork(&self) -> Self {
        Self {
            settings: Arc::clone(&self.settings),
            keys: self.keys.clone(),
            offered: self.offered.fork(),
            base: self.base,
            wall_ahead: self.wall_ahead,
        }
    }
}

/// What a call got back, as the model delivers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reply<T> {
    /// The server's answer.
    Answered(T),
    /// No answer within the call's bound (a timeout, a reset): the command may have run.
    NoReply,
    /// An error reply: the command did not run.
    Refused,
    /// The server does not know the command (`ERR unknown command`, `ERR syntax error`:
    /// an older server than the handle found): it did not run.
    Unknown,
    /// The user's ACL refuses the command (`NOPERM`; in a script, the command inside it
    /// that it refuses): it did not run.
    NoPerm,
    /// A native release's answer, and the notification sent beside it refused by the
    /// user's ACL (`NOPERM` to `PUBLISH`).
    Unnotified(T),
}

impl<T> Reply<T> {
    /// As the executors hand it to the machine.
    fn into_result(self, settings: &Settings) -> Result<T, LockError> {
        match self {
            Reply::Answered(value) | Reply::Unnotified(value) => Ok(value),
            Reply::NoReply => Err(LockError::no_reply(settings.response_timeout)),
            Reply::Refused => Err(LockError::Redis(redis::RedisError::from((
                redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
                "refused by the model's server",
            )))),
            Reply::Unknown => Err(server_error("ERR unknown command")),
            Reply::NoPerm => Err(server_error(
                "NOPERM User lock has no permissions to run the 'publish' command",
            )),
        }
    }
}

/// An error reply as a connection reads it off the wire (`-…\r\n`).
fn server_error(line: &str) -> LockError {
    LockError::Redis(wire_error(line))
}

/// An error reply as the connection reads it, before it is a call's error.
fn wire_error(line: &str) -> redis::RedisError {
    let wire = format!("-{line}\r\n");
    let read = redis::parse_redis_value(wire.as_bytes()).and_then(Value::extract_error);
    match read {
        Err(e) => e,
        Ok(_) => redis::RedisError::from((redis::ErrorKind::Parse, "not an error reply")),
    }
}

/// A question beside a lease call: `COMMAND DOCS SET DELEX DELIFEQ`, its outcome for
/// [`Handle::asked`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Question(native::Question);

/// A lease call's command, as it goes to the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Command {
    /// renew.lua for `ttl`; native: `SET key token IFEQ token PX ttl`.
    Renew {
        /// The lease it sets.
        ttl: Duration,
        /// Sent as the server's own command.
        native: bool,
    },
    /// compare-del.lua; native: `DELIFEQ key token`, then `PUBLISH` in the same round
    /// trip.
    Delete {
        /// Sent as the server's own command.
        native: bool,
    },
}

/// A lease call to send.
#[derive(Clone, Debug)]
pub struct Out {
    /// What goes.
    pub command: Command,
    /// When the executor gives up on the answer (then [`Reply::NoReply`]); one bound for
    /// the call and every time it goes again.
    pub give_up: Instant,
    /// The question the executor asks beside it, bounded on its own by the response
    /// timeout, when the call found it open.
    pub question: Option<Question>,
    /// The command's words as they go to the server (`EVALSHA sha1 numkeys keys...
    /// args...` for a script): for a server that runs the scripts themselves.
    pub words: Vec<Vec<u8>>,
}

/// What a lease call's reply led to.
pub enum Heard<T> {
    /// The call goes again (a native command the server refused, now as its script).
    Again(Out),
    /// Its outcome.
    Done(T),
}

/// Which lease call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Step {
    Renew(Duration),
    Delete,
}

/// One lease call on its way, through the executors' own rounds (`LeaseCalls`): sent
/// native where the handle found the server offers it, sent again as its script when
/// the native command is refused, every round within one bound.
struct Leasing {
    calls: LeaseCalls,
    step: Step,
    /// The round on its way went native.
    native: bool,
    give_up: Instant,
}

impl Leasing {
    /// The call begins at `now` (`make` builds it for what the server offers), with the
    /// question beside it if it is open.
    fn begin(
        handle: &Handle,
        step: Step,
        make: &dyn Fn(NativeCommands) -> LeaseCall,
        now: Instant,
    ) -> (Self, Out) {
        let question = handle.offered.claim(handle.settings.native).map(Question);
        let mut leasing = Self {
            calls: LeaseCalls::new(1, true),
            step,
            native: false,
            give_up: now + handle.settings.response_timeout,
        };
        let out = leasing.round(handle, make).unwrap_or(Out {
            command: leasing.command(),
            give_up: leasing.give_up,
            question: None,
            words: Vec::new(),
        });
        (leasing, Out { question, ..out })
    }

    fn command(&self) -> Command {
        match self.step {
            Step::Renew(ttl) => Command::Renew {
                ttl,
                native: self.native,
            },
            Step::Delete => Command::Delete {
                native: self.native,
            },
        }
    }

    /// The next round's call, if one is due.
    fn round(
        &mut self,
        handle: &Handle,
        make: &dyn Fn(NativeCommands) -> LeaseCall,
    ) -> Option<Out> {
        let usable = handle.offered.usable(handle.settings.native);
        let (_, call) = self.calls.round(usable, |_, native| make(native)).pop()?;
        self.native = call.is_native();
        Some(Out {
            command: self.command(),
            give_up: self.give_up,
            question: None,
            words: call.words(),
        })
    }

    /// The round's reply: the call's outcome, or the call again.
    fn heard(
        &mut self,
        handle: &Handle,
        reply: Reply<bool>,
        make: &dyn Fn(NativeCommands) -> LeaseCall,
    ) -> Heard<Result<Confirmed, LockError>> {
        let reply = self.read(reply, handle);
        self.calls.answered(0, reply, &handle.offered);
        if let Some(out) = self.round(handle, make) {
            return Heard::Again(out);
        }
        let answer = (self.calls.take_answered().pop()).map_or_else(
            || Err(LockError::no_reply(handle.settings.response_timeout)),
            |(_, reply)| reply,
        );
        Heard::Done(answer)
    }

    /// The reply as the executors read it off the connection: a script's integer, or a
    /// native command's own replies (`OK` or nil from `SET … IFEQ`; `DELIFEQ`'s integer
    /// and the notification's receivers), an error as the server words it.
    fn read(&self, reply: Reply<bool>, handle: &Handle) -> Result<Confirmed, LockError> {
        match (reply, self.step) {
            (Reply::Answered(done), Step::Renew(_)) if self.native => {
                let set = if done { Value::Okay } else { Value::Nil };
                LeaseCall::read(vec![Ok(set)], &handle.offered)
            }
            (Reply::Answered(done), Step::Delete) if self.native => {
                let deleted = Ok(Value::Int(i64::from(done)));
                LeaseCall::read(vec![deleted, Ok(Value::Int(0))], &handle.offered)
            }
            (Reply::Unnotified(done), Step::Delete) if self.native => {
                let deleted = Ok(Value::Int(i64::from(done)));
                let refused = Err(wire_error(
                    "NOPERM User lock has no permissions to access the 'lock:{m}:released' \
                     channel",
                ));
                LeaseCall::read(vec![deleted, refused], &handle.offered)
            }
            (Reply::NoPerm, Step::Renew(_)) if self.native => Err(server_error(
                "NOPERM User lock has no permissions to run the 'set' command",
            )),
            (Reply::NoPerm, Step::Delete) if self.native => Err(server_error(
                "NOPERM User lock has no permissions to run the 'delifeq' command",
            )),
            (Reply::Answered(done) | Reply::Unnotified(done), _) => {
                redis::from_redis_value(Value::Int(i64::from(done)))
                    .map_err(|e| LockError::Redis(e.into()))
            }
            (Reply::Unknown, Step::Renew(_)) => Err(server_error("ERR syntax error")),
            (Reply::Unknown, Step::Delete) => Err(server_error(
                "ERR unknown command 'DELIFEQ', with args beginning with: 'lock:{m}'",
            )),
            (other, _) => other.map_reply().into_result(&handle.settings),
        }
    }

    fn digest<H: Hasher>(&self, state: &mut H) {
        self.calls.digest(state);
        (self.step, self.native, self.give_up).hash(state);
    }

    fn fork(&self) -> Self {
        Self {
            calls: self.calls.fork(),
            step: self.step,
            native: self.native,
            give_up: self.give_up,
        }
    }
}

/// A lease call begins at `now` (`make` builds it), kept in `slot` until it is answered.
fn start(
    slot: &mut Option<Leasing>,
    handle: &Handle,
    step: Step,
    make: &dyn Fn(NativeCommands) -> LeaseCall,
    now: Instant,
) -> Out {
    let (leasing, out) = Leasing::begin(handle, step, make, now);
    *slot = Some(leasing);
    out
}

/// How `lease`'s release is built, for what the server offers.
fn deleting(lease: &LeaseState) -> impl Fn(NativeCommands) -> LeaseCall + '_ {
    |native| (lease.settings).release_call(&lease.keys, lease.token.as_str(), native)
}

/// The reply of the lease call on its way in `slot` (`make` builds it again): the call
/// again, or its outcome, the slot then emptied.
fn hear(
    slot: &mut Option<Leasing>,
    handle: &Handle,
    reply: Reply<bool>,
    make: &dyn Fn(NativeCommands) -> LeaseCall,
) -> Heard<Result<Confirmed, LockError>> {
    let Some(leasing) = slot.as_mut() else {
        return Heard::Done(reply.map_reply().into_result(&handle.settings));
    };
    let heard = leasing.heard(handle, reply, make);
    if matches!(heard, Heard::Done(_)) {
        *slot = None;
    }
    heard
}

impl Reply<bool> {
    /// An error reply, as one for a confirmation.
    fn map_reply(self) -> Reply<Confirmed> {
        match self {
            Reply::Answered(done) => Reply::Answered(Confirmed(done)),
            Reply::NoReply => Reply::NoReply,
            Reply::Refused => Reply::Refused,
            Reply::Unknown => Reply::Unknown,
            Reply::NoPerm => Reply::NoPerm,
            Reply::Unnotified(done) => Reply::Unnotified(Confirmed(done)),
        }
    }
}

/// A lease call's reply as the executors read it (`1`, `OK`, or a fair-queue.lua reply
/// whose status is `1`: done), or `None` when it is not one.
///
/// ```no_run
/// assert_eq!(lockscript::__private::model::confirmed(redis::Value::Int(1)), Some(true));
/// ```
pub fn confirmed(value: Value) -> Option<bool> {
    redis::from_redis_value::<Confirmed>(value)
        .ok()
        .map(|c| c.0)
}

/// What a `lock()` asks of the model next.
pub enum Ask {
    /// Send `call`, one of the attempt's calls, cut at `give_up` (the attempt's bound:
    /// then [`Reply::NoReply`]); its answer goes to the matching [`Acquisition`] method.
    Call {
        /// The call.
        call: Call,
        /// When the executor gives up on the reply.
        give_up: Instant,
    },
    /// Sleep until a release or the nap wakes the caller, then [`Acquisition::woke`].
    Sleep,
    /// Release this grant nobody owns in the background, then ask again.
    Release(Orphan),
    /// Done: the lock is held.
    Granted(Holder),
    /// Done: `try_lock()` found the lock held by another owner (`Ok(None)`).
    Held,
    /// Done: the caller's error.
    Failed(LockError),
}

/// One `lock()` being carried out.
pub struct Acquisition {
    machine: Acquire,
    settings: Arc<Settings>,
    /// When the attempt in flight was sent: its grant's lease counts from there.
    sent: Option<Instant>,
    /// See [`Handle::clock`].
    base: Option<Instant>,
    /// The attempt in flight, when it goes as the acquire transaction.
    attempt: Option<Attempting>,
    /// The attempt's next step, decided by a reply.
    queued: Option<(Call, Instant)>,
    /// The [`Call::Script`] in flight.
    scripted: Option<Scripted>,
    /// When the sleeping caller's nap ends.
    wakes: Option<Instant>,
}

/// What a [`Call::Script`] in flight is, for reading its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Scripted {
    /// fair-queue.lua's `acquire` for the waiter's ticket.
    Queue,
    /// A single try of a queued kind (fair-queue.lua's `acquire` without a ticket).
    Attempt,
}

/// Where an attempt that goes as the acquire transaction stands.
#[derive(Clone)]
enum Attempting {
    /// The server's clock asked first.
    Clock {
        question: ClockQuestion,
        token: String,
        give_up: Instant,
    },
    Transaction {
        txn: Transaction,
        token: String,
        give_up: Instant,
    },
    Raise,
}

/// One call of an attempt, as the model sends it to its server.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Call {
    /// acquire-with-retry.lua for `token` (the script); its answer goes to
    /// [`Acquisition::attempted`].
    Acquire {
        /// The attempt's fresh owner token.
        token: String,
    },
    /// `TIME`, before the connection's first acquire transaction; its answer goes to
    /// [`Acquisition::timed`].
    Time,
    /// The acquire transaction for `token`, a missing counter starting at `start_us`;
    /// its answer goes to [`Acquisition::transacted`].
    Transaction {
        /// The attempt's fresh owner token.
        token: String,
        /// Where a missing counter starts.
        start_us: u64,
    },
    /// raise-fence.lua: the counter raised to at least `floor` before the grant counts;
    /// its answer goes to [`Acquisition::raised`].
    Raise {
        /// The server's clock when it granted, plus one.
        floor: u64,
    },
    /// A script as it goes to the server (`EVALSHA sha1 numkeys keys... args...`): a
    /// queued kind's attempt or queue call; its answer goes to
    /// [`Acquisition::answered`].
    Script {
        /// The command's words.
        words: Vec<Vec<u8>>,
    },
}

/// The acquire transaction's replies as a connection hands them, from the model
/// server's answer to its commands.
fn exec_replies(t: &Transacted) -> Vec<redis::RedisResult<Value>> {
    let ok_or_nil = |yes: bool| if yes { Value::Okay } else { Value::Nil };
    let bulk = |n: u64| Value::BulkString(n.to_string().into_bytes());
    let int = |n: u64| Value::Int(i64::try_from(n).unwrap_or(i64::MAX));
    let mut replies = vec![Ok(Value::Okay)];
    replies.extend((0..7).map(|_| Ok(Value::SimpleString("QUEUED".into()))));
    replies.push(Ok(Value::Array(vec![
        ok_or_nil(t.granted),
        ok_or_nil(t.started),
        int(t.fence),
        Value::Int(1),
        Value::Int(t.pttl),
        Value::Int(0),
        Value::Array(vec![
            bulk(t.time_us / 1_000_000),
            bulk(t.time_us % 1_000_000),
        ]),
    ])));
    replies
}

/// What the acquire transaction's commands answered, as the model's server ran them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Transacted {
    /// The first `SET` answered `OK`: granted.
    pub granted: bool,
    /// The second `SET` answered `OK`: the counter started at the attempt's value.
    pub started: bool,
    /// `INCR`'s value.
    pub fence: u64,
    /// The lock key's `PTTL`.
    pub pttl: i64,
    /// `TIME`, microseconds.
    pub time_us: u64,
}

impl Acquisition {
    /// What to do next, at `now`, on `handle`.
    pub fn next(&mut self, handle: &Handle, now: Instant) -> Ask {
        if let Some((call, give_up)) = self.queued.take() {
            return Ask::Call { call, give_up };
        }
        loop {
            match self.machine.next(now) {
                // One caller per handle: its turn comes at once.
                Next::Turn { .. } => self.machine.turned(false, now),
                Next::Attempt { token, limit } => {
                    self.sent = Some(now);
                    return self.attempt(handle, token.as_str().to_owned(), now + limit, now);
                }
                Next::Sleep { nap, .. } => {
                    self.wakes = Some(now + nap);
                    return Ask::Sleep;
                }
                // The model delivers every handoff letter to its waiter (or loses it, a
                // fault): the mailbox is live from the start.
                Next::Enter => self.machine.entered(true),
                Next::Listen { .. } => self.machine.listened(true),
                Next::Queue { limit } => {
                    let Some(ticket) = self.machine.ticket() else {
                        continue;
                    };
                    let call = self.settings.queue_call(self.machine.keys(), ticket);
                    self.sent = Some(now);
                    self.scripted = Some(Scripted::Queue);
                    let words = command_words(call.evalsha_cmd());
                    return Ask::Call {
                        call: Call::Script { words },
                        give_up: now + limit,
                    };
                }
                Next::Release(abandoned) => {
                    return Ask::Release(Orphan::new(abandoned, &self.settings));
                }
                Next::Done(Ok(Some(granted))) => {
                    let (held, handovers) = Lease::of(granted, &self.settings, true);
                    return Ask::Granted(Holder {
                        owned: Owned::new(held, handovers),
                        settings: Arc::clone(&self.settings),
                        renewal: None,
                        extension: None,
                        releasing: None,
                        lost_before: None,
                    });
                }
                Next::Done(Err(e)) => return Ask::Failed(e),
                Next::Done(Ok(None)) => return Ask::Held,
                Next::Confirm { .. } => {
                    return Ask::Failed(LockError::InvalidSettings(
                        "internal: a step the model's lock() does not take".to_owned(),
                    ));
                }
            }
        }
    }

    /// This process's clock at `now` as the executors read it (see [`Handle::clock`],
    /// [`Handle::step_wall`]).
    fn local_us(&self, handle: &Handle, now: Instant) -> Option<u64> {
        let since = now.saturating_duration_since(self.base?);
        let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        Some(transact::counted(us(since), || {
            us(since + handle.wall_ahead)
        }))
    }

    /// An attempt for `token` at `now`, cut at `give_up`: as the executors send it.
    fn attempt(&mut self, handle: &Handle, token: String, give_up: Instant, now: Instant) -> Ask {
        let (settings, keys) = (&self.settings, self.machine.keys());
        if settings.queued(keys) {
            let call = settings.acquire_call(keys, &token);
            self.scripted = Some(Scripted::Attempt);
            let words = command_words(call.evalsha_cmd());
            return Ask::Call {
                call: Call::Script { words },
                give_up,
            };
        }
        if let Some(local) = self.local_us(handle, now) {
            if let Some((question, _)) = ClockQuestion::new(settings, keys, &handle.offered, local)
            {
                self.attempt = Some(Attempting::Clock {
                    question,
                    token,
                    give_up,
                });
                return Ask::Call {
                    call: Call::Time,
                    give_up,
                };
            }
            if let Some(txn) = Transaction::new(settings, keys, &token, &handle.offered, local) {
                let start_us = txn.start_us();
                self.attempt = Some(Attempting::Transaction {
                    txn,
                    token: token.clone(),
                    give_up,
                });
                return Ask::Call {
                    call: Call::Transaction { token, start_us },
                    give_up,
                };
            }
        }
        Ask::Call {
            call: Call::Acquire { token },
            give_up,
        }
    }

    /// The answer to [`Call::Time`] (microseconds), at `now`: the transaction follows, or
    /// the script if the clock is still unknown; no reply ends the attempt (its bound is
    /// the whole attempt's).
    pub fn timed(&mut self, handle: &Handle, reply: Reply<u64>, now: Instant) {
        let Some(Attempting::Clock {
            question,
            token,
            give_up,
        }) = self.attempt.take()
        else {
            return;
        };
        if let Reply::NoReply = reply {
            return self.acquired(
                handle,
                Err(LockError::no_reply(self.settings.response_timeout)),
                now,
            );
        }
        let answer = match reply {
            Reply::Answered(us) => Some(Value::Array(vec![
                Value::BulkString((us / 1_000_000).to_string().into_bytes()),
                Value::BulkString((us % 1_000_000).to_string().into_bytes()),
            ])),
            _ => None,
        };
        let received = self.local_us(handle, now).unwrap_or_default();
        question.answered(answer.as_ref(), received, &handle.offered);
        if let Ask::Call { call, give_up } = self.attempt(handle, token, give_up, now) {
            self.queued = Some((call, give_up));
        }
    }

    /// The answer to [`Call::Transaction`], at `now`, read by the executors' own
    /// `Transaction`: the outcome, a raise to ask, or (refused) the script at once.
    pub fn transacted(&mut self, handle: &Handle, reply: Reply<Transacted>, now: Instant) {
        let Some(Attempting::Transaction {
            txn,
            token,
            give_up,
        }) = self.attempt.take()
        else {
            return;
        };
        let sent = self.sent.unwrap_or(now);
        let replies = match reply {
            Reply::Answered(t) | Reply::Unnotified(t) => Ok(exec_replies(&t)),
            other => Err(other
                .into_result(&self.settings)
                .err()
                .unwrap_or_else(|| LockError::no_reply(self.settings.response_timeout))),
        };
        let received = self.local_us(handle, now).unwrap_or_default();
        match txn.read(
            replies,
            self.machine.keys(),
            (sent, now, received),
            &handle.offered,
        ) {
            Read::Outcome(outcome) => self.acquired(handle, outcome, now),
            Read::Raise { floor } => {
                self.attempt = Some(Attempting::Raise);
                self.queued = Some((Call::Raise { floor }, give_up));
            }
            Read::Refused => self.queued = Some((Call::Acquire { token }, give_up)),
        }
    }

    /// The answer to [`Call::Raise`] (the counter afterwards), at `now`: the grant's
    /// fence, or (no answer) a grant worth nothing.
    pub fn raised(&mut self, handle: &Handle, reply: Reply<i64>, now: Instant) {
        self.attempt = None;
        let sent = self.sent.take().unwrap_or(now);
        let outcome = transact::raised(reply.into_result(&self.settings), sent);
        self.acquired(handle, Ok(outcome), now);
    }

    /// The attempt's outcome reaches the machine; a failure that a reconnect explains
    /// opens `handle`'s question again.
    fn acquired(&mut self, handle: &Handle, outcome: Result<Outcome, LockError>, now: Instant) {
        self.sent = None;
        if let Err(e) = &outcome {
            handle.offered.met(e);
        }
        self.machine.acquired(outcome, now);
    }

    /// The attempt's reply (`(1, fence)` or `(0, pttl)`), at `now`. A failure that a
    /// reconnect or a failover explains opens `handle`'s question again, as any call's.
    pub fn attempted(&mut self, handle: &Handle, reply: Reply<(i64, i64)>, now: Instant) {
        let sent = self.sent.take().unwrap_or(now);
        let reply = reply.into_result(&self.settings);
        if let Err(e) = &reply {
            handle.offered.met(e);
        }
        let reply =
            reply.map(|(acquired, value)| Outcome::from_reply(Acquired(acquired, value), sent));
        self.machine.acquired(reply, now);
    }

    /// The caller drops its `lock()` at `now` (a cancelled future, a timeout around
    /// it): every grant that may exist without an owner, for the background releaser, as
    /// the faces hand them over when a `lock()` is dropped.
    pub fn cancel(mut self, now: Instant) -> Vec<Orphan> {
        let abandoned = self.machine.abandon(now);
        (abandoned.into_iter())
            .map(|a| Orphan::new(a, &self.settings))
            .collect()
    }

    /// The sleeper woke at `now` (its nap ended, or a release notification came).
    pub fn woke(&mut self, now: Instant) {
        self.wakes = None;
        self.machine.woke(Wake::Nap, now);
    }

    /// When the sleeping caller's nap ends (it wakes then at the latest), if it sleeps.
    pub fn wakes_by(&self) -> Option<Instant> {
        self.wakes
    }

    /// The owner token a grant to this fair waiter carries (its ticket's), which a
    /// handoff letter names; `None` for a lock by attempts.
    pub fn ticket_token(&self) -> Option<&str> {
        self.machine.ticket().map(|t| t.token.as_str())
    }

    /// The sleeper woke at `now` with a handoff letter published on its channel
    /// (`grant <token> <fence> <server_us> <claim_ms>`).
    pub fn letter(&mut self, payload: &[u8], now: Instant) {
        self.wakes = None;
        let wake = Letter::parse(payload).map_or(Wake::Nap, Wake::Letter);
        self.machine.woke(wake, now);
    }

    /// The answer to [`Call::Script`] (the server's reply as a connection reads it), at
    /// `now`: read as the executors read a queued kind's attempt or queue call.
    pub fn answered(&mut self, handle: &Handle, reply: Reply<Value>, now: Instant) {
        let sent = self.sent.take().unwrap_or(now);
        let Some(scripted) = self.scripted.take() else {
            return;
        };
        let reply = reply.into_result(&self.settings).and_then(|value| {
            if let Value::ServerError(e) = value {
                return Err(LockError::Redis(e.into()));
            }
            Ok(value)
        });
        if let Err(e) = &reply {
            handle.offered.met(e);
        }
        match scripted {
            Scripted::Queue => {
                let read = reply.and_then(|v| {
                    redis::from_redis_value(v).map_err(|e| LockError::Redis(e.into()))
                });
                self.machine.queued(read, now);
            }
            Scripted::Attempt => {
                let read = reply.and_then(|v| {
                    redis::from_redis_value::<Acquired>(v).map_err(|e| LockError::Redis(e.into()))
                });
                let outcome = read.map(|acquired| Outcome::from_reply(acquired, sent));
                self.machine.acquired(outcome, now);
            }
        }
    }

    /// What tells this acquisition apart from another (tokens left out).
    pub fn digest<H: Hasher>(&self, state: &mut H) {
        self.machine.digest(state);
        self.sent.hash(state);
        let attempting = match &self.attempt {
            None => (0u8, 0u64),
            Some(Attempting::Clock { .. }) => (1, 0),
            Some(Attempting::Transaction { txn, .. }) => (2, txn.start_us()),
            Some(Attempting::Raise) => (3, 0),
        };
        attempting.hash(state);
        // The queued call's token is left out, as every token.
        let queued = self.queued.as_ref().map(|(call, give_up)| {
            let call = match call {
                Call::Acquire { .. } => (1u8, 0u64),
                Call::Time => (2, 0),
                Call::Transaction { start_us, .. } => (3, *start_us),
                Call::Raise { floor } => (4, *floor),
                Call::Script { .. } => (5, 0),
            };
            (call, *give_up)
        });
        queued.hash(state);
        // Not when the nap ends: a backoff is jittered at random, and a world that
        // reads it ([`wakes_by`](Self::wakes_by)) tells its states apart by it at the
        // grain of its own clock.
        self.scripted.hash(state);
    }

    /// A copy that goes on alone from here (the model's branches).
    #[must_use]
    pub fn fork(&self) -> Self {
        Self {
            machine: self.machine.fork(),
            settings: Arc::clone(&self.settings),
            sent: self.sent,
            base: self.base,
            attempt: self.attempt.clone(),
            queued: self.queued.clone(),
            scripted: self.scripted,
            wakes: self.wakes,
        }
    }
}

/// What a lease is, as its holder finds it at one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Belief {
    /// Valid until `valid_until`, unless renewed.
    Held {
        /// The validity end on the holder's clock.
        valid_until: Instant,
    },
    /// Known lost.
    Lost,
    /// Given up before it was lost.
    Released,
}

/// A granted lock: its guard's lease, the watchdog's renewal in flight, the release.
pub struct Holder {
    owned: Owned,
    settings: Arc<Settings>,
    renewal: Option<(Sending, Leasing)>,
    /// The caller's `extend` in flight.
    extension: Option<(Sending, Leasing)>,
    /// The release in flight.
    releasing: Option<Leasing>,
    /// Set when the release began: whether the lease was lost before it.
    lost_before: Option<bool>,
}

impl Holder {
    fn lease(&self) -> &LeaseState {
        self.owned.lease()
    }

    /// The owner token the lock key holds for this grant.
    pub fn token(&self) -> &str {
        self.lease().token.as_str()
    }

    /// The grant's fencing token.
    pub fn fence(&self) -> u64 {
        self.lease().fence
    }

    /// The lease as its holder finds it at `now` (a lease past its validity end is marked
    /// lost by this look, as by any).
    pub fn belief(&self, now: Instant) -> Belief {
        match self.lease().status(now) {
            Status::Held { valid_until } => Belief::Held { valid_until },
            Status::Lost => Belief::Lost,
            Status::Released => Belief::Released,
        }
    }

    /// Whether the watchdog would send a renewal at `now`.
    pub fn renewal_due(&self, now: Instant) -> bool {
        let lease = self.lease();
        self.renewal.is_none()
            && lease.renews()
            && matches!(lease.status(now), Status::Held { .. })
            && lease.renewal_due(now)
    }

    /// The watchdog's renewal at `now`, if one goes. Its answer goes to
    /// [`renewal_done`](Self::renewal_done).
    pub fn begin_renewal(&mut self, handle: &Handle, now: Instant) -> Option<Out> {
        let sending = self.lease().begin_renewal(now)?;
        let make = renewing(self.owned.lease());
        Some(start_renewing(
            &mut self.renewal,
            handle,
            sending,
            &make,
            now,
        ))
    }

    /// The renewal's reply (`true`: renewed; `false`: the key is not ours), at `now`:
    /// the renewal again (a refused native command, now as its script), or done.
    pub fn renewal_done(&mut self, handle: &Handle, reply: Reply<bool>, now: Instant) -> Heard<()> {
        let lease = self.owned.lease();
        match hear_renewing(&mut self.renewal, handle, reply, &renewing(lease)) {
            Some(Heard::Again(out)) => Heard::Again(out),
            Some(Heard::Done((sending, reply))) => {
                lease.renewal_done(sending, reply, now);
                Heard::Done(())
            }
            None => Heard::Done(()),
        }
    }

    /// The caller's `extend(ttl)` at `now`, or the error `extend` returns without
    /// sending anything (the lease is lost already). Its answer goes to
    /// [`extended`](Self::extended).
    pub fn begin_extend(
        &mut self,
        handle: &Handle,
        ttl: Duration,
        now: Instant,
    ) -> Result<Out, LockError> {
        let sending = self.lease().extending(ttl, now)?;
        let make = extending(self.owned.lease());
        Ok(start_renewing(
            &mut self.extension,
            handle,
            sending,
            &make,
            now,
        ))
    }

    /// The extension's reply (`true`: extended; `false`: the key is not ours), at `now`:
    /// the call again, or what `extend` returns.
    pub fn extended(
        &mut self,
        handle: &Handle,
        reply: Reply<bool>,
        now: Instant,
    ) -> Heard<Result<(), LockError>> {
        let lease = self.owned.lease();
        match hear_renewing(&mut self.extension, handle, reply, &extending(lease)) {
            Some(Heard::Again(out)) => Heard::Again(out),
            Some(Heard::Done((sending, reply))) => Heard::Done(lease.extended(sending, reply, now)),
            None => Heard::Done(Ok(())),
        }
    }

    /// The guard is dropped at `now` without a release (an early return, a panic): the
    /// lease stops, and the grant goes to the background releaser, as the faces' drop
    /// does.
    pub fn drop_guard(&mut self, now: Instant) -> Option<Orphan> {
        let abandoned = self.owned.abandoned(now)?;
        Some(Orphan::new(abandoned, &self.settings))
    }

    /// `release()` begins at `now`: the lease stops, and its compare-and-delete goes out.
    /// Its answer goes to [`released`](Self::released).
    pub fn release(&mut self, handle: &Handle, now: Instant) -> Out {
        let (lost_before, _) = self.owned.give_up(None, now);
        self.lost_before = Some(lost_before);
        let make = deleting(self.owned.lease());
        start(&mut self.releasing, handle, Step::Delete, &make, now)
    }

    /// The release's reply (`true`: deleted; `false`: the key was not ours), at `now`:
    /// the call again, or what `release()` returns, and the release to try again in the
    /// background when the guard, dropped right after, still owes one.
    pub fn released(
        &mut self,
        handle: &Handle,
        reply: Reply<bool>,
        now: Instant,
    ) -> Heard<(Result<(), LockError>, Option<Orphan>)> {
        let heard = hear(
            &mut self.releasing,
            handle,
            reply,
            &deleting(self.owned.lease()),
        );
        let answer = match heard {
            Heard::Again(out) => return Heard::Again(out),
            Heard::Done(answer) => answer,
        };
        let lost_before = self.lost_before.unwrap_or(false);
        let outcome = self.owned.deleted(lost_before, answer.map(|c| c.0));
        let again = self.owned.abandoned(now);
        let orphan = again.map(|a| Orphan::new(a, &self.settings));
        Heard::Done((outcome, orphan))
    }

    /// What tells this holder apart from another (its token left out).
    pub fn digest<H: Hasher>(&self, state: &mut H) {
        self.lease().digest(state);
        for (sending, leasing) in [&self.renewal, &self.extension].into_iter().flatten() {
            sending.hash(state);
            leasing.digest(state);
        }
        (self.renewal.is_some(), self.extension.is_some()).hash(state);
        if let Some(leasing) = &self.releasing {
            leasing.digest(state);
        }
        self.lost_before.hash(state);
    }

    /// A copy that goes on alone from here, its lease a copy too (the model's branches).
    #[must_use]
    pub fn fork(&self) -> Self {
        let fork = |(sending, leasing): &(Sending, Leasing)| (*sending, leasing.fork());
        Self {
            owned: self.owned.fork(),
            settings: Arc::clone(&self.settings),
            renewal: self.renewal.as_ref().map(fork),
            extension: self.extension.as_ref().map(fork),
            releasing: self.releasing.as_ref().map(Leasing::fork),
            lost_before: self.lost_before,
        }
    }
}

/// How the watchdog's renewal of `lease` is built, for the ttl its `Sending` carries and
/// what the server offers.
fn renewing(lease: &LeaseState) -> impl Fn(&Sending, NativeCommands) -> LeaseCall + '_ {
    move |sending, native| renewal(lease, sending, native)
}

/// How the caller's `extend` of `lease` is built, as the faces send it (the backend's
/// renewal with the extension's ttl).
fn extending(lease: &LeaseState) -> impl Fn(&Sending, NativeCommands) -> LeaseCall + '_ {
    |sending, native| {
        (lease.settings).renew_call(&lease.keys, lease.token.as_str(), sending.ttl, native)
    }
}

/// A renewal or an extension (`sending`) begins at `now`, kept in `slot` with its
/// `Sending` until it is answered.
fn start_renewing(
    slot: &mut Option<(Sending, Leasing)>,
    handle: &Handle,
    sending: Sending,
    make: &dyn Fn(&Sending, NativeCommands) -> LeaseCall,
    now: Instant,
) -> Out {
    let step = Step::Renew(sending.ttl);
    let (leasing, out) = Leasing::begin(handle, step, &|native| make(&sending, native), now);
    *slot = Some((sending, leasing));
    out
}

/// A renewal's or extension's outcome as the lease takes it: confirmed from when it went
/// out, or not ours.
type Renewed = Result<Option<Instant>, LockError>;

/// The reply to the renewal or extension on its way in `slot`: the call again (kept in
/// the slot), or its outcome as the lease takes it (confirmed from when it went out, or
/// not ours) with its `Sending`; `None` when none is on its way.
fn hear_renewing(
    slot: &mut Option<(Sending, Leasing)>,
    handle: &Handle,
    reply: Reply<bool>,
    make: &dyn Fn(&Sending, NativeCommands) -> LeaseCall,
) -> Option<Heard<(Sending, Renewed)>> {
    let (sending, mut leasing) = slot.take()?;
    match leasing.heard(handle, reply, &|native| make(&sending, native)) {
        Heard::Again(out) => {
            *slot = Some((sending, leasing));
            Some(Heard::Again(out))
        }
        Heard::Done(answer) => {
            let sent = LeaseState::sent_at(&sending);
            let confirmed = answer.map(|done| done.0.then_some(sent));
            Some(Heard::Done((sending, confirmed)))
        }
    }
}

/// A grant nobody owns, released in the background with its own token until its TTL
/// frees it anyway.
pub struct Orphan {
    abandoned: Abandoned,
    settings: Arc<Settings>,
    failures: u32,
    /// When the try on its way was sent.
    sent: Option<Instant>,
    /// The try on its way.
    leasing: Option<Leasing>,
}

impl Orphan {
    fn new(abandoned: Abandoned, settings: &Arc<Settings>) -> Self {
        Self {
            abandoned,
            settings: Arc::clone(settings),
            failures: 0,
            sent: None,
            leasing: None,
        }
    }

    /// The grant's owner token, which its compare-and-delete names.
    pub fn token(&self) -> &str {
        self.abandoned.token.as_str()
    }

    /// The release is sent at `now`.
    pub fn sending(&mut self, handle: &Handle, now: Instant) -> Out {
        self.sent = Some(now);
        let make = |native| self.settings.abandoned_call(&self.abandoned, native);
        start(&mut self.leasing, handle, Step::Delete, &make, now)
    }

    /// The compare-and-delete answered `reply` at `now`: the call again, or when to try
    /// again (`None` when the background release is over).
    pub fn released(
        &mut self,
        handle: &Handle,
        reply: Reply<bool>,
        now: Instant,
    ) -> Heard<Option<Instant>> {
        let make = |native| self.settings.abandoned_call(&self.abandoned, native);
        let answer = match hear(&mut self.leasing, handle, reply, &make) {
            Heard::Again(out) => return Heard::Again(out),
            Heard::Done(answer) => answer,
        };
        let again = self.abandoned.released(
            answer.as_ref().map(|c| c.0),
            self.failures,
            self.sent.unwrap_or(now),
            now,
        );
        self.failures += 1;
        Heard::Done(again)
    }

    /// What tells this background release apart from another (its token left out).
    pub fn digest<H: Hasher>(&self, state: &mut H) {
        let a = &self.abandoned;
        // The ticket names its owner token: only whether there is one.
        let ticket = a.ticket.is_some();
        (a.until, a.unanswered, ticket, self.failures, self.sent).hash(state);
        if let Some(leasing) = &self.leasing {
            leasing.digest(state);
        }
    }

    /// A copy that goes on alone from here (the model's branches).
    #[must_use]
    pub fn fork(&self) -> Self {
        Self {
            abandoned: self.abandoned.clone(),
            settings: Arc::clone(&self.settings),
            failures: self.failures,
            sent: self.sent,
            leasing: self.leasing.as_ref().map(Leasing::fork),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_servers_refusal_reads_as_the_wire_gives_it() {
        let syntax = server_error("ERR syntax error");
        let unknown = server_error("ERR unknown command 'DELIFEQ', with args beginning with: 'k'");
        for e in [&syntax, &unknown] {
            assert!(NativeCommands::refused(e), "{e:?}");
            assert!(!e.is_transient(), "{e:?}");
        }
    }
}
