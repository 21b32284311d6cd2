//! Read/write locks and semaphores against real servers: many readers or one writer,
//! writer preference, fencing order, downgrade, a refused upgrade, each holder's own
//! lease; permits counted across handles, a crashed holder's permit coming back at its
//! lease's end, the number of permits changed at run time; the blocking face; Redis
//! Cluster.

use std::time::{Duration, Instant};

use lockscript::{LockError, Locks};
use lockscript_test::cluster::RedisCluster;
use lockscript_test::server::RedisServer;
use redis::aio::ConnectionLike;

/// A liveness bound for waits that must end; never a speed assertion.
const PATIENCE: Duration = Duration::from_secs(10);

/// The scheduling slack of a call on this busy two-core machine (as the chaos checker's).
const SLACK: Duration = Duration::from_millis(250);

async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, fut)
        .await
        .unwrap_or_else(|_| panic!("{what} did not happen within {PATIENCE:?}"))
}

/// A handle of its own (its own connections, as another process has).
async fn handle(server: &RedisServer) -> Locks {
    Locks::connect(&server.client()).await.expect("connect")
}

async fn until_queued<C: ConnectionLike>(conn: &mut C, name: &str, n: usize) {
    within(&format!("{n} waiting"), async {
        loop {
            let queued: usize = redis::cmd("ZCARD")
                .arg(format!("lock:{{{name}}}:queue"))
                .query_async(conn)
                .await
                .unwrap();
            if queued == n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn readers_share_a_writer_excludes_them_and_fences_order_the_writer_last() {
    let server = RedisServer::start();
    let mut conn = server.multiplexed().await;
    let (first, second, third) = (
        handle(&server).await.rw(),
        handle(&server).await.rw(),
        handle(&server).await.rw(),
    );
    let r1 = first.read("doc").await.unwrap();
    let r2 = second
        .try_read("doc")
        .await
        .unwrap()
        .expect("readers share");
    assert!(
        third.try_write("doc").await.unwrap().is_none(),
        "readers hold it"
    );
    let writer = {
        let c = third.clone();
        tokio::spawn(async move { c.write("doc").await.unwrap() })
    };
    until_queued(&mut conn, "doc", 1).await;
    // A writer waits: a new reader does not pass it.
    assert!(
        first.try_read("doc").await.unwrap().is_none(),
        "writer preference"
    );
    let (f1, f2) = (r1.fencing_token(), r2.fencing_token());
    r1.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!writer.is_finished(), "one reader still holds it");
    let released = Instant::now();
    r2.release().await.unwrap();
    let writer = within("the writer's grant", writer).await.unwrap();
    assert!(
        released.elapsed() < SLACK,
        "handed on the last reader's release"
    );
    assert_eq!(writer.attempts(), 1, "handed over: no second call");
    assert!(
        writer.fencing_token() > f1.max(f2),
        "a writer's fence is above every earlier reader's"
    );
    assert!(
        second.try_read("doc").await.unwrap().is_none(),
        "the writer excludes readers"
    );
    writer.release().await.unwrap();
    let again = second.try_read("doc").await.unwrap().expect("free again");
    again.release().await.unwrap();
}

#[tokio::test]
async fn a_writers_release_lets_the_readers_first_in_line_in_together_and_no_later_ones() {
    let server = RedisServer::start();
    let mut conn = server.multiplexed().await;
    let w1 = handle(&server).await.rw();
    let first = w1.write("line").await.unwrap();
    // Queue: reader, reader, writer, reader.
    let mut tasks = Vec::new();
    for (i, write) in [(0, false), (1, false), (2, true), (3, false)] {
        let rw = handle(&server).await.rw();
        tasks.push(tokio::spawn(async move {
            if write {
                let g = rw.write("line").await.unwrap();
                let at = Instant::now();
                tokio::time::sleep(Duration::from_millis(100)).await;
                g.release().await.unwrap();
                (i, at)
            } else {
                let g = rw.read("line").await.unwrap();
                let at = Instant::now();
                tokio::time::sleep(Duration::from_millis(100)).await;
                g.release().await.unwrap();
                (i, at)
            }
        }));
        until_queued(&mut conn, "line", i + 1).await;
    }
    first.release().await.unwrap();
    let mut at = Vec::new();
    for t in tasks {
        at.push(within("every waiter served", t).await.unwrap());
    }
    at.sort_by_key(|(_, t)| *t);
    let order: Vec<usize> = at.iter().map(|(i, _)| *i).collect();
    assert_eq!(
        order[2..],
        [2, 3],
        "the writer, then the reader behind it: {order:?}"
    );
    // The two readers first in line came in together, within one handoff of each other.
    assert!(at[1].1 - at[0].1 < Duration::from_millis(50), "{at:?}");
}

#[tokio::test]
async fn downgrade_keeps_the_lock_and_lets_waiting_readers_in() {
    let server = RedisServer::start();
    let mut conn = server.multiplexed().await;
    let rw = handle(&server).await.rw();
    let writer = rw.write("dg").await.unwrap();
    let fence = writer.fencing_token();
    let other = handle(&server).await.rw();
    let reader = {
        let other = other.clone();
        tokio::spawn(async move { other.read("dg").await.unwrap() })
    };
    until_queued(&mut conn, "dg", 1).await;
    let read = writer.downgrade().await.unwrap();
    assert_eq!(read.fencing_token(), fence, "the same grant, now shared");
    let r2 = within("the waiting reader", reader).await.unwrap();
    assert!(
        other.try_write("dg").await.unwrap().is_none(),
        "two readers hold it"
    );
    // Only readers are left: the write key is gone.
    let writer_key: Option<String> = redis::cmd("GET")
        .arg("lock:{dg}")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(writer_key, None);
    assert!(read.is_held().await.unwrap());
    read.release().await.unwrap();
    r2.release().await.unwrap();
}

#[tokio::test]
async fn an_upgrade_is_a_typed_error_not_a_deadlock() {
    let server = RedisServer::start();
    let rw = handle(&server).await.rw();
    let read = rw.read("up").await.unwrap();
    let started = Instant::now();
    let e = rw.write("up").await.unwrap_err();
    assert!(
        matches!(&e, LockError::Upgrade { name } if name == "up"),
        "{e}"
    );
    assert!(
        started.elapsed() < Duration::from_millis(50),
        "refused at once"
    );
    let e = rw.try_write("up").await.unwrap_err();
    assert!(matches!(e, LockError::Upgrade { .. }));
    // Another task of the same handle is not upgrading: it waits for the reader.
    let waiter = {
        let rw = rw.clone();
        tokio::spawn(async move { rw.write("up").await.map(|g| g.fencing_token()) })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiter.is_finished());
    read.release().await.unwrap();
    within("the other task's write lock", waiter)
        .await
        .unwrap()
        .unwrap();
    // Released: this task may write now.
    let w = rw.write("up").await.unwrap();
    w.release().await.unwrap();
}

/// fair-queue.lua called as a reader of `name` (`op` for `token`, with `ticket`).
async fn as_reader<C: ConnectionLike>(
    conn: &mut C,
    name: &str,
    op: &str,
    token: &str,
    ticket: &str,
) -> (i64, i64, i64, i64) {
    as_holder(conn, name, ("r", 0), op, token, ticket).await
}

/// fair-queue.lua's `op` for `token` as a holder of `kind` (`"r"`, or `"p"` of
/// `permits`), with a lease of 30 s.
async fn as_holder<C: ConnectionLike>(
    conn: &mut C,
    name: &str,
    (kind, permits): (&str, u64),
    op: &str,
    token: &str,
    ticket: &str,
) -> (i64, i64, i64, i64) {
    let key = |suffix: &str| format!("lock:{{{name}}}{suffix}");
    lockscript::builtin::fair_queue(
        &key(""),
        &key(":fence"),
        &key(":queue"),
        &key(":alive"),
        &key(":holders"),
        &key(":fences"),
        op,
        token,
        ticket,
        kind,
        30_000,
        3_600_000,
        2_000,
        permits,
    )
    .invoke_async(conn)
    .await
    .unwrap()
}

/// Reader A (with a ticket) then reader B (without) granted `name`: A's ticket and the
/// two fences.
async fn two_readers<C: ConnectionLike>(conn: &mut C, name: &str) -> (String, i64, i64) {
    let ticket_a = format!("{READER_A} 2000 r nobody");
    let (status, fence_a, ..) = as_reader(conn, name, "acquire", READER_A, &ticket_a).await;
    assert_eq!(status, 1);
    let (status, fence_b, ..) = as_reader(conn, name, "acquire", READER_B, "").await;
    assert_eq!(status, 1);
    (ticket_a, fence_a, fence_b)
}

const READER_A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const READER_B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

#[tokio::test]
async fn a_reader_that_asks_again_learns_its_own_fence_not_the_latest() {
    // A reader whose grant reply (or handoff message) was lost asks again: it must get
    // back its own fencing token, though readers after it raised the counter (found by
    // the chaos checker: two readers reported with one fence).
    let server = RedisServer::start();
    let mut conn = server.multiplexed().await;
    let (a, b) = (READER_A, READER_B);
    let (ticket_a, fence_a, fence_b) = two_readers(&mut conn, "again").await;
    assert_eq!(fence_b, fence_a + 1);
    let (status, again, left, _) = as_reader(&mut conn, "again", "acquire", a, &ticket_a).await;
    assert_eq!(status, 2, "already granted");
    assert_eq!(again, fence_a, "its own fence");
    assert!(left > 0);
    // Released, its fence is forgotten with it.
    let (status, ..) = as_reader(&mut conn, "again", "release", a, "").await;
    assert_eq!(status, 1);
    let fences: Vec<String> = redis::cmd("HKEYS")
        .arg("lock:{again}:fences")
        .query_async(&mut conn)
        .await
        .unwrap();
    let tokens: Vec<_> = fences.iter().filter(|f| *f != "~kind").collect();
    assert_eq!(tokens, [b], "only the other reader's");
}

#[tokio::test]
async fn a_reader_back_without_its_fence_is_served_anew_never_with_fence_zero() {
    // A backward step of the server's clock brings a reader's key of holders back after
    // its expiry had passed, while its key of fences was already deleted (the server's
    // active expiry takes keys one by one). The reader asking again got `{2, 0, ..}`: a
    // grant with fencing token 0 (a 30-minute soak of the AOF topology, seed 9178).
    let server = RedisServer::start();
    let mut conn = server.multiplexed().await;
    let a = READER_A;
    let (ticket_a, _, fence_b) = two_readers(&mut conn, "ghost").await;
    lose_the_fences(&mut conn, "ghost").await;
    let (status, fence, left, _) = as_reader(&mut conn, "ghost", "acquire", a, &ticket_a).await;
    assert_eq!(
        (status, fence, left),
        (1, fence_b + 1, 30_000),
        "granted anew, with the next fence"
    );
    let stored: i64 = redis::cmd("HGET")
        .arg("lock:{ghost}:fences")
        .arg(a)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(stored, fence, "its fence is kept for the next ask");
}

/// What a backward step of the server's clock can leave behind (see the test above):
/// the key of holders without the key of fences.
async fn lose_the_fences<C: ConnectionLike>(conn: &mut C, name: &str) {
    let () = redis::cmd("DEL")
        .arg(format!("lock:{{{name}}}:fences"))
        .query_async(conn)
        .await
        .unwrap();
}

#[tokio::test]
async fn readers_without_their_fences_hold_nothing_for_renew_holds_or_release() {
    // A holder without its fencing token is no holder for every operation, not only
    // for `acquire`: a renewal, a check or a release of it is answered "held nothing".
    let server = RedisServer::start();
    let mut conn = server.multiplexed().await;
    two_readers(&mut conn, "ghosts").await;
    lose_the_fences(&mut conn, "ghosts").await;
    for op in ["holds", "renew", "release"] {
        for token in [READER_A, READER_B] {
            let (status, ..) = as_reader(&mut conn, "ghosts", op, token, "").await;
            assert_eq!(status, 0, "{op} of a reader without its fence");
        }
    }
    let holders: i64 = redis::cmd("EXISTS")
        .arg("lock:{ghosts}:holders")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(holders, 0, "the holders without fences are gone");
}

#[tokio::test]
async fn a_permit_holder_without_its_fence_takes_no_permit() {
    let server = RedisServer::start();
    let mut conn = server.multiplexed().await;
    let one = ("p", 1);
    let (status, fence_a, ..) = as_holder(&mut conn, "sem", one, "acquire", READER_A, "").await;
    assert_eq!(status, 1);
    let (status, ..) = as_holder(&mut conn, "sem", one, "acquire", READER_B, "").await;
    assert_eq!(status, 0, "the one permit is taken");
    lose_the_fences(&mut conn, "sem").await;
    let (status, fence_b, ..) = as_holder(&mut conn, "sem", one, "acquire", READER_B, "").await;
    assert_eq!(
        (status, fence_b),
        (1, fence_a + 1),
        "the permit of a holder without its fence is free, granted with the next fence"
    );
}

#[tokio::test]
async fn a_crashed_readers_share_comes_back_when_its_lease_ends() {
    let server = RedisServer::start();
    let mut conn = server.multiplexed().await;
    let ttl = Duration::from_millis(500);
    let crashed = handle(&server).await.ttl(ttl).watchdog(false).rw();
    let read = crashed.read("gone").await.unwrap();
    let ends = read.lease().valid_until();
    std::mem::forget(read);
    let rw = handle(&server).await.rw();
    let writer = tokio::spawn(async move {
        let w = rw.write("gone").await.unwrap();
        (Instant::now(), w)
    });
    until_queued(&mut conn, "gone", 1).await;
    let (granted, w) = within("the writer after the reader's lease", writer)
        .await
        .unwrap();
    assert!(
        granted <= ends + Duration::from_millis(20) + SLACK,
        "the writer came {:?} after the dead reader's lease ended",
        granted.saturating_duration_since(ends)
    );
    w.release().await.unwrap();
}

#[tokio::test]
async fn a_readers_loss_is_signalled_when_its_share_is_taken_away() {
    let server = RedisServer::start();
    let mut conn = server.multiplexed().await;
    let rw = handle(&server).await.ttl(Duration::from_millis(600)).rw();
    let read = rw.read("taken").await.unwrap();
    // Someone deletes the holders (an operator, a flush): the next renewal finds out.
    let _: () = redis::cmd("DEL")
        .arg("lock:{taken}:holders")
        .query_async(&mut conn)
        .await
        .unwrap();
    let deleted = Instant::now();
    within("the loss signal", read.lost()).await;
    assert!(
        deleted.elapsed() <= Duration::from_millis(200) + SLACK,
        "lost() {:?} after the share was taken (renewals every 200 ms)",
        deleted.elapsed()
    );
    assert!(matches!(
        read.release().await,
        Err(LockError::NotHeld { .. })
    ));
}

#[tokio::test]
async fn permits_are_counted_across_handles_and_handed_on_release() {
    let server = RedisServer::start();
    let mut conn = server.multiplexed().await;
    let mut pools = Vec::new();
    for _ in 0..4 {
        pools.push(handle(&server).await.semaphore(3));
    }
    let mut held = Vec::new();
    for pool in &pools[..3] {
        held.push(
            pool.try_acquire("enc")
                .await
                .unwrap()
                .expect("a free permit"),
        );
    }
    assert!(
        pools[3].try_acquire("enc").await.unwrap().is_none(),
        "all 3 held"
    );
    let fences: Vec<u64> = held.iter().map(|permit| permit.fencing_token()).collect();
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
    let waiter = {
        let pool = pools[3].clone();
        tokio::spawn(async move { pool.acquire("enc").await.unwrap() })
    };
    until_queued(&mut conn, "enc", 1).await;
    let released = Instant::now();
    held.pop().unwrap().release().await.unwrap();
    let p = within("the waiter's permit", waiter).await.unwrap();
    assert!(released.elapsed() < SLACK);
    assert_eq!(p.attempts(), 1, "handed over: no second call");
    assert!(p.fencing_token() > *fences.iter().max().unwrap());
    let holders: usize = redis::cmd("ZCARD")
        .arg("lock:{enc}:holders")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(holders, 3);
    p.release().await.unwrap();
    for p in held {
        p.release().await.unwrap();
    }
}

#[tokio::test]
async fn a_crashed_holders_permit_comes_back_when_its_lease_ends() {
    let server = RedisServer::start();
    let mut conn = server.multiplexed().await;
    let ttl = Duration::from_millis(500);
    let crashed = handle(&server).await.ttl(ttl).watchdog(false).semaphore(1);
    let permit = crashed.acquire("leak").await.unwrap();
    let ends = permit.lease().valid_until();
    std::mem::forget(permit);
    let pool = handle(&server).await.semaphore(1);
    let waiter = tokio::spawn(async move {
        let p = pool.acquire("leak").await.unwrap();
        (Instant::now(), p)
    });
    until_queued(&mut conn, "leak", 1).await;
    let (granted, p) = within("the permit after the lease", waiter).await.unwrap();
    assert!(
        granted <= ends + Duration::from_millis(20) + SLACK,
        "the permit came back {:?} after the dead holder's lease ended",
        granted.saturating_duration_since(ends)
    );
    p.release().await.unwrap();
}

#[tokio::test]
async fn the_number_of_permits_can_change_at_run_time() {
    let server = RedisServer::start();
    let two = handle(&server).await.semaphore(2);
    let p1 = two.acquire("n").await.unwrap();
    let p2 = two.acquire("n").await.unwrap();
    assert!(two.try_acquire("n").await.unwrap().is_none());
    // Raised to 3: a call with the new number admits a third holder.
    let three = handle(&server).await.semaphore(3);
    let p3 = three
        .try_acquire("n")
        .await
        .unwrap()
        .expect("3 permits now");
    // Lowered to 1: nobody more until fewer than 1 hold one; held permits are kept.
    let one = handle(&server).await.semaphore(1);
    assert!(one.try_acquire("n").await.unwrap().is_none());
    assert!(p1.is_held().await.unwrap() && p3.is_held().await.unwrap());
    for p in [p1, p2, p3] {
        p.release().await.unwrap();
    }
    let alone = one.try_acquire("n").await.unwrap().expect("free");
    alone.release().await.unwrap();
    // No permits: refused before anything is sent.
    let refused = handle(&server)
        .await
        .semaphore(0)
        .try_acquire("n")
        .await
        .unwrap_err();
    assert!(
        matches!(refused, LockError::InvalidSettings(_)),
        "{refused}"
    );
}

#[test]
fn the_blocking_face_has_read_write_locks_and_semaphores() {
    let server = RedisServer::start();
    let blocking = || lockscript::blocking::Locks::connect(&server.client()).unwrap();
    let rw = blocking().rw();
    let r = rw.read("b").unwrap();
    assert!(matches!(rw.write("b"), Err(LockError::Upgrade { .. })));
    let other = blocking().rw();
    let writer = std::thread::spawn(move || {
        let w = other.write("b").unwrap();
        let fence = w.fencing_token();
        let read = w.downgrade().unwrap();
        read.release().unwrap();
        fence
    });
    std::thread::sleep(Duration::from_millis(100));
    assert!(!writer.is_finished(), "the writer waits for the reader");
    let reader_fence = r.fencing_token();
    r.release().unwrap();
    assert!(writer.join().unwrap() > reader_fence);

    let pool = blocking().semaphore(2);
    let p1 = pool.acquire("bs").unwrap();
    let p2 = pool.acquire("bs").unwrap();
    assert!(pool.try_acquire("bs").unwrap().is_none());
    let waiter = {
        let pool = blocking().semaphore(2);
        std::thread::spawn(move || pool.acquire("bs").unwrap().attempts())
    };
    std::thread::sleep(Duration::from_millis(100));
    p1.release().unwrap();
    assert_eq!(waiter.join().unwrap(), 1, "handed over");
    p2.release().unwrap();
}

#[tokio::test]
async fn read_write_locks_and_semaphores_work_on_redis_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let connect = || async { Locks::connect_cluster(cluster.urls()).await.unwrap() };
    let (a, b) = (connect().await, connect().await);
    for name in ["c-rw-1", "c-rw-2", "c-rw-3"] {
        let r1 = a.rw().read(name).await.unwrap();
        let r2 = b.rw().read(name).await.unwrap();
        let writer = {
            let rw = b.rw();
            let name = name.to_owned();
            tokio::spawn(async move { rw.write(&name).await.unwrap() })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!writer.is_finished());
        r1.release().await.unwrap();
        r2.release().await.unwrap();
        let w = within("the writer on the cluster", writer).await.unwrap();
        assert!(w.fencing_token() > 0);
        let read = w.downgrade().await.unwrap();
        read.release().await.unwrap();

        let pool = a.semaphore(2);
        let p1 = pool.acquire(name).await.unwrap();
        let p2 = b.semaphore(2).acquire(name).await.unwrap();
        assert!(pool.try_acquire(name).await.unwrap().is_none());
        p1.release().await.unwrap();
        let p3 = pool
            .try_acquire(name)
            .await
            .unwrap()
            .expect("a permit back");
        p2.release().await.unwrap();
        p3.release().await.unwrap();
    }
}

/// Review defect 6: a waiter that gives up (its ticket taken out, nothing held) stood in
/// front of a reader that can come in now; the reader must be served by that release,
/// not left to its own next renewal. The reader here is a bare ticket that never renews:
/// only the release can serve it.
#[tokio::test]
async fn a_waiter_giving_up_serves_the_readers_it_stood_in_front_of() {
    let server = RedisServer::start();
    let mut conn = server.multiplexed().await;
    let reader = handle(&server).await.rw();
    let r1 = reader.read("gave").await.unwrap();
    let writers = handle(&server)
        .await
        .wait_timeout(Duration::from_millis(300))
        .rw();
    let writer = tokio::spawn(async move { writers.write("gave").await });
    until_queued(&mut conn, "gave", 1).await;
    // A reader behind the writer (writer preference keeps it queued).
    let token = "00000000000000000000000000be11ed";
    let ticket = format!("{token} 30000 r nobody-listens");
    let (status, ..) = as_reader(&mut conn, "gave", "acquire", token, &ticket).await;
    assert_eq!(status, 0, "queued behind the writer");
    let err = writer.await.unwrap().unwrap_err();
    let gave_up = Instant::now();
    assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
    let admitted = within("the reader behind the writer to be served", async {
        loop {
            let score: Option<f64> = redis::cmd("ZSCORE")
                .arg("lock:{gave}:holders")
                .arg(token)
                .query_async(&mut conn)
                .await
                .unwrap();
            if score.is_some() {
                return Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
    assert!(
        admitted - gave_up <= SLACK,
        "served {:?} after the writer gave up",
        admitted - gave_up
    );
    r1.release().await.unwrap();
}

/// Review defect 7: one name, one kind. While readers hold a name, a lock of that name
/// is refused by the server (it used to be granted beside them), and so are permits;
/// while permits hold it, readers are refused. Each refusal is a typed error that says
/// what holds the name, and changes nothing.
#[tokio::test]
async fn a_name_held_as_one_kind_refuses_the_others() {
    let server = RedisServer::start();
    let locks = handle(&server).await;
    let reader = locks.rw().read("mixed").await.unwrap();
    for result in [
        locks.try_lock("mixed").await.map(|g| g.is_some()),
        locks.lock("mixed").await.map(|_| true),
        locks
            .semaphore(3)
            .try_acquire("mixed")
            .await
            .map(|p| p.is_some()),
    ] {
        match result {
            Err(LockError::WrongKind { ref name, held, .. }) => {
                assert_eq!(name, "mixed");
                assert!(held.contains("readers"), "{held}");
            }
            other => panic!("a second kind beside readers: {other:?}"),
        }
    }
    let mut conn = server.multiplexed().await;
    let holders: usize = redis::cmd("ZCARD")
        .arg("lock:{mixed}:holders")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(holders, 1, "nothing granted beside the reader");
    assert!(!reader.is_lost());
    reader.release().await.unwrap();

    let permit = locks.semaphore(2).acquire("pool").await.unwrap();
    let err = locks.rw().try_read("pool").await.unwrap_err();
    assert!(
        matches!(err, LockError::WrongKind { held, .. } if held.contains("permits")),
        "{err:?}"
    );
    let err = locks.try_lock("pool").await.unwrap_err();
    assert!(matches!(err, LockError::WrongKind { .. }), "{err:?}");
    permit.release().await.unwrap();
    // Once nobody holds it, the name takes any kind again.
    let guard = locks.try_lock("pool").await.unwrap().expect("free");
    guard.release().await.unwrap();
}
