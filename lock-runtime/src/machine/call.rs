//! The lock protocol's script calls: which script each step of a lock runs, with what
//! keys and arguments. The switch between the plain protocol and the queued one
//! (fair-queue.lua) is here, and only here; so is how a renewal's or release's replies
//! are read, and which of them go again ([`LeaseCalls`]).

use std::time::Duration;

use crate::machine::key::{Keys, Kind};
use crate::machine::limit::millis;
use crate::machine::native::{NativeCommands, Offered};
use crate::machine::reply::{Acquired, Confirmed, Handed};
use crate::machine::settings::{ReplicaWait, Settings};
use crate::machine::token::Token;
use crate::{LockError, PipelineExt};

/// A plain lock's renewal or release as sent: its script, or the server's own
/// command where it offers one (see [`crate::machine::native`]).
pub(crate) enum LeaseCall {
    Script(crate::Invocation<Confirmed>),
    /// The native command, then (for a release) the notification, sent together; the
    /// first reply answers.
    Native(Vec<redis::Cmd>),
}

impl LeaseCall {
    pub(crate) fn is_native(&self) -> bool {
        matches!(self, Self::Native(_))
    }

    /// The words of the call's first command as they go to the server (`EVALSHA sha1
    /// numkeys keys... args...` for a script), for the model checker's server.
    #[cfg(feature = "model")]
    pub(crate) fn words(&self) -> Vec<Vec<u8>> {
        match self {
            Self::Script(call) => command_words(call.evalsha_cmd()),
            Self::Native(cmds) => cmds.first().map(command_words).unwrap_or_default(),
        }
    }

    /// Appends the call to `pipe` (its commands moved, not copied); how many replies it
    /// adds there (the first answers).
    pub(crate) fn add_to(self, pipe: &mut redis::Pipeline) -> Result<usize, LockError> {
        match self {
            Self::Script(call) => {
                pipe.invoke(&call)?;
                Ok(1)
            }
            Self::Native(cmds) => {
                let n = cmds.len();
                for cmd in cmds {
                    pipe.add_command(cmd);
                }
                Ok(n)
            }
        }
    }

    /// A native call's commands as one pipeline, to send alone, each command's reply
    /// kept as its own (a pipeline's error names no command: an `ERR unknown command`
    /// would not be told from any other, nor a refused notification from a refused
    /// release).
    pub(crate) fn native_pipe(cmds: &[redis::Cmd]) -> redis::Pipeline {
        let mut pipe = redis::Pipeline::with_capacity(cmds.len());
        pipe.ignore_errors();
        for cmd in cmds {
            pipe.add_command(cmd.clone());
        }
        pipe
    }

    /// What a call's replies say: its first reply (a script's, `OK` or nil from `SET …
    /// IFEQ`, 1 or 0 from `DELIFEQ`/`DELEX`). The notification after a native release
    /// changes nothing: the release is done or not by its own reply, and a refused
    /// notification is told to `offered` (which says so once) while waiters poll.
    pub(crate) fn read(
        replies: Vec<redis::RedisResult<redis::Value>>,
        offered: &Offered,
    ) -> Result<Confirmed, LockError> {
        let mut replies = replies.into_iter();
        let first = replies
            .next()
            .ok_or_else(|| redis::RedisError::from((redis::ErrorKind::Parse, "no reply")))?;
        for notification in replies {
            if let Err(e) = notification {
                if crate::machine::mutants::notification_error_is_the_calls() {
                    return Err(e.into());
                }
                offered.notification_failed(&e);
            }
        }
        Ok(redis::from_redis_value(first?).map_err(redis::RedisError::from)?)
    }
}

/// Lease calls sent together (the watchdog's due renewals, or one call alone) until
/// each has its own answer, read from its own replies whatever the others in its round
/// trip say. A native command the server refused (it lacks it, or an ACL denies it)
/// proves the call did not run: it goes again as its script. A call the server refused
/// for now (`MOVED`, `READONLY`, `LOADING`...: a failover, a slot migration) goes again
/// too where the executor retries those (see [`new`](Self::new)), [`RETRY_LATER`]
/// after. Each round sends every call still due together, and the executor bounds all
/// rounds by one response timeout: a batch is answered within one bound however many
/// of its calls went again.
pub(crate) struct LeaseCalls {
    calls: Vec<Due>,
    /// A call refused for now is sent again (the async executor), rather than answered
    /// with the refusal (the blocking one, whose connection is the whole handle's).
    retry_later: bool,
}

