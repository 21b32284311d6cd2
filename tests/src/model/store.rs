//! A Redis small enough to copy at every branch of the search, that runs lockscript's
//! own scripts (`lock-runtime/scripts/*.lua`, in Lua 5.1 as Redis does) against its keys:
//! the model's server for what is too large to write again by hand (the fair queue, the
//! readers and permits, handover), and the check that what is written by hand
//! ([`super::server`]) means what the scripts do.
//!
//! It has the commands the scripts call, with Redis's replies and errors for the
//! arguments they pass: strings (`GET`, `SET` with `NX`/`XX`/`PX`/`EX`, `INCR`), hashes
//! (`HSET`, `HGET`, `HDEL`), sorted sets (`ZADD`, `ZREM`, `ZSCORE`, `ZCARD`, `ZRANGE`,
//! `ZRANGEBYSCORE` with `LIMIT`), keys (`DEL`, `EXISTS`, `PEXPIRE`, `PTTL`), `TIME`,
//! `PUBLISH` (kept, for the model to deliver). Keys expire on the clock a step is run at,
//! as Redis does within a script (its time is the script's start), and as Redis counts
//! it: a key set to expire at `t` ms is there at `t` (`PTTL` 0) and gone after. Lua values cross as
//! Redis converts them both ways (an integer reply is a number, nil is `false`, a
//! status is `{ok=...}`, a number returned is truncated to an integer...).
//!
//! `store_matches_redis.rs` runs random operations of every script on this store and on
//! a real server whose clock is frozen at the same instants (libfaketime), and compares
//! every reply and every key.

use std::collections::BTreeMap;
use std::fmt;

use mlua::{Lua, MultiValue, Value as LuaValue};

/// A reply, as the server sends it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Reply {
    /// Nil.
    Nil,
    /// An integer.
    Int(i64),
    /// A bulk string.
    Bulk(Vec<u8>),
    /// A status (`OK`).
    Status(String),
    /// An array.
    Array(Vec<Reply>),
    /// An error: its message, the code first (`WRONGTYPE ...`, `ERR ...`).
    Error(String),
}

impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::Nil => write!(f, "nil"),
            Reply::Int(n) => write!(f, "{n}"),
            Reply::Bulk(b) => write!(f, "{:?}", String::from_utf8_lossy(b)),
            Reply::Status(s) => write!(f, "+{s}"),
            Reply::Error(e) => write!(f, "-{e}"),
            Reply::Array(items) => {
                write!(f, "[")?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{item}")?;
                }
                write!(f, "]")
            }
        }
    }
}

/// A key's value.
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    /// A string.
    Str(Vec<u8>),
    /// A hash.
    Hash(BTreeMap<Vec<u8>, Vec<u8>>),
    /// A sorted set: member to score.
    ZSet(BTreeMap<Vec<u8>, f64>),
}

/// A key: its value and when it expires (milliseconds of the server's clock).
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// The value.
    pub data: Data,
    /// When it expires, if it does.
    pub until_ms: Option<u64>,
}

/// A hash's fields.
type Fields = BTreeMap<Vec<u8>, Vec<u8>>;

/// A sorted set's members and their scores.
type Scores = BTreeMap<Vec<u8>, f64>;

/// The keys, and the messages published.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Store {
    keys: BTreeMap<Vec<u8>, Entry>,
    /// Keys go at their expiry instant, not a millisecond after (see
    /// [`expiring_at_the_instant`](Self::expiring_at_the_instant)).
    at_the_instant: bool,
    /// Every `PUBLISH` run so far: (channel, message).
    pub published: Vec<(Vec<u8>, Vec<u8>)>,
    /// A defect planted in one of the scripts it runs (see [`Store::planted`]).
    patch: Option<Patch>,
}

/// Edits to one shipped script, for the model checker's own tests: a defect put in the
/// script the server runs under the shipped digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Patch {
    /// The script's file name (`fair-queue.lua`).
    pub file: &'static str,
    /// Each text replaced, and what replaces it.
    pub edits: Vec<(&'static str, &'static str)>,
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
const NOT_FLOAT: &str = "ERR value is not a valid float";
const SYNTAX: &str = "ERR syntax error";

