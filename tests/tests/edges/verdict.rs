//! What each check of a case must show on a given server, and the failures.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use super::model::{Case, Outcome, hex};
use super::switches::Switches;

/// The server a run is on.
#[derive(Clone, Debug)]
pub struct Server {
    pub valkey: bool,
    pub version: (u32, u32, u32),
    /// For messages: "Valkey 9.1.2 (/path/valkey-server)".
    pub described: String,
}

impl Server {
    /// From `INFO server`: Valkey by its `valkey_version`, Redis otherwise.
    pub fn of(info: &str, described: String) -> Self {
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
        };
        let (valkey, version) = match field("valkey_version") {
            Some(v) => (true, v),
            None => (false, field("redis_version").unwrap_or("0.0.0")),
        };
        let mut parts = version.split('.').map(|p| p.parse().unwrap_or(0));
        let version = (
            parts.next().unwrap_or(0),
            parts.next().unwrap_or(0),
            parts.next().unwrap_or(0),
        );
        Self {
            valkey,
            version,
            described,
        }
    }

    /// Whether the server has a command that appeared in `redis` / `valkey`.
    fn has(&self, redis: Option<(u32, u32)>, valkey: Option<(u32, u32)>) -> bool {
        let since = if self.valkey { valkey } else { redis };
        since.is_some_and(|(major, minor)| (self.version.0, self.version.1) >= (major, minor))
    }

    /// Redis 7.0 brought `#!lua` shebangs, `EVALSHA_RO` and Functions; every Valkey has them.
    pub fn modern(&self) -> bool {
        self.valkey || self.version >= (7, 0, 0)
    }
}

/// What a check must show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expect {
    Is(String),
    /// `LockError::ServerTooOld` naming this (a command, or `SHEBANG`).
    TooOld(&'static str),
    /// `LockError::Unsupported` naming this (`SHEBANG`, `FUNCTIONS`).
    Unsupported(&'static str),
    /// `LockError::ServerTooOld`, whatever it names.
    TooOldAny,
    /// Whatever it is, it names this (upper case).
    Names(&'static str),
    /// One of these.
    AnyOf(Vec<Expect>),
    /// Not judged: a check with no meaning for this case, or switched off.
    Any,
}

impl Expect {
    fn holds(&self, seen: &str) -> bool {
        let error = |kind: &str, what: &str| {
            seen.strip_prefix(kind)
                .is_some_and(|message| message.to_ascii_uppercase().contains(what))
        };
        match self {
            Expect::Is(expected) => expected == seen,
            Expect::TooOld(what) => error("err:ServerTooOld:", what),
            Expect::Unsupported(what) => error("err:Unsupported:", what),
            Expect::TooOldAny => seen.starts_with("err:ServerTooOld:"),
            Expect::Names(what) => seen.to_ascii_uppercase().contains(what),
            Expect::AnyOf(choices) => choices.iter().any(|e| e.holds(seen)),
            Expect::Any => true,
        }
    }
}

impl std::fmt::Display for Expect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Expect::Is(s) => f.write_str(s),
            Expect::TooOld(what) => write!(f, "err:ServerTooOld naming {what}"),
            Expect::Unsupported(what) => write!(f, "err:Unsupported naming {what}"),
            Expect::TooOldAny => f.write_str("err:ServerTooOld"),
            Expect::Names(what) => write!(f, "anything naming {what}"),
            Expect::AnyOf(choices) => {
                let choices: Vec<String> = choices.iter().map(ToString::to_string).collect();
                f.write_str(&choices.join(" or "))
            }
            Expect::Any => f.write_str("(anything)"),
        }
    }
}