/// How long to wait before sending again a call the server refused for now.
#[cfg_attr(not(feature = "tokio"), allow(dead_code))]
pub(crate) const RETRY_LATER: Duration = Duration::from_millis(10);

/// Where one of [`LeaseCalls`] stands.
enum Due {
    /// To send in the next round; as its script once a native command was refused;
    /// with the refusal that sends it again, if any.
    Next {
        script: bool,
        refused: Option<LockError>,
    },
    /// In the round on its way (native or not).
    Sent {
        native: bool,
    },
    Answered(Result<Confirmed, LockError>),
    /// Answered, and the answer already handed out ([`LeaseCalls::take_answered`]).
    Delivered,
}

/// A call of a round as a pipeline carries it: its place among the calls, and how many
/// replies it adds (the first answers).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Placed {
    call: usize,
    replies: usize,
}

impl LeaseCalls {
    /// `n` calls, none sent yet; calls the server refuses for now are sent again when
    /// `retry_later` (until the executor's bound cuts the rounds).
    pub(crate) fn new(n: usize, retry_later: bool) -> Self {
        let next = || Due::Next {
            script: false,
            refused: None,
        };
        Self {
            calls: std::iter::repeat_with(next).take(n).collect(),
            retry_later,
        }
    }

    /// The next round: every call still due, built by `make(i, native)` with `usable`
    /// (nothing for a call whose native command was refused), each with its place.
    /// Empty once every call has its answer.
    pub(crate) fn round(
        &mut self,
        usable: NativeCommands,
        make: impl Fn(usize, NativeCommands) -> LeaseCall,
    ) -> Vec<(usize, LeaseCall)> {
        let mut round = Vec::new();
        for (i, due) in self.calls.iter_mut().enumerate() {
            if let Due::Next { script, .. } = due {
                let call = make(
                    i,
                    if *script {
                        NativeCommands::default()
                    } else {
                        usable
                    },
                );
                *due = Due::Sent {
                    native: call.is_native(),
                };
                round.push((i, call));
            }
        }
        round
    }