fn int_arg(arg: &[u8]) -> Result<i64, String> {
    std::str::from_utf8(arg)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| NOT_INTEGER.to_owned())
}

fn float_arg(arg: &[u8]) -> Result<f64, String> {
    let s = std::str::from_utf8(arg).map_err(|_| NOT_FLOAT.to_owned())?;
    match s.to_ascii_lowercase().as_str() {
        "+inf" | "inf" => Ok(f64::INFINITY),
        "-inf" => Ok(f64::NEG_INFINITY),
        _ => s
            .parse::<f64>()
            .ok()
            .filter(|f| !f.is_nan())
            .ok_or_else(|| NOT_FLOAT.to_owned()),
    }
}

/// A score as Redis writes it (`ZSCORE`, `WITHSCORES`): the shortest form that reads
/// back the same, integers without a fraction.
pub fn score_text(score: f64) -> Vec<u8> {
    if score == f64::INFINITY {
        return b"inf".to_vec();
    }
    if score == f64::NEG_INFINITY {
        return b"-inf".to_vec();
    }
    format!("{score}").into_bytes()
}

/// A bound of `ZRANGEBYSCORE`: the score and whether it is exclusive (`(`).
fn score_bound(arg: &[u8]) -> Result<(f64, bool), String> {
    let err = || "ERR min or max is not a float".to_owned();
    match arg.strip_prefix(b"(") {
        Some(rest) => float_arg(rest).map(|f| (f, true)).map_err(|_| err()),
        None => float_arg(arg).map(|f| (f, false)).map_err(|_| err()),
    }
}

impl Store {
    /// A store whose keys go at their expiry instant, as the model's hand-written server
    /// ([`super::server`]) takes them, not a millisecond after as Redis does: to check
    /// that server's steps against the scripts, all else equal.
    #[must_use]
    pub fn expiring_at_the_instant() -> Self {
        Self {
            at_the_instant: true,
            ..Self::default()
        }
    }

    /// Whether a key set to expire at `until_ms` is gone at `now_ms`.
    fn gone(&self, until_ms: Option<u64>, now_ms: u64) -> bool {
        until_ms.is_some_and(|t| now_ms > t || (self.at_the_instant && now_ms == t))
    }

    /// The live keys at `now_ms`, with their values and expiries: what two stores (or a
    /// store and a server) are compared by.
    pub fn keys(&self, now_ms: u64) -> impl Iterator<Item = (&[u8], &Entry)> {
        (self.keys.iter())
            .filter(move |(_, e)| !self.gone(e.until_ms, now_ms))
            .map(|(k, e)| (k.as_slice(), e))
    }

    fn live(&mut self, key: &[u8], now_ms: u64) -> Option<&mut Entry> {
        if (self.keys.get(key)).is_some_and(|e| self.gone(e.until_ms, now_ms)) {
            self.keys.remove(key);
        }
        self.keys.get_mut(key)
    }

    fn hash(&mut self, key: &[u8], now_ms: u64) -> Result<Option<&mut Fields>, String> {
        match self.live(key, now_ms) {
            None => Ok(None),
            Some(Entry {
                data: Data::Hash(h),
                ..
            }) => Ok(Some(h)),
            Some(_) => Err(WRONGTYPE.to_owned()),
        }
    }

    fn zset(&mut self, key: &[u8], now_ms: u64) -> Result<Option<&mut Scores>, String> {
        match self.live(key, now_ms) {
            None => Ok(None),
            Some(Entry {
                data: Data::ZSet(z),
                ..
            }) => Ok(Some(z)),
            Some(_) => Err(WRONGTYPE.to_owned()),
        }
    }

    /// A new key without an expiry.
    fn create(&mut self, key: &[u8], data: Data) {
        let entry = Entry {
            data,
            until_ms: None,
        };
        self.keys.insert(key.to_vec(), entry);
    }

    /// A hash or sorted set left empty is deleted, as Redis does.
    fn drop_if_empty(&mut self, key: &[u8]) {
        let empty = match self.keys.get(key).map(|e| &e.data) {
            Some(Data::Hash(h)) => h.is_empty(),
            Some(Data::ZSet(z)) => z.is_empty(),
            _ => false,
        };
        if empty {
            self.keys.remove(key);
        }
    }

