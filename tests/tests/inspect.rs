//! `lockscript inspect` against real servers: a held lock, a fair lock with waiters, a
//! read/write lock with readers and a waiting writer, a semaphore with permits, and locks
//! spread over the primaries of a Cluster; each read with the commands of a read-only ACL
//! user, and every figure checked against what the holders know of themselves.

use std::time::Duration;

use lockscript::Locks;
use lockscript_audit::inspect::{Grant, Kind, LockState, Options, Report, inspect, owner_digest};
use lockscript_test::cluster::RedisCluster;
use lockscript_test::server::RedisServer;

/// A liveness bound for waits that must end; never a speed assertion.
const PATIENCE: Duration = Duration::from_secs(10);

/// The read-only user of the guide's ACL line for `lockscript inspect`.
const INSPECTOR: &str = "inspector";

fn options(pattern: &str) -> Options {
    Options {
        pattern: Some(pattern.to_owned()),
        ..Options::default()
    }
}

/// Adds the read-only user `lockscript inspect` documents, and returns its URL.
fn read_only_url(server: &RedisServer) -> String {
    let mut conn = server.connection();
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg(INSPECTOR)
        .arg("on")
        .arg(">secret")
        .arg("~lock:*")
        .arg("resetchannels")
        .arg("-@all")
        .arg("+scan")
        .arg("+get")
        .arg("+pttl")
        .arg("+zrange")
        .arg("+zcard")
        .arg("+hgetall")
        .arg("+time")
        .arg("+cluster|slots")
        .query::<()>(&mut conn)
        .expect("ACL SETUSER");
    server
        .url()
        .replacen("redis://", &format!("redis://{INSPECTOR}:secret@"), 1)
}

