//! `lockscript`: audit Redis Lua scripts as plain files, and check what a server runs.
//!
//! ```text
//! lockscript audit [--json] [--guarded] [DIR...]
//! lockscript verify URL [--functions] [--load] [--json] [DIR...]
//! lockscript wrap FILE
//! lockscript functions [--guarded] [DIR...]
//! lockscript inspect URL [NAME | PATTERN] [--prefix P] [--json] [--watch SECS]
//! ```
//!
//! The server's address comes first in every subcommand that talks to one; `--url URL`
//! anywhere on the line says the same (the older form of `verify`), and then every word
//! left is a directory or the pattern.
//!
//! `audit` runs the checks `#[lock_script]` runs at compile time on every script of each
//! directory and its subdirectories (default `scripts`; a single `.lua` file works too),
//! with its `--- @include`s expanded (a file only included is checked inside what includes
//! it; one `SHA1SUMS` lists is a script too), and checks the directory's `SHA1SUMS`
//! (expanded digests; names as `sha1sum` writes them, `./x.lua` too). Finding no script is
//! a problem, and so is a file that cannot be read (the others are still audited;
//! `functions` and `verify`, which send the files, stop on it). Each script's includes, the oldest servers it needs and what it may reply (`replies`,
//! the shapes `#[lock_script]` holds the declared return type against) are shown; a call whose
//! command is computed is noted as unchecked (`unchecked` in `--json`).
//! `verify` asks a server (`SCRIPT EXISTS`) which of those digests it holds, and with
//! `--load` loads the missing ones, refusing any digest the server reports differently.
//! With `--functions` it reads the server's lockscript function libraries instead
//! (`FUNCTION LIST WITHCODE`): each file must be the body of a function named with its
//! digest, and every function's body must still hash to the digest in its name.
//! `verify` first checks that the server can run Lua at all (`FUNCTION STATS` lists its
//! engines; a Valkey 9 without its `lua` module has none).
//! `functions` prints the Redis Functions library of the files, exactly what a binary
//! with the same scripts loads with `Delivery::Functions` (`redis-cli -x FUNCTION LOAD <`
//! deploys it by hand).
//! `wrap` prints the owner-guarded form of a script, exactly what
//! `#[lock_script("...", guarded)]` sends; `audit --guarded` adds its digest to the table.
//!
//! `audit` also prints warnings: calls of commands that some servers of the test matrix
//! lack (Valkey's `DELIFEQ`, Redis 8's `XACKDEL`), naming them and the first version that
//! has the command; and hints: a script that calls no command that writes (every call
//! seen, with a literal command) but is not declared `#!lua flags=no-writes`, which would
//! make it read-only. Neither changes the exit status.
//!
//! `inspect` shows the locks on a live server (every primary of a Cluster), read-only:
//! for each lock its kind, each holder's lease left and fencing token (a digest of its
//! owner token, never the token), the fence counter and when it expires, and the waiters
//! in line with their age and whether their process is alive; see
//! `lockscript_audit::inspect` for what it reads and the ACL it needs.
//!
//! Exit status: 0 when everything is in order, 1 when a problem was found, 2 when the
//! command could not run (bad arguments, unreadable directory, unreachable server).

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use lockscript_audit::audit::{DirReport, ScriptReport, audit_dir};
use serde_json::{Value, json};