    /// This store, running `patch`'s script with its edits instead of as shipped.
    ///
    /// # Panics
    ///
    /// If an edit's text is not in the script (the defect would not be planted).
    #[must_use]
    pub fn planted(mut self, patch: Patch) -> Self {
        let source = builtin(patch.file).source();
        for (from, _) in &patch.edits {
            assert!(source.contains(from), "{} has no {from:?}", patch.file);
        }
        self.patch = Some(patch);
        self
    }

    /// A client's request (`args[0]` its name) at `now_us`: a command, or `EVAL` /
    /// `EVALSHA` (a digest of one of lockscript's own scripts, as the executors send
    /// them; any other is `NOSCRIPT`, as on a server that never loaded it).
    pub fn request(&mut self, args: &[Vec<u8>], now_us: u64) -> Reply {
        let name = args.first().map(|n| n.to_ascii_uppercase());
        let source = match name.as_deref() {
            Some(b"EVAL") => args.get(1).map(|s| String::from_utf8_lossy(s).into_owned()),
            Some(b"EVALSHA") => {
                let sha = args
                    .get(1)
                    .map(|s| String::from_utf8_lossy(s).to_ascii_lowercase());
                match lockscript::scripts().find(|s| Some(s.sha1()) == sha.as_deref()) {
                    Some(script) => Some(match &self.patch {
                        Some(patch) if script.path().ends_with(patch.file) => (patch.edits)
                            .iter()
                            .fold(script.source().to_owned(), |s, (from, to)| {
                                s.replace(from, to)
                            }),
                        _ => script.source().to_owned(),
                    }),
                    None => {
                        return Reply::Error(
                            "NOSCRIPT No matching script. Please use EVAL.".to_owned(),
                        );
                    }
                }
            }
            _ => return self.command(args, now_us),
        };
        let (Some(source), Some(numkeys)) = (source, args.get(2)) else {
            return Reply::Error("ERR wrong number of arguments for 'eval' command".into());
        };
        let Some(numkeys) = std::str::from_utf8(numkeys)
            .ok()
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|n| 3 + n <= args.len())
        else {
            return Reply::Error(
                "ERR Number of keys can't be greater than number of args".to_owned(),
            );
        };
        let keys: Vec<&[u8]> = args[3..3 + numkeys].iter().map(Vec::as_slice).collect();
        let values: Vec<&[u8]> = args[3 + numkeys..].iter().map(Vec::as_slice).collect();
        self.eval(&source, &keys, &values, now_us)
    }

    /// Runs one command (`args[0]` its name) at `now_us` on the server's clock, as a
    /// script's `redis.call` does (no scripts within scripts).
    pub fn command(&mut self, args: &[Vec<u8>], now_us: u64) -> Reply {
        match self.run(args, now_us) {
            Ok(reply) => reply,
            Err(e) => Reply::Error(e),
        }
    }

    #[allow(clippy::too_many_lines)]
    fn run(&mut self, args: &[Vec<u8>], clock_us: u64) -> Result<Reply, String> {
        let now_ms = clock_us / 1_000;
        let Some(name) = args.first() else {
            return Err("ERR empty command".to_owned());
        };
        let name = String::from_utf8_lossy(name).to_ascii_uppercase();
        let arity = |n: usize| {
            if args.len() < n {
                Err(format!(
                    "ERR wrong number of arguments for '{}' command",
                    name.to_ascii_lowercase()
                ))
            } else {
                Ok(())
            }
        };
        match name.as_str() {
            "TIME" => Ok(Reply::Array(vec![
                Reply::Bulk((clock_us / 1_000_000).to_string().into_bytes()),
                Reply::Bulk((clock_us % 1_000_000).to_string().into_bytes()),
            ])),
            "GET" => {
                arity(2)?;
                match self.live(&args[1], now_ms) {
                    None => Ok(Reply::Nil),
                    Some(Entry {
                        data: Data::Str(s), ..
                    }) => Ok(Reply::Bulk(s.clone())),
                    Some(_) => Err(WRONGTYPE.to_owned()),
                }
            }
            "SET" => {
                arity(3)?;
                let (mut nx, mut xx, mut ttl_ms) = (false, false, None);
                let mut rest = args[3..].iter();
                while let Some(opt) = rest.next() {
                    match String::from_utf8_lossy(opt).to_ascii_uppercase().as_str() {
                        "NX" => nx = true,
                        "XX" => xx = true,
                        unit @ ("PX" | "EX") => {
                            let n = int_arg(rest.next().ok_or(SYNTAX)?)?;
                            if n <= 0 {
                                return Err("ERR invalid expire time in 'set' command".into());
                            }
                            let n = u64::try_from(n).unwrap_or(0);
                            ttl_ms = Some(if unit == "EX" { n * 1_000 } else { n });
                        }
                        _ => return Err(SYNTAX.to_owned()),
                    }
                }
                if nx && xx {
                    return Err(SYNTAX.to_owned());
                }
                let exists = self.live(&args[1], now_ms).is_some();
                if (nx && exists) || (xx && !exists) {
                    return Ok(Reply::Nil);
                }
                self.keys.insert(
                    args[1].clone(),
                    Entry {
                        data: Data::Str(args[2].clone()),
                        until_ms: ttl_ms.map(|t| now_ms + t),
                    },
                );
                Ok(Reply::Status("OK".into()))
            }
            "INCR" => {
                arity(2)?;
                match self.live(&args[1], now_ms) {
                    None => {
                        self.create(&args[1], Data::Str(b"1".to_vec()));
                        Ok(Reply::Int(1))
                    }
                    Some(Entry {
                        data: Data::Str(s), ..
                    }) => {
                        let n = int_arg(s)?.checked_add(1).ok_or(NOT_INTEGER)?;
                        *s = n.to_string().into_bytes();
                        Ok(Reply::Int(n))
                    }
                    Some(_) => Err(WRONGTYPE.to_owned()),
                }
            }
            "DEL" | "EXISTS" => {
                arity(2)?;
                let mut n = 0;
                for key in &args[1..] {
                    if self.live(key, now_ms).is_some() {
                        n += 1;
                        if name == "DEL" {
                            self.keys.remove(key);
                        }
                    }
                }
                Ok(Reply::Int(n))
            }
            "PEXPIRE" => {
                arity(3)?;
                let ms = int_arg(&args[2])?;
                if args.len() > 3 {
                    return Err(SYNTAX.to_owned());
                }
                let Some(entry) = self.live(&args[1], now_ms) else {
                    return Ok(Reply::Int(0));
                };
                if ms <= 0 {
                    self.keys.remove(&args[1]);
                } else {
                    entry.until_ms = Some(now_ms + u64::try_from(ms).unwrap_or(0));
                }
                Ok(Reply::Int(1))
            }
            "PTTL" => {
                arity(2)?;
                Ok(Reply::Int(match self.live(&args[1], now_ms) {
                    None => -2,
                    Some(Entry { until_ms: None, .. }) => -1,
                    Some(Entry {
                        until_ms: Some(t), ..
                    }) => i64::try_from(*t - now_ms).unwrap_or(i64::MAX),
                }))
            }
            "PUBLISH" => {
                arity(3)?;
                self.published.push((args[1].clone(), args[2].clone()));
                Ok(Reply::Int(0))
            }
            "HSET" => {
                if args.len() < 4 || !args.len().is_multiple_of(2) {
                    return Err("ERR wrong number of arguments for 'hset' command".into());
                }
                if self.hash(&args[1], now_ms)?.is_none() {
                    self.create(&args[1], Data::Hash(BTreeMap::new()));
                }
                let h = self.hash(&args[1], now_ms)?.ok_or(WRONGTYPE)?;
                let mut added = 0;
                for pair in args[2..].chunks(2) {
                    if h.insert(pair[0].clone(), pair[1].clone()).is_none() {
                        added += 1;
                    }
                }
                Ok(Reply::Int(added))
            }
            "HGET" => {
                arity(3)?;
                Ok(match self.hash(&args[1], now_ms)? {
                    Some(h) => h
                        .get(&args[2])
                        .map_or(Reply::Nil, |v| Reply::Bulk(v.clone())),
                    None => Reply::Nil,
                })
            }
            "HDEL" => {
                arity(3)?;
                let n = removed(self.hash(&args[1], now_ms)?, &args[2..]);
                self.drop_if_empty(&args[1]);
                Ok(Reply::Int(n))
            }
            "ZADD" => {
                arity(4)?;
                let mut at = 2;
                let (mut nx, mut xx, mut gt, mut lt, mut ch) = (false, false, false, false, false);
                while at < args.len() {
                    match String::from_utf8_lossy(&args[at])
                        .to_ascii_uppercase()
                        .as_str()
                    {
                        "NX" => nx = true,
                        "XX" => xx = true,
                        "GT" => gt = true,
                        "LT" => lt = true,
                        "CH" => ch = true,
                        _ => break,
                    }
                    at += 1;
                }
                let pairs = &args[at..];
                if pairs.is_empty() || !pairs.len().is_multiple_of(2) {
                    return Err(SYNTAX.to_owned());
                }
                if nx && xx {
                    return Err("ERR XX and NX options at the same time are not compatible".into());
                }
                if (gt && lt) || (nx && (gt || lt)) {
                    return Err(
                        "ERR GT, LT, and/or NX options at the same time are not compatible".into(),
                    );
                }
                let scored: Vec<(f64, Vec<u8>)> = pairs
                    .chunks(2)
                    .map(|p| float_arg(&p[0]).map(|s| (s, p[1].clone())))
                    .collect::<Result<_, _>>()?;
                if self.zset(&args[1], now_ms)?.is_none() {
                    if xx {
                        return Ok(Reply::Int(0));
                    }
                    self.create(&args[1], Data::ZSet(BTreeMap::new()));
                }
                let z = self.zset(&args[1], now_ms)?.ok_or(WRONGTYPE)?;
                let (mut added, mut changed) = (0, 0);
                for (score, member) in scored {
                    match z.get(&member).copied() {
                        None if !xx => {
                            z.insert(member, score);
                            added += 1;
                        }
                        Some(old)
                            if !nx
                                && old.to_bits() != score.to_bits()
                                && (!gt || score > old)
                                && (!lt || score < old) =>
                        {
                            z.insert(member, score);
                            changed += 1;
                        }
                        _ => {}
                    }
                }
                self.drop_if_empty(&args[1]);
                Ok(Reply::Int(if ch { added + changed } else { added }))
            }
            "ZREM" => {
                arity(3)?;
                let n = removed(self.zset(&args[1], now_ms)?, &args[2..]);
                self.drop_if_empty(&args[1]);
                Ok(Reply::Int(n))
            }
            "ZSCORE" => {
                arity(3)?;
                Ok(match self.zset(&args[1], now_ms)? {
                    Some(z) => z
                        .get(&args[2])
                        .map_or(Reply::Nil, |s| Reply::Bulk(score_text(*s))),
                    None => Reply::Nil,
                })
            }
            "ZCARD" => {
                arity(2)?;
                Ok(Reply::Int(
                    self.zset(&args[1], now_ms)?
                        .map_or(0, |z| i64::try_from(z.len()).unwrap_or(i64::MAX)),
                ))
            }
            "ZRANGE" => {
                arity(4)?;
                let (start, stop) = (int_arg(&args[2])?, int_arg(&args[3])?);
                let scores = match args.get(4) {
                    None => false,
                    Some(o) if o.eq_ignore_ascii_case(b"WITHSCORES") && args.len() == 5 => true,
                    Some(_) => return Err(SYNTAX.to_owned()),
                };
                let sorted = self.sorted(&args[1], now_ms)?;
                let len = i64::try_from(sorted.len()).unwrap_or(i64::MAX);
                let from = if start < 0 {
                    (len + start).max(0)
                } else {
                    start
                };
                let to = if stop < 0 {
                    len + stop
                } else {
                    stop.min(len - 1)
                };
                let picked = if from > to || from >= len {
                    &[][..]
                } else {
                    let (from, to) = (
                        usize::try_from(from).unwrap_or(0),
                        usize::try_from(to).unwrap_or(0),
                    );
                    &sorted[from..=to]
                };
                Ok(Reply::Array(members(picked, scores)))
            }
            "ZRANGEBYSCORE" => {
                arity(4)?;
                let (min, max) = (score_bound(&args[2])?, score_bound(&args[3])?);
                let (mut scores, mut limit) = (false, None);
                let mut rest = args[4..].iter();
                while let Some(opt) = rest.next() {
                    match String::from_utf8_lossy(opt).to_ascii_uppercase().as_str() {
                        "WITHSCORES" => scores = true,
                        "LIMIT" => {
                            let offset = int_arg(rest.next().ok_or(SYNTAX)?)?;
                            let count = int_arg(rest.next().ok_or(SYNTAX)?)?;
                            limit = Some((offset, count));
                        }
                        _ => return Err(SYNTAX.to_owned()),
                    }
                }
                let sorted = self.sorted(&args[1], now_ms)?;
                let within = sorted.into_iter().filter(|(s, _)| {
                    (if min.1 { *s > min.0 } else { *s >= min.0 })
                        && (if max.1 { *s < max.0 } else { *s <= max.0 })
                });
                let picked: Vec<(f64, Vec<u8>)> = match limit {
                    Some((offset, _)) if offset < 0 => Vec::new(),
                    Some((offset, count)) => {
                        let skipped = within.skip(usize::try_from(offset).unwrap_or(0));
                        match usize::try_from(count) {
                            Ok(count) => skipped.take(count).collect(),
                            Err(_) => skipped.collect(),
                        }
                    }
                    None => within.collect(),
                };
                Ok(Reply::Array(members(&picked, scores)))
            }
            "EVAL" | "EVALSHA" => Err("ERR This Redis command is not allowed from script".into()),
            _ => Err(format!(
                "ERR unknown command '{}'",
                name.to_ascii_lowercase()
            )),
        }
    }

    /// The members of the sorted set at `key` in Redis's order ([`in_order`]).
    fn sorted(&mut self, key: &[u8], now_ms: u64) -> Result<Vec<(f64, Vec<u8>)>, String> {
        Ok(self.zset(key, now_ms)?.map_or_else(Vec::new, |z| {
            in_order(z)
                .into_iter()
                .map(|(s, m)| (s, m.to_vec()))
                .collect()
        }))
    }

    /// Runs `script` (its source; a first `#!` line is the server's, not Lua's) with
    /// `keys` and `argv` at `now_us`, as `EVAL` does.
    pub fn eval(&mut self, script: &str, keys: &[&[u8]], argv: &[&[u8]], now_us: u64) -> Reply {
        LUA.with(|lua| self.eval_in(lua, script, keys, argv, now_us))
            .unwrap_or_else(|e| Reply::Error(format!("ERR {e}")))
    }

    fn eval_in(
        &mut self,
        lua: &Lua,
        script: &str,
        keys: &[&[u8]],
        argv: &[&[u8]],
        now_us: u64,
    ) -> mlua::Result<Reply> {
        let body = if script.starts_with("#!") {
            // Keep the line count, so that errors name the file's lines.
            script.split_once('\n').map_or("", |(_, rest)| rest)
        } else {
            script
        };
        let strings = |items: &[&[u8]]| -> mlua::Result<mlua::Table> {
            let t = lua.create_table()?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, lua.create_string(item)?)?;
            }
            Ok(t)
        };
        let store = std::cell::RefCell::new(&mut *self);
        lua.scope(|scope| {
            let globals = lua.globals();
            globals.set("KEYS", strings(keys)?)?;
            globals.set("ARGV", strings(argv)?)?;
            let redis = lua.create_table()?;
            let call = |raise: bool| {
                let store = &store;
                scope.create_function(move |lua, args: MultiValue| {
                    let words: Vec<Vec<u8>> = args
                        .into_iter()
                        .map(|v| match v {
                            LuaValue::String(s) => Ok(s.as_bytes().to_vec()),
                            LuaValue::Integer(n) => Ok(n.to_string().into_bytes()),
                            LuaValue::Number(n) => Ok(lua_number_text(n).into_bytes()),
                            _ => Err(mlua::Error::runtime(
                                "Lua redis lib command arguments must be strings or integers",
                            )),
                        })
                        .collect::<mlua::Result<_>>()?;
                    let reply = store.borrow_mut().command(&words, now_us);
                    match reply {
                        Reply::Error(e) if raise => Err(mlua::Error::external(ScriptError(e))),
                        other => to_lua(lua, &other),
                    }
                })
            };
            redis.set("call", call(true)?)?;
            redis.set("pcall", call(false)?)?;
            redis.set(
                "error_reply",
                lua.create_function(|lua, msg: String| {
                    let t = lua.create_table()?;
                    t.set("err", msg)?;
                    Ok(t)
                })?,
            )?;
            redis.set(
                "status_reply",
                lua.create_function(|lua, msg: String| {
                    let t = lua.create_table()?;
                    t.set("ok", msg)?;
                    Ok(t)
                })?,
            )?;
            globals.set("redis", redis)?;
            // Each script compiled once per thread, as a server keeps it by its digest
            // (compiling is most of a run's time).
            let compiled = COMPILED.with(|cache| {
                let mut cache = cache.borrow_mut();
                if let Some(f) = cache.get(body) {
                    return Ok(f.clone());
                }
                let f = lua.load(body).set_name("@script").into_function()?;
                cache.insert(body.to_owned(), f.clone());
                Ok::<_, mlua::Error>(f)
            });
            match compiled.and_then(|f| f.call::<LuaValue>(())) {
                Ok(value) => Ok(from_lua(&value)),
                Err(e) => Ok(Reply::Error(script_error(&e))),
            }
        })
    }

    /// Every key at `now_ms`, each as a line: what two stores are compared by in tests.
    pub fn dump(&self, now_ms: u64) -> Vec<String> {
        self.keys(now_ms)
            .map(|(key, entry)| {
                let ttl = entry
                    .until_ms
                    .map_or_else(|| "-1".to_owned(), |t| (t - now_ms).to_string());
                let value = match &entry.data {
                    Data::Str(s) => format!("string {:?}", String::from_utf8_lossy(s)),
                    Data::Hash(h) => format!(
                        "hash {:?}",
                        h.iter()
                            .map(|(f, v)| (String::from_utf8_lossy(f), String::from_utf8_lossy(v)))
                            .collect::<Vec<_>>()
                    ),
                    Data::ZSet(z) => {
                        format!(
                            "zset {:?}",
                            in_order(z)
                                .iter()
                                .map(|(s, m)| (
                                    String::from_utf8_lossy(m),
                                    String::from_utf8_lossy(&score_text(*s)).into_owned()
                                ))
                                .collect::<Vec<_>>()
                        )
                    }
                };
                format!("{} ttl {ttl} {value}", String::from_utf8_lossy(key))
            })
            .collect()
    }
}

