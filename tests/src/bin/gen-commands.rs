//! `gen-commands`: writes `lock-audit/src/commands/table.rs` and
//! `lock-audit/src/globals/table.rs`, the command and globals tables the lint of
//! `#[lock_script]` and `lockscript audit` checks scripts against, from what running
//! servers report. `tests/commands.sh` (`./run commands [--check]`) starts the servers of
//! the matrix and runs it.
//!
//! ```text
//! gen-commands --out FILE --globals FILE NAME=HOST:PORT...
//! ```
//!
//! From each server it reads `INFO server` (product and version), `COMMAND` (names,
//! subcommands, flags, arity, and where the keys are: the key specifications from 7.0 on,
//! `first`/`last`/`step` before) and, from 7.0 on, `COMMAND DOCS` (`since`); then it calls
//! every command that is flagged neither `write` nor `noscript` in a
//! `#!lua flags=no-writes` script, since Redis 7.0 and later hide the `may_replicate` flag
//! that makes `PUBLISH`, `SPUBLISH` and `PFCOUNT` count as writes there. Last, a script
//! lists what its `_G` holds, and the members of each table in it (`string.format`,
//! `redis.acl_check_cmd`): the globals a script finds defined there. The rules that merge
//! the servers are in `lock-audit/src/commands.rs` and `lock-audit/src/globals.rs`. Exit
//! status 1 when a server could not be read, 2 on bad arguments.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use redis::Value;

/// Names some servers list that are not commands: Redis 6.2 registers `HOST:` and `POST`
/// to close connections that send HTTP (7.0 and later hide them from `COMMAND`).
const NOT_COMMANDS: &[&str] = &["HOST:", "POST"];
/// What a script's call of a command that counts as a write fails with.
const WRITE_REFUSED: &str = "Write commands are not allowed from read-only scripts";
/// The probe: the command and its arguments come as ARGV.
const PROBE: &str = "#!lua flags=no-writes\nreturn redis.call(unpack(ARGV))";
/// Lists every global of the sandbox a script runs in, and the members of each table
/// among them (`KEYS` and `ARGV` hold the call's keys and arguments, not members).
const GLOBALS_PROBE: &str = "local names = {}\n\
    for name, value in pairs(_G) do\n\
      if type(name) == 'string' then\n\
        names[#names + 1] = name\n\
        if type(value) == 'table' and value ~= _G and name ~= 'KEYS' and name ~= 'ARGV' then\n\
          for member in pairs(value) do\n\
            if type(member) == 'string' then names[#names + 1] = name .. '.' .. member end\n\
          end\n\
        end\n\
      end\n\
    end\n\
    return names";
/// How long a server that was just started may refuse connections.
const CONNECT_RETRY: Duration = Duration::from_secs(10);
/// Width of the name column of the table, so one new long name does not move every row.
const NAME_COLUMN: usize = 36;

/// A server product, as the table names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Product {
    Redis,
    Valkey,
}

/// One command or subcommand as one server reports it.
#[derive(Clone, Debug, Default)]
struct Reported {
    /// `COMMAND` flags, `may_replicate` spelled as 6.2 spells it.
    flags: BTreeSet<String>,
    arity: i64,
    /// `COMMAND DOCS` `since`.
    since: Option<String>,
    /// Listed with subcommands (a container such as `CLIENT`).
    container: bool,
    /// Refused in a `no-writes` script as a write, though not flagged `write` (the probe).
    refused_as_write: bool,
    /// The key specifications whose keys can be read off a call ([`KeySpec::read`]);
    /// `None` from a server that reports none (6.2).
    keys: Option<Vec<KeySpec>>,
    /// `COMMAND`'s `first`, `last` and `step`: where the keys are on 6.2 (0 for none).
    legacy_keys: (i64, i64, i64),
}

/// Where a search for keys begins: at an index, or after a keyword looked for from an
/// index on.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Begin {
    Index(i64),
    Keyword(String, i64),
}

/// Which arguments from there are keys: a range (`last`, `step`, `limit`) or a count given
/// by an argument (`index`, `first`, `step`).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Find {
    Range(i64, i64, i64),
    Keynum(i64, i64, i64),
}