/// What a call of `case` must give on `server`: a refused parameter first (nothing is
/// sent), then, when the server lacks what the script needs, the typed error naming it;
/// a shebang a server before 7.0 cannot read is `Unsupported` when the runtime learns it
/// from the server's refusal (`EVALSHA_RO`, or EVAL of the text), `ServerTooOld` when
/// from `INFO` before loading.
fn reply(case: &Case, server: &Server) -> Expect {
    let lacking = case
        .script
        .floor
        .filter(|f| !server.has(f.command.redis, f.command.valkey));
    let (reply, name) = match case.outcome() {
        Outcome::Argument(name, count) => {
            return Expect::Is(format!("err:Argument:{name}:{count}"));
        }
        Outcome::Reply(reply) => (reply, lacking.map(|f| f.command.name)),
    };
    let mut choices = Vec::new();
    if case.script.flags.is_some() && !server.modern() {
        choices.push(Expect::TooOld("SHEBANG"));
        choices.push(Expect::Unsupported("SHEBANG"));
        // The floor names the command that needs the newest server.
        choices.extend(name.map(Expect::TooOld));
    } else if let Some(name) = name {
        choices.push(Expect::TooOld(name));
        if lacking.is_some_and(|f| f.pcall) {
            // The script goes on without the command, where nothing stops it first.
            choices.push(Expect::Is(reply));
        }
    } else {
        return Expect::Is(reply);
    }
    Expect::AnyOf(choices)
}

/// Every check the driver prints for a case, in its order, with what it must show.
/// `nul_library`: a script of the generated binary holds a NUL byte and the server is
/// Valkey, which compiles a library only up to it: every Functions call of the binary is
/// then `Unsupported` naming the NUL byte, whichever script it calls.
pub fn expectations(
    case: &Case,
    server: &Server,
    switches: &Switches,
    nul_library: bool,
) -> Vec<(&'static str, Expect)> {
    let outcome = case.outcome();
    let refused = matches!(outcome, Outcome::Argument(..));
    let (bytes, _) = case.script.expanded();
    let utf8 = std::str::from_utf8(&bytes).is_ok();
    let lacking = case
        .script
        .floor
        .is_some_and(|f| !server.has(f.command.redis, f.command.valkey));
    let old = !server.modern();
    // A check of a class switched off is not judged.
    let unless = |off: &[(&str, bool)], e: Expect| {
        if off
            .iter()
            .any(|(class, applies)| *applies && !switches.on(class))
        {
            Expect::Any
        } else {
            e
        }
    };
    // Commands a server before 7.0 does not know: `EVALSHA_RO`/`EVAL_RO` and FCALL.
    let unknown = ("pre7-unknown-commands", old && !refused);
    let read_only = (unknown.0, unknown.1 && case.script.read_only());
    let reply = unless(&[read_only], reply(case, server));
    // What only a call that runs the script shows.
    let runs = matches!(reply, Expect::Is(_)) && !refused;
    let when_run = |expected: &str| {
        if runs {
            Expect::Is(expected.to_owned())
        } else {
            Expect::Any
        }
    };
    let function_classes = [("non-utf8-functions", !utf8), ("floor-functions", lacking)];
    // With no Functions (before 7.0) only what a call gives has a meaning.
    let functions = |e: Expect| {
        if old {
            Expect::Any
        } else {
            unless(&function_classes, e)
        }
    };
    let calls = if old && !refused {
        unless(&[unknown], Expect::Unsupported("FUNCTIONS"))
    } else if nul_library && !refused {
        // A script the server is too old for is refused before the library is sent.
        Expect::AnyOf(vec![
            Expect::Unsupported("NUL BYTE"),
            functions(reply.clone()),
        ])
    } else {
        functions(reply.clone())
    };
    // No call runs, and the library never loads.
    let (functions_commands, function_body) = if nul_library {
        (Expect::Any, Expect::Names("NUL BYTE"))
    } else {
        (
            functions(when_run("fcall=1 scripts=0")),
            functions(Expect::Is("listed=1 verbatim=1".to_owned())),
        )
    };
    let pipelines = |e: Expect| unless(&[("floor-pipelines", lacking)], e);
    let pipeline_commands = |e: Expect| unless(&[("non-utf8-pipelines", !utf8)], pipelines(e));
    let second = if refused {
        // Refused when added: the second call is never added.
        Expect::Is("(not added)".to_owned())
    } else {
        let shebang = case.script.flags.is_some();
        unless(&[("pre7-pipeline-shebang", old && shebang)], reply.clone())
    };
    vec![
        ("digest", Expect::Is(case.sha1())),
        ("bytes", Expect::Is(hex(&bytes))),
        ("meta", Expect::Is(case.meta())),
        ("evalsha-cold", reply.clone()),
        ("cached-after-evalsha", when_run("1")),
        ("evalsha-cached", reply.clone()),
        ("eval-fallback", reply.clone()),
        ("eval-fallback-commands", when_run("eval=1")),
        ("cached-after-eval", when_run("1")),
        ("async-cold", reply.clone()),
        ("functions-cold", calls.clone()),
        ("functions-cached", calls.clone()),
        ("functions-commands", functions_commands),
        ("function-body", function_body),
        ("functions-async", calls),
        ("pipeline-1", pipelines(reply.clone())),
        ("pipeline-2", pipelines(second.clone())),
        (
            "pipeline-commands",
            pipeline_commands(when_run("eval=1 evalsha=1")),
        ),
        ("transaction-1", pipelines(reply)),
        ("transaction-2", pipelines(second)),
        (
            "transaction-commands",
            pipeline_commands(when_run("eval=1 evalsha=1")),
        ),
    ]
}

