//! Random sequences of lock operations from several clients against a real
//! redis-server, checked step by step against a model of the lock: who owns it, the
//! last fencing token granted, and which guards have gone stale.

use std::time::Duration;

use lockscript::{LockError, LockGuard, Locks};
use lockscript_test::server::RedisServer;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use redis::aio::ConnectionManager;

const CLIENTS: usize = 3;

#[derive(Clone, Debug)]
enum Op {
    TryLock(usize),
    Extend(usize),
    Release(usize),
    /// The lease ends under its holder (the key is deleted, as expiry would).
    Expire,
    /// The server loses its script cache.
    ScriptFlush,
    /// The fencing counter expires (as an idle one does after `fence_retention`).
    CounterExpires,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..CLIENTS).prop_map(Op::TryLock),
        2 => (0..CLIENTS).prop_map(Op::Extend),
        3 => (0..CLIENTS).prop_map(Op::Release),
        1 => Just(Op::Expire),
        1 => Just(Op::ScriptFlush),
        1 => Just(Op::CounterExpires),
    ]
}

/// The model: the owner (a client), the last token granted, the attempts refused since
/// (each raises the counter: a plain attempt is a transaction that increments it
/// whatever its `SET NX` answered), and whether the counter has restarted since (then
/// the next token is only known to be higher).
#[derive(Default)]
struct Model {
    owner: Option<usize>,
    fence: Option<u64>,
    refused: u64,
    restarted: bool,
}

impl Model {
    /// A grant with `fence` at `step`: the next number after the last token and the
    /// refused attempts since, or only a higher one after the counter restarted.
    fn granted(&mut self, step: usize, fence: u64) -> Result<(), TestCaseError> {
        match self.fence {
            Some(last) if !self.restarted => {
                let next = last + 1 + self.refused;
                prop_assert_eq!(fence, next, "step {}: the next fence", step);
            }
            Some(last) => prop_assert!(
                fence > last,
                "step {}: fence {} after the counter's restart, last {}",
                step,
                fence,
                last
            ),
            None => prop_assert!(fence > 0, "step {}: first fence", step),
        }
        self.fence = Some(fence);
        self.refused = 0;
        self.restarted = false;
        Ok(())
    }
}

/// Runs one command of the test's own, behind the clients' backs.
async fn admin_cmd(admin: &mut redis::aio::MultiplexedConnection, words: &[&str]) {
    let _: redis::Value = redis::cmd(words[0])
        .arg(&words[1..])
        .query_async(admin)
        .await
        .unwrap();
}

async fn run_case(
    server: &RedisServer,
    clients: &[Locks<ConnectionManager>],
    name: &str,
    ops: &[Op],
) -> Result<(), TestCaseError> {
    let key = format!("lock:{{{name}}}");
    let counter = format!("{key}:fence");
    let mut admin = server.multiplexed().await;
    let mut model = Model::default();
    let mut guards: Vec<Option<LockGuard>> = (0..CLIENTS).map(|_| None).collect();
    for (step, op) in ops.iter().enumerate() {
        match *op {
            Op::TryLock(c) => {
                let got = clients[c].try_lock(name).await.unwrap();
                if model.owner.is_none() {
                    let guard = got.ok_or_else(|| {
                        TestCaseError::fail(format!("step {step}: free lock refused"))
                    })?;
                    model.granted(step, guard.fencing_token())?;
                    model.owner = Some(c);
                    guards[c] = Some(guard); // a stale guard it had is dropped
                } else {
                    prop_assert!(
                        got.is_none(),
                        "step {}: granted while {:?} holds",
                        step,
                        model.owner
                    );
                    model.refused += 1;
                }
            }
            Op::Extend(c) => {
                if let Some(guard) = &guards[c] {
                    let result = guard.extend(Duration::from_secs(30)).await;
                    if model.owner == Some(c) {
                        prop_assert!(
                            result.is_ok(),
                            "step {}: owner's extend: {:?}",
                            step,
                            result
                        );
                    } else {
                        prop_assert!(
                            matches!(result, Err(LockError::NotHeld { .. })),
                            "step {}: stale extend: {:?}",
                            step,
                            result
                        );
                    }
                }
            }
            Op::Release(c) => {
                if let Some(guard) = guards[c].take() {
                    let result = guard.release().await;
                    if model.owner == Some(c) {
                        prop_assert!(
                            result.is_ok(),
                            "step {}: owner's release: {:?}",
                            step,
                            result
                        );
                        model.owner = None;
                    } else {
                        prop_assert!(
                            matches!(result, Err(LockError::NotHeld { .. })),
                            "step {}: stale release: {:?}",
                            step,
                            result
                        );
                    }
                }
            }
            Op::Expire => {
                admin_cmd(&mut admin, &["DEL", &key]).await;
                model.owner = None;
            }
            Op::CounterExpires => {
                admin_cmd(&mut admin, &["PEXPIRE", &counter, "0"]).await;
                model.restarted = true;
            }
            Op::ScriptFlush => admin_cmd(&mut admin, &["SCRIPT", "FLUSH"]).await,
        }
        // The server agrees with the model about who holds the key.
        let exists: bool = redis::cmd("EXISTS")
            .arg(&key)
            .query_async(&mut admin)
            .await
            .unwrap();
        prop_assert_eq!(exists, model.owner.is_some(), "step {}: key exists", step);
    }
    for guard in guards.into_iter().flatten() {
        let _ = guard.release().await;
    }
    Ok(())
}

#[test]
fn random_operation_sequences_match_the_model() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let clients: Vec<Locks<ConnectionManager>> = runtime.block_on(async {
        let mut clients = Vec::new();
        for _ in 0..CLIENTS {
            clients.push(
                Locks::connect(&server.client())
                    .await
                    .unwrap()
                    .ttl(Duration::from_secs(30)),
            );
        }
        clients
    });
    let mut runner = TestRunner::new(Config {
        cases: 64,
        failure_persistence: None,
        ..Config::default()
    });
    let case = std::sync::atomic::AtomicU64::new(0);
    runner
        .run(&proptest::collection::vec(op(), 1..40), |ops| {
            // A fresh lock name per case (shrinking included): each case starts from a
            // free lock and no counter.
            let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let name = format!("model-{n}");
            runtime.block_on(run_case(&server, &clients, &name, &ops))
        })
        .unwrap();
}
