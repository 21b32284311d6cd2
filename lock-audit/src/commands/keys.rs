//! Where a command's keys are in a call: the servers' key specifications (`COMMAND INFO`,
//! `key_specs`), and which arguments of a call written in a script they certainly make
//! keys.
//!
//! A key specification says where the search for keys begins (at an index, or after a
//! keyword) and how far the keys go from there (a range, or a count given by an argument:
//! `numkeys`). Redis computes them on the call's arguments, the name at index 0 and a
//! subcommand at 1 (`OBJECT ENCODING key` has its key at 2). The table keeps the
//! specifications every server that reports them agrees on, leaving out the ones the
//! servers mark `incomplete` or `not_key` (`SPUBLISH`'s channel), the ones whose search
//! is `unknown` (`SORT ... STORE`), and keyword searches that run backwards from the
//! end (`MIGRATE ... KEYS`): where those find keys cannot be read off the call.
//!
//! [`KeySpec::keys_in`] applies them to a call as the analysis sees it before it runs
//! ([`Argument`]): literal arguments, computed ones, and a last one that may expand to any
//! number of values. It answers only the positions that hold a key whatever the computed
//! arguments turn out to be; a position it cannot be sure of is left out.

/// Where the search for a command's keys begins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Begin {
    /// At this index of the call (the command's name is 0).
    Index(usize),
    /// After the first argument from index `from` on that is `keyword` (any case).
    Keyword {
        /// The keyword, upper case: `STREAMS`.
        keyword: &'static str,
        /// The index the search starts at.
        from: usize,
    },
}

/// Which arguments from where the search began are keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Find {
    /// Every `step`th argument up to `last`: `last` counts from the beginning when it is
    /// 0 or more, from the end of the call when negative (-1 the last argument). With a
    /// `limit` above 1 (and `last` -1), only the first 1/`limit` of the arguments that
    /// remain are keys: `XREAD ... STREAMS k1 k2 id1 id2`.
    Range {
        /// The last key, relative to the beginning, or to the end of the call when
        /// negative.
        last: i64,
        /// The distance between two keys (`MSET k v k v`: 2).
        step: usize,
        /// 0 or 1 for no limit; `n` for the first 1/n of the remaining arguments.
        limit: usize,
    },
    /// The argument at `index` (from the beginning) is how many keys there are; they
    /// start at `first` (from the beginning), every `step`th argument:
    /// `ZUNIONSTORE dest numkeys k1 k2`.
    Keynum {
        /// Where `numkeys` is, from the beginning.
        index: usize,
        /// Where the first key is, from the beginning.
        first: usize,
        /// The distance between two keys.
        step: usize,
    },
}

/// One key specification of a command, as the servers report it in `COMMAND INFO`.
///
/// ```
/// use lockscript_audit::commands::{self, Argument};
///
/// // ZUNIONSTORE dest numkeys key [key ...]: the destination, then `numkeys` keys.
/// let zunionstore = commands::find("ZUNIONSTORE").unwrap();
/// let call = [
///     Argument::Text("ZUNIONSTORE".into()),
///     Argument::Computed,
///     Argument::Number("2".into()),
///     Argument::Computed,
///     Argument::Text("other".into()),
///     Argument::Text("WEIGHTS".into()),
/// ];
/// assert_eq!(zunionstore.keys_in(&call, false), [1, 3, 4]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeySpec {
    /// Where the search begins.
    pub begin: Begin,
    /// Which arguments from there are keys.
    pub find: Find,
}

/// One argument of a call, as a script's text shows it before the script runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Argument {
    /// A string literal, as written between its quotes (escapes not decoded).
    Text(String),
    /// A number literal, as written (`2`, `0x10`, `1e3`).
    Number(String),
    /// Anything else: a variable, `KEYS[1]`, `'a' .. x`, a call's result.
    Computed,
}

impl Argument {
    /// The argument is certainly `keyword` (`Some(true)`), certainly not (`Some(false)`),
    /// or can't be told (a computed value, or text with escapes).
    fn is_keyword(&self, keyword: &str) -> Option<bool> {
        match self {
            Self::Text(text) if !text.contains('\\') => Some(text.eq_ignore_ascii_case(keyword)),
            // A number is sent as digits, never a keyword's letters.
            Self::Number(_) => Some(false),
            Self::Text(_) | Self::Computed => None,
        }
    }