#[derive(Parser)]
#[command(
    name = "lockscript",
    version,
    about = "Audit Redis Lua scripts as plain files"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check every .lua file (syntax, KEYS/ARGV, commands, literal keys, globals, shebang)
    /// and SHA1SUMS.
    Audit {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Add each script's guarded digest (what `#[lock_script(..., guarded)]` sends).
        #[arg(long)]
        guarded: bool,
        /// Directories of scripts.
        #[arg(default_value = "scripts")]
        dirs: Vec<PathBuf>,
    },
    /// Print the owner-guarded form of a script: what `#[lock_script(..., guarded)]`
    /// sends, byte for byte (pipe it to `sha1sum` for its digest).
    Wrap {
        /// The script file.
        file: PathBuf,
    },
    /// Print the scripts as one Redis Functions library: what FUNCTION LOAD takes.
    Functions {
        /// Add each script's guarded form (what `#[lock_script(..., guarded)]` sends).
        #[arg(long)]
        guarded: bool,
        /// Directories of scripts.
        #[arg(default_value = "scripts")]
        dirs: Vec<PathBuf>,
    },
    /// Show the locks on a live server (every primary of a Cluster), read-only: holders
    /// (a digest of the owner token, lease left, fencing token), the fence counter,
    /// waiters (age, alive).
    Inspect {
        /// The server, e.g. redis://127.0.0.1:6379/ (any node of a Cluster), then one lock
        /// name or a glob over names (`orders:*`; every lock when absent).
        #[arg(value_name = "URL [NAME | PATTERN]")]
        words: Vec<String>,
        /// The server, as the first word says it (the form `verify` used to need).
        #[arg(long)]
        url: Option<String>,
        /// The key prefix of the lock handles.
        #[arg(long, default_value = "lock:")]
        prefix: String,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Print again every SECS seconds until interrupted.
        #[arg(long, value_name = "SECS")]
        watch: Option<f64>,
        /// The COUNT of each SCAN call.
        #[arg(long, default_value_t = 1000)]
        count: usize,
        /// Read at most this many locks.
        #[arg(long, default_value_t = 1000)]
        max: usize,
    },
    /// Report which scripts a server has cached (SCRIPT EXISTS), or with --functions which
    /// are in its function libraries; --load adds the missing.
    Verify {
        /// The server, as the first word says it (the older form: `--url URL DIR...`).
        #[arg(long)]
        url: Option<String>,
        /// Check the server's lockscript function libraries instead of its script cache.
        #[arg(long)]
        functions: bool,
        /// SCRIPT LOAD the scripts the server does not have (FUNCTION LOAD the files'
        /// library with --functions).
        #[arg(long)]
        load: bool,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// The server, e.g. redis://127.0.0.1:6379/, then the directories of scripts
        /// (default `scripts`).
        #[arg(value_name = "URL [DIR]")]
        words: Vec<String>,
    },
}

/// The server's address and the words after it: the first word, as every subcommand that
/// talks to a server takes it, or `--url` (then every word is what follows the address).
fn address(
    url: Option<String>,
    mut words: Vec<String>,
    usage: &str,
) -> Result<(String, Vec<String>), Fatal> {
    if let Some(url) = url {
        return Ok((url, words));
    }
    if words.is_empty() {
        return Err(Fatal(format!(
            "no server address: {usage} (e.g. redis://127.0.0.1:6379/)"
        )));
    }
    let url = words.remove(0);
    if !url.contains("://") {
        return Err(Fatal(format!(
            "`{url}` is not a server address (redis://host:port/, rediss://... or \
             unix://...), which comes first: {usage}"
        )));
    }
    Ok((url, words))
}

/// `writeln!` into the output, which is a `String` (writing to it cannot fail).
macro_rules! say {
    ($out:expr, $($arg:tt)*) => {{
        let _ = writeln!($out, $($arg)*);
    }};
}

/// `write!` into the output.
macro_rules! say_raw {
    ($out:expr, $($arg:tt)*) => {{
        let _ = write!($out, $($arg)*);
    }};
}

/// Something that stops the command from running at all (exit status 2).
struct Fatal(String);

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut out = String::new();
    let out = &mut out;
    // The password of the server's URL, never shown: output and errors end up in CI
    // logs and on the screens of whoever is on call.
    let secret = match &cli.command {
        Command::Inspect { words, url, .. } | Command::Verify { words, url, .. } => url
            .as_deref()
            .or(words.first().map(String::as_str))
            .and_then(password_of),
        _ => None,
    };
    let redact = |text: &str| match &secret {
        Some(secret) => text.replace(secret.as_str(), "***"),
        None => text.to_owned(),
    };
    let outcome = match cli.command {
        Command::Audit {
            json,
            guarded,
            dirs,
        } => audit(&dirs, json, guarded, out),
        Command::Wrap { file } => wrap(&file, out),
        Command::Functions { guarded, dirs } => functions(&dirs, guarded),
        Command::Inspect {
            words,
            url,
            prefix,
            json,
            watch,
            count,
            max,
        } => match address(url, words, "lockscript inspect URL [NAME | PATTERN]") {
            Ok((_, rest)) if rest.len() > 1 => Err(Fatal(format!(
                "inspect takes one name or pattern after the address, not {}: quote a \
                 pattern (`'orders:*'`) so the shell does not expand it",
                rest.len()
            ))),
            Ok((url, mut rest)) => {
                let options = lockscript_audit::inspect::Options {
                    prefix,
                    pattern: rest.pop(),
                    scan_count: count.max(1),
                    max_locks: max.max(1),
                };
                match watch {
                    Some(secs) => return watch_locks(&url, &options, json, secs),
                    None => inspect(&url, &options, json, out),
                }
            }
            Err(e) => Err(e),
        },
        Command::Verify {
            url,
            functions,
            load,
            json,
            words,
        } => match address(url, words, "lockscript verify URL [DIR...]") {
            Ok((url, dirs)) => {
                let mut dirs: Vec<PathBuf> = dirs.into_iter().map(PathBuf::from).collect();
                if dirs.is_empty() {
                    dirs.push(PathBuf::from("scripts"));
                }
                if functions {
                    verify_functions(&url, load, &dirs, json, out)
                } else {
                    verify(&url, load, &dirs, json, out)
                }
            }
            Err(e) => Err(e),
        },
    };
    // Everything is written at once, and a reader that stopped reading (`| head`) is
    // not an error: the output was not wanted any further.
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout
        .write_all(redact(out).as_bytes())
        .and_then(|()| stdout.flush())
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        eprintln!("lockscript: cannot write the output: {e}");
        return ExitCode::from(2);
    }
    match outcome {
        Ok(0) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(1),
        Err(Fatal(message)) => {
            eprintln!("lockscript: {}", redact(&message));
            ExitCode::from(2)
        }
    }
}