/// One key specification, as `lock-audit/src/commands/keys.rs` reads them.
#[derive(Clone, Debug, PartialEq, Eq)]
struct KeySpec {
    begin: Begin,
    find: Find,
}

impl KeySpec {
    /// One entry of `COMMAND`'s key specifications (a map: `flags`, `begin_search`,
    /// `find_keys`, each search a map of `type` and `spec`). `None` for what cannot be read
    /// off a call: a specification flagged `incomplete` (it may miss keys, and where it
    /// finds them is a guess: `MIGRATE ... KEYS`) or `not_key` (`SPUBLISH`'s channel), a
    /// search of type `unknown` (`SORT ... STORE`), a keyword search backwards from the end.
    fn read(spec: &Value) -> Option<Self> {
        let flags: Vec<String> = field(spec, "flags")
            .map(|f| items(f).iter().filter_map(text).collect())
            .unwrap_or_default();
        if flags.iter().any(|f| f == "incomplete" || f == "not_key") {
            return None;
        }
        let search = |name: &str| {
            let search = field(spec, name)?;
            Some((text(field(search, "type")?)?, field(search, "spec")?))
        };
        let number = |map: &Value, name: &str| match field(map, name) {
            Some(Value::Int(n)) => Some(*n),
            _ => None,
        };
        let begin = match search("begin_search")? {
            (kind, at) if kind == "index" => Begin::Index(number(at, "index")?),
            (kind, at) if kind == "keyword" => {
                let from = number(at, "startfrom")?;
                if from < 1 {
                    return None;
                }
                Begin::Keyword(text(field(at, "keyword")?)?.to_ascii_uppercase(), from)
            }
            _ => return None,
        };
        let find = match search("find_keys")? {
            (kind, r) if kind == "range" => Find::Range(
                number(r, "lastkey")?,
                number(r, "keystep")?,
                number(r, "limit")?,
            ),
            (kind, k) if kind == "keynum" => Find::Keynum(
                number(k, "keynumidx")?,
                number(k, "firstkey")?,
                number(k, "keystep")?,
            ),
            _ => return None,
        };
        let positive = match (&begin, &find) {
            (Begin::Index(i) | Begin::Keyword(_, i), Find::Range(_, step, limit)) => {
                *i >= 1 && *step >= 1 && *limit >= 0
            }
            (Begin::Index(i) | Begin::Keyword(_, i), Find::Keynum(n, first, step)) => {
                *i >= 1 && *n >= 0 && *first >= 0 && *step >= 1
            }
        };
        positive.then_some(Self { begin, find })
    }

    /// Where the keys are on a server that gives only `first`, `last` and `step` (6.2):
    /// from `first` to `last` (from the end when negative), every `step`th.
    fn legacy((first, last, step): (i64, i64, i64)) -> Option<Self> {
        (first >= 1 && step >= 1).then(|| Self {
            begin: Begin::Index(first),
            find: Find::Range(if last < 0 { last } else { last - first }, step, 0),
        })
    }

    /// As the table writes it: `index(1).range(0, 1, 0)`.
    fn render(&self) -> String {
        let begin = match &self.begin {
            Begin::Index(i) => format!("index({i})"),
            Begin::Keyword(word, from) => format!("keyword({word:?}, {from})"),
        };
        match self.find {
            Find::Range(last, step, limit) => format!("{begin}.range({last}, {step}, {limit})"),
            Find::Keynum(index, first, step) => format!("{begin}.keynum({index}, {first}, {step})"),
        }
    }
}

/// The value of `name` in a map (RESP3) or a flat list of names and values (RESP2).
fn field<'a>(map: &'a Value, name: &str) -> Option<&'a Value> {
    map.as_map_iter()?
        .find(|(k, _)| text(k).is_some_and(|k| k == name))
        .map(|(_, v)| v)
}

/// Everything one server reports.
#[derive(Debug)]
struct Server {
    /// The matrix name it was given on the command line (`redis-6.2`).
    name: String,
    product: Product,
    version: Vec<u32>,
    version_text: String,
    /// Answers `COMMAND DOCS` (7.0 and later) and so reports subcommands.
    docs: bool,
    commands: BTreeMap<String, Reported>,
    /// The globals a script finds defined, and the members of the tables among them as
    /// `table.member`.
    globals: BTreeSet<String>,
}