/// Inspects until `done` holds of the one lock `name` (waiters queue asynchronously).
async fn until(url: &str, name: &str, done: impl Fn(&LockState) -> bool) -> LockState {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let url = url.to_owned();
        let opts = options(name);
        let report = tokio::task::spawn_blocking(move || inspect(&url, &opts))
            .await
            .unwrap()
            .expect("inspect");
        if let Some(lock) = report.locks.into_iter().find(|l| l.name == name)
            && done(&lock)
        {
            return lock;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "lock `{name}` never reached the expected state within {PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_shows_its_holder_lease_and_fence_without_the_token() {
    let server = RedisServer::start();
    let url = read_only_url(&server);
    let locks = Locks::connect(&server.client())
        .await
        .unwrap()
        .ttl(Duration::from_secs(30));
    let guard = locks.lock("orders:42").await.unwrap();

    let lock = until(&url, "orders:42", |l| !l.holders.is_empty()).await;
    assert_eq!(lock.kind, Kind::Lock);
    assert_eq!(lock.holders.len(), 1);
    let holder = &lock.holders[0];
    assert_eq!(holder.grant, Grant::Exclusive);
    assert_eq!(holder.fence, Some(guard.fencing_token()));
    let server_left = holder.lease_left_ms;
    let client_left = i64::try_from(guard.remaining().as_millis()).unwrap();
    assert!(
        server_left > 0 && server_left <= 30_000 && server_left + 1000 >= client_left,
        "the server's lease left ({server_left} ms) is the holder's ({client_left} ms) or later"
    );
    let fence = lock.fence.clone().expect("the fence counter");
    assert_eq!(fence.value, guard.fencing_token());
    assert!(
        fence.expires_in_ms.is_some_and(|ms| ms > 30_000),
        "{fence:?}"
    );

    // The owner token never shows, only its digest: the JSON holds no 32-hex token.
    let report = Report {
        cluster: false,
        nodes: vec![],
        locks: vec![lock.clone()],
        truncated: false,
    };
    let json = lockscript_audit::inspect::json(&report).to_string();
    let table = lockscript_audit::inspect::table(&report);
    let owner: String = redis::cmd("GET")
        .arg("lock:{orders:42}")
        .query(&mut server.connection())
        .unwrap();
    assert!(
        !json.contains(&owner) && !table.contains(&owner),
        "{json}\n{table}"
    );
    assert_eq!(holder.owner, owner_digest(&owner));
    assert!(
        table.contains("orders:42  lock") && table.contains(&holder.owner),
        "{table}"
    );

    guard.release().await.unwrap();
    let freed = until(&url, "orders:42", |l| l.holders.is_empty()).await;
    assert_eq!(
        freed.fence.map(|f| f.value),
        Some(fence.value),
        "the counter outlives the lease"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_lock_shows_its_waiters_in_line_and_alive() {
    let server = RedisServer::start();
    let url = read_only_url(&server);
    let fair = || async {
        Locks::connect(&server.client())
            .await
            .unwrap()
            .fair(true)
            .ttl(Duration::from_secs(30))
            .wait_timeout(PATIENCE)
    };
    let holder = fair().await;
    let guard = holder.lock("hot").await.unwrap();
    let mut waiting = Vec::new();
    for n in 1..=2 {
        let handle = fair().await;
        waiting.push(tokio::spawn(async move {
            let g = handle.lock("hot").await.unwrap();
            g.release().await.unwrap();
        }));
        until(&url, "hot", |l| l.waiters_total == n).await;
    }
    let lock = until(&url, "hot", |l| l.waiters.len() == 2).await;
    assert_eq!(lock.kind, Kind::Fair);
    assert_eq!(lock.holders[0].fence, Some(guard.fencing_token()));
    assert!(
        lock.waiters
            .iter()
            .all(|w| w.alive && w.grant == Grant::Exclusive)
    );
    assert!(
        lock.waiters[0].waiting_ms >= lock.waiters[1].waiting_ms,
        "first in line waited longest: {:?}",
        lock.waiters
    );
    assert_ne!(lock.waiters[0].owner, lock.waiters[1].owner);

    let first = guard.fencing_token();
    guard.release().await.unwrap();
    for w in waiting {
        tokio::time::timeout(PATIENCE, w).await.unwrap().unwrap();
    }
    let done = until(&url, "hot", |l| {
        l.waiters_total == 0 && l.holders.is_empty()
    })
    .await;
    assert!(done.fence.unwrap().value > first + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_write_lock_shows_its_readers_and_a_waiting_writer() {
    let server = RedisServer::start();
    let url = read_only_url(&server);
    let locks = Locks::connect(&server.client())
        .await
        .unwrap()
        .ttl(Duration::from_secs(30))
        .wait_timeout(PATIENCE);
    let rw = locks.rw();
    let first = rw.read("catalog").await.unwrap();
    let second = rw.read("catalog").await.unwrap();
    let lock = until(&url, "catalog", |l| l.holders.len() == 2).await;
    assert_eq!(lock.kind, Kind::ReadWrite);
    let mut fences: Vec<_> = lock.holders.iter().map(|h| h.fence.unwrap()).collect();
    fences.sort_unstable();
    assert_eq!(fences, vec![first.fencing_token(), second.fencing_token()]);
    assert!(
        lock.holders
            .iter()
            .all(|h| h.grant == Grant::Read && h.lease_left_ms > 0)
    );

    let other = Locks::connect(&server.client())
        .await
        .unwrap()
        .wait_timeout(PATIENCE)
        .rw();
    let writer = tokio::spawn(async move {
        let w = other.write("catalog").await.unwrap();
        w.release().await.unwrap();
    });
    let lock = until(&url, "catalog", |l| l.waiters.len() == 1).await;
    assert_eq!(lock.waiters[0].grant, Grant::Exclusive);
    assert!(lock.waiters[0].alive);
    first.release().await.unwrap();
    second.release().await.unwrap();
    tokio::time::timeout(PATIENCE, writer)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_shows_its_permits() {
    let server = RedisServer::start();
    let url = read_only_url(&server);
    let pool = Locks::connect(&server.client())
        .await
        .unwrap()
        .ttl(Duration::from_secs(30))
        .semaphore(3);
    let a = pool.acquire("encoder").await.unwrap();
    let b = pool.acquire("encoder").await.unwrap();
    let lock = until(&url, "encoder", |l| l.holders.len() == 2).await;
    assert_eq!(lock.kind, Kind::Semaphore);
    assert!(lock.holders.iter().all(|h| h.grant == Grant::Permit));
    let mut fences: Vec<_> = lock.holders.iter().map(|h| h.fence.unwrap()).collect();
    fences.sort_unstable();
    assert_eq!(fences, vec![a.fencing_token(), b.fencing_token()]);
    a.release().await.unwrap();
    until(&url, "encoder", |l| l.holders.len() == 1).await;
    b.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pattern_finds_every_lock_on_every_primary_of_a_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let locks = Locks::connect_cluster(cluster.urls())
        .await
        .unwrap()
        .ttl(Duration::from_secs(30));
    // Names until three masters hold one each.
    let mut guards = Vec::new();
    let mut masters = Vec::new();
    for n in 0.. {
        let name = format!("job:{n}");
        let master = cluster.master_for_key(&format!("lock:{{{name}}}"));
        if masters.contains(&master) {
            continue;
        }
        masters.push(master);
        guards.push((name.clone(), locks.lock(&name).await.unwrap()));
        if masters.len() == 3 {
            break;
        }
    }
    let url = cluster.urls()[0].clone();
    let report = tokio::task::spawn_blocking({
        let url = url.clone();
        move || inspect(&url, &options("job:*"))
    })
    .await
    .unwrap()
    .expect("inspect");
    assert!(report.cluster);
    assert_eq!(report.nodes.len(), 3);
    let mut found: Vec<_> = report
        .locks
        .iter()
        .map(|l| (l.name.clone(), l.holders[0].fence, l.node.clone()))
        .collect();
    found.sort();
    let mut expected: Vec<_> = guards
        .iter()
        .map(|(name, g)| (name.clone(), Some(g.fencing_token())))
        .collect();
    expected.sort();
    assert_eq!(
        found
            .iter()
            .map(|(n, f, _)| (n.clone(), *f))
            .collect::<Vec<_>>(),
        expected
    );
    let nodes: std::collections::HashSet<_> = found.iter().map(|(_, _, node)| node).collect();
    assert_eq!(nodes.len(), 3, "one lock on each primary: {found:?}");

    // One name is read from the primary that serves its slot, whichever node was asked.
    let (name, guard) = &guards[2];
    let other = cluster.urls()[1].clone();
    let one = tokio::task::spawn_blocking({
        let name = name.clone();
        move || inspect(&other, &options(&name))
    })
    .await
    .unwrap()
    .expect("inspect one");
    assert_eq!(one.locks.len(), 1);
    assert_eq!(one.locks[0].holders[0].fence, Some(guard.fencing_token()));
    for (_, g) in guards {
        g.release().await.unwrap();
    }
}

#[test]
fn an_unreachable_server_is_an_error_that_names_it() {
    let err = inspect("redis://127.0.0.1:1/", &Options::default()).unwrap_err();
    assert!(err.contains("127.0.0.1:1"), "{err}");
}
