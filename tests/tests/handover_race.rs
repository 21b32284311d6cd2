//! A waiter whose own attempt is granted while a guard of its handle is in the middle of
//! handing the lock over to it: the handover cannot succeed (the key is the waiter's
//! now), so `lock()` returns at once instead of waiting for the releaser's answer. The
//! chaos soak (single seed 108) saw `lock()` hold such a grant until the releaser's
//! handover timed out, and return it 357 ms after its validity had ended.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lockscript::{Locks, RetryPolicy};
use lockscript_test::server::RedisServer;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{Cmd, Pipeline, RedisFuture, Value};

/// A real connection that holds some commands on the way out, as a slow network would:
/// acquires for 150 ms while `slow_acquire` is set, handovers for 2 s while
/// `slow_handover` is set. Nothing else is touched.
#[derive(Clone)]
struct SlowNetwork {
    inner: MultiplexedConnection,
    slow_acquire: Arc<AtomicBool>,
    slow_handover: Arc<AtomicBool>,
}

/// Whether `cmd` runs the script with digest `sha1`.
fn runs(cmd: &Cmd, sha1: &str) -> bool {
    cmd.args_iter()
        .any(|arg| matches!(arg, redis::Arg::Simple(bytes) if bytes == sha1.as_bytes()))
}

impl ConnectionLike for SlowNetwork {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let acquire = lockscript::builtin::acquire("k", "f", "h", "t", 1, 1)
            .script()
            .sha1();
        let handover = lockscript::builtin::handover("k", "f", "a", "b", 1, 1)
            .script()
            .sha1();
        let hold = if self.slow_handover.load(Ordering::SeqCst) && runs(cmd, handover) {
            Duration::from_secs(2)
        } else if self.slow_acquire.load(Ordering::SeqCst) && runs(cmd, acquire) {
            Duration::from_millis(150)
        } else {
            Duration::ZERO
        };
        Box::pin(async move {
            tokio::time::sleep(hold).await;
            self.inner.req_packed_command(cmd).await
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        // A plain lock's attempt: its MULTI/EXEC.
        let acquire = cmd.cmd_iter().any(|c| {
            c.args_iter()
                .next()
                .is_some_and(|a| matches!(a, redis::Arg::Simple(b) if b == b"MULTI"))
        });
        let hold = if self.slow_acquire.load(Ordering::SeqCst) && acquire {
            Duration::from_millis(150)
        } else {
            Duration::ZERO
        };
        Box::pin(async move {
            tokio::time::sleep(hold).await;
            self.inner.req_packed_commands(cmd, offset, count).await
        })
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_granted_by_its_own_attempt_does_not_wait_for_a_stuck_handover() {
    let server = RedisServer::start();
    let (slow_acquire, slow_handover) = (Arc::default(), Arc::default());
    let conn = SlowNetwork {
        inner: server
            .client()
            .get_multiplexed_async_connection()
            .await
            .unwrap(),
        slow_acquire: Arc::clone(&slow_acquire),
        slow_handover: Arc::clone(&slow_handover),
    };
    // No notifications: the waiter polls every 20 ms. A 300 ms lease, as in the soak.
    let locks = Locks::new(conn)
        .ttl(Duration::from_millis(300))
        .wait_timeout(Duration::from_secs(5))
        .retry(RetryPolicy::new(
            Duration::from_millis(20),
            Duration::from_millis(20),
        ));
    let first = locks.lock("x").await.unwrap();

    let waiter = {
        let locks = locks.clone();
        tokio::spawn(async move {
            let guard = locks.lock("x").await;
            (guard, Instant::now())
        })
    };
    // The waiter was refused and stands its offer. From now on its attempts reach the
    // server 150 ms after they are made, so the next one arrives after what follows.
    tokio::time::sleep(Duration::from_millis(100)).await;
    slow_acquire.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(60)).await;
    // The key vanishes without a release notice, and the release that follows takes the
    // waiter's offer and sends a handover that stays out for the response timeout.
    let _: () = redis::cmd("DEL")
        .arg("lock:{x}")
        .query(&mut server.connection())
        .unwrap();
    slow_handover.store(true, Ordering::SeqCst);
    let releasing = Instant::now();
    let released = first.release().await;
    let release_ended = Instant::now();
    assert!(released.is_err(), "the handover timed out: {released:?}");
    assert!(release_ended - releasing >= Duration::from_millis(400));

    let (guard, granted_at) = waiter.await.unwrap();
    let guard = guard.expect("the waiter's own attempt found the key free");
    assert!(
        granted_at < release_ended,
        "lock() waited {:?} for the releaser's handover to time out",
        granted_at - releasing
    );
    assert!(
        !guard.is_lost() && guard.valid_until() > granted_at,
        "lock() returned a lease that had already ended"
    );
    guard.release().await.unwrap();
}