/// The checks of every script at once (`load_scripts`), for the cases that compiled:
/// each digest cached, or `ServerTooOld` when the server lacks something one needs.
pub fn whole(compiled: &[&Case], server: &Server) -> Vec<(&'static str, Expect)> {
    let lacking = compiled.iter().any(|case| {
        case.script
            .floor
            .is_some_and(|f| !server.has(f.command.redis, f.command.valkey))
            || case.script.flags.is_some() && !server.modern()
    });
    if lacking {
        vec![("load-scripts", Expect::TooOldAny), ("loaded", Expect::Any)]
    } else {
        vec![
            ("load-scripts", Expect::Is("ok".to_owned())),
            ("loaded", Expect::Is(format!("{0}/{0}", compiled.len()))),
        ]
    }
}

/// The key of the failures of [`whole`] in [`judge`]'s answer.
pub const WHOLE: usize = usize::MAX;

/// One check that did not show what it must.
#[derive(Debug)]
pub struct Failure {
    pub check: &'static str,
    pub expected: String,
    pub seen: String,
}

/// The failures of every case against the driver's lines (`case<TAB>check<TAB>seen`).
pub fn judge(
    cases: &[Case],
    compile_errors: &BTreeMap<usize, String>,
    stdout: &str,
    server: &Server,
    switches: &Switches,
) -> BTreeMap<usize, Vec<Failure>> {
    let mut seen: BTreeMap<(usize, &str), &str> = BTreeMap::new();
    for line in stdout.lines() {
        let mut fields = line.splitn(3, '\t');
        if let (Some(index), Some(check), Some(value)) =
            (fields.next(), fields.next(), fields.next())
        {
            let index = if index == "all" {
                Some(WHOLE)
            } else {
                index.parse().ok()
            };
            if let Some(index) = index {
                seen.insert((index, check), value);
            }
        }
    }
    let mut failures = BTreeMap::new();
    let compiled: Vec<&Case> = cases
        .iter()
        .filter(|c| !compile_errors.contains_key(&c.index))
        .collect();
    let nul_library = server.valkey
        && compiled
            .iter()
            .any(|case| case.script.expanded().0.contains(&0));
    let mut failed = Vec::new();
    for (check, expected) in whole(&compiled, server) {
        let value = seen.get(&(WHOLE, check)).copied();
        match value {
            Some(value) if expected.holds(value) => {}
            _ => failed.push(Failure {
                check,
                expected: expected.to_string(),
                seen: value
                    .unwrap_or("(no line: the driver stopped before)")
                    .to_owned(),
            }),
        }
    }
    if !failed.is_empty() {
        failures.insert(WHOLE, failed);
    }
    for case in cases {
        let mut failed = Vec::new();
        if let Some(why) = case.script.refused {
            // Every server refuses the script: the build must refuse it first, in an error
            // about the script (not one of the signature's).
            let file = format!("scripts/c{}.lua", case.index);
            let errors = compile_errors.get(&case.index);
            if !errors.is_some_and(|e| e.contains(&file)) {
                failed.push(Failure {
                    check: "compile",
                    expected: format!(
                        "a compile error naming {file}: every server refuses the script ({why})"
                    ),
                    seen: errors.map_or("it compiled", |e| e.trim_end()).to_owned(),
                });
            }
        } else if let Some(errors) = compile_errors.get(&case.index) {
            failed.push(Failure {
                check: "compile",
                expected: "the declaration compiles".to_owned(),
                seen: errors.trim_end().to_owned(),
            });
        } else {
            for (check, expected) in expectations(case, server, switches, nul_library) {
                let value = seen.get(&(case.index, check)).copied();
                match value {
                    Some(value) if expected.holds(value) => {}
                    _ => failed.push(Failure {
                        check,
                        expected: expected.to_string(),
                        seen: value
                            .unwrap_or("(no line: the driver stopped before)")
                            .to_owned(),
                    }),
                }
            }
        }
        if !failed.is_empty() {
            failures.insert(case.index, failed);
        }
    }
    failures
}

