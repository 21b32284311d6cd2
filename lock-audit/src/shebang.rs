//! The `#!lua` first line of a script, read exactly as the servers read it.
//!
//! Redis 7.0 and later and Valkey take a first line that starts with `#!` as the
//! script's shebang (Redis 6.2 reads none: `#!` is a Lua syntax error there). They find
//! the line's end with C's `strchr(body, '\n')`, so a script with no newline after the
//! shebang, or a NUL byte before it, is refused ("Invalid script shebang"). They split the
//! line with `sdssplitargs`: blanks before a word are any of C's `isspace` (space, tab,
//! CR, LF, vertical tab, form feed), but only a space, tab, CR or LF ends a word. The
//! first word names the engine: Redis wants exactly `#!lua`, Valkey any case of `lua`.
//! Every other word must be `flags=`, its list split at each comma: `flags=` alone is no
//! flag, but a comma with nothing after it (`flags=no-writes,`) or before it is an empty
//! flag the servers refuse ("Unexpected flag in script shebang: "). A flag may repeat.
//!
//! Quotes (`"flags=no-writes"`) are read differently by Redis and by Valkey 9 (which
//! accepts `"a"b` as one word, Redis refuses it), so a shebang with a quote is refused
//! here whatever either server does with it: write the flags unquoted.

use crate::commands::{Product, Servers};
use crate::problem::{Position, Problem};

/// The flags Redis 7 accepts after `#!lua flags=`.
pub const KNOWN_FLAGS: &[&str] = &[
    "no-writes",
    "allow-oom",
    "allow-stale",
    "no-cluster",
    "allow-cross-slot-keys",
];

/// A script's shebang as the servers read it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Shebang {
    /// The flags listed, in order, as written (unknown ones too).
    pub(crate) flags: Vec<String>,
    /// What every server refuses.
    problems: Vec<Problem>,
    /// The engine is `lua` in another case (`#!LUA`): Valkey runs it, Redis does not.
    engine_case: Option<String>,
}

/// Where every shebang problem is reported: the start of the file.
const FIRST: Position = Position { line: 1, column: 1 };

impl Shebang {
    /// Reads the shebang of `source`: `None` when it does not start with `#!`.
    pub(crate) fn read(source: &str) -> Option<Self> {
        let rest = source.strip_prefix("#!")?;
        let mut shebang = Self::default();
        // `strchr(body, '\n')`: the first newline, unless a NUL byte comes first.
        let end = source.find(['\n', '\0']);
        let line = match end {
            Some(end) if source.as_bytes()[end] == b'\n' => &source[..end],
            Some(end) => {
                shebang.refuse(format!(
                    "a NUL byte in the shebang line `{}`: Redis and Valkey read the line only up \
                     to it, find no newline, and refuse the script (\"Invalid script shebang\")",
                    &source[..end]
                ));
                return Some(shebang);
            }
            None => {
                let first = rest.lines().next().unwrap_or_default();
                shebang.refuse(format!(
                    "the shebang `#!{first}` is not followed by a newline: Redis and Valkey refuse \
                     the script (\"Invalid script shebang\"); end the line with a newline, and put \
                     the script's body after it"
                ));
                return Some(shebang);
            }
        };
        if line.contains(['"', '\'']) {
            shebang.refuse(format!(
                "quotes in the shebang `{line}`: Redis and Valkey split a quoted shebang \
                 differently (Valkey reads `\"a\"b` as one word, Redis refuses it), so it is \
                 refused here; write `#!lua flags=...` without quotes"
            ));
            return Some(shebang);
        }
        let mut words = split(line).into_iter().peekable();
        let engine = words.next().unwrap_or_default();
        match engine.strip_prefix("#!") {
            // `#! lua`: one mistake, said once.
            Some("") if words.peek().is_some_and(|w| w.eq_ignore_ascii_case("lua")) => {
                shebang.refuse(format!(
                    "a space after `#!` in the shebang `{line}`: the servers take `#!` alone as \
                     the engine's name and refuse the script (Redis: \"Unexpected engine in \
                     script shebang: #!\"); write `#!lua`"
                ));
                words.next();
            }
            Some("lua") => {}
            Some(name) if name.eq_ignore_ascii_case("lua") => {
                shebang.engine_case = Some(engine.clone());
            }
            _ => shebang.refuse(format!(
                "unknown script engine in shebang `{line}`: Redis only runs `#!lua` (Redis \
                 refuses it with \"Unexpected engine in script shebang: {engine}\")"
            )),
        }
        while let Some(word) = words.next() {
            let Some(list) = word.strip_prefix("flags=") else {
                shebang.refuse(format!(
                    "unknown shebang option `{word}`: a script accepts only `flags=...` \
                     (`name=` belongs to Redis Functions)"
                ));
                continue;
            };
            if list.is_empty() {
                continue;
            }
            // `flags=a, b`: the space ends the word, so its list ends in an empty flag and
            // `b` is a word of its own; one mistake, said once.
            let spaced = (list.ends_with(',') && words.peek().is_some())
                .then(|| words.next())
                .flatten();
            let mut empty_said = false;
            for flag in list.split(',') {
                if flag.is_empty() {
                    if std::mem::replace(&mut empty_said, true) {
                        continue;
                    }
                    let message = match &spaced {
                        Some(next) => format!(
                            "a space after the comma in `{word} {next}`: Redis and Valkey split \
                             the line there, so the list ends in an empty flag, and refuse the \
                             script (\"Unexpected flag in script shebang: \"); write \
                             `{word}{next}`"
                        ),
                        None => format!(
                            "empty flag in `{word}`: Redis and Valkey refuse the script \
                             (\"Unexpected flag in script shebang: \"); separate the flags by \
                             single commas, with no comma at either end"
                        ),
                    };
                    shebang.refuse(message);
                    continue;
                }
                if !KNOWN_FLAGS.contains(&flag) {
                    shebang.refuse(format!(
                        "unknown shebang flag `{flag}`: Redis accepts {}",
                        KNOWN_FLAGS.join(", ")
                    ));
                }
                shebang.flags.push(flag.to_owned());
            }
        }
        Some(shebang)
    }