/// A failure that stops the run, with what was being done.
#[derive(Debug)]
struct Failed(String);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((out, globals, servers)) = parse_args(&args) else {
        eprintln!("usage: gen-commands --out FILE --globals FILE NAME=HOST:PORT...");
        return ExitCode::from(2);
    };
    match run(&out, &globals, &servers) {
        Ok(summary) => {
            eprint!("{summary}");
            ExitCode::SUCCESS
        }
        Err(Failed(why)) => {
            eprintln!("gen-commands: {why}");
            ExitCode::from(1)
        }
    }
}

/// The command table's file, the globals table's file, and the servers.
type Args = (String, String, Vec<(String, String)>);

fn parse_args(args: &[String]) -> Option<Args> {
    let [flag, out, globals_flag, globals, servers @ ..] = args else {
        return None;
    };
    if flag != "--out" || globals_flag != "--globals" || servers.is_empty() {
        return None;
    }
    let servers = servers
        .iter()
        .map(|s| s.split_once('=').map(|(n, a)| (n.to_owned(), a.to_owned())))
        .collect::<Option<Vec<_>>>()?;
    Some((out.clone(), globals.clone(), servers))
}

fn run(out: &str, globals: &str, addresses: &[(String, String)]) -> Result<String, Failed> {
    let mut servers = addresses
        .iter()
        .map(|(name, address)| read_server(name, address))
        .collect::<Result<Vec<_>, _>>()?;
    servers.sort_by(|a, b| (a.product, &a.version).cmp(&(b.product, &b.version)));
    infer_subcommands(&mut servers);
    let table = render(&servers);
    std::fs::write(out, table).map_err(|e| Failed(format!("cannot write {out}: {e}")))?;
    std::fs::write(globals, render_globals(&servers))
        .map_err(|e| Failed(format!("cannot write {globals}: {e}")))?;
    Ok(summary(&servers))
}

fn read_server(name: &str, address: &str) -> Result<Server, Failed> {
    let failed =
        |what: &str, e: &dyn std::fmt::Display| Failed(format!("{name} ({address}): {what}: {e}"));
    let client = redis::Client::open(format!("redis://{address}/"))
        .map_err(|e| failed("bad address", &e))?;
    let deadline = Instant::now() + CONNECT_RETRY;
    let mut conn = loop {
        match client.get_connection() {
            Ok(conn) => break conn,
            Err(e) if Instant::now() < deadline && e.is_connection_refusal() => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(failed("cannot connect", &e)),
        }
    };
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut conn)
        .map_err(|e| failed("INFO server", &e))?;
    let field = |key: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
            .map(|v| v.trim().to_owned())
    };
    let (product, version_text) = match field("valkey_version") {
        Some(v) => (Product::Valkey, v),
        None => (
            Product::Redis,
            field("redis_version").ok_or_else(|| failed("INFO server", &"no redis_version"))?,
        ),
    };
    let listed: Value = redis::cmd("COMMAND")
        .query(&mut conn)
        .map_err(|e| failed("COMMAND", &e))?;
    let mut commands = BTreeMap::new();
    for entry in items(&listed) {
        read_entry(entry, &mut commands);
    }
    for name in NOT_COMMANDS {
        commands.remove(*name);
    }
    let docs = match redis::cmd("COMMAND").arg("DOCS").query::<Value>(&mut conn) {
        Ok(docs) => {
            read_docs(&docs, &mut commands);
            true
        }
        // 6.2: "ERR Unknown subcommand".
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError) => {
            false
        }
        Err(e) => return Err(failed("COMMAND DOCS", &e)),
    };
    if docs {
        probe(&mut conn, &mut commands).map_err(|e| failed("probe", &e))?;
    }
    let globals: Vec<String> = redis::cmd("EVAL")
        .arg(GLOBALS_PROBE)
        .arg(0)
        .query(&mut conn)
        .map_err(|e| failed("listing _G", &e))?;
    Ok(Server {
        name: name.to_owned(),
        product,
        version: parse_version(&version_text),
        version_text,
        docs,
        commands,
        globals: globals.into_iter().collect(),
    })
}