/// The failure message: a summary by check and by input class, then each failing case
/// in full (the first `detailed` of them), with how to draw it again.
pub fn report(
    cases: &[Case],
    failures: &BTreeMap<usize, Vec<Failure>>,
    seed: u64,
    server: &Server,
    detailed: usize,
    shown: impl Fn(&Case) -> String,
) -> String {
    let mut out = format!(
        "{} of {} generated cases failed on {} (seed {seed}).\n",
        failures.keys().filter(|i| **i != WHOLE).count(),
        cases.len(),
        server.described
    );
    let mut by_check: BTreeMap<&str, usize> = BTreeMap::new();
    let mut by_tag: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for case in cases {
        let failed = failures.contains_key(&case.index);
        for tag in case.tags() {
            let entry = by_tag.entry(tag).or_default();
            entry.1 += 1;
            if failed {
                entry.0 += 1;
            }
        }
    }
    for failed in failures.values() {
        for f in failed {
            *by_check.entry(f.check).or_default() += 1;
        }
    }
    out.push_str("\nfailing checks (cases):\n");
    for (check, n) in &by_check {
        let _ = writeln!(out, "  {check}: {n}");
    }
    out.push_str("\ninput classes (failing cases / cases with it):\n");
    for (tag, (failed, all)) in &by_tag {
        let _ = writeln!(out, "  {tag}: {failed}/{all}");
    }
    out.push_str("\nfailing cases:\n");
    for (index, failed) in failures {
        if *index == WHOLE {
            for f in failed {
                let _ = writeln!(
                    out,
                    "  every script at once, {}:\n    expected: {}\n    seen:     {}",
                    f.check, f.expected, f.seen
                );
            }
            continue;
        }
        let checks: BTreeSet<&str> = failed.iter().map(|f| f.check).collect();
        let tags = cases
            .iter()
            .find(|c| c.index == *index)
            .map(|c| c.tags().into_iter().collect::<Vec<_>>().join(" "))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  case {index}: {} [{tags}]",
            checks.into_iter().collect::<Vec<_>>().join(", ")
        );
    }
    for (index, failed) in failures.iter().take(detailed) {
        let Some(case) = cases.iter().find(|c| c.index == *index) else {
            continue;
        };
        let _ = writeln!(
            out,
            "\n=== case {index} (again alone: LOCKSCRIPT_EDGES_SEED={seed} LOCKSCRIPT_EDGES_ONLY={index} LOCKSCRIPT_EDGES_KEEP=1)\n{}",
            shown(case)
        );
        for f in failed {
            let _ = writeln!(
                out,
                "check {}:\n  expected: {}\n  seen:     {}",
                f.check, f.expected, f.seen
            );
        }
    }
    if failures.len() > detailed {
        let _ = writeln!(
            out,
            "\n({} more failing cases; LOCKSCRIPT_EDGES_DETAIL=N shows N in full)",
            failures.len() - detailed
        );
    }
    out
}
