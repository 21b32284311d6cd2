//! bull's scripts that use `--- @include`, declared with `#[lock_script]` unchanged and
//! run under a real Redis: the crate in `bull/` (outside the workspace, as the files are
//! third-party and fetched, never committed). The pinned package is fetched first by
//! `tests/corpus.sh fetch bull` (npm, installed when missing) into `target/corpus`.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn bull_scripts_with_includes_build_unchanged_and_run() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let fetched = Command::new("bash")
        .arg(root.join("corpus.sh"))
        .args(["fetch", "bull"])
        .status()
        .expect("run tests/corpus.sh");
    assert!(fetched.success(), "tests/corpus.sh fetch bull failed");

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
        "bull's scripts failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("4 passed"), "{stdout}");
}
