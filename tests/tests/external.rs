//! A crate outside the workspace depends on lockscript by path, declares its own
//! script, calls it sync and async, reads its digest and finds it in `scripts()`.

use std::path::PathBuf;

use lockscript_test::server::RedisServer;

/// Runs `cargo <command> <args>` on the crate in `external/`; its standard output.
fn cargo_external(command: &str, args: &[&str]) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = lockscript_test::cargo()
        .args([command, "--quiet", "--manifest-path"])
        .arg(root.join("external/Cargo.toml"))
        // Its own target dir: it is a separate workspace with its own lock file.
        .arg("--target-dir")
        .arg(root.join("../target/external"))
        .args(args)
        .output()
        .expect("run cargo");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "cargo {command} in external/ failed:\n{stdout}\n{stderr}"
    );
    stdout
}

#[test]
fn crate_outside_the_workspace_declares_and_runs_its_own_script() {
    let server = RedisServer::start();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let stdout = cargo_external("run", &["--", &server.url()]);

    let source = std::fs::read(root.join("external/lua/bump.lua")).expect("read bump.lua");
    let sha1 = sha1_smol::Sha1::from(&source).digest().to_string();
    assert!(stdout.contains("sync=2 async=5"), "{stdout}");
    assert!(
        stdout.contains(&format!("name=bump sha1={sha1}")),
        "{stdout}"
    );
    // Every script the runtime ships is registered in the external binary too.
    let shipped = std::fs::read_dir(root.join("../scripts"))
        .expect("the scripts directory")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "lua"))
        })
        .count();
    assert!(
        stdout.contains(&format!("registered=true builtin={shipped}")),
        "{stdout}"
    );

    // The server has it cached under the compiled digest (the first call fell back to EVAL).
    let mut conn = server.connection();
    let exists: Vec<bool> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(&sha1)
        .query(&mut conn)
        .expect("SCRIPT EXISTS");
    assert_eq!(exists, vec![true]);
}

/// The crate outside the workspace tests its own script with `#[lockscript_test::test]`
/// (sync with a fixture file, async, and the handle's helpers), as a user's crate would.
#[test]
fn crate_outside_the_workspace_tests_its_script_with_the_attribute() {
    let stdout = cargo_external("test", &["--test", "bump"]);
    assert!(stdout.contains("3 passed"), "{stdout}");
}