    /// Whether the next round waits [`RETRY_LATER`] first: a call in it was refused
    /// for now.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn retrying(&self) -> bool {
        self.calls
            .iter()
            .any(|d| matches!(d, Due::Next { refused: Some(e), .. } if e.is_retry_later()))
    }

    /// Call `i` of the round answered `reply`: an answer, or a refusal that sends it
    /// again (see [`LeaseCalls`]). What the server offers is noted in `offered`: a
    /// refused native command keeps the connection on scripts, and a failover or a
    /// reconnect makes the next call ask again.
    pub(crate) fn answered(
        &mut self,
        i: usize,
        reply: Result<Confirmed, LockError>,
        offered: &Offered,
    ) {
        let Some(due) = self.calls.get_mut(i) else {
            return;
        };
        let Due::Sent { native } = *due else {
            return;
        };
        *due = match reply {
            Err(e) if offered.failed(&e, native) => Due::Next {
                script: true,
                refused: Some(e),
            },
            // Kept a script if it went as one.
            Err(e) if self.retry_later && e.is_retry_later() => Due::Next {
                script: !native,
                refused: Some(e),
            },
            reply => Due::Answered(reply),
        };
    }

    /// Several calls in one pipeline (each command's reply kept as its own), and each
    /// call's place in it, for [`read`](Self::read).
    pub(crate) fn pipeline(
        round: Vec<(usize, LeaseCall)>,
    ) -> Result<(redis::Pipeline, Vec<Placed>), LockError> {
        let mut pipe = redis::Pipeline::with_capacity(round.len());
        pipe.ignore_errors();
        let placed = round
            .into_iter()
            .map(|(call, lease_call)| {
                let replies = lease_call.add_to(&mut pipe)?;
                Ok(Placed { call, replies })
            })
            .collect::<Result<Vec<Placed>, LockError>>()?;
        Ok((pipe, placed))
    }

    /// The replies to a [`pipeline`](Self::pipeline): each call answered by its own.
    pub(crate) fn read(
        &mut self,
        placed: &[Placed],
        replies: Vec<redis::RedisResult<redis::Value>>,
        offered: &Offered,
    ) {
        let mut replies = replies.into_iter();
        for p in placed {
            let own = replies.by_ref().take(p.replies).collect();
            self.answered(p.call, LeaseCall::read(own, offered), offered);
        }
    }

    /// The round failed as a whole with `error` (no reply, a broken connection): each
    /// of its calls is answered with it.
    pub(crate) fn failed(&mut self, error: &LockError, offered: &Offered) {
        for i in 0..self.calls.len() {
            if matches!(self.calls[i], Due::Sent { .. }) {
                self.answered(i, Err(error.for_each()), offered);
            }
        }
    }

    /// The round went unsent as a whole (a Cluster connection refused a pipeline across
    /// slots): its calls are due again as they were.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn unsent(&mut self) {
        for due in &mut self.calls {
            if let Due::Sent { native } = *due {
                *due = Due::Next {
                    script: !native,
                    refused: None,
                };
            }
        }
    }

    /// The calls answered since the last look, each with its place, handed out as they
    /// come: a call that waits (on a Cluster primary in trouble) holds no other's
    /// answer. Each answer is handed out once; [`rest`](Self::rest) skips them.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn take_answered(&mut self) -> Vec<(usize, Result<Confirmed, LockError>)> {
        let mut out = Vec::new();
        for (i, due) in self.calls.iter_mut().enumerate() {
            if matches!(due, Due::Answered(_))
                && let Due::Answered(reply) = std::mem::replace(due, Due::Delivered)
            {
                out.push((i, reply));
            }
        }
        out
    }

    /// The answer of each call not yet handed out, with its place, in order, once the
    /// rounds end (every call answered, or the executor's bound `timeout` passed): a
    /// call on its way then got no reply in time (it may have run); one refused and not
    /// sent again has its refusal.
    pub(crate) fn rest(self, timeout: Duration) -> Vec<(usize, Result<Confirmed, LockError>)> {
        let each = |(i, due)| match due {
            Due::Answered(reply) => Some((i, reply)),
            Due::Next {
                refused: Some(e), ..
            } => Some((i, Err(e))),
            Due::Next { refused: None, .. } | Due::Sent { .. } => {
                Some((i, Err(LockError::no_reply(timeout))))
            }
            Due::Delivered => None,
        };
        self.calls
            .into_iter()
            .enumerate()
            .filter_map(each)
            .collect()
    }

    /// Each call's answer, in order, once the rounds end: see [`rest`](Self::rest)
    /// (none handed out before).
    #[cfg_attr(not(any(test, feature = "blocking")), allow(dead_code))]
    pub(crate) fn answers(self, timeout: Duration) -> Vec<Result<Confirmed, LockError>> {
        self.rest(timeout)
            .into_iter()
            .map(|(_, reply)| reply)
            .collect()
    }
}

#[cfg(feature = "model")]
impl LeaseCalls {
    /// A copy that goes on alone (the model checker's branches); errors copied as the
    /// executors copy a round's error for each of its calls.
    pub(crate) fn fork(&self) -> Self {
        let copy = |r: &Result<Confirmed, LockError>| match r {
            Ok(c) => Ok(*c),
            Err(e) => Err(e.for_each()),
        };
        let calls = (self.calls.iter())
            .map(|due| match due {
                Due::Next { script, refused } => Due::Next {
                    script: *script,
                    refused: refused.as_ref().map(LockError::for_each),
                },
                Due::Sent { native } => Due::Sent { native: *native },
                Due::Answered(reply) => Due::Answered(copy(reply)),
                Due::Delivered => Due::Delivered,
            })
            .collect();
        Self {
            calls,
            retry_later: self.retry_later,
        }
    }