/// The password in a server's URL (`redis://user:password@host/`, or
/// `redis+unix:///path?pass=password`), as written there.
fn password_of(url: &str) -> Option<String> {
    let parsed = redis::parse_redis_url(url)?;
    let password = match parsed.password() {
        Some(password) => password.to_owned(),
        None => parsed
            .query_pairs()
            .find(|(key, _)| key == "pass")
            .map(|(_, value)| value.into_owned())?,
    };
    (!password.is_empty()).then(|| percent_decode(&password))
}

/// `%XX` escapes decoded (a password with `@` or `:` is written escaped in a URL).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `lockscript inspect`: the report once; 1 when one name was asked for and is not held,
/// queued or counted.
fn inspect(
    url: &str,
    options: &lockscript_audit::inspect::Options,
    json: bool,
    out: &mut String,
) -> Result<usize, Fatal> {
    use lockscript_audit::inspect;
    let report = inspect::inspect(url, options).map_err(Fatal)?;
    if json {
        say!(out, "{:#}", inspect::json(&report));
    } else {
        say_raw!(out, "{}", inspect::table(&report));
    }
    let asked_one = options
        .pattern
        .as_deref()
        .is_some_and(|p| !inspect::is_glob(p));
    if asked_one && report.locks.is_empty() {
        if !json {
            say!(
                out,
                "no lock named `{}` (prefix `{}`)",
                options.pattern.as_deref().unwrap_or_default(),
                options.prefix
            );
        }
        return Ok(1);
    }
    Ok(0)
}

/// `lockscript inspect --watch SECS`: the report again every `secs` seconds, on a cleared
/// screen, until interrupted; a failed read is shown and tried again at the next tick.
fn watch_locks(
    url: &str,
    options: &lockscript_audit::inspect::Options,
    json: bool,
    secs: f64,
) -> ExitCode {
    let Ok(every) = std::time::Duration::try_from_secs_f64(secs) else {
        eprintln!("lockscript: --watch takes a number of seconds, not {secs}");
        return ExitCode::from(2);
    };
    let every = every.max(std::time::Duration::from_millis(100));
    loop {
        let mut out = String::new();
        let read = inspect(url, options, json, &mut out);
        let mut stdout = std::io::stdout().lock();
        let shown = match read {
            Ok(_) => write!(stdout, "\x1b[2J\x1b[H{out}"),
            Err(Fatal(message)) => {
                writeln!(stdout, "\x1b[2J\x1b[Hlockscript: {message} (trying again)")
            }
        };
        if shown.and_then(|()| stdout.flush()).is_err() {
            return ExitCode::SUCCESS; // the reader went away
        }
        drop(stdout);
        std::thread::sleep(every);
    }
}

fn reports(dirs: &[PathBuf]) -> Result<Vec<DirReport>, Fatal> {
    dirs.iter()
        .map(|dir| audit_dir(dir).map_err(|e| Fatal(format!("cannot read {}: {e}", dir.display()))))
        .collect()
}

/// The reports of `dirs` for a command that sends the files (`functions`, `verify`): a
/// file that cannot be read stops it, as its bytes are unknown (`audit` reports it as a
/// problem of that file instead).
fn readable_reports(dirs: &[PathBuf]) -> Result<Vec<DirReport>, Fatal> {
    let reports = reports(dirs)?;
    if let Some(script) = reports
        .iter()
        .flat_map(|r| &r.scripts)
        .find(|s| s.unreadable.is_some())
    {
        return Err(Fatal(format!(
            "cannot read {}: {}",
            script.path.display(),
            script.unreadable.as_deref().unwrap_or_default()
        )));
    }
    Ok(reports)
}

/// `KEYS`/`ARGV` as the table shows them: the highest literal index, `+` when the
/// script also reads the table by count.
fn count(usage: &lockscript_audit::lua::Usage) -> String {
    format!("{}{}", usage.highest, if usage.dynamic { "+" } else { "" })
}

