//! The multi-lock actor: `lock_all` (sometimes `try_lock_all`) over two or three of the
//! names the single-lock actors take ([`pick_names`]), so that a multi-lock holder and a
//! single-lock holder contend for one name. Each name's grant is recorded as a grant of
//! its own, granted `multi` (or `try_multi`), with that name's fencing token: the checker's
//! exclusion and fence rules then hold a multi-lock holder to every other holder of each
//! of its names, single locks included. Its critical section writes to each name, each
//! write only after the whole guard was found not lost: losing one name stops the work on
//! all of them.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use lockscript::{Lease, LockGuard, Locks, MultiGuard};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use super::{Ctx, Watch, outcome_of, pick_name, watch};

/// Spawns the multi-lock actor: two tasks, each on a handle of its own made by `make`.
pub(super) async fn actors<C, M, MF>(ctx: &Arc<Ctx>, make: M) -> Vec<tokio::task::JoinHandle<()>>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
    M: Fn() -> MF,
    MF: Future<Output = Locks<C>>,
{
    let mut tasks = Vec::new();
    for i in 0..2 {
        let locks = make().await;
        let seed = ctx.cfg.seed ^ (0xb1 + i);
        tasks.push(tokio::spawn(actor(Arc::clone(ctx), locks, seed)));
    }
    tasks
}

/// One task of the actor: multi-locks until the worker stops.
async fn actor<C>(ctx: Arc<Ctx>, locks: Locks<C>, seed: u64)
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let mut rng = StdRng::seed_from_u64(seed);
    ctx.ready().await;
    while !ctx.stop.load(Ordering::Relaxed) {
        take_all(&ctx, &locks, &mut rng).await;
    }
}

/// Two or three different names of the single-lock actors': the first drawn as they
/// draw theirs (mostly a hot one), the others cold ones. Both hot names at once would be
/// free together too rarely for a wait to end in a grant.
fn pick_names(rng: &mut StdRng) -> Vec<String> {
    let n = rng.random_range(2..=3);
    let mut names = vec![pick_name(rng)];
    while names.len() < n {
        let name = format!("cold{}", rng.random_range(0..24));
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// One name of a held multi-lock, as recorded: its grant, its lease, the watcher of
/// its loss, and (once the holder stops) when it began to give it up and the validity
/// end it then had.
struct Taken {
    name: String,
    grant: u64,
    lease: Lease,
    done: Watch,
    ending: Option<(Instant, Instant)>,
}

impl Taken {
    /// Records that the holder begins to give this name up now.
    fn releasing(&mut self, ctx: &Ctx) -> Instant {
        let ending = (ctx.releasing(self.grant), self.lease.valid_until());
        self.ending = Some(ending);
        ending.0
    }

    /// Records the end of this name's grant (`outcome`), and ends its watcher
    /// (`released`: the release returned `Ok`).
    fn ended(self, ctx: &Ctx, outcome: &str, released: bool) {
        let (ending, valid_until) = self
            .ending
            .unwrap_or_else(|| (Instant::now(), self.lease.valid_until()));
        ctx.ended(self.grant, outcome, ending, valid_until);
        self.done.finish(released);
    }
}

/// How a held multi-lock ends.
#[derive(Clone, Copy)]
enum End {
    /// `MultiGuard::release`: every name at once, one answer for all.
    Together,
    /// `into_guards`, then each name's guard released in turn, each with its answer.
    OneByOne,
    /// `extend`, then the guard dropped (its names released in the background).
    Drop,
}

/// Takes a multi-lock, records a grant per name, runs the section, then ends it one of
/// the [`End`] ways.
async fn take_all<C>(ctx: &Arc<Ctx>, locks: &Locks<C>, rng: &mut StdRng)
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let names = pick_names(rng);
    let joined = names.join("+");
    let trying = rng.random_bool(0.25);
    let started = Instant::now();
    let guard = if trying {
        match locks.try_lock_all(&names).await {
            Ok(Some(guard)) => {
                ctx.call("try_lock_all", &joined, started, "ok", String::new());
                guard
            }
            Ok(None) => {
                ctx.call("try_lock_all", &joined, started, "held", String::new());
                tokio::time::sleep(Duration::from_millis(rng.random_range(1..20))).await;
                return;
            }
            Err(e) => {
                ctx.call("try_lock_all", &joined, started, "error", e.to_string());
                tokio::time::sleep(Duration::from_millis(20)).await;
                return;
            }
        }
    } else {
        let result = locks.lock_all(&names).await;
        let Some(guard) = ctx.waited("lock_all", &joined, started, result) else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            return;
        };
        guard
    };
    let how = if trying { "try_multi" } else { "multi" };
    let mut taken = granted(ctx, &guard, how, started);
    section(ctx, &guard, &taken, rng.random()).await;
    let ending = taken.iter_mut().map(|t| t.releasing(ctx)).min();
    let ending = ending.unwrap_or_else(Instant::now);
    let end = match rng.random_range(0..5) {
        0 | 1 => End::Together,
        2 | 3 => End::OneByOne,
        _ => End::Drop,
    };
    match end {
        End::Together => {
            let released = guard.release().await;
            let outcome = outcome_of(&released);
            let detail = released.as_ref().err().map(ToString::to_string);
            ctx.call(
                "release",
                &joined,
                ending,
                outcome,
                detail.unwrap_or_default(),
            );
            // One answer for all: which name failed is not told, so a failure is each
            // name's `error` (no rule reads more into it), a success each's `released`.
            let each = if released.is_ok() {
                "released"
            } else {
                "error"
            };
            for t in taken {
                t.ended(ctx, each, released.is_ok());
            }
        }
        End::OneByOne => {
            for (t, guard) in taken.into_iter().zip(guard.into_guards()) {
                let at = Instant::now();
                let released = LockGuard::release(guard).await;
                let outcome = outcome_of(&released);
                ctx.call("release", &t.name, at, outcome, String::new());
                t.ended(ctx, outcome, released.is_ok());
            }
        }
        End::Drop => {
            let extended = guard.extend(ctx.ttl()).await;
            let outcome = if extended.is_ok() { "ok" } else { "error" };
            ctx.call("extend", &joined, ending, outcome, String::new());
            drop(guard);
            for t in taken {
                t.ended(ctx, "dropped", false);
            }
        }
    }
}