    /// The count the argument certainly gives as `numkeys`: a decimal literal, as the
    /// server reads it (`string2ll`: no sign, no leading zero).
    fn count(&self) -> Option<usize> {
        let digits = match self {
            // Lua sends a whole number as its shortest digits: `007` arrives as "7".
            Self::Number(text) => text.trim_start_matches('0'),
            Self::Text(text) if text == "0" || !text.starts_with('0') => text,
            Self::Text(_) | Self::Computed => return None,
        };
        if digits.is_empty() {
            return matches!(self, Self::Number(t) if !t.is_empty()).then_some(0);
        }
        if !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok()
    }
}

/// A search that begins at index `pos`, for the generated table:
/// `index(1).range(0, 1, 0)` is a command's one key at 1.
pub const fn index(pos: usize) -> Begin {
    Begin::Index(pos)
}

/// A search that begins after `keyword`, looked for from index `from` on.
pub const fn keyword(keyword: &'static str, from: usize) -> Begin {
    Begin::Keyword { keyword, from }
}

impl Begin {
    /// The specification with its keys in a range ([`Find::Range`]).
    pub const fn range(self, last: i64, step: usize, limit: usize) -> KeySpec {
        KeySpec {
            begin: self,
            find: Find::Range { last, step, limit },
        }
    }

    /// The specification with its keys counted by an argument ([`Find::Keynum`]).
    pub const fn keynum(self, index: usize, first: usize, step: usize) -> KeySpec {
        KeySpec {
            begin: self,
            find: Find::Keynum { index, first, step },
        }
    }
}

impl KeySpec {
    /// The indexes of `call` (the name at 0) that certainly hold a key by this
    /// specification, whatever its computed arguments hold; `open` when the last argument
    /// may expand to any number of values, none included (`unpack(t)`, `...`).
    ///
    /// Every argument but an open last one is one value in Lua, so the index of each is
    /// exact; with `open`, the call has at least `call.len() - 1` arguments and how many
    /// more is unknown, so a range counted from the end stops where that fewest count puts
    /// it.
    ///
    /// ```
    /// use lockscript_audit::commands::{Argument, index, keyword};
    ///
    /// let text = |s: &str| Argument::Text(s.to_owned());
    /// // XREAD COUNT 10 STREAMS a b 0 0: the first half after STREAMS.
    /// let xread = keyword("STREAMS", 1).range(-1, 1, 2);
    /// let call = ["XREAD", "COUNT", "10", "STREAMS", "a", "b", "0", "0"].map(text);
    /// assert_eq!(xread.keys_in(&call, false), [4, 5]);
    /// // A computed argument before STREAMS might be STREAMS itself: can't tell.
    /// let mut computed = call.clone();
    /// computed[2] = Argument::Computed;
    /// assert!(xread.keys_in(&computed, false).is_empty());
    /// // DEL k1 k2 unpack(more): every argument from 1 on, however many follow.
    /// let del = index(1).range(-1, 1, 0);
    /// let call = [text("DEL"), text("a"), text("b"), Argument::Computed];
    /// assert_eq!(del.keys_in(&call, true), [1, 2]);
    /// ```
    pub fn keys_in(&self, call: &[Argument], open: bool) -> Vec<usize> {
        let given = call.len();
        // The fewest arguments the call can have: an open last one may be none.
        let fewest = if open { given.saturating_sub(1) } else { given };
        let Some(first) = self.begin.first_key(call, open) else {
            return Vec::new();
        };
        let (first, last, step) = match self.find {
            Find::Range { last, step, limit } => {
                let last = match usize::try_from(last) {
                    Ok(ahead) => first.checked_add(ahead),
                    // From the end: where the fewest arguments put it (more arguments only
                    // move it further, and then there are more keys, not other ones).
                    Err(_) if limit <= 1 => usize::try_from(last.unsigned_abs())
                        .ok()
                        .and_then(|back| fewest.checked_sub(back)),
                    // `last` -1 with a limit: the first 1/limit of what remains.
                    Err(_) if last == -1 => fewest
                        .checked_sub(first)
                        .map(|rest| rest / limit)
                        .and_then(|n| (first + n).checked_sub(1)),
                    Err(_) => None,
                };
                (first, last, step)
            }
            Find::Keynum {
                index,
                first: offset,
                step,
            } => {
                // The count must be a literal the server reads as one.
                let Some(count) = call.get(first + index).and_then(Argument::count) else {
                    return Vec::new();
                };
                let start = first + offset;
                // Redis up to 8.2 ends the keys `numkeys` arguments after the first
                // (`MSETEX 2 k1 v1 k2 v2`: k1 only), newer servers `numkeys` keys `step`
                // apart (k1 and k2): the keys both find, in a call long enough for both.
                let widest = count
                    .checked_sub(1)
                    .and_then(|n| n.checked_mul(step))
                    .and_then(|n| start.checked_add(n));
                if widest.is_none_or(|widest| widest >= fewest) {
                    return Vec::new();
                }
                (start, (start + count).checked_sub(1), step)
            }
        };
        // A range the fewest arguments do not reach is refused by the server (wrong
        // number of arguments, or no keys found): no key is certain then.
        let Some(last) = last.filter(|&last| last >= first && last < fewest) else {
            return Vec::new();
        };
        (first..=last).step_by(step.max(1)).collect()
    }
}