    /// Everything a later call can depend on (the model checker tells states apart by
    /// it): where each call stands, its error by kind.
    pub(crate) fn digest<H: std::hash::Hasher>(&self, state: &mut H) {
        use std::hash::Hash;
        let kind = |e: &LockError| e.to_string();
        for due in &self.calls {
            match due {
                Due::Next { script, refused } => {
                    (0u8, script, refused.as_ref().map(kind)).hash(state);
                }
                Due::Sent { native } => (1u8, native).hash(state),
                Due::Answered(reply) => {
                    (2u8, reply.as_ref().map(|c| c.0).map_err(kind)).hash(state);
                }
                Due::Delivered => 3u8.hash(state),
            }
        }
        self.retry_later.hash(state);
    }
}

/// The watchdog's renewal of `lease` (with the ttl `sending` carries), native where the
/// server offers it (`native`) and the lease's handle allows it.
pub(crate) fn renewal(
    lease: &crate::machine::lease::LeaseState,
    sending: &crate::machine::lease::Sending,
    native: NativeCommands,
) -> LeaseCall {
    let settings = &lease.settings;
    let native = if settings.native {
        native
    } else {
        NativeCommands::default()
    };
    settings.renew_call(&lease.keys, lease.token.as_str(), sending.ttl, native)
}

/// An owner token on one lock, with the settings of its handle: what every call of the
/// lock protocol names (an attempt's fresh token, a lease's, a grant nobody owns).
#[derive(Clone, Copy)]
pub struct Owner<'a> {
    pub(crate) settings: &'a Settings,
    pub(crate) keys: &'a Keys,
    pub(crate) token: &'a Token,
}

impl<'a> Owner<'a> {
    pub(crate) fn new(settings: &'a Settings, keys: &'a Keys, token: &'a Token) -> Self {
        Self {
            settings,
            keys,
            token,
        }
    }
}

impl crate::machine::lease::LeaseState {
    /// This lease's owner token on its lock.
    pub(crate) fn owner(&self) -> Owner<'_> {
        Owner::new(&self.settings, &self.keys, &self.token)
    }
}

/// The lock protocol's script calls, as every face (async, blocking, Redlock) sends
/// them: with this handle's ttl arithmetic and its [`Delivery`](crate::Delivery).
impl Settings {
    /// acquire-with-retry.lua: take `keys` for `token` with the handle's ttl (in fair
    /// mode fair-queue.lua's `acquire` without a ticket, which never jumps the queue).
    /// A plain lock's attempt goes as the acquire transaction instead where it can
    /// ([`crate::machine::transact`]); this is its script otherwise.
    pub(crate) fn acquire_call(&self, keys: &Keys, token: &str) -> crate::Invocation<Acquired> {
        if self.queued(keys) {
            return self
                .fair_call(keys, "acquire", token, "", self.ttl)
                .reply_as();
        }
        crate::script::builtin::acquire(
            &keys.lock,
            &keys.fence,
            &keys.holders(),
            token,
            millis(self.ttl),
            self.fence_lifetime(self.ttl),
        )
        .delivery(self.delivery)
        .reply_as()
    }

    /// Whether grants of `keys` go through the waiter queue (fair-queue.lua): in fair
    /// mode, and always for read/write locks and semaphores.
    pub(crate) fn queued(&self, keys: &Keys) -> bool {
        self.fair || keys.kind != Kind::Lock
    }

    /// fair-queue.lua: `op` for `token` (with its `ticket`, or `""`) and a lease of
    /// `lease`, for the kind of `keys`.
    pub(crate) fn fair_call(
        &self,
        keys: &Keys,
        op: &str,
        token: &str,
        ticket: &str,
        lease: Duration,
    ) -> crate::Invocation<(i64, i64, i64, i64)> {
        crate::script::builtin::fair_queue(
            &keys.lock,
            &keys.fence,
            &keys.queue(),
            &keys.alive(),
            &keys.holders(),
            &keys.fences(),
            op,
            token,
            ticket,
            keys.kind.code(),
            millis(lease),
            self.fence_lifetime(self.ttl.max(lease)),
            millis(crate::machine::fair::WAITER_LEASE),
            keys.kind.permits(),
        )
        .delivery(self.delivery)
    }

