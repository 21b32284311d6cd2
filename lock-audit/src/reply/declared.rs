//! What a declared Rust return type accepts, by redis-rs's `FromRedisValue` (1.x) rules.

use super::shape::{Shape, Shapes};

/// A declared return type, as far as the check can judge it: each variant follows what
/// redis-rs's `FromRedisValue` accepts for the Rust types it stands for (read from
/// redis 1.8's `types.rs`; a miss is better than a false alarm, so where the outcome
/// hangs on text the analysis does not know, it is accepted).
///
/// ```
/// use lockscript_audit::reply::{Declared, Shapes};
///
/// let string = Declared::Text;
/// assert!(string.refusal("String", &Shapes::parse("nb")).is_some());
/// let option = Declared::Option(Box::new(Declared::Text));
/// assert!(option.refusal("Option<String>", &Shapes::parse("nb")).is_none());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Declared {
    /// Takes any reply: `redis::Value`, `()`, and every type the check cannot judge (a
    /// type of the user's own, a path it does not know).
    Any,
    /// `String`: bulk strings, statuses and integers (as their digits); not nil, not an
    /// array.
    Text,
    /// `Vec<u8>` (and `Box<[u8]>`...): a bulk string's bytes, nil (empty), an array of
    /// small integers; not an integer, not a status.
    Bytes,
    /// The integers (`i8` .. `u128`, `isize`, `usize`): an integer, a string or status
    /// that parses as one; not nil, not an array.
    Integer,
    /// `f32`, `f64`: as the integers; a truncated Lua number is refused, as the reply
    /// lost its fraction.
    Float,
    /// `bool`: nil (false), an integer (non-zero), `"1"`/`"0"`, `OK`; not an array.
    Bool,
    /// `Option<T>`: nil is `None`, anything else as `T`.
    Option(Box<Declared>),
    /// `Vec<T>` (`Box<[T]>`, `Arc<[T]>`): an array of `T`, nil (empty), a bulk string
    /// (one `T`); not an integer, not a status.
    List(Box<Declared>),
    /// `HashSet<T>`, `BTreeSet<T>`: an array of `T`, nil (empty).
    Set(Box<Declared>),
    /// `HashMap<K, V>`, `BTreeMap<K, V>`: an array of keys and values in turn, nil
    /// (empty).
    Map(Box<Declared>, Box<Declared>),
    /// A tuple: an array of its members.
    Tuple(Vec<Declared>),
}

/// Why a declared type cannot hold a shape of the reply: what was found, and what to
/// declare or return instead.
///
/// ```
/// use lockscript_audit::reply::{Declared, Shapes};
///
/// let refusal = Declared::Integer.refusal("i64", &Shapes::parse("[b]")).unwrap();
/// assert_eq!(refusal.found, "an array");
/// assert!(refusal.fix.starts_with("declare a `Vec<...>`"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The shape refused, in words ("nil", "an array").
    pub found: String,
    /// What to do: "declare `Option<String>`".
    pub fix: String,
}

