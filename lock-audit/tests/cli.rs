//! The `lockscript` binary end to end: exit codes, the JSON shape, a broken script
//! found, and `verify` against a real redis-server.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A private redis-server on a Unix socket in a temp dir, killed on drop. Not the harness's
/// (lockscript-test depends on lockscript, which depends on this crate): a socket needs no
/// free port, so this is all `verify` needs. `REDIS_SERVER_BIN` picks the binary (the first
/// of a list), as for every other test.
struct RedisServer {
    child: Child,
    dir: tempfile::TempDir,
}

impl RedisServer {
    fn start() -> RedisServer {
        Self::with_args(&[])
    }

    fn with_args(args: &[&str]) -> RedisServer {
        let bin = std::env::var_os("REDIS_SERVER_BIN")
            .and_then(|list| std::env::split_paths(&list).find(|p| !p.as_os_str().is_empty()))
            .unwrap_or_else(|| "redis-server".into());
        let dir = tempfile::Builder::new()
            .prefix("cli-redis-")
            .tempdir()
            .unwrap();
        let mut child = Command::new(&bin)
            .args(["--port", "0", "--save", "", "--appendonly", "no"])
            .arg("--unixsocket")
            .arg(dir.path().join("redis.sock"))
            .arg("--dir")
            .arg(dir.path())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let deadline = Instant::now() + Duration::from_secs(10);
        let server = loop {
            assert!(
                child.try_wait().unwrap().is_none(),
                "{} exited during startup",
                bin.display()
            );
            if dir.path().join("redis.sock").exists() {
                break RedisServer { child, dir };
            }
            assert!(Instant::now() < deadline, "{} did not start", bin.display());
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut conn = server.connection();
        let _: String = redis::cmd("PING").query(&mut conn).unwrap();
        server
    }

    /// A Valkey 9+ with its `lua` module unloaded; `None` on other servers.
    fn without_lua() -> Option<RedisServer> {
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query(&mut Self::start().connection())
            .unwrap();
        if !info.contains("valkey_version:9") {
            return None;
        }
        let server = Self::with_args(&["--enable-module-command", "yes"]);
        redis::cmd("MODULE")
            .arg("UNLOAD")
            .arg("lua")
            .exec(&mut server.connection())
            .expect("Valkey 9 unloads its Lua module");
        Some(server)
    }

    fn url(&self) -> String {
        format!(
            "redis+unix://{}",
            self.dir.path().join("redis.sock").display()
        )
    }

    fn connection(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .unwrap()
            .get_connection()
            .unwrap()
    }

    fn has_functions(&self) -> bool {
        redis::cmd("FUNCTION")
            .arg("STATS")
            .query::<redis::Value>(&mut self.connection())
            .is_ok()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn lockscript(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lockscript"))
        .args(args)
        .current_dir(workspace())
        .output()
        .expect("run lockscript")
}

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(out)))
}

/// How many scripts the runtime ships: the `.lua` files of `scripts/`.
fn shipped() -> usize {
    std::fs::read_dir(workspace().join("scripts"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "lua")
        })
        .count()
}

