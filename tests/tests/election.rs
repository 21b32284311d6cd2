//! Leader election against real servers: two candidates and a follower, resignation,
//! a leader paused past its lease (a child process stopped with SIGSTOP) replaced and
//! its term refused by a fenced write, a leader gone without resigning seen gone by its
//! lease end, the scoped form, first come first served, and a Cluster.

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::{Duration, Instant};

use lockscript::{Leader, LockError, Locks, RetryPolicy};
use lockscript_test::cluster::RedisCluster;
use lockscript_test::server::RedisServer;
use redis::aio::ConnectionManager;

/// A liveness bound for waits that must end; never a speed assertion.
const PATIENCE: Duration = Duration::from_secs(30);

/// How late a follower may see a change after the server's message (a proclamation, a
/// resignation) or after a leader's lease end: the guide's figure, for a busy 2-core
/// machine.
const SEEN_WITHIN: Duration = Duration::from_millis(250);

/// How far a call may overrun its bound on a busy machine: the guide's figure.
const CALL_SLACK: Duration = Duration::from_millis(250);

/// How late `lost()` may fire after the validity end: the guide's figure.
const LOSS_SLACK: Duration = Duration::from_millis(100);

async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, fut)
        .await
        .unwrap_or_else(|_| panic!("{what} did not happen within {PATIENCE:?}"))
}

/// Candidates that move only when a release notifies them: a 30 s backoff, a 60 s lease.
async fn patient(server: &RedisServer) -> Locks<ConnectionManager> {
    Locks::connect(&server.client())
        .await
        .expect("connect")
        .ttl(Duration::from_secs(60))
        .wait_timeout(Duration::from_secs(20))
        .retry(RetryPolicy::new(
            Duration::from_secs(30),
            Duration::from_secs(30),
        ))
}

/// An observer of `$election` in a task of its own: a receiver of each change it sees,
/// with the instant it saw it. (A macro: the elections of `Locks` and `Redlock` are two
/// types.)
macro_rules! follow {
    ($election:expr) => {{
        let (to, from) = tokio::sync::mpsc::unbounded_channel::<(Option<Leader>, Instant)>();
        let mut observer = $election.observe();
        tokio::spawn(async move {
            loop {
                let seen = observer.next().await.expect("observe");
                if to.send((seen, Instant::now())).is_err() {
                    return;
                }
            }
        });
        from
    }};
}

async fn seen(
    changes: &mut tokio::sync::mpsc::UnboundedReceiver<(Option<Leader>, Instant)>,
) -> (Option<Leader>, Instant) {
    within("the follower seeing a change", changes.recv())
        .await
        .expect("the observer's task")
}

