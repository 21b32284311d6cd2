//! Differential check of the script analysis against the real servers: scripts generated
//! from a fixed seed, each judged by `lockscript_audit::lua::analyze_on` for the server
//! under test, then loaded and run there. The two must agree: the analysis finds no
//! problem exactly when the server loads the script and runs it without a refusal the
//! analysis is about (a shebang it cannot read, a global or library member it does not
//! define, a read-only table written).
//!
//! The scripts combine what the analysis rules on per server:
//! - a shebang, or none: the engine spelled right or not, flag lists with unknown flags,
//!   duplicates, empty flags (a comma at either end, two commas, a space after a comma),
//!   `flags=` alone, several `flags=` words, tabs, CRLF, and no newline at all;
//! - reads of globals from a pool of every global some server of the matrix defines
//!   (generated, [`lockscript_audit::globals::GLOBALS`]) and names none defines;
//! - calls of library members, bare or guarded (`if os.time then os.time() end`), and
//!   writes into global tables and new globals.
//!
//! Quoted shebangs are not generated: the analysis refuses them on purpose, as Redis and
//! Valkey split them differently (see `lockscript_audit`'s shebang module).
//!
//! Run under `cargo test` it checks 300 scripts on each server of `REDIS_SERVER_BIN`
//! (a few seconds). `AUDIT_DIFFERENTIAL_CASES=20000` checks more, and
//! `AUDIT_DIFFERENTIAL_SEED=n` starts from another seed; a failure names the seed and the
//! case, and prints the script.
//!
//! A seeded generator, not proptest: each case costs two round trips to a live server,
//! the scripts are a few lines and printed whole on failure (shrinking would add little),
//! and the same seed must give the same corpus on every server of the matrix.

use lockscript_audit::commands::{Product, SERVERS, Server, Servers};
use lockscript_audit::globals::GLOBALS;
use lockscript_audit::lua::{analyze, analyze_on};
use redis::Value;

/// Cases per server under `cargo test`.
const CASES: usize = 300;
const SEED: u64 = 0x5eed_a0d1_7000_0043;

/// Names no server of the matrix defines: Lua 5.1 libraries the sandboxes leave out,
/// later Lua's names, and typos.
const UNDEFINED: &[&str] = &[
    "require", "dofile", "loadfile", "io", "debug", "package", "module", "utf8", "bit32", "jit",
    "printf", "tonumbr", "Redis", "rediss", "os2", "unpak",
];

/// Member calls that succeed wherever the member exists (no argument errors, no side
/// effects), and members no server has.
const MEMBER_CALLS: &[&str] = &[
    "os.clock()",
    "os.time()",
    "redis.acl_check_cmd('GET', 'k')",
    "redis.sha1hex('x')",
    "redis.setresp(2)",
    "server.sha1hex('x')",
    "string.len('x')",
    "string.fromat('x')",
    "math.floor(1.5)",
    "cjson.encode({})",
    "table.getn({})",
    "bit.band(1, 3)",
];

const FLAGS: &[&str] = &[
    "no-writes",
    "allow-oom",
    "allow-stale",
    "no-cluster",
    "allow-cross-slot-keys",
    "NO-WRITES",
    "fast",
    "",
];

/// splitmix64: a small, seeded, portable generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % u64::try_from(n).unwrap()).unwrap()
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<'a, T: ?Sized>(&mut self, from: &[&'a T]) -> &'a T {
        from[self.below(from.len())]
    }
}

/// A shebang line (with its line end, or none), or nothing.
fn shebang(rng: &mut Rng) -> String {
    if rng.chance(35) {
        return String::new();
    }
    let engine = *[
        "#!lua", "#!lua", "#!lua", "#!lua", "#!LUA", "#! lua", "#!", "#!lua5",
    ]
    .get(rng.below(8))
    .unwrap();
    let mut line = engine.to_owned();
    for _ in 0..rng.below(3) {
        let gap = *["  ", "\t", " \u{b}", " "].get(rng.below(4)).unwrap();
        let word = match rng.below(8) {
            0 => "flags=".to_owned(),
            1 => "name=x".to_owned(),
            2 => "FLAGS=no-writes".to_owned(),
            _ => {
                let n = 1 + rng.below(3);
                let flags: Vec<&str> = (0..n).map(|_| rng.pick(FLAGS)).collect();
                let mut list = flags.join(",");
                match rng.below(10) {
                    0 => list.push(','),
                    1 => list.insert(0, ','),
                    2 => list.push_str(", no-writes"),
                    _ => {}
                }
                format!("flags={list}")
            }
        };
        line.push_str(gap);
        line.push_str(&word);
    }
    if rng.chance(15) {
        line.push_str("  ");
    }
    match rng.below(12) {
        0 => line,
        1 | 2 => line + "\r\n",
        _ => line + "\n",
    }
}