fn flags(script: &ScriptReport) -> String {
    if script.analysis.flags.is_empty() {
        "-".to_owned()
    } else {
        script.analysis.flags.join(",")
    }
}

fn script_json(script: &ScriptReport) -> Value {
    let a = &script.analysis;
    json!({
        "name": script.name,
        "path": script.path.display().to_string(),
        "sha1": script.unreadable.is_none().then_some(&script.sha1),
        "keys": { "highest": a.keys.highest, "dynamic": a.keys.dynamic },
        "argv": { "highest": a.argv.highest, "dynamic": a.argv.dynamic },
        "flags": a.flags,
        "read_only": a.read_only(),
        "commands": a.commands.iter().map(|c| c.name.replace('|', " ").to_ascii_uppercase()).collect::<Vec<_>>(),
        "includes": includes(script),
        "requires": floor_json(script),
        "problems": script.problems,
        "warnings": script.warnings,
        "hints": script.hints,
        "unchecked_calls": script.unchecked.len(),
        "unchecked": script.unchecked,
        "guarded_sha1": script.guarded_sha1(),
        "replies": replies_json(script),
    })
}

/// Every shape the script may reply, in words ("nil | bulk string"); empty when it could
/// not be analysed.
fn replies(script: &ScriptReport) -> String {
    let all = lockscript_audit::reply::Return::all(&script.analysis.returns);
    if all.is_empty() {
        String::new()
    } else {
        all.to_string()
    }
}

/// `{"shapes": "nb", "text": "nil | bulk string", "returns": [{"line": 3, ...}]}`: the
/// union of what the script may reply, and each `return` by its line in the expanded
/// body (`implicit`: the script's end, reached without one), each in the compact form of
/// `lockscript_audit::reply::Shapes::code` and in words.
fn replies_json(script: &ScriptReport) -> Value {
    let all = lockscript_audit::reply::Return::all(&script.analysis.returns);
    let returns: Vec<Value> = script
        .analysis
        .returns
        .iter()
        .map(|r| {
            json!({
                "line": r.at.line,
                "implicit": r.implicit,
                "shapes": r.shapes.code(),
                "text": r.shapes.to_string(),
            })
        })
        .collect();
    json!({ "shapes": all.code(), "text": replies(script), "returns": returns })
}

/// The digest of the script's guarded form (none when the file is not UTF-8).
trait GuardedDigest {
    fn guarded_sha1(&self) -> Option<String>;
}

impl GuardedDigest for ScriptReport {
    fn guarded_sha1(&self) -> Option<String> {
        // The wrapper is text around text: a body that is not UTF-8 has no guarded form.
        if self.unreadable.is_some() || self.source.as_bytes() != self.bytes.as_slice() {
            return None;
        }
        Some(lockscript_audit::sha1_hex(
            lockscript_audit::guarded::wrap(&self.source).as_bytes(),
        ))
    }
}

/// The oldest Redis and Valkey the script runs on: `{"redis": {"version": "7.0.0",
/// "because": "the `#!lua` shebang"}, "valkey": null}` (null: any version; a null
/// version: none runs it).
fn floor_json(script: &ScriptReport) -> Value {
    let floor = lockscript_audit::floor::Floor::of(&script.analysis);
    let need = |n: Option<&lockscript_audit::floor::Need>| {
        n.map(|n| json!({ "version": n.version.map(|v| v.to_string()), "because": n.because }))
    };
    json!({ "redis": need(floor.redis.as_ref()), "valkey": need(floor.valkey.as_ref()) })
}

/// The oldest servers the script runs on, when it does not run on every one:
/// "Redis 7.0.0 or later (for the `#!lua` shebang)".
fn needs(script: &ScriptReport) -> Option<String> {
    let floor = lockscript_audit::floor::Floor::of(&script.analysis);
    let needs: Vec<String> = [
        (lockscript_audit::commands::Product::Redis, &floor.redis),
        (lockscript_audit::commands::Product::Valkey, &floor.valkey),
    ]
    .into_iter()
    .filter_map(|(product, need)| need.as_ref().map(|n| n.describe(product)))
    .collect();
    (!needs.is_empty()).then(|| needs.join("; "))
}

/// The files a script includes, as paths relative to the script's directory.
fn includes(script: &ScriptReport) -> Vec<String> {
    let dir = script
        .path
        .parent()
        .unwrap_or_else(|| std::path::Path::new(""));
    script
        .parts
        .iter()
        .skip(1)
        .map(|p| p.strip_prefix(dir).unwrap_or(p).display().to_string())
        .collect()
}