thread_local! {
    /// One Lua state per thread, its globals set afresh for each script.
    static LUA: Lua = Lua::new();
    /// The scripts run so far on this thread's Lua state, compiled, by their source.
    static COMPILED: std::cell::RefCell<std::collections::HashMap<String, mlua::Function>> =
        std::cell::RefCell::default();
}

/// An error `redis.call` raised: the script stops with it, as on the server.
#[derive(Debug)]
struct ScriptError(String);

impl fmt::Display for ScriptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ScriptError {}

/// The error reply of a script that stopped: the error `redis.call` raised (its code
/// first, as the server's reply starts), or `ERR` and Lua's message.
fn script_error(e: &mlua::Error) -> String {
    let mut cause: &mlua::Error = e;
    loop {
        match cause {
            mlua::Error::CallbackError { cause: inner, .. } => cause = inner,
            mlua::Error::ExternalError(inner) => {
                if let Some(s) = inner.downcast_ref::<ScriptError>() {
                    return s.0.clone();
                }
                return format!("ERR {inner}");
            }
            other => return format!("ERR {other}"),
        }
    }
}

/// A Lua number as Redis passes it to a command (`fpconv_dtoa`): the shortest text that
/// reads back the same, integers without a fraction.
fn lua_number_text(n: f64) -> String {
    #[allow(clippy::cast_possible_truncation)]
    if n.fract() == 0.0 && n.abs() < 1e17 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

/// A reply as Lua sees it (`redis.call`'s result).
fn to_lua(lua: &Lua, reply: &Reply) -> mlua::Result<LuaValue> {
    Ok(match reply {
        Reply::Nil => LuaValue::Boolean(false),
        Reply::Int(n) => LuaValue::Integer(*n),
        Reply::Bulk(b) => LuaValue::String(lua.create_string(b)?),
        Reply::Status(s) => {
            let t = lua.create_table()?;
            t.set("ok", s.as_str())?;
            LuaValue::Table(t)
        }
        Reply::Error(e) => {
            let t = lua.create_table()?;
            t.set("err", e.as_str())?;
            LuaValue::Table(t)
        }
        Reply::Array(items) => {
            let t = lua.create_table()?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, to_lua(lua, item)?)?;
            }
            LuaValue::Table(t)
        }
    })
}