    /// fair-queue.lua's `acquire` for a waiter's `ticket`: its place in the queue of
    /// `keys`, renewed, or the grant (a lease of the handle's ttl when this call makes
    /// it, the claim's when a release handed it before).
    pub(crate) fn queue_call(
        &self,
        keys: &Keys,
        ticket: &crate::machine::fair::Ticket,
    ) -> crate::Invocation<(i64, i64, i64, i64)> {
        let token = ticket.token.as_str();
        self.fair_call(keys, "acquire", token, &ticket.ticket, self.ttl)
    }

    /// Whether `token` holds a grant of `keys`, as a script: for readers and permits
    /// (`None` for a lock or a writer, whose key a plain `GET` reads).
    pub(crate) fn holds_call(
        &self,
        keys: &Keys,
        token: &str,
    ) -> Option<crate::Invocation<Confirmed>> {
        keys.kind.shared().then(|| {
            self.fair_call(keys, "holds", token, "", self.ttl)
                .reply_as()
        })
    }

    /// With `wait_for_replicas`: renew.lua and `WAIT` in one pipeline, for the connection
    /// that acquired, and the `WAIT` timeout; `None` without it. The renewal is a write
    /// behind the grant in the replication stream, so `WAIT` counts exactly the replicas
    /// that have the grant, even on a connection re-made since.
    pub(crate) fn confirm_pipe(
        &self,
        keys: &Keys,
        token: &str,
    ) -> Result<Option<(redis::Pipeline, Duration)>, LockError> {
        let Some(ReplicaWait { replicas, timeout }) = self.wait_for_replicas else {
            return Ok(None);
        };
        let mut pipe = redis::pipe();
        self.renew_call(keys, token, self.ttl, NativeCommands::default())
            .add_to(&mut pipe)?;
        pipe.cmd("WAIT").arg(replicas).arg(millis(timeout));
        Ok(Some((pipe, timeout)))
    }

    /// What [`confirm_pipe`](Self::confirm_pipe) answered: whether the grant is still
    /// ours and how many replicas acknowledged it. Too few: `NotReplicated` (and the
    /// grant is released by its pending marker).
    pub(crate) fn replicated(
        &self,
        keys: &Keys,
        (Confirmed(ours), acked): (Confirmed, usize),
    ) -> Result<(), LockError> {
        let wanted = self.wait_for_replicas.map_or(0, |w| w.replicas);
        if ours && acked >= wanted {
            tracing::debug!(lock = %keys.name, acked, "grant acknowledged by replicas");
            return Ok(());
        }
        let acked = if ours { acked } else { 0 };
        tracing::warn!(lock = %keys.name, acked, wanted, "grant not replicated; releasing it");
        Err(LockError::NotReplicated {
            name: keys.name.clone(),
            acked,
            wanted,
        })
    }

    /// fair-queue.lua's `downgrade`: the writer `token` becomes a reader with lease `ttl`.
    pub(crate) fn downgrade_call(
        &self,
        keys: &Keys,
        token: &str,
        ttl: Duration,
    ) -> crate::Invocation<Confirmed> {
        let mut write = keys.clone();
        write.kind = Kind::Write;
        self.fair_call(&write, "downgrade", token, "", ttl)
            .reply_as()
    }

    /// renew.lua: set the lease of `token`'s lock to `ttl`; for a plain lock on a server
    /// that offers it (`native`), `SET … IFEQ … PX` instead.
    pub(crate) fn renew_call(
        &self,
        keys: &Keys,
        token: &str,
        ttl: Duration,
        native: NativeCommands,
    ) -> LeaseCall {
        if keys.kind.shared() {
            return LeaseCall::Script(self.fair_call(keys, "renew", token, "", ttl).reply_as());
        }
        if native.renews() {
            let mut set = redis::cmd("SET");
            set.arg(&keys.lock)
                .arg(token)
                .arg("IFEQ")
                .arg(token)
                .arg("PX")
                .arg(millis(ttl));
            return LeaseCall::Native(vec![set]);
        }
        LeaseCall::Script(
            crate::script::builtin::renew(&keys.lock, token, millis(ttl))
                .delivery(self.delivery)
                .reply_as(),
        )
    }