fn wrap(file: &std::path::Path, out: &mut String) -> Result<usize, Fatal> {
    let script = lockscript_audit::include::expand(file)
        .map_err(|e| Fatal(format!("cannot read {}: {e}", file.display())))?;
    if let Some(problem) = script.problems.first() {
        return Err(Fatal(format!("{}: {}", problem.place, problem.message)));
    }
    if let Some(place) = script.first_invalid() {
        return Err(Fatal(format!(
            "{place}: not UTF-8: the guarded wrapper is text around the script's text"
        )));
    }
    say_raw!(out, "{}", lockscript_audit::guarded::wrap(&script.text));
    Ok(0)
}

/// "1 warning", "2 warnings".
fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// The widths of the table's name and flags columns: their longest entry.
#[derive(Clone, Copy)]
struct Widths {
    name: usize,
    flags: usize,
}

impl Widths {
    fn of(scripts: &[&ScriptReport]) -> Self {
        let longest = |f: &dyn Fn(&ScriptReport) -> usize, header: &str| {
            scripts
                .iter()
                .map(|s| f(s))
                .max()
                .unwrap_or(0)
                .max(header.len())
        };
        Self {
            name: longest(&|s| s.name.chars().count(), "SCRIPT"),
            flags: longest(&|s| flags(s).chars().count(), "FLAGS"),
        }
    }
}

fn audit_row(
    [name, sha1, keys, argv, flags, read_only, status]: [&str; 7],
    guarded: Option<&str>,
    w: Widths,
) -> String {
    let (nw, fw) = (w.name, w.flags);
    let row = format!(
        "  {name:<nw$} {sha1:<40}  {keys:>4}  {argv:>4}  {flags:<fw$} {read_only:<9} {status}"
    );
    match guarded {
        // The guarded digest in its own column after the longest possible status.
        Some(digest) => format!("{row:<width$} {digest}", width = nw + fw + 86),
        None => row,
    }
}

fn audit(dirs: &[PathBuf], as_json: bool, guarded: bool, out: &mut String) -> Result<usize, Fatal> {
    let reports = reports(dirs)?;
    let problems: usize = reports.iter().map(DirReport::problem_count).sum();
    let warnings: usize = reports.iter().map(DirReport::warning_count).sum();
    let hints: usize = reports.iter().map(DirReport::hint_count).sum();
    let unchecked: usize = reports.iter().map(DirReport::unchecked_count).sum();
    if as_json {
        let dirs: Vec<Value> = reports
            .iter()
            .map(|r| {
                json!({
                    "dir": r.dir.display().to_string(),
                    "scripts": r.scripts.iter().map(script_json).collect::<Vec<_>>(),
                    "sha1sums": { "present": r.sums.present, "listed": r.sums.listed, "problems": r.sums.problems },
                    "problems": r.problems,
                })
            })
            .collect();
        say!(
            out,
            "{}",
            json!({ "dirs": dirs, "problems": problems, "warnings": warnings, "hints": hints, "unchecked_calls": unchecked })
        );
        return Ok(problems);
    }
    let all: Vec<&ScriptReport> = reports.iter().flat_map(|r| &r.scripts).collect();
    let widths = Widths::of(&all);
    for report in &reports {
        audit_table(report, widths, guarded, out);
    }
    let mut warned = match warnings {
        0 => String::new(),
        n => format!(", {}", plural(n, "warning")),
    };
    if hints > 0 {
        let _ = write!(warned, ", {}", plural(hints, "hint"));
    }
    if unchecked > 0 {
        let _ = write!(warned, ", {}", plural(unchecked, "unchecked call"));
    }
    say!(
        out,
        "{}, {}{warned}",
        plural(all.len(), "script"),
        plural(problems, "problem")
    );
    Ok(problems)
}

