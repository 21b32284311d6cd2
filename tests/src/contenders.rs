//! Contention across OS processes: a test binary starts copies of itself, each running
//! one ignored test as a contender that prints a line per grant; the parent merges
//! them into one history for [`crate::history::assert_exclusive`].

use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Nanoseconds on the wall clock, which every process on the machine shares.
pub fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// The line a contender prints for one grant.
///
/// ```
/// assert_eq!(lockscript_test::contenders::grant_line(3, 10, 20), "GRANT 3 10 20");
/// ```
pub fn grant_line(fence: u64, start: u128, end: u128) -> String {
    format!("GRANT {fence} {start} {end}")
}

/// The body of a contender process: `tasks` tasks each take the lock `rounds` times
/// through `grant`, hold it for `hold`, and release it; then every grant is printed as
/// a [`grant_line`] for [`run`] to collect. `grant` acquires and returns the fencing
/// token and the future that releases the grant.
///
/// # Panics
///
/// If a task panics (a failed acquire or release).
pub async fn contend<G, Fut, R>(tasks: usize, rounds: usize, hold: Duration, grant: G)
where
    G: Fn() -> Fut + Clone + Send + 'static,
    Fut: Future<Output = (u64, R)> + Send,
    R: Future<Output = ()> + Send,
{
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let grant = grant.clone();
            tokio::spawn(async move {
                let mut lines = Vec::new();
                for _ in 0..rounds {
                    let (fence, release) = grant().await;
                    let start = now_ns();
                    tokio::time::sleep(hold).await;
                    lines.push(grant_line(fence, start, now_ns()));
                    release.await;
                }
                lines
            })
        })
        .collect();
    for handle in handles {
        for line in handle.await.expect("a contending task") {
            println!("{line}");
        }
    }
}

/// Runs `count` copies of the current test binary, each running only the ignored test
/// `test` with `env` set, and returns every grant they printed as (fence, start, end).
/// Panics with a contender's output if one fails.
pub fn run(test: &str, env: (&str, &str), count: usize) -> Vec<(u64, u128, u128)> {
    let exe = std::env::current_exe().expect("the test binary");
    let children: Vec<_> = (0..count)
        .map(|_| {
            Command::new(&exe)
                .args([
                    test,
                    "--exact",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(env.0, env.1)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start a contender")
        })
        .collect();
    let mut history = Vec::new();
    for child in children {
        let out = child.wait_with_output().expect("a contender's output");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "contender failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // libtest may print "test name ... " on the same line first.
        for line in stdout
            .lines()
            .filter_map(|l| l.split_once("GRANT ").map(|(_, g)| g))
        {
            let mut fields = line
                .split(' ')
                .map(|f| f.parse::<u128>().expect("a number"));
            let (fence, start, end) = (
                fields.next().expect("fence"),
                fields.next().expect("start"),
                fields.next().expect("end"),
            );
            history.push((u64::try_from(fence).expect("a u64 fence"), start, end));
        }
    }
    history
}