/// A script's result as the server replies it.
fn from_lua(value: &LuaValue) -> Reply {
    match value {
        LuaValue::Boolean(true) => Reply::Int(1),
        LuaValue::Integer(n) => Reply::Int(*n),
        #[allow(clippy::cast_possible_truncation)]
        LuaValue::Number(n) => Reply::Int(*n as i64),
        LuaValue::String(s) => Reply::Bulk(s.as_bytes().to_vec()),
        LuaValue::Table(t) => {
            if let Ok(LuaValue::String(e)) = t.raw_get::<LuaValue>("err") {
                return Reply::Error(e.to_string_lossy());
            }
            if let Ok(LuaValue::String(ok)) = t.raw_get::<LuaValue>("ok") {
                return Reply::Status(ok.to_string_lossy());
            }
            let mut items = Vec::new();
            for i in 1.. {
                match t.raw_get::<LuaValue>(i) {
                    Ok(LuaValue::Nil) | Err(_) => break,
                    Ok(v) => items.push(from_lua(&v)),
                }
            }
            Reply::Array(items)
        }
        // nil, false, and what a reply cannot carry (functions...).
        _ => Reply::Nil,
    }
}

/// A sorted set's members in Redis's order: by score, then by member bytes.
fn in_order(z: &Scores) -> Vec<(f64, &[u8])> {
    let mut all: Vec<(f64, &[u8])> = z.iter().map(|(m, s)| (*s, m.as_slice())).collect();
    all.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(b.1)));
    all
}