#[tokio::test]
async fn two_candidates_and_a_follower() {
    let server = RedisServer::start();
    let (one, two, three) = (
        patient(&server).await,
        patient(&server).await,
        patient(&server).await,
    );
    let follower = three.election("jobs");
    let mut changes = follow!(&follower);
    assert_eq!(seen(&mut changes).await.0, None, "nobody leads at first");
    assert_eq!(follower.leader().await.unwrap(), None);

    let first = one.election("jobs").campaign("10.0.0.1:80").await.unwrap();
    let elected = Instant::now();
    let (leader, at) = seen(&mut changes).await;
    let leader = leader.expect("a leader");
    assert_eq!(
        (leader.value.as_str(), leader.term),
        ("10.0.0.1:80", first.term())
    );
    let late = at.saturating_duration_since(elected);
    assert!(
        late <= SEEN_WITHIN,
        "the follower saw the leader {late:?} after"
    );
    assert_eq!(follower.leader().await.unwrap(), Some(leader.clone()));

    // The second candidate waits; the first proclaims a new value, then resigns.
    let second = {
        let election = two.election("jobs");
        tokio::spawn(async move { election.campaign("10.0.0.2:80").await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!second.is_finished(), "one leader at a time");
    first.proclaim("10.0.0.1:81").await.unwrap();
    let proclaimed = Instant::now();
    let (moved, at) = seen(&mut changes).await;
    assert_eq!(moved.unwrap().value, "10.0.0.1:81");
    assert!(at.saturating_duration_since(proclaimed) <= SEEN_WITHIN);

    let resigned = Instant::now();
    first.resign().await.unwrap();
    let second = within("the second candidate", second)
        .await
        .unwrap()
        .unwrap();
    // Its backoff is 30 s and the lease 60 s: only the release can have woken it.
    assert!(resigned.elapsed() < Duration::from_secs(2));
    assert!(second.term() > leader.term, "terms rise");
    let (now, _) = seen(&mut changes).await;
    let now = match now {
        // The follower may see the gap between the two leaders.
        None => seen(&mut changes).await.0,
        some => some,
    };
    assert_eq!(now, follower.leader().await.unwrap());
    assert_eq!(now.unwrap().term, second.term());
    second.resign().await.unwrap();
    assert_eq!(seen(&mut changes).await.0, None);
}

#[tokio::test]
async fn a_leader_gone_without_resigning_is_seen_gone_by_its_lease_end() {
    let server = RedisServer::start();
    let leader_locks = Locks::connect(&server.client())
        .await
        .unwrap()
        .ttl(Duration::from_millis(500))
        .watchdog(false);
    let follower = patient(&server).await.election("gone");
    let mut changes = follow!(&follower);
    assert_eq!(seen(&mut changes).await.0, None);
    let leadership = leader_locks.election("gone").campaign("x").await.unwrap();
    assert!(seen(&mut changes).await.0.is_some());
    // Its lease ends on the server by `valid_until` plus the drift margin.
    let end = leadership.valid_until() + Duration::from_millis(10);
    let (gone, at) = seen(&mut changes).await;
    assert_eq!(gone, None);
    let late = at.saturating_duration_since(end);
    assert!(
        late <= SEEN_WITHIN,
        "seen gone {late:?} after the lease end"
    );
    // Its loss is signalled by then too.
    let lost = tokio::time::timeout(LOSS_SLACK, leadership.lost()).await;
    assert!(lost.is_ok() && leadership.is_lost());
    assert!(matches!(
        leadership.proclaim("again").await,
        Err(LockError::NotHeld { .. })
    ));
}

#[tokio::test]
async fn the_scoped_form_cancels_the_work_on_loss_and_resigns_after() {
    let server = RedisServer::start();
    let locks = Locks::connect(&server.client()).await.unwrap();
    let election = locks.election("scoped");
    let term = election
        .lead("me", |lease| async move { lease.fencing_token() })
        .await
        .unwrap();
    assert!(term > 0);
    assert_eq!(
        election.leader().await.unwrap(),
        None,
        "resigned after the work"
    );

    let short = locks
        .clone()
        .ttl(Duration::from_millis(300))
        .watchdog(false);
    let started = Instant::now();
    let err = short
        .election("scoped")
        .lead("me", |_| std::future::pending::<()>())
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::Lost { .. }), "{err:?}");
    let bound = Duration::from_millis(300) + LOSS_SLACK + Duration::from_millis(100);
    assert!(
        started.elapsed() <= bound,
        "cancelled after {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn fair_candidates_lead_in_the_order_they_campaigned() {
    let server = RedisServer::start();
    let fair = patient(&server).await.fair(true);
    let first = fair.election("fifo").campaign("0").await.unwrap();
    let mut waiting = Vec::new();
    for i in 1..=3 {
        let election = fair.election("fifo");
        waiting.push(tokio::spawn(async move {
            election.campaign(&i.to_string()).await
        }));
        // Each is in the queue before the next campaigns.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    first.resign().await.unwrap();
    let mut last_term = 0;
    for (i, candidate) in waiting.into_iter().enumerate() {
        let leadership = within("the next candidate", candidate)
            .await
            .unwrap()
            .unwrap();
        let leader = fair.election("fifo").leader().await.unwrap().unwrap();
        assert_eq!(
            leader.value,
            (i + 1).to_string(),
            "first come, first served"
        );
        assert!(leadership.term() > last_term);
        last_term = leadership.term();
        leadership.resign().await.unwrap();
    }
}

#[tokio::test]
async fn an_election_on_a_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let a = Locks::connect_cluster(cluster.urls()).await.unwrap();
    let b = Locks::connect_cluster(cluster.urls()).await.unwrap();
    let mut changes = follow!(&b.election("cluster"));
    assert_eq!(seen(&mut changes).await.0, None);
    let leadership = a.election("cluster").campaign("a").await.unwrap();
    let elected = Instant::now();
    let (leader, at) = seen(&mut changes).await;
    let first_term = leadership.term();
    assert_eq!(leader.unwrap().term, first_term);
    assert!(at.saturating_duration_since(elected) <= SEEN_WITHIN);
    assert!(
        b.election("cluster")
            .try_campaign("b")
            .await
            .unwrap()
            .is_none()
    );
    leadership.resign().await.unwrap();
    assert_eq!(seen(&mut changes).await.0, None);
    let next = b
        .election("cluster")
        .try_campaign("b")
        .await
        .unwrap()
        .unwrap();
    assert!(next.term() > first_term, "terms rise");
    assert_eq!(
        b.election("cluster").leader().await.unwrap().unwrap().value,
        "b"
    );
    next.resign().await.unwrap();
}

const PAUSED_VAR: &str = "LOCKSCRIPT_PAUSED_LEADER";

#[tokio::test]
async fn a_leader_paused_past_its_lease_is_replaced_and_its_term_refused() {
    let server = RedisServer::start();
    let mut child = lockscript_test::ignored_test_process("paused_leader_process")
        .env(PAUSED_VAR, server.url())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next = |prefix: &str| -> String {
        loop {
            let line = lines.next().expect("the leader's output").unwrap();
            if let Some(at) = line.find(prefix) {
                return line[at + prefix.len()..].trim().to_owned();
            }
        }
    };
    let old_term: u64 = next("LEADING").parse().unwrap();
    // The old leader's lease (1 s) was granted before it said so.
    let lease_end = Instant::now() + Duration::from_secs(1);
    let pid = child.id().to_string();
    let signal = |sig: &str| {
        let ok = std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap();
        assert!(ok.success(), "kill {sig}");
    };
    let locks = Locks::connect(&server.client())
        .await
        .unwrap()
        .ttl(Duration::from_secs(5))
        .wait_timeout(Duration::from_secs(20));
    let election = locks.election("paused");
    let mut changes = follow!(&election);
    let (first, _) = seen(&mut changes).await;
    assert_eq!(first.map(|l| l.term), Some(old_term), "the leader leads");
    signal("-STOP");
    let leadership = within("the new leader", election.campaign("new"))
        .await
        .unwrap();
    let elected = Instant::now();
    // A candidate refused sleeps past the holder's lease or its backoff (at most 250 ms),
    // then attempts: it leads within that of the old lease's end.
    let bound = RetryPolicy::default().max_delay() + CALL_SLACK;
    let late = elected.saturating_duration_since(lease_end);
    assert!(
        late <= bound,
        "the new leader came {late:?} after the old lease's end"
    );
    assert!(leadership.term() > old_term, "the new term is higher");
    let (leader, at) = seen(&mut changes).await;
    let leader = match leader {
        None => seen(&mut changes).await,
        some => (some, at),
    };
    assert_eq!(leader.0.unwrap().term, leadership.term());
    let late = leader.1.saturating_duration_since(elected);
    assert!(
        late <= SEEN_WITHIN,
        "followers saw the new leader {late:?} after"
    );

    // The new leader writes with its term; the old one wakes and tries with its own.
    let mut conn = server.connection();
    let written = lockscript::builtin::fenced_set("store", "store:seen", leadership.term(), "new")
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(written, 1);
    signal("-CONT");
    writeln!(child.stdin.take().unwrap(), "GO").unwrap();
    assert_eq!(next("LOST"), "true", "the old leader's lease is known lost");
    assert_eq!(
        next("WRITTEN"),
        "0",
        "the old term is refused by the fenced store"
    );
    assert!(child.wait().unwrap().success());
    let value: String = redis::cmd("GET").arg("store").query(&mut conn).unwrap();
    assert_eq!(value, "new");
    leadership.resign().await.unwrap();
}

/// The leader of `a_leader_paused_past_its_lease_is_replaced_and_its_term_refused`, in
/// a process the test stops and continues.
#[tokio::test]
#[ignore = "a child process of a_leader_paused_past_its_lease_is_replaced_and_its_term_refused"]
async fn paused_leader_process() {
    let url = std::env::var(PAUSED_VAR).expect("run by the election test");
    let client = redis::Client::open(url).unwrap();
    let locks = Locks::connect(&client)
        .await
        .unwrap()
        .ttl(Duration::from_secs(1));
    let leadership = locks.election("paused").campaign("old").await.unwrap();
    println!("LEADING {}", leadership.term());
    // Stopped here; continued, told to go on.
    let mut go = String::new();
    tokio::task::spawn_blocking(move || std::io::stdin().read_line(&mut go))
        .await
        .unwrap()
        .unwrap();
    let lost = tokio::time::timeout(Duration::from_secs(1), leadership.lost()).await;
    println!("LOST {}", lost.is_ok());
    let mut conn = client.get_connection().unwrap();
    let written = lockscript::builtin::fenced_set("store", "store:seen", leadership.term(), "old")
        .invoke(&mut conn)
        .unwrap();
    println!("WRITTEN {written}");
}

#[tokio::test]
async fn an_election_on_redlock_follows_a_majority() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let clients: Vec<redis::Client> = servers.iter().map(RedisServer::client).collect();
    let a = lockscript::Redlock::connect(&clients).await.unwrap();
    let b = lockscript::Redlock::connect(&clients).await.unwrap();
    let mut changes = follow!(&b.election("quorum"));
    assert_eq!(seen(&mut changes).await.0, None);
    let leadership = a.election("quorum").campaign("a").await.unwrap();
    let elected = Instant::now();
    let (leader, at) = seen(&mut changes).await;
    assert_eq!(leader.unwrap().term, leadership.term());
    // No notifications on a quorum: observers read every largest backoff (250 ms).
    let bound = lockscript::RetryPolicy::default().max_delay() + SEEN_WITHIN;
    let late = at.saturating_duration_since(elected);
    assert!(late <= bound, "seen {late:?} after, bound {bound:?}");
    assert!(
        b.election("quorum")
            .try_campaign("b")
            .await
            .unwrap()
            .is_none()
    );
    leadership.proclaim("a2").await.unwrap();
    assert_eq!(
        b.election("quorum").leader().await.unwrap().unwrap().value,
        "a2"
    );

    // A record a minority holds is not the leader's: the majority's is.
    let mut minority = servers[0].connection();
    let _: () = redis::cmd("HSET")
        .arg("lock:{quorum}:leader")
        .arg("value")
        .arg("forged")
        .query(&mut minority)
        .unwrap();
    assert_eq!(
        b.election("quorum").leader().await.unwrap().unwrap().value,
        "a2"
    );

    let first = leadership.term();
    leadership.resign().await.unwrap();
    let next = b.election("quorum").campaign("b").await.unwrap();
    assert!(next.term() > first, "terms rise across a quorum");
    let leader = b.election("quorum").leader().await.unwrap().unwrap();
    assert_eq!((leader.value.as_str(), leader.term), ("b", next.term()));
    next.resign().await.unwrap();
}