    /// compare-del.lua: release `token`'s lock (in fair mode fair-queue.lua's
    /// `release`, which hands it to the first live waiter); for a plain lock on a server
    /// that offers it (`native`), `DELIFEQ` (or `DELEX … IFEQ`) and the release
    /// notification in the same round trip, in that order, as the script does them.
    pub(crate) fn release_call(
        &self,
        keys: &Keys,
        token: &str,
        native: NativeCommands,
    ) -> LeaseCall {
        if self.queued(keys) {
            return LeaseCall::Script(
                self.fair_call(keys, "release", token, "", self.ttl)
                    .reply_as(),
            );
        }
        if native.releases() {
            let mut del;
            if native.delifeq {
                del = redis::cmd("DELIFEQ");
                del.arg(&keys.lock).arg(token);
            } else {
                del = redis::cmd("DELEX");
                del.arg(&keys.lock).arg("IFEQ").arg(token);
            }
            let mut publish = redis::cmd("PUBLISH");
            publish.arg(&keys.channel).arg("released");
            return LeaseCall::Native(vec![del, publish]);
        }
        LeaseCall::Script(
            crate::script::builtin::compare_del(&keys.lock, token)
                .delivery(self.delivery)
                .reply_as(),
        )
    }

    /// The release of a grant nobody owns; for a fair waiter that gave up, its ticket
    /// leaves the queue in the same call (and a grant made to it goes to the next).
    pub(crate) fn abandoned_call(
        &self,
        abandoned: &crate::machine::grant::Abandoned,
        native: NativeCommands,
    ) -> LeaseCall {
        let token = abandoned.token.as_str();
        match &abandoned.ticket {
            Some(ticket) => LeaseCall::Script(
                self.fair_call(&abandoned.keys, "release", token, ticket, self.ttl)
                    .reply_as(),
            ),
            None => self.release_call(&abandoned.keys, token, native),
        }
    }

    /// handover.lua: pass `token`'s lock to `next` with lease `ttl`.
    pub(crate) fn handover_call(
        &self,
        keys: &Keys,
        token: &str,
        next: &str,
        ttl: Duration,
    ) -> crate::Invocation<Handed> {
        crate::script::builtin::handover(
            &keys.lock,
            &keys.fence,
            token,
            next,
            millis(ttl),
            self.fence_lifetime(ttl),
        )
        .delivery(self.delivery)
        .reply_as()
    }

    /// raise-fence.lua: raise the counter of `keys` to at least `floor` (a Redlock
    /// grant's majority; a counter an acquire transaction restarted behind the server's
    /// clock).
    #[cfg(any(feature = "tokio", feature = "blocking"))]
    pub(crate) fn raise_fence_call(&self, keys: &Keys, floor: u64) -> crate::Invocation<i64> {
        crate::script::builtin::raise_fence(&keys.fence, floor, self.fence_lifetime(self.ttl))
            .delivery(self.delivery)
    }
}

