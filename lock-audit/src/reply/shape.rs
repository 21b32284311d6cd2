//! The shapes a reply may have, as a set.

use std::fmt;

/// One kind of reply, as a RESP2 caller reads it (redis-rs's default protocol; a RESP3
/// caller gets RESP3's forms of some, such as a boolean for a script's `false` after
/// `redis.setresp(3)`, which only `bool` and `redis::Value` read).
///
/// ```
/// use lockscript_audit::reply::{Shape, Shapes};
///
/// assert!(Shapes::parse("nb").iter().eq([Shape::Nil, Shape::Bulk]));
/// assert_eq!(Shape::Truncated.describe(), "a Lua number, sent as an integer with its fraction cut off");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// A nil reply: Lua's `nil` or `false`, a command's nil (`GET` of a missing key).
    Nil,
    /// Lua's `false` before it is replied (a script's `return` never holds it): nil to the
    /// caller, but the integer 0 once the script called `redis.setresp(3)` (a command's
    /// nil is `false` in Lua under RESP2, `nil` under RESP3).
    False,
    /// An integer: a command's integer, a Lua integer constant, `#t`, `true` (1).
    Integer,
    /// An integer that was a Lua number which may have had a fraction, cut off when Redis
    /// turned it into the reply (`n / 2`, `tonumber(x)`, `1.5`).
    Truncated,
    /// A bulk string whose text is not known.
    Bulk,
    /// A bulk string whose text is known not to be a number (`'missing'`).
    Word,
    /// A status reply (`{ok = ...}`, a command's `+OK`) whose text is not known.
    Status,
    /// A status reply whose text is known not to be a number (`OK`, `PONG`).
    StatusWord,
    /// An error reply (`redis.pcall`'s error, `{err = ...}`, `redis.error_reply`); the
    /// caller gets it as an error, whatever type it declared.
    Error,
    /// An array (a Lua table; an element's shapes are [`Shapes::element`]).
    Array,
    /// Not known: a computed command, a value from `ARGV`, `cjson.decode`.
    Unknown,
}

const ALL: [Shape; 11] = [
    Shape::Nil,
    Shape::False,
    Shape::Integer,
    Shape::Truncated,
    Shape::Bulk,
    Shape::Word,
    Shape::Status,
    Shape::StatusWord,
    Shape::Error,
    Shape::Array,
    Shape::Unknown,
];

impl Shape {
    fn bit(self) -> u16 {
        1 << (self as u16)
    }

    /// The letter of the compact form ([`Shapes::parse`]); an array is `[...]`, written
    /// after the letters.
    fn letter(self) -> char {
        match self {
            Self::Nil => 'n',
            Self::False => 'F',
            Self::Integer => 'i',
            Self::Truncated => 'f',
            Self::Bulk => 'b',
            Self::Word => 'w',
            Self::Status => 's',
            Self::StatusWord => 'o',
            Self::Error => 'e',
            Self::Array => '[',
            Self::Unknown => '?',
        }
    }

    /// The shape in words, as an error message names it.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Nil => "nil",
            Self::False => "Lua's false",
            Self::Integer => "an integer",
            Self::Truncated => "a Lua number, sent as an integer with its fraction cut off",
            Self::Bulk => "a bulk string",
            Self::Word => "a string that is not a number",
            Self::Status => "a status reply",
            Self::StatusWord => "a status reply that is not a number (such as OK)",
            Self::Error => "an error reply",
            Self::Array => "an array",
            Self::Unknown => "an unknown reply",
        }
    }
}

/// A set of [`Shape`]s: every shape a reply may have, and for an array, the shapes of its
/// elements.
///
/// ```
/// use lockscript_audit::reply::{Shape, Shapes};
///
/// let get = Shapes::parse("nb");
/// assert!(get.contains(Shape::Nil) && get.contains(Shape::Bulk));
/// assert_eq!(get.to_string(), "nil | bulk string");
/// let hgetall = Shapes::parse("[b]");
/// assert!(hgetall.element().is_some_and(|e| e.contains(Shape::Bulk)));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Shapes {
    kinds: u16,
    element: Option<Box<Shapes>>,
}

impl Shapes {
    /// No shape (what a path that never returns gives).
    pub fn none() -> Self {
        Self::default()
    }

    /// One shape (for [`Shape::Array`], an array of elements of no known shape yet).
    pub fn of(shape: Shape) -> Self {
        Self {
            kinds: shape.bit(),
            element: None,
        }
    }

    /// Not known.
    pub fn unknown() -> Self {
        Self::of(Shape::Unknown)
    }

    /// An array whose elements have `element`'s shapes.
    pub fn array(element: Self) -> Self {
        Self {
            kinds: Shape::Array.bit(),
            element: Some(Box::new(element)),
        }
    }

    /// Holds `shape`.
    pub fn contains(&self, shape: Shape) -> bool {
        self.kinds & shape.bit() != 0
    }

    /// Holds no shape.
    pub fn is_empty(&self) -> bool {
        self.kinds == 0
    }

    /// The shapes of an array's elements, when it may be an array.
    pub fn element(&self) -> Option<&Shapes> {
        self.element.as_deref()
    }