fn items(value: &Value) -> &[Value] {
    match value {
        Value::Array(items) | Value::Set(items) => items,
        _ => &[],
    }
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::Okay => Some("OK".to_owned()),
        _ => None,
    }
}

/// One `COMMAND` entry: `[name, arity, flags, first, last, step, ...]`, with key
/// specifications at index 8 and subcommands (entries of the same shape) at index 9 from
/// 7.0 on.
fn read_entry(entry: &Value, commands: &mut BTreeMap<String, Reported>) {
    let fields = items(entry);
    let Some(name) = fields.first().and_then(text) else {
        return;
    };
    let arity = match fields.get(1) {
        Some(Value::Int(n)) => *n,
        _ => 0,
    };
    let flags = fields
        .get(2)
        .map(|f| items(f).iter().filter_map(text).collect())
        .unwrap_or_default();
    let number = |i: usize| match fields.get(i) {
        Some(Value::Int(n)) => *n,
        _ => 0,
    };
    let subcommands = fields.get(9).map(items).unwrap_or_default();
    commands.insert(
        name.to_ascii_uppercase(),
        Reported {
            flags,
            arity,
            container: !subcommands.is_empty(),
            keys: fields
                .get(8)
                .map(|specs| items(specs).iter().filter_map(KeySpec::read).collect()),
            legacy_keys: (number(3), number(4), number(5)),
            ..Reported::default()
        },
    );
    for sub in subcommands {
        read_entry(sub, commands);
    }
}

/// `COMMAND DOCS`: a map of name to a map of fields, `subcommands` nested the same way.
fn read_docs(docs: &Value, commands: &mut BTreeMap<String, Reported>) {
    let Some(entries) = docs.as_map_iter() else {
        return;
    };
    for (name, fields) in entries {
        let Some(name) = text(name) else { continue };
        let Some(fields) = fields.as_map_iter() else {
            continue;
        };
        for (key, value) in fields {
            match text(key).as_deref() {
                Some("since") => {
                    if let Some(c) = commands.get_mut(&name.to_ascii_uppercase()) {
                        c.since = text(value);
                    }
                }
                Some("subcommands") => read_docs(value, commands),
                _ => {}
            }
        }
    }
}

/// Calls each command that is flagged neither `write` nor `noscript` in a `no-writes`
/// script, with placeholder arguments up to its arity, and marks the ones the server
/// refuses as writes. The refusal comes before the command runs; the others run with
/// arguments that are mostly invalid, on a throwaway server.
fn probe(
    conn: &mut redis::Connection,
    commands: &mut BTreeMap<String, Reported>,
) -> redis::RedisResult<()> {
    let pong: String = redis::cmd("EVAL")
        .arg(PROBE)
        .arg(0)
        .arg("PING")
        .query(conn)?;
    if pong != "PONG" {
        return Err(redis::RedisError::from((
            redis::ErrorKind::Client,
            "a no-writes script calling PING did not answer PONG",
        )));
    }
    for (name, reported) in commands.iter_mut() {
        if reported.container
            || reported.flags.contains("write")
            || reported.flags.contains("noscript")
        {
            continue;
        }
        let mut argv: Vec<String> = name.split('|').map(str::to_owned).collect();
        let wanted = usize::try_from(reported.arity.unsigned_abs()).unwrap_or(usize::MAX);
        while argv.len() < wanted {
            argv.push("x".to_owned());
        }
        let reply = redis::cmd("EVAL")
            .arg(PROBE)
            .arg(0)
            .arg(&argv)
            .query::<Value>(conn);
        reported.refused_as_write = match reply {
            Err(e) if e.is_io_error() => return Err(e),
            Err(e) => e.to_string().contains(WRITE_REFUSED),
            Ok(Value::ServerError(e)) => e.details().is_some_and(|d| d.contains(WRITE_REFUSED)),
            Ok(_) => false,
        };
    }
    Ok(())
}