/// One directory's table, its SHA1SUMS line, its problems and its warnings.
fn audit_table(report: &DirReport, widths: Widths, guarded: bool, out: &mut String) {
    say!(out, "{}", report.dir.display());
    say!(
        out,
        "{}",
        audit_row(
            [
                "SCRIPT",
                "SHA1",
                "KEYS",
                "ARGV",
                "FLAGS",
                "READ-ONLY",
                "STATUS"
            ],
            guarded.then_some("GUARDED SHA1"),
            widths,
        )
    );
    for s in &report.scripts {
        let status = match (s.problems.len(), s.warnings.len()) {
            (0, 0) => "ok".to_owned(),
            (0, w) => plural(w, "warning"),
            (p, 0) => plural(p, "problem"),
            (p, w) => format!("{}, {}", plural(p, "problem"), plural(w, "warning")),
        };
        say!(
            out,
            "{}",
            audit_row(
                [
                    &s.name,
                    if s.unreadable.is_some() { "-" } else { &s.sha1 },
                    &count(&s.analysis.keys),
                    &count(&s.analysis.argv),
                    &flags(s),
                    if s.analysis.read_only() { "yes" } else { "no" },
                    &status,
                ],
                guarded
                    .then(|| s.guarded_sha1().unwrap_or_else(|| "-".to_owned()))
                    .as_deref(),
                widths,
            )
        );
        if let Some(needs) = needs(s) {
            say!(out, "  {:<w$} needs {needs}", "", w = widths.name);
        }
        let replies = replies(s);
        if !replies.is_empty() {
            say!(out, "  {:<w$} replies {replies}", "", w = widths.name);
        }
        let parts = includes(s);
        if !parts.is_empty() {
            say!(
                out,
                "  {:<w$} includes {}",
                "",
                parts.join(", "),
                w = widths.name
            );
        }
    }
    let sums = if !report.sums.present {
        "no SHA1SUMS in this directory".to_owned()
    } else if report.sums.problems.is_empty() {
        format!("SHA1SUMS ok ({} files)", report.sums.listed)
    } else {
        format!(
            "SHA1SUMS: {}",
            plural(report.sums.problems.len(), "problem")
        )
    };
    say!(out, "  {sums}");
    for problem in report
        .scripts
        .iter()
        .flat_map(|s| &s.problems)
        .chain(&report.sums.problems)
        .chain(&report.problems)
    {
        say!(out, "  problem: {problem}");
    }
    for warning in report.scripts.iter().flat_map(|s| &s.warnings) {
        say!(out, "  warning: {warning}");
    }
    for hint in report.scripts.iter().flat_map(|s| &s.hints) {
        say!(out, "  hint: {hint}");
    }
    for at in report.scripts.iter().flat_map(|s| &s.unchecked) {
        say!(
            out,
            "  note: {at}: the command is computed, not a literal: this call is not checked"
        );
    }
    say!(out,);
}

/// What the server says about one script.
enum Cached {
    Yes,
    Missing,
    Loaded,
    Refused(String),
}

/// The files of `dirs` (with their guarded forms when asked) as one library.
fn files_library(
    reports: &[DirReport],
    guarded: bool,
) -> Result<lockscript_audit::functions::Library, Fatal> {
    // Each script as its bytes, which the library holds as they are (a file that is not
    // UTF-8 included): the same bytes as the runtime's library of the same scripts.
    let mut sources: Vec<(String, Vec<u8>)> = Vec::new();
    for script in reports.iter().flat_map(|r| &r.scripts) {
        if guarded {
            if script.source.as_bytes() != script.bytes.as_slice() {
                return Err(Fatal(format!(
                    "cannot put the guarded form of {} in a library: it is not UTF-8, and the \
                     guard is Lua text wrapped around the script's text",
                    script.path.display(),
                )));
            }
            sources.push((
                format!("{}+guarded", script.name),
                lockscript_audit::guarded::wrap(&script.source).into_bytes(),
            ));
        }
        sources.push((script.name.clone(), script.bytes.clone()));
    }
    let sources: Vec<lockscript_audit::functions::Source<'_>> = sources
        .iter()
        .map(|(name, source)| lockscript_audit::functions::Source { name, source })
        .collect();
    Ok(lockscript_audit::functions::library(&sources))
}

/// `lockscript functions`: the library's bytes, as `FUNCTION LOAD` takes them, written
/// to stdout here rather than through the (text) output.
fn functions(dirs: &[PathBuf], guarded: bool) -> Result<usize, Fatal> {
    let reports = readable_reports(dirs)?;
    let code = files_library(&reports, guarded)?.code;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(&code).and_then(|()| stdout.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Fatal(format!("cannot write the output: {e}")))
        }
        _ => Ok(0),
    }
}

/// Connects, and checks that the server can run Lua: `FUNCTION STATS` lists its script
/// engines (a Valkey 9 without its `lua` module lists none); a server without `FUNCTION`
/// (before 7.0) has Lua built in.
fn connect(url: &str) -> Result<redis::Connection, Fatal> {
    let client =
        redis::Client::open(url).map_err(|e| Fatal(format!("bad server address {url}: {e}")))?;
    let mut conn = client
        .get_connection_with_timeout(std::time::Duration::from_secs(5))
        .map_err(|e| Fatal(format!("cannot connect to {url}: {e}")))?;
    let stats: redis::RedisResult<std::collections::HashMap<String, redis::Value>> =
        redis::cmd("FUNCTION").arg("STATS").query(&mut conn);
    if let Ok(stats) = stats {
        let engines: std::collections::HashMap<String, redis::Value> = stats
            .get("engines")
            .and_then(|e| redis::from_redis_value_ref(e).ok())
            .unwrap_or_default();
        if !engines.keys().any(|name| name.eq_ignore_ascii_case("lua")) {
            return Err(Fatal(format!(
                "{url} cannot run Lua scripts: FUNCTION STATS lists no Lua engine (on Valkey 9, \
                 load its `lua` module); no script of a lock can run there"
            )));
        }
    }
    Ok(conn)
}

