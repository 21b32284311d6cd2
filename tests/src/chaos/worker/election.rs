//! The election actor: two candidates (each with a handle of its own, in every worker
//! process) campaign in the election [`ELECTION`], and an observer follows it.
//!
//! An election is the lock of its name, so each leadership is recorded as a grant of that
//! lock, granted `leader`, whose fence is the term: the checker's exclusion and fence
//! rules then say that leaders never overlap and that terms rise. A leader writes fenced
//! with its term (each write only after it found its leadership not lost), sometimes
//! proclaims a new value, then resigns, or drops its leadership (released in the
//! background). The observer records every change it is told of ([`Event::Observed`]):
//! the checker holds the terms it sees to never going down.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use lockscript::{ElectionOf, Face, LeadershipOf, LockError};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use super::{Ctx, outcome_of, watch};
use crate::chaos::history::Event;

/// The election's name (its lock's, `lock:{leader}`): no other actor locks it.
const ELECTION: &str = "leader";

/// Spawns the two candidates and the observer, each on an election of a handle of its
/// own made by `make` (on one server or a cluster, or on Redlock's masters).
pub(super) async fn actors<B, M, MF>(ctx: &Arc<Ctx>, make: M) -> Vec<tokio::task::JoinHandle<()>>
where
    B: Face,
    M: Fn(&'static str) -> MF,
    MF: Future<Output = ElectionOf<B>>,
{
    let mut tasks = Vec::new();
    for candidate in 0..2 {
        let election = make(ELECTION).await;
        let seed = ctx.cfg.seed ^ (0xc1 + u64::from(candidate));
        tasks.push(tokio::spawn(campaigns(
            Arc::clone(ctx),
            election,
            seed,
            candidate,
        )));
    }
    let election = make(ELECTION).await;
    tasks.push(tokio::spawn(observe(Arc::clone(ctx), election)));
    tasks
}

/// One candidate: campaigns (sometimes only tries), leads, steps down; until the worker
/// stops.
async fn campaigns<B: Face>(ctx: Arc<Ctx>, election: ElectionOf<B>, seed: u64, candidate: u32) {
    let mut rng = StdRng::seed_from_u64(seed);
    let value = format!("w{}c{candidate}", ctx.cfg.worker);
    ctx.ready().await;
    while !ctx.stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        let won = if rng.random_bool(0.25) {
            match election.try_campaign(&value).await {
                Ok(Some(leadership)) => {
                    ctx.call("try_campaign", ELECTION, started, "ok", String::new());
                    leadership
                }
                Ok(None) => {
                    ctx.call("try_campaign", ELECTION, started, "held", String::new());
                    tokio::time::sleep(Duration::from_millis(rng.random_range(1..50))).await;
                    continue;
                }
                Err(e) => {
                    ctx.call("try_campaign", ELECTION, started, "error", e.to_string());
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            }
        } else {
            // A campaign waits however long another leads: it ends with the run.
            let won = tokio::select! {
                won = election.campaign(&value) => won,
                () = ctx.stopped() => {
                    ctx.call("campaign", ELECTION, started, "cancelled", String::new());
                    return;
                }
            };
            match won {
                Ok(leadership) => {
                    ctx.call("campaign", ELECTION, started, "ok", String::new());
                    leadership
                }
                Err(e) => {
                    ctx.call("campaign", ELECTION, started, "error", e.to_string());
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            }
        };
        lead(&ctx, won, &value, rng.random()).await;
    }
}

/// One leadership, recorded as a grant of the election's lock with its term as the
/// fence: a few fenced writes with the term, each after finding the leadership not
/// lost, a proclamation now and then; then it resigns, or drops the leadership.
async fn lead<B: Face>(ctx: &Arc<Ctx>, leadership: LeadershipOf<B>, value: &str, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let lease = leadership.guard().lease();
    let term = leadership.term();
    let grant = ctx.granted(ELECTION, term, "leader", lease.valid_until());
    let done = watch(ctx, grant, lease.clone(), None);
    let writer = format!("w{}g{grant}", ctx.cfg.worker);
    for i in 0..rng.random_range(1..=4) {
        if i > 0 {
            tokio::time::sleep(ctx.pause(&mut rng)).await;
        }
        if !ctx.may_write(grant, || leadership.is_lost()) {
            break;
        }
        ctx.write(grant, &lease, ELECTION, &writer).await;
        if rng.random_bool(0.3) {
            // Refused once the leadership is lost (then the next check says so).
            let at = Instant::now();
            let proclaimed = leadership.proclaim(&format!("{value}/{i}")).await;
            let outcome = match &proclaimed {
                Ok(()) => "ok",
                Err(LockError::NotHeld { .. }) => "not_held",
                Err(_) => "error",
            };
            let detail = proclaimed.err().map(|e| e.to_string());
            ctx.call(
                "proclaim",
                ELECTION,
                at,
                outcome,
                detail.unwrap_or_default(),
            );
        }
    }
    let (ending, valid_until) = (ctx.releasing(grant), lease.valid_until());
    if rng.random_bool(0.2) {
        drop(leadership);
        ctx.ended(grant, "dropped", ending, valid_until);
        done.finish(false);
    } else {
        let resigned = leadership.resign().await;
        let outcome = outcome_of(&resigned);
        ctx.call("release", ELECTION, ending, outcome, String::new());
        ctx.ended(grant, outcome, ending, valid_until);
        done.finish(resigned.is_ok());
    }
}

/// The observer: records each leader it is told of (the current one first), until the
/// worker stops.
async fn observe<B: Face>(ctx: Arc<Ctx>, election: ElectionOf<B>) {
    let mut observer = election.observe();
    ctx.ready().await;
    loop {
        let started = Instant::now();
        let seen = tokio::select! {
            seen = observer.next() => seen,
            () = ctx.stopped() => return,
        };
        match seen {
            Ok(leader) => ctx.record(&Event::Observed {
                worker: ctx.cfg.worker,
                lock: ELECTION.to_owned(),
                term: leader.as_ref().map(|l| l.term),
                value: leader.map(|l| l.value).unwrap_or_default(),
                t_start: ctx.rec.ns(started),
                t: ctx.now(),
            }),
            Err(e) => {
                ctx.call("observe", ELECTION, started, "error", e.to_string());
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}