/// Records a grant of each name of `guard` (granted `how` by a call that began at
/// `started`) and watches each one's loss.
fn granted<C>(ctx: &Arc<Ctx>, guard: &MultiGuard<C>, how: &str, started: Instant) -> Vec<Taken>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    guard
        .guards()
        .iter()
        .map(|g| {
            let lease = g.lease();
            // On a Cluster the names go one slot after another, and the watchdog renews
            // the first slots' names while the call waits for the later ones: a name's
            // lease end may be a renewal's, so it does not tell when the name was
            // granted. Its wait does: the grant was sent that long after the call began.
            let requested = started + lease.waited();
            let fence = lease.fencing_token();
            let grant =
                ctx.granted_after(g.name(), fence, how, lease.valid_until(), Some(requested));
            Taken {
                name: g.name().to_owned(),
                grant,
                done: watch(ctx, grant, lease.clone(), None),
                lease,
                ending: None,
            }
        })
        .collect()
}

/// The critical section: a few rounds, each a write to every name (guarded on its
/// server, then fenced by its own token), each write only after `is_lost()` of the whole
/// guard said that no name was lost; a loss stops every name's writes.
async fn section<C>(ctx: &Ctx, guard: &MultiGuard<C>, taken: &[Taken], seed: u64)
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let mut rng = StdRng::seed_from_u64(seed);
    for i in 0..rng.random_range(1..=3) {
        if i > 0 {
            tokio::time::sleep(ctx.pause(&mut rng)).await;
        }
        for t in taken {
            if !ctx.may_write(t.grant, || guard.is_lost()) {
                return;
            }
            let writer = format!("w{}g{}", ctx.cfg.worker, t.grant);
            ctx.write(t.grant, &t.lease, &t.name, &writer).await;
        }
    }
}