fn parse_version(text: &str) -> Vec<u32> {
    text.split('.').map(|p| p.parse().unwrap_or(0)).collect()
}

/// Redis 6.2 lists container commands without subcommands. A subcommand is taken to
/// exist there when its container does and the `since` that the Redis servers with
/// `COMMAND DOCS` give it is not after the server's version; it carries its container's
/// flags, as 6.2 checks flags per command (`CLIENT HELP` is refused in a script there,
/// since `CLIENT` is `noscript`).
fn infer_subcommands(servers: &mut [Server]) {
    let mut since: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for server in servers
        .iter()
        .filter(|s| s.docs && s.product == Product::Redis)
    {
        for (name, c) in &server.commands {
            if name.contains('|')
                && let Some(v) = &c.since
            {
                since
                    .entry(name.clone())
                    .or_insert_with(|| parse_version(v));
            }
        }
    }
    for server in servers
        .iter_mut()
        .filter(|s| !s.docs && s.product == Product::Redis)
    {
        for (name, added) in &since {
            let Some((parent, _)) = name.split_once('|') else {
                continue;
            };
            if *added > server.version {
                continue;
            }
            if let Some(container) = server.commands.get_mut(parent) {
                container.container = true;
                let flags = container.flags.clone();
                server.commands.insert(
                    name.clone(),
                    Reported {
                        flags,
                        ..Reported::default()
                    },
                );
            }
        }
    }
}

/// One row of the table: the servers' reports merged.
struct Row {
    on: Vec<bool>,
    write: bool,
    noscript: Vec<bool>,
    redis_since: Option<String>,
    valkey_since: Option<String>,
    may_replicate: bool,
    /// `COMMAND`'s arity, the most lenient the servers give (the command's name counts):
    /// `n` exactly n arguments, `-n` at least n.
    arity: i64,
    /// Where the keys are ([`agreed_keys`]).
    keys: Vec<KeySpec>,
}

/// The key specifications of a command that every server reporting specifications for it
/// gives (in the order the first of them lists them): where the servers differ, a
/// position is not certainly a key. Where none reports any (a command only 6.2 has),
/// `COMMAND`'s `first`, `last` and `step` of the servers that have it, when they agree.
fn agreed_keys(found: &[Option<&Reported>]) -> Vec<KeySpec> {
    let specced: Vec<&Vec<KeySpec>> = found
        .iter()
        .flatten()
        .filter_map(|r| r.keys.as_ref())
        .collect();
    if let Some((first, others)) = specced.split_first() {
        return first
            .iter()
            .filter(|spec| others.iter().all(|o| o.contains(spec)))
            .cloned()
            .collect();
    }
    let legacy: BTreeSet<(i64, i64, i64)> = found.iter().flatten().map(|r| r.legacy_keys).collect();
    match legacy.iter().collect::<Vec<_>>()[..] {
        [only] => KeySpec::legacy(*only).into_iter().collect(),
        _ => Vec::new(),
    }
}

/// The arity every server accepts a call by: at least the fewest any server needs, and
/// exactly only when every server says exactly the same number. 0 where no server gives
/// one (a 6.2 subcommand inferred from its container).
fn lenient_arity(arities: impl Iterator<Item = i64>) -> i64 {
    let known: Vec<i64> = arities.filter(|a| *a != 0).collect();
    let Some(fewest) = known.iter().map(|a| a.abs()).min() else {
        return 0;
    };
    if known.iter().all(|a| *a == known[0]) && known[0] > 0 {
        fewest
    } else {
        -fewest
    }
}

