//! bull's and BullMQ's scripts, which `--- @include` shared files, declared with
//! `#[lock_script]` unchanged (every one of bull's 26 and BullMQ's 49, each with the type
//! its own callers read) and run under a real Redis: the crate in `bull/` (outside the
//! workspace, as the files are third-party and fetched, never committed). The pinned
//! packages are fetched first by `tests/corpus.sh fetch bull bullmq` (npm, installed when
//! missing).

use std::path::PathBuf;
use std::process::Command;

#[test]
fn bull_and_bullmq_scripts_with_includes_build_unchanged_and_run() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let fetched = Command::new("bash")
        .arg(root.join("corpus.sh"))
        .args(["fetch", "bull", "bullmq"])
        .status()
        .expect("run tests/corpus.sh");
    assert!(
        fetched.success(),
        "tests/corpus.sh fetch bull bullmq failed"
    );

    let out = lockscript_test::cargo()
        .args(["test", "--quiet", "--manifest-path"])
        .arg(root.join("bull/Cargo.toml"))
        // Its own target dir: a separate workspace with its own lock file.
        .arg("--target-dir")
        .arg(root.join("../target/external"))
        .output()
        .expect("run cargo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "bull's and BullMQ's scripts failed:\n{stdout}\n{stderr}"
    );
    // A build refuses a declaration the reply check finds wrong, so passing tests also
    // say that every one of bull's 26 and BullMQ's 49 declarations raised no false alarm.
    let passed: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("test result: ok. "))
        .filter_map(|l| l.split(' ').next())
        .filter(|n| *n != "0")
        .collect();
    assert_eq!(
        passed,
        ["6", "4"],
        "bull's 6 tests and BullMQ's 4:\n{stdout}"
    );
}
