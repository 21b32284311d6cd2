//! A Redis Cluster's routing, as plain data: which slot a key (or a command, or a
//! pipeline) lives in, which primary serves a slot by the last `CLUSTER SLOTS` answer and
//! the redirections seen since, and what a `MOVED` or `ASK` reply names. The connection
//! that does the I/O is [`crate::exec::cluster`].

use std::collections::HashMap;

use redis::{Arg, Cmd, Pipeline, RedisError, ServerErrorKind, Value};

/// How many hash slots a Redis Cluster has.
pub(crate) const SLOTS: u16 = 16_384;

/// The slot of a key whose hash tag (or whole name, without one) is `tag`.
pub(crate) fn of_tag(tag: &[u8]) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(tag) % SLOTS
}

/// The slot of `key`: of its hash tag (what is between the first `{` and the next `}`,
/// when that is not empty), or else of the whole key, as Redis Cluster hashes it.
pub(crate) fn of_key(key: &[u8]) -> u16 {
    let tag = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    of_tag(tag)
}

/// Commands that name no key: sent to any primary (or, in a pipeline, along with the
/// keyed commands, to theirs).
const KEYLESS: &[&[u8]] = &[
    b"ACL",
    b"ASKING",
    b"AUTH",
    b"CLIENT",
    b"CLUSTER",
    b"COMMAND",
    b"CONFIG",
    b"DBSIZE",
    b"DISCARD",
    b"ECHO",
    b"EXEC",
    b"FUNCTION",
    b"HELLO",
    b"INFO",
    b"LASTSAVE",
    b"LATENCY",
    b"MEMORY",
    b"MULTI",
    b"PING",
    b"PUBLISH",
    b"READONLY",
    b"READWRITE",
    b"ROLE",
    b"SCRIPT",
    b"SELECT",
    b"SLOWLOG",
    b"TIME",
    b"UNWATCH",
    b"WAIT",
    b"WAITAOF",
];

/// The slot of `cmd`'s first key; `None` for a command that names none (a script called
/// with no keys, `TIME`, `WAIT`, `PUBLISH`...).
pub(crate) fn of_cmd(cmd: &Cmd) -> Option<u16> {
    let mut args = cmd.args_iter().map(|arg| match arg {
        Arg::Simple(bytes) => bytes,
        _ => b"0".as_slice(),
    });
    let name = args.next()?.to_ascii_uppercase();
    match name.as_slice() {
        b"EVAL" | b"EVALSHA" | b"EVAL_RO" | b"EVALSHA_RO" | b"FCALL" | b"FCALL_RO" => {
            let _script = args.next()?;
            let numkeys: usize = std::str::from_utf8(args.next()?).ok()?.parse().ok()?;
            if numkeys == 0 {
                return None;
            }
            args.next().map(of_key)
        }
        keyless if KEYLESS.contains(&keyless) => None,
        _ => args.next().map(of_key),
    }
}

/// Where a command that names no key goes on a Cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Spread {
    /// To one primary (or, with a key, to its slot's).
    One,
    /// To every primary, each of which must accept it: loading a script or a library,
    /// flushing them. One answer (the first primary's), or the first error.
    EveryAccepts,
    /// To every primary, the answers as a map of address to answer (`INFO`, read as
    /// the oldest server's by the script layer).
    EveryAnswers,
}

/// Where `cmd` goes: the commands that concern every primary's scripts, functions or
/// version go to all of them (as redis-rs's cluster connection sends them), the rest to
/// one.
pub(crate) fn spread_of(cmd: &Cmd) -> Spread {
    let mut args = cmd.args_iter().map(|arg| match arg {
        Arg::Simple(bytes) => bytes.to_ascii_uppercase(),
        _ => Vec::new(),
    });
    let (Some(name), sub) = (args.next(), args.next()) else {
        return Spread::One;
    };
    match (name.as_slice(), sub.as_deref()) {
        (b"SCRIPT", Some(b"LOAD" | b"FLUSH"))
        | (b"FUNCTION", Some(b"LOAD" | b"FLUSH" | b"DELETE" | b"RESTORE")) => Spread::EveryAccepts,
        (b"INFO", _) => Spread::EveryAnswers,
        _ => Spread::One,
    }
}