fn rows(servers: &[Server]) -> BTreeMap<String, Row> {
    let names: BTreeSet<&String> = servers.iter().flat_map(|s| s.commands.keys()).collect();
    names
        .into_iter()
        .map(|name| {
            let found: Vec<Option<&Reported>> =
                servers.iter().map(|s| s.commands.get(name)).collect();
            let flagged_write = found.iter().flatten().any(|r| r.flags.contains("write"));
            let refused = found.iter().flatten().any(|r| r.refused_as_write);
            // The newest server of a product that gives a `since` speaks for the product.
            let since = |product: Product| {
                servers
                    .iter()
                    .zip(&found)
                    .rev()
                    .filter(|(s, _)| s.product == product)
                    .find_map(|(_, r)| r.and_then(|r| r.since.clone()))
            };
            let row = Row {
                on: found.iter().map(Option::is_some).collect(),
                write: flagged_write || refused,
                noscript: found
                    .iter()
                    .map(|r| r.is_some_and(|r| r.flags.contains("noscript")))
                    .collect(),
                redis_since: since(Product::Redis),
                valkey_since: since(Product::Valkey),
                may_replicate: refused && !flagged_write,
                arity: lenient_arity(found.iter().flatten().map(|r| r.arity)),
                keys: agreed_keys(&found),
            };
            (name.clone(), row)
        })
        .collect()
}

fn marks(set: &[bool]) -> String {
    set.iter().map(|&b| if b { 'x' } else { '.' }).collect()
}

fn product_name(product: Product) -> &'static str {
    match product {
        Product::Redis => "Redis",
        Product::Valkey => "Valkey",
    }
}

fn render(servers: &[Server]) -> String {
    let rows = rows(servers);
    let matrix: Vec<String> = servers
        .iter()
        .map(|s| format!("{} {}", product_name(s.product), s.version_text))
        .collect();
    // Only the constructors the rows use, so the table compiles without warnings.
    let specs = || rows.values().flat_map(|r| &r.keys);
    let mut imports = vec!["Command", "Product", "Server", "entry"];
    if specs().any(|k| matches!(k.begin, Begin::Index(_))) {
        imports.push("index");
    }
    if specs().any(|k| matches!(k.begin, Begin::Keyword(..))) {
        imports.push("keyword");
    }
    let mut out = String::new();
    let _ = write!(
        out,
        "//! The command table, GENERATED by `./run commands` (tests/commands.sh and\n\
         //! tests/src/bin/gen-commands.rs) from what these servers report:\n\
         //! {}.\n\
         //! Do not edit: `./run commands --check` fails when a fresh run differs. The rules\n\
         //! are in the parent module.\n\n\
         use super::{{{}}};\n\n\
         /// The servers the table was read from: a command's `on` and `noscript` marks\n\
         /// follow this order.\n\
         #[rustfmt::skip]\n\
         pub const SERVERS: &[Server] = &[\n",
        matrix.join(", "),
        imports.join(", "),
    );
    for s in servers {
        let _ = writeln!(
            out,
            "    Server {{ product: Product::{}, version: \"{}\" }},",
            product_name(s.product),
            s.version_text
        );
    }
    let may: Vec<String> = rows
        .iter()
        .filter(|(_, r)| r.may_replicate)
        .map(|(n, _)| format!("    \"{n}\",\n"))
        .collect();
    let _ = write!(
        out,
        "];\n\n\
         /// Commands not flagged `write` that a server refuses in a `no-writes` script as\n\
         /// writes, because they may replicate (their [`Command::write`] is set).\n\
         #[rustfmt::skip]\n\
         pub const MAY_REPLICATE: &[&str] = &[\n{}];\n\n\
         /// Every command any server reports, sorted by name for binary search. Each row is\n\
         /// `entry(name, on, write, noscript, arity, since Redis, since Valkey, keys)`: `on`\n\
         /// and `noscript` mark each server of [`SERVERS`] with `x` (has it, refuses it in a\n\
         /// script) or `.`; `arity` is `COMMAND`'s, the most lenient of the servers (`n`\n\
         /// exactly, `-n` at least, the name included; 0 unknown); a `since` is empty when\n\
         /// no server of that product says; `keys` are the key specifications the servers\n\
         /// agree on, as `index(i)` or `keyword(\"WORD\", from)` then `.range(last, step,\n\
         /// limit)` or `.keynum(index, first, step)` (the parent module says which are kept).\n\
         #[rustfmt::skip]\n\
         pub const COMMANDS: &[Command] = &[\n",
        may.concat(),
    );
    for (name, r) in &rows {
        let name = format!("\"{name}\",");
        let write = format!("{},", r.write);
        let arity = format!("{},", r.arity);
        let redis = format!("\"{}\",", r.redis_since.as_deref().unwrap_or(""));
        let valkey = format!("\"{}\",", r.valkey_since.as_deref().unwrap_or(""));
        let keys: Vec<String> = r.keys.iter().map(KeySpec::render).collect();
        let _ = writeln!(
            out,
            "    entry({name:<NAME_COLUMN$} \"{}\", {write:<6} \"{}\", {arity:<4} {redis:<9} {valkey:<9} &[{}]),",
            marks(&r.on),
            marks(&r.noscript),
            keys.join(", "),
        );
    }
    out.push_str("];\n");
    out
}

