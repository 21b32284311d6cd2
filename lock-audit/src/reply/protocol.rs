//! The protocol a script's commands reply in.

/// The protocol in which a script's `redis.call` hands it a command's reply: RESP2 until
/// the script calls `redis.setresp(3)`, RESP3 after. Under RESP3 a map reaches Lua as
/// `{map = ...}`, a set as `{set = ...}`, a double as `{double = n}` and null as `nil`
/// (under RESP2, `false`); the generated reply table holds both forms.
///
/// ```
/// use lockscript_audit::commands::reply_to;
/// use lockscript_audit::reply::Protocol;
///
/// let text = |s: &str| Some(s.to_owned());
/// let call = [text("ZRANGE"), None, text("0"), text("-1"), text("WITHSCORES")];
/// // Member and score: flat under RESP2, pairs under RESP3 (returned as nested arrays).
/// assert_eq!(reply_to(&call, false, Protocol::Resp2).unwrap().code(), "[b?]");
/// assert_eq!(reply_to(&call, false, Protocol::Resp3).unwrap().code(), "[b[b]]");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// RESP2, the protocol of a script that did not call `redis.setresp(3)`.
    Resp2,
    /// RESP3, after `redis.setresp(3)`.
    Resp3,
}