#[test]
fn the_blocking_face_elects_proclaims_observes_and_resigns() {
    use lockscript::blocking;
    let server = RedisServer::start();
    let connect = || {
        blocking::Locks::connect(&server.client())
            .unwrap()
            .ttl(Duration::from_secs(60))
            .wait_timeout(Duration::from_secs(20))
            .retry(RetryPolicy::new(
                Duration::from_secs(30),
                Duration::from_secs(30),
            ))
    };
    let (one, two, three) = (connect(), connect(), connect());
    let (to, changes) = std::sync::mpsc::channel::<(Option<Leader>, Instant)>();
    let mut observer = three.election("sync").observe();
    std::thread::spawn(move || {
        loop {
            let seen = observer.change().expect("observe");
            if to.send((seen, Instant::now())).is_err() {
                return;
            }
        }
    });
    let seen = || {
        changes
            .recv_timeout(PATIENCE)
            .expect("a change within PATIENCE")
    };
    assert_eq!(seen().0, None);

    let first = one.election("sync").campaign("one").unwrap();
    let elected = Instant::now();
    let (leader, at) = seen();
    assert_eq!(leader.unwrap().term, first.term());
    assert!(at.saturating_duration_since(elected) <= SEEN_WITHIN);

    let second = {
        let election = two.election("sync");
        std::thread::spawn(move || election.campaign("two"))
    };
    std::thread::sleep(Duration::from_millis(300));
    assert!(!second.is_finished(), "one leader at a time");
    assert!(two.election("sync").try_campaign("x").unwrap().is_none());
    let first_term = first.term();
    let resigned = Instant::now();
    first.resign().unwrap();
    let second = second.join().unwrap().unwrap();
    assert!(
        resigned.elapsed() < Duration::from_secs(2),
        "woken by the release"
    );
    assert!(second.term() > first_term, "terms rise");
    let leader = three.election("sync").leader().unwrap().unwrap();
    assert_eq!((leader.value.as_str(), leader.term), ("two", second.term()));
    second.resign().unwrap();
    let term = one
        .election("sync")
        .lead("scoped", lockscript::blocking::Leadership::term)
        .unwrap();
    assert!(term > leader.term);
    assert_eq!(three.election("sync").leader().unwrap(), None);
}