/// The globals table: every name some server's `_G` holds (and every member of its
/// tables), with the servers that have it.
fn render_globals(servers: &[Server]) -> String {
    let matrix: Vec<String> = servers
        .iter()
        .map(|s| format!("{} {}", product_name(s.product), s.version_text))
        .collect();
    let names: BTreeSet<&String> = servers.iter().flat_map(|s| &s.globals).collect();
    let mut out = String::new();
    let _ = write!(
        out,
        "//! The globals table, GENERATED by `./run commands` (tests/commands.sh and\n\
         //! tests/src/bin/gen-commands.rs) from what these servers report:\n\
         //! {}.\n\
         //! Do not edit: `./run commands --check` fails when a fresh run differs. The rules\n\
         //! are in the parent module.\n\n\
         use super::{{Global, global}};\n\n\
         /// Every name a script finds defined on some server, sorted for binary search: the\n\
         /// globals of its `_G`, and the members of the tables among them as `table.member`.\n\
         /// Each row is `global(name, on)`: `on` marks each server of\n\
         /// [`SERVERS`](crate::commands::SERVERS) with `x` (defines it) or `.`.\n\
         #[rustfmt::skip]\n\
         pub const GLOBALS: &[Global] = &[\n",
        matrix.join(", ")
    );
    for name in names {
        let on: Vec<bool> = servers.iter().map(|s| s.globals.contains(name)).collect();
        let name = format!("\"{name}\",");
        let _ = writeln!(out, "    global({name:<NAME_COLUMN$} \"{}\"),", marks(&on));
    }
    out.push_str("];\n");
    out
}

/// What the run found, for the person who ran it.
fn summary(servers: &[Server]) -> String {
    let rows = rows(servers);
    let mut out = String::new();
    for (i, s) in servers.iter().enumerate() {
        let (top, sub): (Vec<&String>, Vec<&String>) =
            s.commands.keys().partition(|n| !n.contains('|'));
        let _ = writeln!(
            out,
            "{:<11} {} {:<8} {:>4} commands, {:>4} subcommands{}, {:>3} that some other server lacks",
            s.name,
            product_name(s.product),
            s.version_text,
            top.len(),
            sub.len(),
            if s.docs { "" } else { " (inferred)" },
            rows.values()
                .filter(|r| r.on[i] && r.on.contains(&false))
                .count(),
        );
    }
    let partial = rows.values().filter(|r| r.on.contains(&false)).count();
    let noscript_differs = rows
        .values()
        .filter(|r| {
            let refused = r.noscript.iter().filter(|&&b| b).count();
            refused > 0 && refused < r.on.iter().filter(|&&b| b).count()
        })
        .count();
    let may: Vec<&String> = rows
        .iter()
        .filter(|(_, r)| r.may_replicate)
        .map(|(n, _)| n)
        .collect();
    let globals: BTreeSet<&String> = servers.iter().flat_map(|s| &s.globals).collect();
    let _ = writeln!(
        out,
        "{} globals and members; {} not on every server",
        globals.len(),
        globals
            .iter()
            .filter(|g| !servers.iter().all(|s| s.globals.contains(**g)))
            .count()
    );
    let _ = writeln!(
        out,
        "{} names; {partial} not on every server; {noscript_differs} refused in scripts by some servers only; \
         counted as writes though not flagged: {may:?}; {} with key positions",
        rows.len(),
        rows.values().filter(|r| !r.keys.is_empty()).count(),
    );
    out
}