/// What the server's libraries hold for one file.
enum InLibrary {
    Yes(String),
    Missing,
    Loaded(String),
    Refused(String),
}

fn verify_functions(
    url: &str,
    load: bool,
    dirs: &[PathBuf],
    as_json: bool,
    out: &mut String,
) -> Result<usize, Fatal> {
    use lockscript_audit::functions::{PREFIX, split};
    let reports = readable_reports(dirs)?;
    let mut conn = connect(url)?;
    let read = |conn: &mut redis::Connection| -> Result<Vec<(String, Vec<u8>)>, Fatal> {
        let listed: Vec<std::collections::HashMap<String, redis::Value>> = redis::cmd("FUNCTION")
            .arg("LIST")
            .arg("WITHCODE")
            .query(conn)
            .map_err(|e| Fatal(format!("FUNCTION LIST on {url}: {e}")))?;
        Ok(listed
            .into_iter()
            .filter_map(|lib| {
                let name: String = redis::from_redis_value_ref(lib.get("library_name")?).ok()?;
                let code: Vec<u8> = redis::from_redis_value_ref(lib.get("library_code")?).ok()?;
                name.starts_with(PREFIX).then_some((name, code))
            })
            .collect())
    };
    let mut libraries = read(&mut conn)?;
    let mut loaded_now = None;
    let scripts: Vec<&ScriptReport> = reports.iter().flat_map(|r| &r.scripts).collect();
    let holds = |libraries: &[(String, Vec<u8>)], sha1: &str| {
        libraries.iter().find_map(|(name, code)| {
            split(code)
                .iter()
                .any(|f| {
                    f.function.ends_with(sha1) && lockscript_audit::sha1_hex(&f.source) == sha1
                })
                .then(|| name.clone())
        })
    };
    if load && scripts.iter().any(|s| holds(&libraries, &s.sha1).is_none()) {
        let library = files_library(&reports, false)?;
        let reply: redis::RedisResult<String> = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg(&library.code)
            .query(&mut conn);
        loaded_now = Some(match reply {
            Ok(_) => Ok(library.name),
            Err(e) if e.is_io_error() => return Err(Fatal(format!("FUNCTION LOAD on {url}: {e}"))),
            Err(e) if e.to_string().contains("already exists") => Ok(library.name),
            Err(e) => Err(format!("the server refused the library: {e}")),
        });
        libraries = read(&mut conn)?;
    }
    let statuses: Vec<InLibrary> = scripts
        .iter()
        .map(|s| match (holds(&libraries, &s.sha1), &loaded_now) {
            (Some(name), Some(Ok(new))) if &name == new => InLibrary::Loaded(name),
            (Some(name), _) => InLibrary::Yes(name),
            (None, Some(Err(why))) => InLibrary::Refused(why.clone()),
            (None, _) => InLibrary::Missing,
        })
        .collect();
    // Every function of a lockscript library must still be the file its name says.
    let tampered: Vec<String> = libraries
        .iter()
        .flat_map(|(name, code)| {
            split(code).into_iter().filter_map(move |f| {
                let digest = lockscript_audit::sha1_hex(&f.source);
                (!f.function.ends_with(&digest)).then(|| {
                    format!(
                        "function {} of library {name} does not hash to its name's digest (its body hashes to {digest})",
                        f.function
                    )
                })
            })
        })
        .collect();
    let problems = statuses
        .iter()
        .filter(|s| matches!(s, InLibrary::Missing | InLibrary::Refused(_)))
        .count()
        + tampered.len();
    out.push_str(&report_functions(
        url, &libraries, &scripts, &statuses, &tampered, problems, as_json,
    ));
    Ok(problems)
}