    fn refuse(&mut self, message: String) {
        self.problems.push(Problem { at: FIRST, message });
    }

    /// What the servers of `targets` refuse in it.
    pub(crate) fn problems(&self, targets: Servers) -> Vec<Problem> {
        let mut problems = self.problems.clone();
        let old = Servers::from_fn(|s| !s.reads_shebang()).and(targets);
        if !old.is_empty() {
            problems.push(Problem {
                at: FIRST,
                message: format!(
                    "{old} read{} no shebang: `#!` is a Lua syntax error there (\"unexpected \
                     symbol near '#'\"); the shebang needs Redis {} or later, or Valkey",
                    if old.iter().count() == 1 { "s" } else { "" },
                    crate::commands::SHEBANG_SINCE
                ),
            });
        }
        let redis = targets.of(Product::Redis);
        if let Some(engine) = &self.engine_case
            && !redis.is_empty()
        {
            problems.push(Problem {
                at: FIRST,
                message: format!(
                    "`{engine}`: Redis reads only `#!lua`, in lower case, and refuses this \
                     (\"Unexpected engine in script shebang: {engine}\"; Valkey reads any case): \
                     write `#!lua`"
                ),
            });
        }
        problems
    }
}

/// The words of a line as `sdssplitargs` splits one without quotes: blanks before a word
/// are C's `isspace`, a word ends at a space, tab, CR or LF.
fn split(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut rest = line;
    loop {
        rest = rest.trim_start_matches([' ', '\t', '\n', '\u{b}', '\u{c}', '\r']);
        if rest.is_empty() {
            return words;
        }
        let end = rest.find([' ', '\t', '\r', '\n']).unwrap_or(rest.len());
        words.push(rest[..end].to_owned());
        rest = &rest[end..];
    }
}

/// The source with the shebang line turned into a Lua comment of the same width, so
/// positions in the rest stay true (the servers, too, compile from the newline on).
pub(crate) fn as_comment(source: &str) -> String {
    match source.strip_prefix("#!") {
        Some(rest) => format!("--{rest}"),
        None => source.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::{Shebang, split};
    use crate::commands::{Product, SERVERS, Server, Servers};

    #[test]
    fn words_split_as_sdssplitargs_splits_them() {
        assert_eq!(
            split("#!lua \u{c}flags=x\u{c}  y\t"),
            ["#!lua", "flags=x\u{c}", "y"]
        );
        assert!(split(" \u{b} ").is_empty());
    }

    #[test]
    fn an_upper_case_engine_is_refused_by_redis_only() {
        let shebang = Shebang::read("#!LUA\nreturn 1").unwrap();
        let valkey = Servers::from_fn(|s| s.product == Product::Valkey);
        assert!(shebang.problems(valkey).is_empty());
        let problems = shebang.problems(Servers::from_fn(Server::reads_shebang));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0]
                .message
                .starts_with("`#!LUA`: Redis reads only `#!lua`")
        );
    }

    #[test]
    fn redis_6_2_reads_no_shebang() {
        let r62 = Servers::from_fn(|s| s.version.starts_with("6.2."));
        assert!(SERVERS.iter().any(|s| r62.contains(s)));
        let problems = Shebang::read("#!lua\nreturn 1").unwrap().problems(r62);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].message.contains("reads no shebang"),
            "{problems:?}"
        );
    }

    #[test]
    fn quotes_are_refused_whatever_a_server_does_with_them() {
        let problems = Shebang::read("#!lua \"flags=no-writes\"\nreturn 1")
            .unwrap()
            .problems(Servers::from_fn(Server::reads_shebang));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].message.starts_with("quotes in the shebang"));
    }
}
