//! The lock protocol's script calls: which script each step of a lock runs, with what
//! keys and arguments. The switch between the plain protocol and the queued one
//! (fair-queue.lua) is here, and only here.

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
                offered.notification_failed(&e);
            }
        }
        Ok(redis::from_redis_value(first?).map_err(redis::RedisError::from)?)
    }
}

/// One call of a [`batch`]: how many replies it adds to the pipeline (the first
/// answers), and whether it is native (a refusal then means the server does not offer
/// the command).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Batched {
    replies: usize,
    pub(crate) native: bool,
}

/// Several lease calls in one pipeline (errors kept per command), each call's place
/// in it; [`read_batch`] reads the answers.
pub(crate) fn batch(
    calls: impl ExactSizeIterator<Item = LeaseCall>,
) -> Result<(redis::Pipeline, Vec<Batched>), LockError> {
    let mut pipe = redis::Pipeline::with_capacity(calls.len());
    pipe.ignore_errors();
    let placed = calls
        .map(|call| {
            let native = call.is_native();
            let replies = call.add_to(&mut pipe)?;
            Ok(Batched { replies, native })
        })
        .collect::<Result<Vec<Batched>, LockError>>()?;
    Ok((pipe, placed))
}

/// Each call's answer from the replies to a [`batch`], in order (see
/// [`LeaseCall::read`]).
pub(crate) fn read_batch(
    placed: &[Batched],
    replies: Vec<redis::RedisResult<redis::Value>>,
    offered: &Offered,
) -> Vec<Result<Confirmed, LockError>> {
    let mut replies = replies.into_iter();
    let each = |b: &Batched| LeaseCall::read(replies.by_ref().take(b.replies).collect(), offered);
    placed.iter().map(each).collect()
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

    /// raise-fence.lua: raise the counter of `keys` to at least `floor`.
    #[cfg(feature = "redlock")]
    pub(crate) fn raise_fence_call(&self, keys: &Keys, floor: u64) -> crate::Invocation<i64> {
        crate::script::builtin::raise_fence(&keys.fence, floor, self.fence_lifetime(self.ttl))
            .delivery(self.delivery)
    }
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
}