impl Declared {
    /// Whether a reply of `shape` (an array's elements in `element`) converts, and if not,
    /// why. `shown` is the type as declared, for the message.
    // The arms are in order, most specific first: several accept what is left of a type.
    #[allow(clippy::match_same_arms)]
    fn refuses(&self, shown: &str, shape: Shape, element: Option<&Shapes>) -> Option<Refusal> {
        use Shape::{
            Array, Bulk, Error, Integer, Nil, Status, StatusWord, Truncated, Unknown, Word,
        };
        if matches!(shape, Error | Unknown) {
            return None;
        }
        if shape == Shape::False {
            // Not in a script's reply (Redis sends it as nil, or 0): judged as nil.
            return self.refuses(shown, Nil, element);
        }
        let refused = |fix: String| {
            Some(Refusal {
                found: shape.describe().to_owned(),
                fix,
            })
        };
        let nil_fix = || format!("declare `Option<{shown}>`");
        let array_fix = || "declare a `Vec<...>` of its elements (or `redis::Value`)".to_owned();
        match (self, shape) {
            (Self::Any, _) | (Self::Option(_), Nil) => None,
            (Self::Option(inner), _) => inner.refuses(
                shown
                    .strip_prefix("Option<")
                    .and_then(|s| s.strip_suffix('>'))
                    .unwrap_or(shown)
                    .trim(),
                shape,
                element,
            ),
            (Self::Text | Self::Integer | Self::Float, Nil) => refused(nil_fix()),
            (Self::Text | Self::Integer | Self::Float | Self::Bool, Array) => refused(array_fix()),
            (Self::Text, _) => None,
            (Self::Integer | Self::Float | Self::Bool, Word | StatusWord) => {
                refused("return a number, or declare `String`".to_owned())
            }
            (Self::Float, Truncated) => refused(
                "return it as text, `return tostring(x)`, which `f64` reads with its fraction"
                    .to_owned(),
            ),
            (Self::Integer | Self::Float | Self::Bool, _) => None,
            (Self::Bytes, Integer | Truncated) => {
                refused("declare an integer such as `i64`".to_owned())
            }
            (Self::Bytes, Status | StatusWord) => refused("declare `String`".to_owned()),
            (Self::Bytes, Array) => element_refusal(&Self::Integer, "u8", element),
            (Self::Bytes, _) => None,
            (
                Self::List(_) | Self::Set(_) | Self::Map(..) | Self::Tuple(_),
                Integer | Truncated,
            ) => refused("declare an integer such as `i64`".to_owned()),
            (
                Self::List(_) | Self::Set(_) | Self::Map(..) | Self::Tuple(_),
                Status | StatusWord,
            ) => refused("declare `String`".to_owned()),
            (Self::List(inner), Bulk | Word) => {
                // redis-rs reads a bulk string as a one-element Vec of T.
                inner.refuses(&inner_shown(shown, 0), shape, None)
            }
            (Self::List(_) | Self::Set(_) | Self::Map(..), Nil) => None,
            (Self::List(inner), Array) if matches!(**inner, Self::Tuple(_)) => {
                flat_or_nested(inner, &inner_shown(shown, 0), element)
            }
            (Self::List(inner) | Self::Set(inner), Array) => {
                element_refusal(inner, &inner_shown(shown, 0), element)
            }
            (Self::Map(key, value), Array) => {
                // Keys and values alternate; which element is which is not known, so an
                // element either can hold is accepted.
                let element = element?;
                element.iter().find_map(|s| {
                    let sub = element.element();
                    let k = key.refuses(&inner_shown(shown, 0), s, sub)?;
                    value.refuses(&inner_shown(shown, 1), s, sub)?;
                    Some(Refusal {
                        found: format!("an array holding {}", k.found),
                        fix: format!("declare a type its elements fit ({})", k.fix),
                    })
                })
            }
            (Self::Set(_) | Self::Map(..), Bulk | Word) | (Self::Tuple(_), Nil | Bulk | Word) => {
                refused(match shape {
                    Nil => nil_fix(),
                    _ => "declare `String`".to_owned(),
                })
            }
            (Self::Tuple(members), Array) => {
                let element = element?;
                element.iter().find_map(|s| {
                    let sub = element.element();
                    let all: Vec<Refusal> = members
                        .iter()
                        .enumerate()
                        .map(|(i, m)| m.refuses(&inner_shown(shown, i), s, sub))
                        .collect::<Option<Vec<_>>>()?;
                    let first = all.into_iter().next()?;
                    Some(Refusal {
                        found: format!("an array holding {}", first.found),
                        fix: "declare a tuple whose members fit its elements (or `redis::Value`)"
                            .to_owned(),
                    })
                })
            }
            _ => None,
        }
    }

    /// The first shape of `shapes` this type cannot hold, with what to do; `None` when
    /// every shape converts (an unknown or error shape always does). `shown` is the type
    /// as declared (`"String"`), for the message.
    ///
    /// ```
    /// use lockscript_audit::reply::{Declared, Shapes};
    ///
    /// let refusal = Declared::Float.refusal("f64", &Shapes::parse("f")).unwrap();
    /// assert!(refusal.fix.contains("tostring"));
    /// assert!(Declared::Integer.refusal("i64", &Shapes::parse("[b]")).is_some());
    /// assert!(Declared::Any.refusal("redis::Value", &Shapes::parse("[b]n")).is_none());
    /// ```
    pub fn refusal(&self, shown: &str, shapes: &Shapes) -> Option<Refusal> {
        shapes
            .iter()
            .find_map(|s| self.refuses(shown, s, shapes.element()))
    }
}

/// An array's elements against a `Vec` of tuples: redis-rs reads the tuples nested (each
/// element an array) or flat (the elements taken in turn as the members: ZRANGE's
/// members and scores under RESP2), so an element that is not an array is refused only
/// when no member takes it.
fn flat_or_nested(tuple: &Declared, shown: &str, element: Option<&Shapes>) -> Option<Refusal> {
    let Declared::Tuple(members) = tuple else {
        return element_refusal(tuple, shown, element);
    };
    let element = element?;
    element.iter().find_map(|s| {
        let sub = element.element();
        let refusal = if s == Shape::Array {
            tuple.refuses(shown, s, sub)?
        } else {
            let all: Vec<Refusal> = members
                .iter()
                .enumerate()
                .map(|(i, m)| m.refuses(&inner_shown(shown, i), s, sub))
                .collect::<Option<Vec<_>>>()?;
            all.into_iter().next()?
        };
        Some(Refusal {
            found: format!("an array with {} among its elements", refusal.found),
            fix: format!("for its elements, {}", refusal.fix),
        })
    })
}

/// An array's elements against the element type: the refusal, said of the array.
fn element_refusal(inner: &Declared, shown: &str, element: Option<&Shapes>) -> Option<Refusal> {
    let element = element?;
    let refusal = inner.refusal(shown, element)?;
    Some(Refusal {
        found: format!("an array holding {}", refusal.found),
        fix: format!("for its elements, {}", refusal.fix),
    })
}