/// The one slot every keyed command of `pipe` lives in (`None` when none names a key);
/// [`cross_slot`] when two name different slots.
pub(crate) fn of_pipeline(pipe: &Pipeline) -> Result<Option<u16>, RedisError> {
    let mut found = None;
    for slot in pipe.cmd_iter().filter_map(of_cmd) {
        match found {
            Some(seen) if seen != slot => return Err(cross_slot()),
            _ => found = Some(slot),
        }
    }
    Ok(found)
}

/// The error a Cluster connection answers a pipeline across slots with, before sending
/// anything (as the server answers a script's keys across slots).
pub(crate) fn cross_slot() -> RedisError {
    server_error("CROSSSLOT Keys in request don't hash to the same slot")
}

/// The error for a slot no known primary serves: nothing was sent; the topology is
/// being read again, and the call may be retried shortly.
pub(crate) fn unserved(slot: u16) -> RedisError {
    server_error(&format!(
        "CLUSTERDOWN no primary is known for hash slot {slot} (the cluster's slots are \
         being read again)"
    ))
}

/// A server error reply, as the server would send it (`CODE detail`).
fn server_error(line: &str) -> RedisError {
    let reply =
        redis::parse_redis_value(format!("-{line}\r\n").as_bytes()).and_then(Value::extract_error);
    match reply {
        Err(e) => e,
        Ok(_) => RedisError::from((redis::ErrorKind::Client, "a server error", line.to_owned())),
    }
}

/// Where a reply sends a command instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Redirect {
    /// `MOVED slot host:port`: the slot is served there now; the command did not run.
    Moved { slot: u16, to: String },
    /// `ASK slot host:port`: this one command goes there, after `ASKING`; it did not run.
    Ask { slot: u16, to: String },
}

impl Redirect {
    /// The redirection `reply` is, if it is one.
    pub(crate) fn of_reply(reply: &Result<Value, RedisError>) -> Option<Self> {
        match reply {
            Ok(Value::ServerError(e)) => Self::read(e.kind()?, e.details()?),
            Err(e) => match e.kind() {
                redis::ErrorKind::Server(kind) => Self::read(kind, e.detail()?),
                _ => None,
            },
            Ok(_) => None,
        }
    }

    fn read(kind: ServerErrorKind, detail: &str) -> Option<Self> {
        let mut parts = detail.split_whitespace();
        let slot = parts.next()?.parse().ok()?;
        let to = parts.next()?.to_owned();
        match kind {
            ServerErrorKind::Moved => Some(Self::Moved { slot, to }),
            ServerErrorKind::Ask => Some(Self::Ask { slot, to }),
            _ => None,
        }
    }
}

/// Which primary serves each slot: the ranges of the last `CLUSTER SLOTS` answer, and
/// the single slots a `MOVED` reply moved since.
#[derive(Clone, Debug, Default)]
pub(crate) struct Topology {
    /// `(first, last, "host:port")`, inclusive, sorted by `first`.
    ranges: Vec<(u16, u16, String)>,
    /// Slots a redirection placed elsewhere since the ranges were read.
    moved: HashMap<u16, String>,
}