/// A few statements, each run when the script runs (no dead code, so the server meets
/// every name the analysis reads).
fn body(rng: &mut Rng, pool: &[&str], eol: &str) -> String {
    let mut lines = Vec::new();
    for i in 0..rng.below(4) {
        let line = match rng.below(10) {
            0..=4 => format!("local v{i} = {}", rng.pick(pool)),
            5 | 6 => rng.pick(MEMBER_CALLS).to_owned(),
            7 => {
                let call = rng.pick(MEMBER_CALLS);
                let member = call.split('(').next().unwrap();
                format!("if {member} then {call} end")
            }
            8 => format!(
                "local m{i} = {}",
                rng.pick(&["os.time", "redis.REDIS_VERSION", "string.len"])
            ),
            _ => rng
                .pick(&[
                    "newglobal = 1",
                    "string.pad = 1",
                    "KEYS[1] = 'k'",
                    "local t = {} t.x = 1",
                ])
                .to_owned(),
        };
        lines.push(line);
    }
    lines.push("return 1".to_owned());
    lines.join(eol) + if rng.chance(50) { eol } else { "" }
}

/// How the server answered a script: accepted, or the refusal.
fn run_on_server(conn: &mut redis::Connection, script: &str) -> Result<(), String> {
    let sha1: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(script)
        .query(conn)
        .map_err(|e| format!("SCRIPT LOAD: {e}"))?;
    match redis::cmd("EVALSHA").arg(&sha1).arg(0).query::<Value>(conn) {
        Ok(Value::ServerError(e)) => Err(format!("EVALSHA: {e:?}")),
        Ok(_) => Ok(()),
        Err(e) => Err(format!("EVALSHA: {e}")),
    }
}

/// A refusal the analysis is about (every other error would be a bad case).
fn analysis_covers(refusal: &str) -> bool {
    [
        "shebang",
        "scripting engine",
        "unexpected symbol near '#'",
        "nonexistent global variable",
        "attempt to call field",
        "readonly table",
    ]
    .iter()
    .any(|known| refusal.contains(known))
}

/// The server of the matrix the connection talks to: the same product and version, or
/// else the same product and `major.minor` (a distribution's point release).
fn matrix_server(conn: &mut redis::Connection) -> &'static Server {
    let info: String = redis::cmd("INFO").arg("server").query(conn).unwrap();
    let field = |key: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
            .map(|v| v.trim().to_owned())
    };
    let (product, version) = match field("valkey_version") {
        Some(v) => (Product::Valkey, v),
        None => (Product::Redis, field("redis_version").unwrap()),
    };
    let line = |v: &str| {
        v.split('.')
            .take(2)
            .map(str::to_owned)
            .collect::<Vec<String>>()
    };
    SERVERS
        .iter()
        .find(|s| s.product == product && s.version == version)
        .or_else(|| {
            SERVERS
                .iter()
                .find(|s| s.product == product && line(s.version) == line(&version))
        })
        .unwrap_or_else(|| {
            panic!(
                "{product} {version} is not a server of the matrix the analysis knows \
                 ({SERVERS:?}): run the test on one of them, or regenerate the tables \
                 (./run commands) with this one in the matrix"
            )
        })
}

fn number(var: &str, default: u64) -> u64 {
    std::env::var(var).ok().map_or(default, |v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{var}={v} is not a number"))
    })
}

#[lockscript_test::test]
fn audit_verdicts_match_what_the_server_does(mut conn: redis::Connection) {
    let server = matrix_server(&mut conn);
    let this = Servers::from_fn(|s| s == server);
    let cases = usize::try_from(number("AUDIT_DIFFERENTIAL_CASES", CASES as u64)).unwrap();
    let seed = number("AUDIT_DIFFERENTIAL_SEED", SEED);
    let mut pool: Vec<&str> = GLOBALS
        .iter()
        .map(|g| g.name)
        .filter(|n| !n.contains('.'))
        .collect();
    pool.extend(UNDEFINED);
    let mut rng = Rng(seed);
    let (mut accepted, mut refused) = (0, 0);
    for case in 0..cases {
        let head = shebang(&mut rng);
        let eol = if head.ends_with("\r\n") || rng.chance(10) {
            "\r\n"
        } else {
            "\n"
        };
        let script = if !head.is_empty() && !head.ends_with('\n') {
            // No newline after the shebang: the file is the shebang alone.
            head
        } else {
            head + &body(&mut rng, &pool, eol)
        };
        let verdict = analyze_on(&script, this);
        let ran = run_on_server(&mut conn, &script);
        let context = || {
            format!(
                "case {case} of seed {seed:#x} on {server}:\n--- script ---\n{script}\n--- \
                 analysis ---\n{:#?}\n--- server ---\n{ran:?}",
                verdict.problems
            )
        };
        if let Err(refusal) = &ran {
            assert!(
                analysis_covers(refusal),
                "a refusal the generator should not cause: {}",
                context()
            );
        }
        assert_eq!(
            verdict.problems.is_empty(),
            ran.is_ok(),
            "the analysis and the server disagree: {}",
            context()
        );
        // What `lockscript audit` and the macro say without being told the server: a
        // script they pass runs on every server they judged it for.
        let audit = analyze(&script);
        if audit.problems.is_empty() && audit.servers.contains(server) {
            assert!(
                ran.is_ok(),
                "audit passes a script the server refuses: {}",
                context()
            );
        }
        if ran.is_ok() {
            accepted += 1;
        } else {
            refused += 1;
        }
    }
    // The corpus is worth its time only if it has both kinds in number.
    assert!(
        accepted * 10 >= cases && refused * 10 >= cases,
        "seed {seed:#x} on {server}: {accepted} accepted, {refused} refused of {cases}"
    );
    eprintln!("{server}: {accepted} accepted and {refused} refused, as the analysis said");
}