#[test]
fn audit_of_the_shipped_scripts_passes_with_a_table() {
    let out = lockscript(&["audit", "scripts"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let text = stdout(&out);
    for name in ["acquire-with-retry", "compare-del", "renew"] {
        assert!(text.contains(name), "{text}");
    }
    let n = shipped();
    assert!(text.contains(&format!("SHA1SUMS ok ({n} files)")), "{text}");
    assert!(text.contains(&format!("{n} scripts, 0 problems")), "{text}");
}

#[test]
fn audit_json_describes_every_script() {
    let out = lockscript(&["audit", "--json", "scripts"]);
    assert_eq!(out.status.code(), Some(0));
    let v = json(&out);
    assert_eq!(v["problems"], 0);
    let scripts = v["dirs"][0]["scripts"].as_array().unwrap();
    assert_eq!(scripts.len(), shipped());
    let names: Vec<&str> = scripts.iter().filter_map(|s| s["name"].as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted, "scripts are listed by name");
    let acquire = scripts
        .iter()
        .find(|s| s["name"] == "acquire-with-retry")
        .unwrap();
    assert_eq!(acquire["keys"]["highest"], 3);
    assert_eq!(acquire["argv"]["highest"], 3);
    assert_eq!(acquire["read_only"], false);
    assert_eq!(
        acquire["commands"],
        serde_json::json!([
            "SET", "PTTL", "EXISTS", "DEL", "INCR", "TIME", "SET", "DEL", "PEXPIRE", "DEL"
        ])
    );
    let bytes = std::fs::read(workspace().join("scripts/acquire-with-retry.lua")).unwrap();
    assert_eq!(acquire["sha1"], lockscript_audit::sha1_hex(&bytes));
    assert_eq!(v["dirs"][0]["sha1sums"]["present"], true);
    assert_eq!(v["dirs"][0]["sha1sums"]["listed"], shipped());
}

/// What `#[lock_script]` holds a declared return type against, shown by the audit: a
/// line under each script's row, and `replies` in `--json` (the union, and each return).
#[test]
fn audit_shows_what_each_script_replies() {
    let out = lockscript(&["audit", "scripts"]);
    let text = stdout(&out);
    let compare_del = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("compare-del"))
        .nth(1)
        .unwrap_or_default();
    assert_eq!(compare_del.trim(), "replies integer", "{text}");

    let out = lockscript(&["audit", "--json", "scripts"]);
    let v = json(&out);
    let scripts = v["dirs"][0]["scripts"].as_array().unwrap();
    let compare_del = scripts.iter().find(|s| s["name"] == "compare-del").unwrap();
    assert_eq!(compare_del["replies"]["shapes"], "i");
    assert_eq!(compare_del["replies"]["text"], "integer");
    let acquire = scripts
        .iter()
        .find(|s| s["name"] == "acquire-with-retry")
        .unwrap();
    // Held by another owner, acquired, or the error of a failed step.
    let shapes = acquire["replies"]["shapes"].as_str().unwrap();
    assert!(shapes.starts_with("e[") && shapes.contains('i'), "{shapes}");
    let returns = acquire["replies"]["returns"].as_array().unwrap();
    assert!(returns.len() >= 3, "{returns:?}");
    assert!(
        returns.iter().all(|r| r["implicit"] == false),
        "{returns:?}"
    );
}

#[test]
fn audit_finds_a_broken_script_and_a_stale_digest() {
    let out = lockscript(&["audit", "lock-audit/tests/fixtures/broken"]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(
        text.contains("sleep.lua:3:12: `SLEEP` is not a Redis command"),
        "{text}"
    );
    assert!(text.contains("get.lua: SHA1SUMS says 0000"), "{text}");
    assert!(text.contains("sleep.lua: not listed in SHA1SUMS"), "{text}");

    let v = json(&lockscript(&[
        "audit",
        "--json",
        "lock-audit/tests/fixtures/broken",
    ]));
    assert_eq!(v["problems"], 3);
    let sleep = &v["dirs"][0]["scripts"][1];
    assert_eq!(sleep["name"], "sleep");
    assert_eq!(sleep["problems"].as_array().unwrap().len(), 1);
}

#[test]
fn unreadable_directory_and_bad_arguments_exit_with_two() {
    let out = lockscript(&["audit", "no/such/dir"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read no/such/dir"));
    assert_eq!(lockscript(&["frobnicate"]).status.code(), Some(2));
}

#[test]
fn verify_reports_missing_scripts_and_load_fills_the_cache() {
    let server = RedisServer::start();
    let url = server.url();
    let out = lockscript(&["verify", "--url", &url, "scripts"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(stdout(&out).contains("MISSING"), "{}", stdout(&out));

    let out = lockscript(&["verify", "--url", &url, "--load", "--json", "scripts"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let v = json(&out);
    assert!(
        v["scripts"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["status"] == "loaded"),
        "{v}"
    );

    let out = lockscript(&["verify", "--url", &url, "scripts"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        stdout(&out).matches("cached").count(),
        shipped(),
        "{}",
        stdout(&out)
    );
    // The server holds exactly the digests the files hash to.
    let mut conn = server.connection();
    let bytes = std::fs::read(workspace().join("scripts/renew.lua")).unwrap();
    let exists: Vec<bool> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(lockscript_audit::sha1_hex(&bytes))
        .query(&mut conn)
        .unwrap();
    assert_eq!(exists, vec![true]);
}

#[test]
fn verify_against_a_closed_server_exits_with_two() {
    let server = RedisServer::start();
    let url = server.url();
    drop(server);
    let out = lockscript(&["verify", "--url", &url, "scripts"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot connect"));
}

/// `wrap` prints the guarded form byte for byte; its digest is the one `audit --json`
/// and `audit --guarded` report, and the one the macro embeds for `guarded`.
#[test]
fn wrap_prints_the_guarded_form_that_audit_digests() {
    let out = lockscript(&["wrap", "tests/lua/bump.lua"]);
    assert_eq!(out.status.code(), Some(0));
    let file = std::fs::read_to_string(workspace().join("tests/lua/bump.lua")).unwrap();
    assert_eq!(stdout(&out), lockscript_audit::guarded::wrap(&file));
    let digest = lockscript_audit::sha1_hex(&out.stdout);

    let v = json(&lockscript(&["audit", "--json", "tests/lua"]));
    let bump = v["dirs"][0]["scripts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "bump")
        .expect("bump in the JSON");
    assert_eq!(bump["guarded_sha1"], digest.as_str());
    let table = stdout(&lockscript(&["audit", "--guarded", "tests/lua"]));
    assert!(table.contains("GUARDED SHA1"), "{table}");
    assert!(table.contains(&digest), "{table}");

    let missing = lockscript(&["wrap", "tests/lua/nope.lua"]);
    assert_eq!(missing.status.code(), Some(2));
}

/// Scripts in the idiom of large projects: `local rcall = redis.call` everywhere, and
/// `PFCOUNT` / `PUBLISH` in a read-only script. The planted mistakes are found through
/// the alias, at their lines.
#[test]
fn audit_follows_aliases_of_redis_call_and_knows_what_counts_as_a_write() {
    let out = lockscript(&["audit", "lock-audit/tests/fixtures/wild"]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(
        text.contains("claim-job-2.lua:17:7: `HSETT` is not a Redis command"),
        "{text}"
    );
    assert!(
        text.contains("count-events-1.lua:12:17: `PFCOUNT` counts as a write"),
        "{text}"
    );
    assert!(
        text.contains("count-events-1.lua:13:7: `PUBLISH` counts as a write"),
        "{text}"
    );
    assert!(text.contains("2 scripts, 3 problems"), "{text}");
}

/// A key written into a script where a command takes a key (issue 41): a problem at the
/// literal's file:line:col saying to pass it in KEYS, in the table and in `--json`; a key
/// built from KEYS (`KEYS[1] .. ':window'`) is not one.
#[test]
fn audit_reports_a_literal_key_at_the_literal() {
    let out = lockscript(&["audit", "lock-audit/tests/fixtures/keys"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let text = stdout(&out);
    let problems: Vec<&str> = text.lines().filter(|l| l.contains("problem:")).collect();
    assert_eq!(
        problems,
        [
            "  problem: lock-audit/tests/fixtures/keys/take.lua:2:42: `config:limit` is a key \
             of `GET` written into the script: pass it in KEYS instead (a `#[key]` parameter, \
             read as `KEYS[n]`); Redis requires every key a script uses to come in KEYS, on any \
             server (a Cluster routes the script by them alone)",
            "  problem: lock-audit/tests/fixtures/keys/take.lua:7:15: `audit:log` is a key of \
             `XADD` written into the script: pass it in KEYS instead (a `#[key]` parameter, read \
             as `KEYS[n]`); Redis requires every key a script uses to come in KEYS, on any \
             server (a Cluster routes the script by them alone)",
        ],
        "{text}"
    );
    assert!(text.ends_with("1 script, 2 problems\n"), "{text}");

    let out = lockscript(&["audit", "--json", "lock-audit/tests/fixtures/keys"]);
    assert_eq!(out.status.code(), Some(1));
    let v = json(&out);
    let take = &v["dirs"][0]["scripts"][0];
    let problems = take["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems[0]
            .as_str()
            .unwrap()
            .starts_with("lock-audit/tests/fixtures/keys/take.lua:2:42: `config:limit` is a key"),
        "{problems:?}"
    );
}

/// A script that calls no command that writes, without `#!lua flags=no-writes`, gets a
/// hint that the flag would make it read-only (issue 41), in the table and in `--json`;
/// not one that is declared so, one that writes, nor one whose command is computed (can't
/// tell). Hints do not change the exit status.
#[test]
fn audit_hints_no_writes_for_a_script_that_only_reads() {
    let out = lockscript(&["audit", "lock-audit/tests/fixtures/read-only"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let text = stdout(&out);
    let hints: Vec<&str> = text.lines().filter(|l| l.contains("hint:")).collect();
    assert_eq!(
        hints,
        [
            "  hint: lock-audit/tests/fixtures/read-only/peek.lua:1:1: calls no command that \
             writes: `#!lua flags=no-writes` as its first line would make it read-only (then \
             sent as EVALSHA_RO, which replicas run, and a write added later is refused; Redis \
             6.2 reads no shebang)"
        ],
        "{text}"
    );
    assert!(
        text.ends_with("4 scripts, 0 problems, 1 hint, 1 unchecked call\n"),
        "{text}"
    );

    let out = lockscript(&["audit", "--json", "lock-audit/tests/fixtures/read-only"]);
    assert_eq!(out.status.code(), Some(0));
    let v = json(&out);
    assert_eq!(v["hints"], 1);
    for script in v["dirs"][0]["scripts"].as_array().unwrap() {
        let hints = script["hints"].as_array().unwrap();
        if script["name"] == "peek" {
            assert_eq!(hints.len(), 1, "{script}");
            assert!(
                hints[0]
                    .as_str()
                    .unwrap()
                    .contains("`#!lua flags=no-writes` as its first line"),
                "{script}"
            );
        } else {
            assert!(hints.is_empty(), "{script}");
        }
    }
}

/// A script that calls a command only some servers of the matrix have (Valkey's
/// `DELIFEQ`, Redis 8.2's `XACKDEL`) gets a warning naming the servers that lack it and
/// the first version that has it; warnings alone exit with 0.
#[test]
fn audit_warns_about_commands_some_servers_lack_and_still_passes() {
    let out = lockscript(&["audit", "lock-audit/tests/fixtures/matrix"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let text = stdout(&out);
    assert!(
        text.contains(
            "  warning: lock-audit/tests/fixtures/matrix/release-if-owner.lua:5:14: \
             `DELIFEQ` exists from Valkey 9.0.0; Redis 6.2."
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "  warning: lock-audit/tests/fixtures/matrix/ack-and-drop.lua:3:26: \
             `XACKDEL` exists from Redis 8.2.0; Redis 6.2."
        ),
        "{text}"
    );
    assert!(text.contains("and Valkey 9.1."), "{text}");
    assert!(!text.contains("problem:"), "{text}");
    assert!(text.contains("2 scripts, 0 problems, 2 warnings"), "{text}");

    let out = lockscript(&["audit", "--json", "lock-audit/tests/fixtures/matrix"]);
    assert_eq!(out.status.code(), Some(0));
    let v = json(&out);
    assert_eq!(v["problems"], 0);
    assert_eq!(v["warnings"], 2);
    let scripts = v["dirs"][0]["scripts"].as_array().unwrap();
    let release = scripts
        .iter()
        .find(|s| s["name"] == "release-if-owner")
        .unwrap();
    assert_eq!(release["problems"].as_array().unwrap().len(), 0);
    let warnings = release["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1);
    assert!(
        warnings[0].as_str().unwrap().ends_with(" lack it"),
        "{warnings:?}"
    );
}

/// `functions` prints the files' library; `verify --functions` finds each file in a
/// server's lockscript library, `--load` deploys the printed library, and a function
/// whose body was changed on the server no longer passes.
#[test]
fn verify_functions_checks_the_servers_library_against_the_files() {
    let server = RedisServer::start();
    if !server.has_functions() {
        eprintln!("skipped: the server has no Redis Functions (before 7.0)");
        return;
    }
    let url = server.url();
    let printed = lockscript(&["functions", "scripts"]);
    assert_eq!(printed.status.code(), Some(0));
    let code = stdout(&printed);
    assert!(code.starts_with("#!lua name=lockscript_"), "{code}");

    let out = lockscript(&["verify", "--url", &url, "--functions", "scripts"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert_eq!(
        stdout(&out).matches("MISSING").count(),
        shipped(),
        "{}",
        stdout(&out)
    );

    let out = lockscript(&[
        "verify",
        "--url",
        &url,
        "--functions",
        "--load",
        "--json",
        "scripts",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let v = json(&out);
    let scripts = v["scripts"].as_array().unwrap();
    assert_eq!(scripts.len(), shipped());
    assert!(scripts.iter().all(|s| s["status"] == "loaded"), "{v}");

    // The server holds exactly the printed library.
    let mut conn = server.connection();
    let listed: Vec<std::collections::HashMap<String, redis::Value>> = redis::cmd("FUNCTION")
        .arg("LIST")
        .arg("WITHCODE")
        .query(&mut conn)
        .unwrap();
    assert_eq!(listed.len(), 1);
    let on_server: String = redis::from_redis_value_ref(&listed[0]["library_code"]).unwrap();
    assert_eq!(on_server, code);
    let out = lockscript(&["verify", "--url", &url, "--functions", "scripts"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert_eq!(
        stdout(&out).matches("  in lockscript_").count(),
        shipped(),
        "{}",
        stdout(&out)
    );

    // Someone replaces the library with one whose renew.lua body differs.
    let renew = std::fs::read_to_string(workspace().join("scripts/renew.lua")).unwrap();
    assert!(code.contains(&renew));
    let tampered = code.replace(&renew, &renew.replace("PEXPIRE", "pexpire"));
    assert_ne!(tampered, code);
    let () = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(&tampered)
        .query(&mut conn)
        .unwrap();
    let out = lockscript(&["verify", "--url", &url, "--functions", "scripts"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let text = stdout(&out);
    assert!(
        text.contains("does not hash to its name's digest"),
        "{text}"
    );
    assert_eq!(text.matches("MISSING").count(), 1, "only renew.lua: {text}");
}

/// A server that cannot run Lua (Valkey 9 without its `lua` module) is refused before
/// anything is checked, with a message that says so.
#[test]
fn verify_refuses_a_server_without_lua() {
    let Some(server) = RedisServer::without_lua() else {
        eprintln!("skipped: Lua is an unloadable module only in Valkey 9+");
        return;
    };
    let out = lockscript(&["verify", "--url", &server.url(), "scripts"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot run Lua scripts"), "{err}");
}

#[test]
fn audit_expands_includes_reads_nested_directories_and_counts_unchecked_calls() {
    let dir = "lock-audit/tests/fixtures/modules";
    let out = lockscript(&["audit", "--json", dir]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let v = json(&out);
    let scripts = v["dirs"][0]["scripts"].as_array().unwrap();
    // The included file is part of add-job, not a script of its own; the nested one is read.
    let names: Vec<&str> = scripts
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["add-job", "computed-call"]);
    let add = &scripts[0];
    assert_eq!(
        add["includes"],
        serde_json::json!(["includes/getTargetQueueList.lua"])
    );
    assert_eq!(add["problems"], serde_json::json!([]));
    // The digest is the expanded body's: the include line replaced by the file.
    let root = workspace().join(dir);
    let main = std::fs::read_to_string(root.join("add-job.lua")).unwrap();
    let included = std::fs::read_to_string(root.join("includes/getTargetQueueList.lua")).unwrap();
    let expanded = main.replace("--- @include \"includes/getTargetQueueList\"\n", &included);
    assert_eq!(add["sha1"], lockscript_audit::sha1_hex(expanded.as_bytes()));
    let computed = &scripts[1];
    assert_eq!(computed["unchecked_calls"], 1);
    assert_eq!(v["unchecked_calls"], 1);
    let problems = computed["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].as_str().unwrap().ends_with(
            "nested/deeper/computed-call.lua:5:24: `OBJECT ENCODINGG` is not a Redis command: \
             `OBJECT` has no subcommand `ENCODINGG`; did you mean `OBJECT ENCODING`?"
        ),
        "{problems:?}"
    );

    let text = stdout(&lockscript(&["audit", dir]));
    assert!(
        text.contains("includes includes/getTargetQueueList.lua"),
        "{text}"
    );
    assert!(
        text.contains("computed-call.lua:4:7: the command is computed, not a literal"),
        "{text}"
    );
    assert!(
        text.ends_with("2 scripts, 1 problem, 1 unchecked call\n"),
        "{text}"
    );
}

#[test]
fn audit_takes_a_single_file_and_counts_an_empty_directory_as_a_problem() {
    let out = lockscript(&["audit", "lock-audit/tests/fixtures/modules/add-job.lua"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(
        stdout(&out).ends_with("1 script, 0 problems\n"),
        "{}",
        stdout(&out)
    );

    let empty = tempfile::tempdir().unwrap();
    let out = lockscript(&["audit", empty.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(text.contains("no script found"), "{text}");
    assert!(text.ends_with("0 scripts, 1 problem\n"), "{text}");
}

#[test]
fn a_long_name_widens_the_table_instead_of_breaking_it() {
    let dir = tempfile::tempdir().unwrap();
    let long = "a-script-name-well-over-twenty-two-characters";
    std::fs::write(dir.path().join(format!("{long}.lua")), "return 1\n").unwrap();
    std::fs::write(dir.path().join("x.lua"), "return 2\n").unwrap();
    let out = lockscript(&["audit", dir.path().to_str().unwrap()]);
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    // The SHA1 column starts at the same place on every row.
    let column = |line: &str, word: &str| line.find(word).unwrap();
    let header = lines.iter().find(|l| l.contains("SCRIPT")).unwrap();
    let long_row = lines.iter().find(|l| l.contains(long)).unwrap();
    let short_row = lines
        .iter()
        .find(|l| l.trim_start().starts_with("x "))
        .unwrap();
    let sha_long = lockscript_audit::sha1_hex(b"return 1\n");
    let sha_short = lockscript_audit::sha1_hex(b"return 2\n");
    assert_eq!(
        column(header, "SHA1"),
        column(long_row, &sha_long),
        "{text}"
    );
    assert_eq!(
        column(header, "SHA1"),
        column(short_row, &sha_short),
        "{text}"
    );
    assert!(column(long_row, &sha_long) > long.len(), "{text}");
}

#[test]
fn a_closed_pipe_ends_the_output_quietly() {
    use std::io::Read;
    use std::process::Stdio;
    // Far more output than a pipe holds, so the writer meets the closed end.
    let mut args = vec!["audit", "--json"];
    args.extend(std::iter::repeat_n("scripts", 200));
    let mut child = Command::new(env!("CARGO_BIN_EXE_lockscript"))
        .args(&args)
        .current_dir(workspace())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read 10 bytes, then close the pipe, as `| head -c 10` does.
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 10];
    stdout.read_exact(&mut first).unwrap();
    drop(stdout);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
    // The exit status is the audit's (no problem in the shipped scripts), not a crash.
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn audit_names_the_oldest_servers_a_script_runs_on() {
    let out = lockscript(&["audit", "lock-audit/tests/fixtures/matrix"]);
    let text = stdout(&out);
    assert!(
        text.contains("needs no Redis (none has `DELIFEQ`); Valkey 9.0.0 or later (for `DELIFEQ`)"),
        "{text}"
    );
    let out = lockscript(&["audit", "--json", "tests/lua/peek.lua"]);
    let v = json(&out);
    let requires = &v["dirs"][0]["scripts"][0]["requires"];
    assert_eq!(requires["redis"]["version"], "7.0.0");
    assert_eq!(requires["redis"]["because"], "the `#!lua` shebang");
    // Valkey began at 7.2, with shebangs: any Valkey runs it.
    assert_eq!(requires["valkey"], Value::Null);
}

#[test]
fn a_file_that_is_not_utf8_is_audited_as_redis_runs_it() {
    let out = lockscript(&["audit", "--json", "tests/lua/latin1.lua"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let v = json(&out);
    let script = &v["dirs"][0]["scripts"][0];
    let bytes = std::fs::read(workspace().join("tests/lua/latin1.lua")).unwrap();
    assert_eq!(script["sha1"], lockscript_audit::sha1_hex(&bytes));
    assert_eq!(script["commands"], serde_json::json!(["SET"]));
    let warning = script["warnings"][0].as_str().unwrap();
    assert!(warning.ends_with("latin1.lua:6:39: not UTF-8 here: Redis runs the bytes as they are; the checks read them as text with U+FFFD in place of what is not"), "{warning}");
}

/// `inspect` shows a lock taken by the shipped acquire script: its holder's digest (never
/// the token), fencing token and lease, as a table and as JSON; one name not held exits 1.
#[test]
fn inspect_shows_a_held_lock_and_exits_one_for_a_name_nobody_holds() {
    let server = RedisServer::start();
    let url = server.url();
    let mut conn = server.connection();
    let acquire =
        std::fs::read_to_string(workspace().join("scripts/acquire-with-retry.lua")).unwrap();
    let token = "0123456789abcdef0123456789abcdef";
    let (granted, fence): (i64, u64) = redis::cmd("EVAL")
        .arg(&acquire)
        .arg(3)
        .arg("lock:{orders:42}")
        .arg("lock:{orders:42}:fence")
        .arg("lock:{orders:42}:holders")
        .arg(token)
        .arg(30_000)
        .arg(3_600_000)
        .query(&mut conn)
        .unwrap();
    assert_eq!(granted, 1);

    let out = lockscript(&["inspect", &url, "orders:42", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(!stdout(&out).contains(token), "the owner token never shows");
    let v = json(&out);
    let lock = &v["locks"][0];
    assert_eq!(lock["name"], "orders:42");
    assert_eq!(lock["kind"], "lock");
    assert_eq!(lock["fence"]["value"], fence);
    let holder = &lock["holders"][0];
    assert_eq!(holder["fence"], fence);
    assert_eq!(holder["grant"], "exclusive");
    assert_eq!(
        holder["owner"],
        &lockscript_audit::sha1_hex(token.as_bytes())[..8]
    );
    let left = holder["lease_left_ms"].as_i64().unwrap();
    assert!(left > 0 && left <= 30_000, "{left}");

    let out = lockscript(&["inspect", &url, "orders:*"]);
    assert_eq!(out.status.code(), Some(0));
    let table = stdout(&out);
    assert!(
        table.contains("orders:42  lock") && table.contains(&format!("fence {fence}")),
        "{table}"
    );

    let out = lockscript(&["inspect", &url, "orders:43"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("no lock named `orders:43`"),
        "{}",
        stdout(&out)
    );
}

/// A file both listed in SHA1SUMS (a script of its own) and included by another script is
/// audited as a script and also checked inside the one that includes it; only a file
/// that is included and not listed is no script of its own.
#[test]
fn a_listed_script_that_another_includes_is_still_a_script() {
    let dir = tempfile::tempdir().unwrap();
    let helper = b"local function double(x) return x * 2 end\nreturn double(tonumber(ARGV[1]))\n";
    let main = b"--- @include \"helper\"\n";
    let fragment = b"local function half(x) return x / 2 end\n";
    std::fs::write(dir.path().join("helper.lua"), helper).unwrap();
    std::fs::write(dir.path().join("main.lua"), main).unwrap();
    std::fs::create_dir(dir.path().join("includes")).unwrap();
    std::fs::write(dir.path().join("includes/fragment.lua"), fragment).unwrap();
    std::fs::write(
        dir.path().join("other.lua"),
        b"--- @include \"includes/fragment\"\nreturn half(1)\n",
    )
    .unwrap();
    let expanded = |text: &[u8], part: &[u8], line: &str| {
        String::from_utf8_lossy(text).replace(line, &String::from_utf8_lossy(part))
    };
    let sums = format!(
        "{}  helper.lua\n{}  main.lua\n{}  other.lua\n",
        lockscript_audit::sha1_hex(helper),
        lockscript_audit::sha1_hex(expanded(main, helper, "--- @include \"helper\"\n").as_bytes()),
        lockscript_audit::sha1_hex(
            expanded(
                b"--- @include \"includes/fragment\"\nreturn half(1)\n",
                fragment,
                "--- @include \"includes/fragment\"\n"
            )
            .as_bytes()
        ),
    );
    std::fs::write(dir.path().join("SHA1SUMS"), sums).unwrap();
    let out = lockscript(&["audit", "--json", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let v = json(&out);
    let names: Vec<&str> = v["dirs"][0]["scripts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["helper", "main", "other"], "{v}");
    assert_eq!(v["dirs"][0]["sha1sums"]["problems"], serde_json::json!([]));
}

/// `find . -name '*.lua' -exec sha1sum {} +` writes `./x.lua`, which `sha1sum -c` reads:
/// the same file as `x.lua`.
#[test]
fn sha1sums_names_written_with_dot_slash_are_the_files() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("a.lua"), b"return 1\n").unwrap();
    std::fs::write(dir.path().join("sub/b.lua"), b"return 2\n").unwrap();
    let sums = format!(
        "{}  ./a.lua\n{} *./sub/b.lua\n",
        lockscript_audit::sha1_hex(b"return 1\n"),
        lockscript_audit::sha1_hex(b"return 2\n"),
    );
    std::fs::write(dir.path().join("SHA1SUMS"), sums).unwrap();
    let out = lockscript(&["audit", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("SHA1SUMS ok (2 files)"),
        "{}",
        stdout(&out)
    );
    // A name listed twice under two spellings is one file listed twice: a problem.
    let twice = format!(
        "{0}  ./a.lua\n{0}  a.lua\n{1}  sub/b.lua\n",
        lockscript_audit::sha1_hex(b"return 1\n"),
        lockscript_audit::sha1_hex(b"return 2\n"),
    );
    std::fs::write(dir.path().join("SHA1SUMS"), twice).unwrap();
    let out = lockscript(&["audit", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("a.lua is listed twice"),
        "{}",
        stdout(&out)
    );
}

/// A `.lua` file that cannot be read is a problem of that file, named; the others are
/// still audited. (`/proc/self/mem` answers a read at offset 0 with EIO, even for root,
/// for whom a file without read permission is still readable.)
#[cfg(target_os = "linux")]
#[test]
fn an_unreadable_script_is_a_problem_of_its_own_and_the_rest_is_audited() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.lua"), b"return 1\n").unwrap();
    std::os::unix::fs::symlink("/proc/self/mem", dir.path().join("broken.lua")).unwrap();
    std::fs::write(dir.path().join("z.lua"), b"return redis.call('SLEEP', 1)\n").unwrap();
    let out = lockscript(&["audit", dir.path().to_str().unwrap()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!(
            "problem: {}: cannot read the file: Input/output error",
            dir.path().join("broken.lua").display()
        )),
        "{text}"
    );
    assert!(text.contains("`SLEEP` is not a Redis command"), "{text}");
    assert!(text.ends_with("3 scripts, 2 problems\n"), "{text}");
    let v = json(&lockscript(&[
        "audit",
        "--json",
        dir.path().to_str().unwrap(),
    ]));
    let broken = &v["dirs"][0]["scripts"][1];
    assert_eq!(broken["name"], "broken");
    assert_eq!(broken["sha1"], serde_json::Value::Null);
}

/// Every subcommand that talks to a server takes its address first; `--url` says the same
/// (the form `verify` used to need), so both forms work in both.
#[test]
fn verify_and_inspect_take_the_address_the_same_two_ways() {
    let server = RedisServer::start();
    let url = server.url();
    let positional = lockscript(&["verify", &url, "--load", "--json", "scripts"]);
    assert_eq!(positional.status.code(), Some(0), "{}", stdout(&positional));
    let flagged = lockscript(&["verify", "--url", &url, "--json", "scripts"]);
    assert_eq!(flagged.status.code(), Some(0), "{}", stdout(&flagged));
    assert_eq!(
        json(&flagged)["scripts"].as_array().unwrap().len(),
        shipped()
    );
    // The directory defaults to `scripts` after the address, as without it.
    let default_dir = lockscript(&["verify", &url, "--json"]);
    assert_eq!(
        default_dir.status.code(),
        Some(0),
        "{}",
        stdout(&default_dir)
    );
    assert_eq!(json(&default_dir)["scripts"], json(&flagged)["scripts"]);

    for args in [
        vec!["inspect", url.as_str(), "orders:*", "--json"],
        vec!["inspect", "--url", url.as_str(), "orders:*", "--json"],
    ] {
        let out = lockscript(&args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stdout(&out));
        assert_eq!(json(&out)["locks"], serde_json::json!([]), "{args:?}");
    }
}

#[test]
fn a_missing_or_misplaced_address_says_where_it_goes() {
    let out = lockscript(&["verify"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        err.contains("no server address: lockscript verify URL"),
        "{err}"
    );

    let out = lockscript(&["verify", "scripts", "redis://127.0.0.1:1/"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        err.contains("`scripts` is not a server address") && err.contains("comes first"),
        "{err}"
    );

    let out = lockscript(&["inspect", "redis://127.0.0.1:1/", "a", "b"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("one name or pattern"));
}

/// The password of the server's URL never shows, in the output or in an error.
#[test]
fn the_urls_password_is_never_shown() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("auditor")
        .arg("on")
        .arg(">s3cret-pass")
        .arg("~*")
        .arg("&*")
        .arg("+@all")
        .query(&mut conn)
        .unwrap();
    let with = format!("{}?user=auditor&pass=s3cret-pass", server.url());
    let out = lockscript(&["verify", &with, "scripts"]);
    let text = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    assert!(
        text.contains("***"),
        "the URL is shown, its password masked: {text}"
    );
    assert!(!text.contains("s3cret-pass"), "{text}");

    let wrong = format!("{}?user=auditor&pass=wrong-pass", server.url());
    for args in [
        vec!["verify", wrong.as_str()],
        vec!["inspect", wrong.as_str()],
    ] {
        let out = lockscript(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let text = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!text.contains("wrong-pass"), "{args:?}: {text}");
    }
}