/// Removes `names` from a hash's fields or a sorted set's members: how many were there.
fn removed<V>(from: Option<&mut BTreeMap<Vec<u8>, V>>, names: &[Vec<u8>]) -> i64 {
    from.map_or(0, |map| {
        (names.iter())
            .map(|name| i64::from(map.remove(name).is_some()))
            .sum()
    })
}

/// A list of sorted-set members, with their scores when asked.
fn members(picked: &[(f64, Vec<u8>)], scores: bool) -> Vec<Reply> {
    let mut out = Vec::new();
    for (score, member) in picked {
        out.push(Reply::Bulk(member.clone()));
        if scores {
            out.push(Reply::Bulk(score_text(*score)));
        }
    }
    out
}

/// One of lockscript's own scripts as the binary ships it (its source, which the
/// server runs under its digest), by file name (`fair-queue.lua`).
///
/// # Panics
///
/// If lockscript has no script of that file.
pub fn builtin(file: &str) -> &'static lockscript::Script {
    lockscript::scripts()
        .find(|s| s.path().ends_with(file))
        .unwrap_or_else(|| panic!("lockscript has no script {file}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(w: &[&str]) -> Vec<Vec<u8>> {
        w.iter().map(|w| w.as_bytes().to_vec()).collect()
    }

    #[test]
    fn a_request_runs_a_shipped_script_by_its_digest_and_refuses_others() {
        let mut store = Store::default();
        let renew = builtin("renew.lua");
        store.command(&words(&["SET", "lock:{m}", "a", "PX", "100"]), 1_000_000);
        let reply = store.request(
            &words(&["EVALSHA", renew.sha1(), "1", "lock:{m}", "a", "500"]),
            1_050_000,
        );
        assert_eq!(reply, Reply::Int(1));
        assert_eq!(
            store.command(&words(&["PTTL", "lock:{m}"]), 1_050_000),
            Reply::Int(500)
        );
        let unknown = store.request(&words(&["EVALSHA", &"0".repeat(40), "0"]), 1_050_000);
        assert!(
            matches!(&unknown, Reply::Error(e) if e.starts_with("NOSCRIPT")),
            "{unknown}"
        );
        let nested = store.request(
            &words(&["EVAL", "return redis.call('EVAL', 'return 1', 0)", "0"]),
            1_050_000,
        );
        assert!(
            matches!(&nested, Reply::Error(e) if e.contains("not allowed")),
            "{nested}"
        );
    }
}