    /// The shapes in this set, in a fixed order.
    pub fn iter(&self) -> impl Iterator<Item = Shape> + '_ {
        ALL.into_iter().filter(|s| self.contains(*s))
    }

    /// Both sets together.
    #[must_use]
    pub fn union(&self, other: &Self) -> Self {
        let element = match (&self.element, &other.element) {
            (Some(a), Some(b)) => Some(Box::new(a.union(b))),
            (Some(a), None) | (None, Some(a)) => Some(a.clone()),
            (None, None) => None,
        };
        Self {
            kinds: self.kinds | other.kinds,
            element,
        }
    }

    /// Adds `shape`.
    #[must_use]
    pub fn with(&self, shape: Shape) -> Self {
        self.union(&Self::of(shape))
    }

    /// This set without `shape`.
    #[must_use]
    pub fn without(&self, shape: Shape) -> Self {
        let mut out = self.clone();
        out.kinds &= !shape.bit();
        if shape == Shape::Array {
            out.element = None;
        }
        out
    }

    /// This set with `from` replaced by `to`, here and in an array's elements, at every
    /// depth (Lua's `false` by what it replies, a command's nil by Lua's `false`).
    ///
    /// ```
    /// use lockscript_audit::reply::{Shape, Shapes};
    ///
    /// let replied = Shapes::parse("F[nF]").replaced(Shape::False, &Shapes::of(Shape::Nil));
    /// assert_eq!(replied.code(), "n[n]");
    /// ```
    #[must_use]
    pub fn replaced(&self, from: Shape, to: &Self) -> Self {
        let mut out = if self.contains(from) {
            self.without(from).union(to)
        } else {
            self.clone()
        };
        if let Some(element) = &self.element {
            out.element = Some(Box::new(element.replaced(from, to)));
        }
        out
    }

    /// This set with only the shapes of `keep` (and unknown, which may be any of them).
    #[must_use]
    pub fn only(&self, keep: &[Shape]) -> Self {
        self.iter()
            .filter(|s| *s != Shape::Unknown && !keep.contains(s))
            .fold(self.clone(), |out, s| out.without(s))
    }

    /// Reads the compact form of the generated reply table
    /// (`crate::commands::REPLIES`): one letter per shape (`n` nil, `i` integer, `f`
    /// truncated number, `b` bulk string, `w` a string not a number, `s` status, `o` a
    /// status not a number, `e` error, `?` unknown) and `[...]` an array of the shapes
    /// inside; `F` is Lua's `false`, which only the inference holds. A letter it does not
    /// know reads as unknown.
    ///
    /// ```
    /// use lockscript_audit::reply::Shapes;
    ///
    /// assert_eq!(Shapes::parse("nb[b]").code(), "nb[b]");
    /// ```
    pub fn parse(code: &str) -> Self {
        let mut chars = code.chars().peekable();
        Self::parse_in(&mut chars)
    }

    fn parse_in(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Self {
        let mut out = Self::none();
        while let Some(c) = chars.next() {
            let one = match c {
                ']' => break,
                '[' => Self::array(Self::parse_in(chars)),
                'n' => Self::of(Shape::Nil),
                'F' => Self::of(Shape::False),
                'i' => Self::of(Shape::Integer),
                'f' => Self::of(Shape::Truncated),
                'b' => Self::of(Shape::Bulk),
                'w' => Self::of(Shape::Word),
                's' => Self::of(Shape::Status),
                'o' => Self::of(Shape::StatusWord),
                'e' => Self::of(Shape::Error),
                _ => Self::unknown(),
            };
            out = out.union(&one);
        }
        out
    }

    /// The compact form [`Shapes::parse`] reads (and `lockscript audit --json` shows).
    pub fn code(&self) -> String {
        let mut out: String = self
            .iter()
            .filter(|s| *s != Shape::Array)
            .map(Shape::letter)
            .collect();
        if self.contains(Shape::Array) {
            out.push('[');
            out.push_str(&self.element().map(Self::code).unwrap_or_default());
            out.push(']');
        }
        out
    }
}

/// "nil | bulk string | array of (bulk string)"; "nothing" for the empty set.
impl fmt::Display for Shapes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("nothing");
        }
        for (i, shape) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(" | ")?;
            }
            match shape {
                Shape::Array => match self.element() {
                    Some(e) if !e.is_empty() => write!(f, "array of ({e})")?,
                    _ => f.write_str("array")?,
                },
                Shape::Nil => f.write_str("nil")?,
                Shape::False => f.write_str("false")?,
                Shape::Integer => f.write_str("integer")?,
                Shape::Truncated => f.write_str("truncated number")?,
                Shape::Bulk => f.write_str("bulk string")?,
                Shape::Word => f.write_str("non-numeric string")?,
                Shape::Status | Shape::StatusWord => f.write_str("status")?,
                Shape::Error => f.write_str("error")?,
                Shape::Unknown => f.write_str("unknown")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{Shape, Shapes};

    #[test]
    fn the_compact_form_reads_back_as_written() {
        for code in [
            "nb",
            "[b]",
            "nb[b]",
            "i",
            "Fi[nF]",
            "nbo",
            "[nib[b[nib[?]]]]",
            "?",
            "",
        ] {
            assert_eq!(Shapes::parse(code).code(), code);
        }
    }

    #[test]
    fn a_union_merges_the_elements_of_arrays() {
        let both = Shapes::parse("[b]").union(&Shapes::parse("n[i]"));
        assert_eq!(both.code(), "n[ib]");
        assert!(!both.without(Shape::Array).contains(Shape::Array));
        assert_eq!(both.without(Shape::Array).element(), None);
    }

    #[test]
    fn shapes_read_as_words() {
        assert_eq!(
            Shapes::parse("n[bn]").to_string(),
            "nil | array of (nil | bulk string)"
        );
        assert_eq!(Shapes::none().to_string(), "nothing");
    }
}