/// What [`verify_functions`] found, as JSON or as a table.
fn report_functions(
    url: &str,
    libraries: &[(String, Vec<u8>)],
    scripts: &[&ScriptReport],
    statuses: &[InLibrary],
    tampered: &[String],
    problems: usize,
    as_json: bool,
) -> String {
    let mut text = String::new();
    let out = &mut text;
    if as_json {
        let rows: Vec<Value> = scripts
            .iter()
            .zip(statuses)
            .map(|(s, status)| {
                let (state, library, detail) = match status {
                    InLibrary::Yes(lib) => ("present", Some(lib.as_str()), None),
                    InLibrary::Loaded(lib) => ("loaded", Some(lib.as_str()), None),
                    InLibrary::Missing => ("missing", None, None),
                    InLibrary::Refused(why) => ("refused", None, Some(why.as_str())),
                };
                json!({ "name": s.name, "path": s.path.display().to_string(), "sha1": s.sha1,
                        "status": state, "library": library, "detail": detail })
            })
            .collect();
        let libraries: Vec<&str> = libraries.iter().map(|(n, _)| n.as_str()).collect();
        say!(
            out,
            "{}",
            json!({ "url": url, "libraries": libraries, "scripts": rows, "tampered": tampered, "problems": problems })
        );
        return text;
    }
    say!(
        out,
        "{url} (function libraries: {})",
        match libraries.len() {
            0 => "none".to_owned(),
            _ => libraries
                .iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        }
    );
    let w = Widths::of(scripts).name;
    say!(out, "  {:<w$} {:<40}  STATUS", "SCRIPT", "SHA1");
    for (s, status) in scripts.iter().zip(statuses) {
        let shown = match status {
            InLibrary::Yes(lib) => format!("in {lib}"),
            InLibrary::Loaded(lib) => format!("loaded now, in {lib}"),
            InLibrary::Missing => "MISSING (run with --load)".to_owned(),
            InLibrary::Refused(why) => format!("REFUSED: {why}"),
        };
        say!(out, "  {:<w$} {:<40}  {shown}", s.name, s.sha1);
    }
    for t in tampered {
        say!(out, "  problem: {t}");
    }
    say!(
        out,
        "{}, {}",
        plural(scripts.len(), "script"),
        plural(problems, "problem")
    );
    text
}

fn verify(
    url: &str,
    load: bool,
    dirs: &[PathBuf],
    as_json: bool,
    out: &mut String,
) -> Result<usize, Fatal> {
    let reports = readable_reports(dirs)?;
    let mut conn = connect(url)?;
    let scripts: Vec<&ScriptReport> = reports.iter().flat_map(|r| &r.scripts).collect();
    let mut exists = redis::cmd("SCRIPT");
    exists.arg("EXISTS");
    for s in &scripts {
        exists.arg(&s.sha1);
    }
    let cached: Vec<bool> = if scripts.is_empty() {
        Vec::new()
    } else {
        exists
            .query(&mut conn)
            .map_err(|e| Fatal(format!("SCRIPT EXISTS on {url}: {e}")))?
    };

    let mut statuses = Vec::new();
    for (script, cached) in scripts.iter().zip(cached) {
        let status = if cached {
            Cached::Yes
        } else if !load {
            Cached::Missing
        } else {
            let source = script.bytes.as_slice();
            let loaded: redis::RedisResult<String> = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(source)
                .query(&mut conn);
            match loaded {
                Ok(digest) if digest.eq_ignore_ascii_case(&script.sha1) => Cached::Loaded,
                Ok(digest) => Cached::Refused(format!(
                    "the server reports digest {digest}, the file hashes to {}",
                    script.sha1
                )),
                Err(e) if e.is_io_error() => {
                    return Err(Fatal(format!("SCRIPT LOAD on {url}: {e}")));
                }
                Err(e) => Cached::Refused(format!("the server refused it: {e}")),
            }
        };
        statuses.push(status);
    }
    let problems = statuses
        .iter()
        .filter(|s| matches!(s, Cached::Missing | Cached::Refused(_)))
        .count();

    if as_json {
        let rows: Vec<Value> = scripts
            .iter()
            .zip(&statuses)
            .map(|(s, status)| {
                let (state, detail) = match status {
                    Cached::Yes => ("cached", None),
                    Cached::Missing => ("missing", None),
                    Cached::Loaded => ("loaded", None),
                    Cached::Refused(why) => ("refused", Some(why.as_str())),
                };
                json!({ "name": s.name, "path": s.path.display().to_string(), "sha1": s.sha1, "status": state, "detail": detail })
            })
            .collect();
        say!(
            out,
            "{}",
            json!({ "url": url, "scripts": rows, "problems": problems })
        );
        return Ok(problems);
    }
    say!(out, "{url}");
    let w = Widths::of(&scripts).name;
    say!(out, "  {:<w$} {:<40}  STATUS", "SCRIPT", "SHA1");
    for (s, status) in scripts.iter().zip(&statuses) {
        let shown = match status {
            Cached::Yes => "cached".to_owned(),
            Cached::Missing => "MISSING (run with --load)".to_owned(),
            Cached::Loaded => "loaded now".to_owned(),
            Cached::Refused(why) => format!("REFUSED: {why}"),
        };
        say!(out, "  {:<w$} {:<40}  {shown}", s.name, s.sha1);
    }
    say!(
        out,
        "{}, {}",
        plural(scripts.len(), "script"),
        plural(problems, "problem")
    );
    Ok(problems)
}