impl Begin {
    /// The index the keys start from in `call`, when it is certain.
    fn first_key(&self, call: &[Argument], open: bool) -> Option<usize> {
        match *self {
            Self::Index(pos) => Some(pos),
            Self::Keyword { keyword, from } => {
                // The server looks at every argument from `from` on but the last one, and
                // takes the first that matches. Only the arguments before the last of the
                // fewest the call can have are certainly looked at; a computed one might
                // match itself. Either way, past them where the keys start can't be told.
                let fewest = if open {
                    call.len().saturating_sub(1)
                } else {
                    call.len()
                };
                let looked_at = fewest.saturating_sub(1);
                for (i, argument) in call.iter().enumerate().take(looked_at).skip(from.max(1)) {
                    match argument.is_keyword(keyword) {
                        Some(true) => return Some(i + 1),
                        Some(false) => {}
                        None => return None,
                    }
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Argument, index, keyword};
    use crate::commands::find;

    fn text(s: &str) -> Argument {
        Argument::Text(s.to_owned())
    }

    fn number(s: &str) -> Argument {
        Argument::Number(s.to_owned())
    }

    /// The call `words`, each a literal but `?`, which is computed.
    fn call(words: &[&str]) -> Vec<Argument> {
        words
            .iter()
            .map(|w| match *w {
                "?" => Argument::Computed,
                w if w.bytes().all(|b| b.is_ascii_digit()) => number(w),
                w => text(w),
            })
            .collect()
    }

    fn keys(name: &str, words: &[&str], open: bool) -> Vec<usize> {
        find(name)
            .unwrap_or_else(|| panic!("no {name}"))
            .keys_in(&call(words), open)
    }

    #[test]
    fn a_single_key_command_has_its_key_at_one() {
        assert_eq!(keys("GET", &["GET", "k"], false), [1]);
        assert_eq!(keys("SET", &["SET", "k", "v", "PX", "?"], false), [1]);
        // Open: SET k unpack(ARGV) still has its key at 1.
        assert_eq!(keys("SET", &["SET", "k", "?"], true), [1]);
        assert!(keys("PING", &["PING", "x"], false).is_empty());
    }

    #[test]
    fn a_subcommand_counts_from_its_container() {
        assert_eq!(
            keys("OBJECT|ENCODING", &["OBJECT", "ENCODING", "k"], false),
            [2]
        );
        assert_eq!(keys("XINFO|STREAM", &["XINFO", "STREAM", "s"], false), [2]);
        assert_eq!(keys("MEMORY|USAGE", &["MEMORY", "USAGE", "k"], false), [2]);
    }

    #[test]
    fn a_range_to_the_end_takes_every_argument_and_stops_short_of_a_trailing_one() {
        assert_eq!(keys("DEL", &["DEL", "a", "b", "c"], false), [1, 2, 3]);
        // BLPOP k1 k2 timeout.
        assert_eq!(keys("BLPOP", &["BLPOP", "a", "b", "0"], false), [1, 2]);
        // BLPOP a b unpack(rest): b may be the timeout when rest is empty.
        assert_eq!(keys("BLPOP", &["BLPOP", "a", "b", "?"], true), [1]);
        // MSET k v k v.
        assert_eq!(keys("MSET", &["MSET", "a", "1", "b", "2"], false), [1, 3]);
        // BITOP AND dest k1 k2: the destination at 2, the sources from 3.
        assert_eq!(
            keys("BITOP", &["BITOP", "AND", "d", "a", "b"], false),
            [2, 3, 4]
        );
    }

    #[test]
    fn numkeys_counts_only_when_it_is_a_literal() {
        assert_eq!(
            keys(
                "ZUNIONSTORE",
                &["ZUNIONSTORE", "d", "2", "a", "b", "WEIGHTS", "1", "2"],
                false
            ),
            [1, 3, 4]
        );
        // numkeys computed: only the destination is certain.
        assert_eq!(
            keys("ZUNIONSTORE", &["ZUNIONSTORE", "d", "?", "a", "b"], false),
            [1]
        );
        // As a string literal too, read as the server reads it.
        let mut lmpop = call(&["LMPOP", "?", "a", "b", "LEFT"]);
        lmpop[1] = text("2");
        assert_eq!(find("LMPOP").unwrap().keys_in(&lmpop, false), [2, 3]);
        lmpop[1] = text("02");
        assert!(find("LMPOP").unwrap().keys_in(&lmpop, false).is_empty());
        // More keys than arguments: the server refuses the call, nothing is certain.
        assert!(keys("LMPOP", &["LMPOP", "3", "a", "b"], false).is_empty());
        assert!(keys("LMPOP", &["LMPOP", "0", "LEFT"], false).is_empty());
        // `007` is sent as 7.
        assert_eq!(number("007").count(), Some(7));
        assert_eq!(number("0").count(), Some(0));
        assert_eq!(number("0x2").count(), None);
    }

    #[test]
    fn a_keyword_search_needs_every_argument_before_the_keyword_to_be_literal() {
        // XREADGROUP GROUP g c COUNT 1 STREAMS s1 s2 > >.
        let words = [
            "XREADGROUP",
            "GROUP",
            "g",
            "c",
            "COUNT",
            "1",
            "STREAMS",
            "s1",
            "s2",
            ">",
            ">",
        ];
        assert_eq!(keys("XREADGROUP", &words, false), [7, 8]);
        // The group name is before the search starts (index 4): it may be computed.
        let mut computed_group = words;
        computed_group[2] = "?";
        assert_eq!(keys("XREADGROUP", &computed_group, false), [7, 8]);
        let mut computed_count = words;
        computed_count[5] = "?";
        assert!(keys("XREADGROUP", &computed_count, false).is_empty());
        // An open call: how many streams follow is unknown, but the first half of the
        // fewest arguments is.
        assert_eq!(
            keys("XREAD", &["XREAD", "STREAMS", "s", "0", "?"], true),
            [2]
        );
        // The keyword is never looked for in the last argument.
        assert!(keys("XREAD", &["XREAD", "COUNT", "STREAMS"], false).is_empty());
        // An escape might spell the keyword.
        let xread = keyword("STREAMS", 1).range(-1, 1, 2);
        let escaped = vec![text("XREAD"), text("STREAM\\83"), text("s"), text("0")];
        assert!(xread.keys_in(&escaped, false).is_empty());
    }

    #[test]
    fn georadius_store_is_a_key_only_after_the_keyword() {
        let words = ["GEORADIUS", "g", "0", "0", "1", "km", "STORE", "dest"];
        assert_eq!(keys("GEORADIUS", &words, false), [1, 7]);
        let words = ["GEORADIUS", "g", "0", "0", "1", "km", "WITHDIST"];
        assert_eq!(keys("GEORADIUS", &words, false), [1]);
    }

    #[test]
    fn the_unsure_specifications_are_left_out_of_the_table() {
        // SPUBLISH's channel is `not_key`; SORT's STORE is `unknown`; MIGRATE's KEYS
        // search runs backwards and is `incomplete`.
        assert!(find("SPUBLISH").unwrap().keys.is_empty());
        assert_eq!(find("SORT").unwrap().keys, [index(1).range(0, 1, 0)]);
        assert_eq!(find("MIGRATE").unwrap().keys, [index(3).range(0, 1, 0)]);
        assert!(
            find("EVAL")
                .unwrap()
                .keys
                .contains(&index(2).keynum(0, 1, 1))
        );
    }
}
