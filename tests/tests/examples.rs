//! The examples users copy (`lock-runtime/examples/`), run against a private server: each
//! does what its documentation says.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use lockscript_test::server::RedisServer;
use redis::Commands;

/// Builds the workspace's examples once (a no-op after `cargo test --workspace`, which
/// builds them with the same features) and returns the path of `name`.
fn example(name: &str) -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        // target/<profile>/deps/examples-<hash> → target/<profile>/examples
        let exe = std::env::current_exe().expect("current_exe");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("target/<profile>");
        let release = profile_dir.file_name().is_some_and(|p| p == "release");
        let mut cargo = lockscript_test::cargo();
        cargo
            .args(["build", "--quiet", "--workspace", "--examples"])
            .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."));
        if release {
            cargo.arg("--release");
        }
        // This test's own features, so the build is the one `cargo test` just made.
        let features: Vec<&str> = [
            (cfg!(feature = "chaos"), "lockscript-harness/chaos"),
            (cfg!(feature = "peers"), "lockscript-harness/peers"),
        ]
        .into_iter()
        .filter_map(|(on, feature)| on.then_some(feature))
        .collect();
        if !features.is_empty() {
            cargo.arg("--features").arg(features.join(","));
        }
        let status = cargo.status().expect("run cargo build --examples");
        assert!(
            status.success(),
            "cargo build --workspace --examples failed"
        );
        profile_dir.join("examples")
    });
    dir.join(name)
}

/// Runs example `name` against `server`; its standard output.
fn run(name: &str, server: &RedisServer) -> String {
    let out = Command::new(example(name))
        .arg(server.url())
        .output()
        .unwrap_or_else(|e| panic!("run example {name}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "example {name} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn jobs_does_every_job_exactly_once() {
    let server = RedisServer::start();
    let stdout = run("jobs", &server);
    for job in ["invoice:1", "invoice:2", "invoice:3", "invoice:4"] {
        let done = stdout
            .lines()
            .filter(|l| l.contains(&format!("did {job} ")))
            .count();
        assert_eq!(done, 1, "{job} done {done} times:\n{stdout}");
    }
    assert!(stdout.contains("4 jobs done, each once"), "{stdout}");
    let done: Vec<String> = server.connection().smembers("jobs:done").unwrap();
    assert_eq!(done.len(), 4, "{done:?}");
}

#[test]
fn leader_terms_never_overlap_and_rise_and_the_follower_sees_each() {
    let server = RedisServer::start();
    let stdout = run("leader", &server);
    let candidates: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("candidate "))
        .collect();
    assert_eq!(candidates.len(), 6, "{stdout}");
    let mut terms = Vec::new();
    let mut leaders = Vec::new();
    for pair in candidates.chunks(2) {
        // "candidate N leads in term T" then that candidate's "resigns": a term ends
        // before the next begins.
        let leader = pair[0].split(' ').nth(1).expect("candidate id");
        assert!(pair[0].contains(" leads in term "), "{stdout}");
        assert_eq!(pair[1], format!("candidate {leader} resigns"), "{stdout}");
        let term: u64 = pair[0]
            .rsplit("term ")
            .next()
            .and_then(|t| t.parse().ok())
            .expect("term");
        terms.push(term);
        leaders.push(leader.to_owned());
    }
    assert!(terms.windows(2).all(|w| w[0] < w[1]), "terms {terms:?}");
    // The follower saw every leader, with its address and term.
    for (leader, term) in leaders.iter().zip(&terms) {
        let seen = format!("follower: 10.0.0.{leader}:8080 leads in term {term}");
        assert!(
            stdout.lines().any(|l| l == seen),
            "{seen} missing:\n{stdout}"
        );
    }
    leaders.sort();
    leaders.dedup();
    assert_eq!(leaders.len(), 3, "every candidate led once: {stdout}");
}

#[test]
fn own_script_runs_and_audits_with_the_same_digest() {
    let server = RedisServer::start();
    let stdout = run("own_script", &server);
    assert!(
        stdout.contains("balance after t-1: 50; t-1 again: -1; after t-2: 75"),
        "{stdout}"
    );
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../lock-runtime/examples/scripts");
    let report = lockscript_audit::audit::audit_dir(&dir).expect("audit");
    assert_eq!(
        report.problem_count(),
        0,
        "{:?}",
        report.scripts[0].problems
    );
    let sha1 = &report.scripts[0].sha1;
    assert!(
        stdout.contains(&format!("script examples/scripts/credit.lua sha1 {sha1}")),
        "{stdout}"
    );
}