/// A command's words as they go to the server, for the model checker's server.
#[cfg(feature = "model")]
pub(crate) fn command_words(cmd: &redis::Cmd) -> Vec<Vec<u8>> {
    cmd.args_iter()
        .map(|arg| match arg {
            redis::Arg::Simple(bytes) => bytes.to_vec(),
            _ => b"0".to_vec(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::{ErrorKind, RedisError, ServerErrorKind, Value};

    const NATIVE: NativeCommands = NativeCommands {
        set_ifeq: true,
        delifeq: true,
        delex_ifeq: false,
    };

    fn server_error(kind: ServerErrorKind, detail: &str) -> RedisError {
        RedisError::from((ErrorKind::Server(kind), "server error", detail.to_owned()))
    }

    /// The release of lock `x` for `token`, built for `native`.
    fn release(native: NativeCommands) -> LeaseCall {
        let settings = Settings::default();
        let keys = settings.keys("x").unwrap();
        settings.release_call(&keys, "token", native)
    }

    #[test]
    fn a_release_is_its_deletes_reply_whatever_its_notification_answered() {
        let offered = Offered::default();
        let refused = server_error(
            ServerErrorKind::NoPerm,
            "this user has no permissions to access the 'lock:{x}:released' channel",
        );
        let done = LeaseCall::read(vec![Ok(Value::Int(1)), Err(refused.clone())], &offered);
        assert_eq!(done.unwrap(), Confirmed(true));
        let gone = LeaseCall::read(vec![Ok(Value::Int(0)), Err(refused)], &offered);
        assert_eq!(gone.unwrap(), Confirmed(false));
        // A refused delete is refused, whatever the notification answered.
        let unknown = server_error(ServerErrorKind::ResponseError, "unknown command 'DELIFEQ'");
        let reply = LeaseCall::read(vec![Err(unknown), Ok(Value::Int(0))], &offered);
        let error = reply.unwrap_err();
        assert!(NativeCommands::refused(&error), "{error}");
        let LeaseCall::Native(cmds) = release(NATIVE) else {
            panic!("a native release");
        };
        assert_eq!(cmds.len(), 2, "DELIFEQ, then PUBLISH");
    }

    #[test]
    fn refused_calls_of_a_round_go_again_together_and_the_others_keep_their_answers() {
        let offered = Offered::default();
        offered.set(NATIVE);
        let mut calls = LeaseCalls::new(3, true);
        let first = calls.round(offered.usable(true), |_, n| release(n));
        assert_eq!(first.len(), 3);
        assert!(first.iter().all(|(_, c)| c.is_native()));
        let syntax = server_error(ServerErrorKind::ResponseError, "syntax error");
        calls.answered(0, Ok(Confirmed(true)), &offered);
        calls.answered(1, Err(syntax.into()), &offered);
        let readonly = server_error(
            ServerErrorKind::ReadOnly,
            "You can't write against a replica",
        );
        calls.answered(2, Err(readonly.into()), &offered);
        assert!(calls.retrying(), "a call refused for now waits a little");
        assert_eq!(offered.get(), None, "a failover: ask again");
        // Both go again in one round, as scripts (the first refused its native command,
        // the server of the other is asked again before the next call).
        let again = calls.round(offered.usable(true), |_, n| release(n));
        let placed: Vec<usize> = again.iter().map(|(i, _)| *i).collect();
        assert_eq!(placed, [1, 2]);
        assert!(again.iter().all(|(_, c)| !c.is_native()));
        calls.answered(1, Ok(Confirmed(true)), &offered);
        calls.answered(2, Ok(Confirmed(false)), &offered);
        assert!(calls.round(NATIVE, |_, n| release(n)).is_empty());
        let answers = calls.answers(Duration::from_millis(500));
        let answers: Vec<bool> = answers.into_iter().map(|a| a.unwrap().0).collect();
        assert_eq!(answers, [true, true, false]);
    }

    #[test]
    fn rounds_cut_by_the_bound_answer_what_may_have_run_as_unanswered() {
        let offered = Offered::default();
        let mut calls = LeaseCalls::new(2, true);
        let _ = calls.round(NativeCommands::default(), |_, n| release(n));
        let loading = server_error(ServerErrorKind::BusyLoading, "loading the dataset");
        calls.answered(0, Err(loading.into()), &offered);
        // The bound passes with call 1 on its way and call 0 waiting to go again.
        let answers = calls.answers(Duration::from_millis(500));
        assert!(answers[0].as_ref().is_err_and(LockError::is_retry_later));
        assert!(answers[1].as_ref().is_err_and(LockError::may_have_run));
        // Where refusals for now are not sent again, they are the answer.
        let mut calls = LeaseCalls::new(1, false);
        let _ = calls.round(NativeCommands::default(), |_, n| release(n));
        let readonly = server_error(ServerErrorKind::ReadOnly, "replica");
        calls.answered(0, Err(readonly.into()), &offered);
        assert!(!calls.retrying());
        assert!(calls.round(NATIVE, |_, n| release(n)).is_empty());
        // A round that failed as a whole answers each of its calls.
        let mut calls = LeaseCalls::new(2, true);
        let _ = calls.round(NativeCommands::default(), |_, n| release(n));
        let reset = LockError::Redis(RedisError::from((ErrorKind::Io, "reset")));
        calls.failed(&reset, &offered);
        let answers = calls.answers(Duration::from_millis(500));
        assert!(
            answers
                .iter()
                .all(|a| a.as_ref().is_err_and(LockError::may_have_run))
        );
    }
}