impl Topology {
    /// Reads a `CLUSTER SLOTS` answer given by the node at `host` (a primary announced
    /// without a host, or as a wildcard address, is on the answering node's host; one
    /// announced as `?` is unknown and its slots unserved). `None` when the answer says
    /// nothing usable.
    pub(crate) fn read(answer: &Value, host: &str) -> Option<Self> {
        let Value::Array(items) = answer else {
            return None;
        };
        let mut ranges = Vec::new();
        for item in items {
            let Value::Array(fields) = item else { continue };
            let (Some(Value::Int(first)), Some(Value::Int(last)), Some(Value::Array(primary))) =
                (fields.first(), fields.get(1), fields.get(2))
            else {
                continue;
            };
            let (Ok(first), Ok(last)) = (u16::try_from(*first), u16::try_from(*last)) else {
                continue;
            };
            let announced = match primary.first() {
                Some(Value::BulkString(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
                Some(Value::SimpleString(s)) => s.clone(),
                _ => String::new(),
            };
            let Some(Value::Int(port)) = primary.get(1) else {
                continue;
            };
            let Ok(port) = u16::try_from(*port) else {
                continue;
            };
            let at = match announced.as_str() {
                "?" => continue,
                "" | "0.0.0.0" | "::" => host.to_owned(),
                announced => announced.to_owned(),
            };
            if first <= last && last < SLOTS {
                ranges.push((first, last, address(&at, port)));
            }
        }
        if ranges.is_empty() {
            return None;
        }
        ranges.sort();
        Some(Self {
            ranges,
            moved: HashMap::new(),
        })
    }

    /// The primary serving `slot`, by the last redirection or else the ranges.
    pub(crate) fn primary(&self, slot: u16) -> Option<&str> {
        if let Some(to) = self.moved.get(&slot) {
            return Some(to);
        }
        let at = self.ranges.partition_point(|(first, ..)| *first <= slot);
        let (_, last, addr) = self.ranges.get(at.checked_sub(1)?)?;
        (slot <= *last).then_some(addr.as_str())
    }

    /// A `MOVED` reply's news: `slot` is served at `to` from now on.
    pub(crate) fn moved(&mut self, slot: u16, to: &str) {
        self.moved.insert(slot, to.to_owned());
    }

    /// Every primary, each once, in slot order.
    pub(crate) fn primaries(&self) -> Vec<String> {
        let mut seen: Vec<String> = Vec::new();
        let all = self
            .ranges
            .iter()
            .map(|(.., a)| a)
            .chain(self.moved.values());
        for addr in all {
            if !seen.contains(addr) {
                seen.push(addr.clone());
            }
        }
        seen
    }
}

/// `host:port`, with an IPv6 host in brackets.
pub(crate) fn address(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The host and port of a `host:port` address (an IPv6 host with or without brackets).
pub(crate) fn host_port(addr: &str) -> Option<(String, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host.to_owned(), port.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_hash_by_their_tag_as_redis_cluster_does() {
        // The values Redis's CLUSTER KEYSLOT gives.
        assert_eq!(of_key(b"foo"), 12_182);
        assert_eq!(of_key(b"{user1000}.following"), of_key(b"user1000"));
        assert_eq!(of_key(b"foo{}{bar}"), of_key(b"foo{}{bar}"));
        assert_ne!(
            of_key(b"foo{}{bar}"),
            of_key(b"bar"),
            "an empty tag is no tag"
        );
        assert_eq!(of_key(b"lock:{orders}"), of_tag(b"orders"));
        assert_eq!(of_key(b"{a}{b}"), of_tag(b"a"), "the first tag counts");
    }

    #[test]
    fn a_command_routes_by_its_first_key() {
        let mut eval = redis::cmd("EVALSHA");
        eval.arg("abc")
            .arg(2)
            .arg("lock:{x}")
            .arg("fence:{x}")
            .arg("tok");
        assert_eq!(of_cmd(&eval), Some(of_tag(b"x")));
        let mut keyless = redis::cmd("EVAL");
        keyless.arg("return 1").arg(0);
        assert_eq!(of_cmd(&keyless), None);
        assert_eq!(
            of_cmd(redis::cmd("SET").arg("k").arg(1)),
            Some(of_key(b"k"))
        );
        for cmd in ["TIME", "MULTI", "EXEC"] {
            assert_eq!(of_cmd(&redis::cmd(cmd)), None, "{cmd}");
        }
        assert_eq!(of_cmd(redis::cmd("wait").arg(1).arg(100)), None);
        assert_eq!(of_cmd(redis::cmd("PUBLISH").arg("ch").arg("m")), None);
    }

    #[test]
    fn what_concerns_every_primary_goes_to_every_primary() {
        let load = redis::cmd("script").arg("load").arg("return 1").clone();
        assert_eq!(spread_of(&load), Spread::EveryAccepts);
        let library = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("#!lua name=x")
            .clone();
        assert_eq!(spread_of(&library), Spread::EveryAccepts);
        assert_eq!(
            spread_of(redis::cmd("INFO").arg("server")),
            Spread::EveryAnswers
        );
        assert_eq!(spread_of(&redis::cmd("INFO")), Spread::EveryAnswers);
        for one in [
            redis::cmd("SCRIPT").arg("EXISTS").arg("abc").clone(),
            redis::cmd("EVALSHA").arg("abc").arg(1).arg("k").clone(),
            redis::cmd("TIME"),
            redis::cmd("COMMAND").arg("DOCS").arg("SET").clone(),
        ] {
            assert_eq!(spread_of(&one), Spread::One, "{one:?}");
        }
    }

    #[test]
    fn a_pipeline_lives_in_one_slot_or_is_refused() {
        let mut pipe = redis::pipe();
        pipe.cmd("MULTI").cmd("SET").arg("lock:{a}").arg(1);
        pipe.cmd("INCR").arg("fence:{a}").cmd("TIME").cmd("EXEC");
        assert_eq!(of_pipeline(&pipe).unwrap(), Some(of_tag(b"a")));
        pipe.cmd("GET").arg("lock:{b}");
        let refused = of_pipeline(&pipe).unwrap_err();
        assert_eq!(
            refused.kind(),
            redis::ErrorKind::Server(ServerErrorKind::CrossSlot)
        );
        assert_eq!(of_pipeline(&redis::pipe()).unwrap(), None);
    }

    #[test]
    fn redirections_are_read_from_replies_and_errors() {
        let moved = redis::parse_redis_value(b"-MOVED 3999 127.0.0.1:6381\r\n").unwrap();
        let read = Redirect::of_reply(&Ok(moved.clone()));
        let to = "127.0.0.1:6381".to_owned();
        assert_eq!(
            read,
            Some(Redirect::Moved {
                slot: 3999,
                to: to.clone()
            })
        );
        assert_eq!(Redirect::of_reply(&moved.extract_error()), read);
        let ask = redis::parse_redis_value(b"-ASK 7 10.0.0.2:7000\r\n").unwrap();
        assert_eq!(
            Redirect::of_reply(&Ok(ask)),
            Some(Redirect::Ask {
                slot: 7,
                to: "10.0.0.2:7000".to_owned()
            })
        );
        assert_eq!(Redirect::of_reply(&Ok(Value::Okay)), None);
        let other = redis::parse_redis_value(b"-TRYAGAIN later\r\n").unwrap();
        assert_eq!(Redirect::of_reply(&Ok(other)), None);
        assert!(crate::error::is_retry_later(&unserved(5)));
    }

    fn node(host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::BulkString(host.as_bytes().to_vec()),
            Value::Int(port),
            Value::BulkString(b"id".to_vec()),
        ])
    }

    fn range(first: i64, last: i64, primary: Value) -> Value {
        Value::Array(vec![
            Value::Int(first),
            Value::Int(last),
            primary,
            node("r", 1),
        ])
    }

    #[test]
    fn the_topology_is_read_from_cluster_slots_and_moved_replies() {
        let answer = Value::Array(vec![
            range(5461, 10922, node("10.0.0.2", 7001)),
            range(0, 5460, node("", 7000)),
            range(10923, 16383, node("?", 7002)),
        ]);
        let mut topology = Topology::read(&answer, "10.0.0.9").expect("read");
        assert_eq!(topology.primary(0), Some("10.0.0.9:7000"));
        assert_eq!(topology.primary(5460), Some("10.0.0.9:7000"));
        assert_eq!(topology.primary(5461), Some("10.0.0.2:7001"));
        assert_eq!(topology.primary(10922), Some("10.0.0.2:7001"));
        assert_eq!(
            topology.primary(10923),
            None,
            "an unknown primary serves nothing"
        );
        topology.moved(10923, "10.0.0.3:7002");
        assert_eq!(topology.primary(10923), Some("10.0.0.3:7002"));
        assert_eq!(topology.primary(10924), None);
        assert_eq!(
            topology.primaries(),
            ["10.0.0.9:7000", "10.0.0.2:7001", "10.0.0.3:7002"]
        );
        assert!(Topology::read(&Value::Array(vec![]), "h").is_none());
        assert!(Topology::read(&Value::Nil, "h").is_none());
    }

    #[test]
    fn addresses_keep_ipv6_hosts_whole() {
        assert_eq!(address("::1", 7000), "[::1]:7000");
        assert_eq!(host_port("[::1]:7000"), Some(("::1".to_owned(), 7000)));
        assert_eq!(host_port("::1:7000"), Some(("::1".to_owned(), 7000)));
        assert_eq!(host_port("node-a:6379"), Some(("node-a".to_owned(), 6379)));
        assert_eq!(host_port("nope"), None);
    }
}