/// The `i`th type argument of `shown` ("Vec<String>" gives "String"), as far as plain
/// text says; the whole text when it has none.
fn inner_shown(shown: &str, i: usize) -> String {
    let Some(open) = shown.find(['<', '(']) else {
        return shown.to_owned();
    };
    let inner = &shown[open + 1..shown.len().saturating_sub(1)];
    let mut depth = 0;
    let mut parts = Vec::new();
    let mut start = 0;
    for (at, c) in inner.char_indices() {
        match c {
            '<' | '(' | '[' => depth += 1,
            '>' | ')' | ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(inner[start..at].trim());
                start = at + 1;
            }
            _ => {}
        }
    }
    parts.push(inner[start..].trim());
    parts
        .get(i)
        .map_or_else(|| shown.to_owned(), |s| (*s).to_owned())
}

#[cfg(test)]
mod tests {
    use super::{Declared, inner_shown};
    use crate::reply::Shapes;

    fn refused(declared: &Declared, code: &str) -> bool {
        declared.refusal("T", &Shapes::parse(code)).is_some()
    }

    #[test]
    fn string_takes_text_statuses_and_integers_but_not_nil_or_arrays() {
        for ok in ["b", "w", "s", "o", "i", "f", "e", "?"] {
            assert!(!refused(&Declared::Text, ok), "{ok}");
        }
        assert!(refused(&Declared::Text, "n"));
        assert!(refused(&Declared::Text, "[b]"));
    }

    #[test]
    fn integers_take_numeric_text_but_not_words_nil_or_arrays() {
        for ok in ["i", "f", "b", "s"] {
            assert!(!refused(&Declared::Integer, ok), "{ok}");
        }
        for no in ["n", "w", "o", "[i]"] {
            assert!(refused(&Declared::Integer, no), "{no}");
        }
        // A float declaration refuses only the truncated number.
        assert!(refused(&Declared::Float, "f"));
        assert!(!refused(&Declared::Float, "ib"));
    }

    /// redis-rs reads a `Vec` of pairs from nested pairs or from a flat array (RESP2's
    /// ZRANGE WITHSCORES), so the flat elements need fit one member only.
    #[test]
    fn a_vec_of_tuples_takes_pairs_nested_or_flat() {
        let pairs = Declared::List(Box::new(Declared::Tuple(vec![
            Declared::Text,
            Declared::Float,
        ])));
        assert!(!refused(&pairs, "[b?]"));
        assert!(!refused(&pairs, "[b[b]]"));
        assert!(refused(&pairs, "[n]"));
        assert!(refused(&pairs, "[[n]]"));
        // A flat element any member takes (a truncated number as the `String`).
        assert!(!refused(&pairs, "[f]"));
    }

    #[test]
    fn bool_takes_nil_and_vec_takes_nil_and_a_single_string() {
        assert!(!refused(&Declared::Bool, "ni"));
        let vec = Declared::List(Box::new(Declared::Text));
        assert!(!refused(&vec, "n[b]b"));
        assert!(refused(&vec, "i"));
        assert!(refused(&vec, "[nb]"));
        let options = Declared::List(Box::new(Declared::Option(Box::new(Declared::Text))));
        assert!(!refused(&options, "[nb]"));
    }

    #[test]
    fn bytes_take_bulk_and_nil_but_not_integers_or_statuses() {
        assert!(!refused(&Declared::Bytes, "nb"));
        assert!(refused(&Declared::Bytes, "i"));
        assert!(refused(&Declared::Bytes, "o"));
    }

    #[test]
    fn maps_and_tuples_take_arrays_whose_elements_fit_a_member() {
        let map = Declared::Map(Box::new(Declared::Text), Box::new(Declared::Integer));
        assert!(!refused(&map, "[bi]"));
        assert!(!refused(&map, "n"));
        assert!(refused(&map, "i"));
        assert!(refused(&map, "[[b]]"));
        let pair = Declared::Tuple(vec![Declared::Integer, Declared::Text]);
        assert!(!refused(&pair, "[ib]"));
        assert!(refused(&pair, "n"));
    }

    #[test]
    fn a_refused_element_is_named_inside_its_arrays() {
        let nested = Declared::Tuple(vec![
            Declared::List(Box::new(Declared::Text)),
            Declared::Integer,
        ]);
        let refusal = nested.refusal("T", &Shapes::parse("[i[nb]]")).unwrap();
        assert_eq!(refusal.found, "an array holding an array holding nil");
    }

    #[test]
    fn nested_type_names_are_split_at_the_top_level() {
        assert_eq!(inner_shown("Vec<String>", 0), "String");
        assert_eq!(inner_shown("HashMap<String, Vec<i64>>", 1), "Vec<i64>");
        assert_eq!(inner_shown("(i64, String)", 1), "String");
    }
}
