//! The inference: what each `return` of a script may give, on every path.
//!
//! A walk over the parsed script that keeps, for each local, the shapes its value would
//! have as a reply (Redis's Lua-to-RESP rules: a number is sent as an integer, cut to one;
//! `false` and `nil` as nil; `true` as 1; a table as an array up to its first nil; `{ok =
//! ...}` as a status and `{err = ...}` as an error). Branches are walked apart and joined;
//! a test of a local narrows it in the branch it guards (`if not v then return '' end`
//! leaves `v` not nil after it); a loop body is walked twice so a value assigned late in
//! it reaches the top; an array appended to (`t[#t + 1] = x`, `table.insert(t, x)`) stays
//! one. Local functions are inferred once where they are defined, their
//! parameters unknown. What it cannot follow is unknown, which no declared type refuses.
//!
//! The protocol is followed like a local (an invisible one): `redis.setresp(3)` switches
//! the path it is on to RESP3, where a command's reply is its RESP3 form and `false`
//! replies 0; a branch that switched joins one that did not as "either", as does a
//! function that switches (when it runs is not followed), so a reply there may be either
//! form. A function's body, in a script that switches anywhere, starts as either.
//!
//! Here the statements and the scopes; `expr` the expressions and calls, `library` what
//! Redis's Lua libraries and Lua's operators give, `narrow` what a test says of a local,
//! `written` what a block wrote before it reads it back.

use full_moon::ast::{
    Block, Call, Expression, FunctionBody, FunctionCall, Index, LastStmt, Prefix, Stmt, Suffix, Var,
};
use full_moon::tokenizer::{Symbol, TokenReference, TokenType};

use super::shape::{Shape, Shapes};
use crate::problem::Position;
use crate::scope::{name_of, position};

mod expr;
mod library;
mod narrow;
mod written;

use narrow::{Narrow, narrows};

/// A key (and a hash field) known to exist, by the text of its expressions.
type Fact = (String, Option<String>);

/// The protocols a path may be in: RESP2 until `redis.setresp(3)`, RESP3 after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Resp {
    two: bool,
    three: bool,
}

impl Resp {
    const TWO: Self = Self {
        two: true,
        three: false,
    };
    const THREE: Self = Self {
        two: false,
        three: true,
    };
    const EITHER: Self = Self {
        two: true,
        three: true,
    };

    /// What Lua's `false` replies: nil, or under RESP3 the integer 0 (RESP3's false, to
    /// a RESP3 caller).
    fn false_replies(self) -> Shapes {
        let mut out = Shapes::none();
        if self.two {
            out = out.with(Shape::Nil);
        }
        if self.three {
            out = out.with(Shape::Integer);
        }
        out
    }
}

/// The name of the local that holds the protocol: not a Lua name, so no script's.
const RESP: &str = "redis.setresp";

/// One `return` of the script (or its end, reached without one), and what it may give.
///
/// ```
/// let analysis = lockscript_audit::lua::analyze("if ARGV[1] then\n  return 1\nend");
/// let [first, end] = analysis.returns.as_slice() else { panic!() };
/// assert_eq!((first.at.line, first.shapes.to_string()), (2, "integer".to_owned()));
/// assert!(end.implicit && end.shapes.to_string() == "nil");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Return {
    /// Where the `return` is (for the end of the script, its last line).
    pub at: Position,
    /// Every shape the reply may have there.
    pub shapes: Shapes,
    /// The script ends here without a `return` (its reply is nil).
    pub implicit: bool,
}

impl Return {
    /// Every shape any of `returns` may reply.
    ///
    /// ```
    /// use lockscript_audit::lua::analyze;
    /// use lockscript_audit::reply::Return;
    ///
    /// let analysis = analyze("if ARGV[1] then return 1 end return redis.call('GET', KEYS[1])");
    /// assert_eq!(Return::all(&analysis.returns).to_string(), "nil | integer | bulk string");
    /// ```
    pub fn all(returns: &[Return]) -> Shapes {
        returns
            .iter()
            .fold(Shapes::none(), |all, r| all.union(&r.shapes))
    }
}

/// What a value is, as far as the walk knows.
#[derive(Clone, Debug)]
enum Value {
    /// Data, by the shapes it would have as a reply.
    Data(Shapes),
    /// `redis.call` (false) or `redis.pcall` (true), or a local alias of it.
    Call(bool),
    /// A local function, by what it returns.
    Function(Shapes),
    /// The protocol (the value of the local [`RESP`]).
    Resp(Resp),
}

impl Value {
    fn shapes(&self) -> Shapes {
        match self {
            Self::Data(s) => s.clone(),
            Self::Call(_) | Self::Function(_) | Self::Resp(_) => Shapes::unknown(),
        }
    }

    fn union(&self, other: &Self) -> Self {
        match (self, other) {
            (Self::Call(a), Self::Call(b)) if a == b => Self::Call(*a),
            (Self::Function(a), Self::Function(b)) => Self::Function(a.union(b)),
            (Self::Data(a), Self::Data(b)) => Self::Data(a.union(b)),
            (Self::Resp(a), Self::Resp(b)) => Self::Resp(Resp {
                two: a.two || b.two,
                three: a.three || b.three,
            }),
            _ => Self::Data(Shapes::unknown()),
        }
    }
}

fn data(shape: Shape) -> Value {
    Value::Data(Shapes::of(shape))
}

#[derive(Clone, Debug)]
struct Local {
    name: String,
    value: Value,
    /// The text of the expression it was declared with and still holds (`KEYS[1]..id`),
    /// to know a key written before when it is read again.
    text: Option<String>,
    /// The function nesting it was declared at (0 the script itself).
    depth: usize,
}

type Scopes = Vec<Vec<Local>>;

/// Every `return` of `block` (a whole script) with its shapes, and the end of the script
/// when it can be reached without one (`last_line`). `switches`: the script names
/// `setresp`, so a function's body may run under either protocol.
pub(crate) fn returns(block: &Block, last_line: usize, switches: bool) -> Vec<Return> {
    let mut walk = Walk {
        scopes: vec![vec![Local {
            name: RESP.to_owned(),
            value: Value::Resp(Resp::TWO),
            text: None,
            depth: 0,
        }]],
        depth: 0,
        returns: Vec::new(),
        breaks: Vec::new(),
        written: Vec::new(),
        pending: Vec::new(),
        switches,
    };
    let ends = walk.block(block);
    let mut found = walk.returns;
    if !ends {
        found.push(Return {
            at: Position {
                line: last_line.max(1),
                column: 1,
            },
            shapes: Shapes::of(Shape::Nil),
            implicit: true,
        });
    }
    found.sort_by_key(|r| (r.at.line, r.at.column));
    // A loop's body is walked twice: one return each, with what either pass found.
    let mut joined: Vec<Return> = Vec::new();
    for r in found {
        match joined.last_mut() {
            Some(last) if last.at == r.at && last.implicit == r.implicit => {
                last.shapes = last.shapes.union(&r.shapes);
            }
            _ => joined.push(r),
        }
    }
    joined
}

struct Walk {
    scopes: Scopes,
    /// How many function bodies deep the walk is.
    depth: usize,
    /// The returns of the function being walked (the script at depth 0).
    returns: Vec<Return>,
    /// For each loop being walked, the locals at each `break`.
    breaks: Vec<Vec<Scopes>>,
    /// For each block being walked, what its statements so far certainly wrote: a string
    /// key, or a hash's field (by the text of the key and field), which a read later in
    /// it or in a block inside it finds (so `HSET k f v` then `HGET k f` is not nil).
    written: Vec<Vec<Fact>>,
    /// What the test guarding the next block says exists (`if EXISTS k == 1 then`).
    pending: Vec<Fact>,
    /// The script names `setresp`.
    switches: bool,
}

fn string_of(token: &TokenReference) -> Option<&str> {
    match token.token().token_type() {
        TokenType::StringLiteral { literal, .. } => Some(literal.as_str()),
        _ => None,
    }
}

fn literal_string(expr: &Expression) -> Option<&str> {
    match expr {
        Expression::String(s) => string_of(s),
        Expression::Parentheses { expression, .. } => literal_string(expression),
        _ => None,
    }
}

/// A string literal's shape: a word when its text is certainly not a number (redis-rs
/// parses the numbers with Rust's `parse`, and every integer text parses as an `f64`).
fn text_shape(text: &str) -> Shape {
    if text.trim().parse::<f64>().is_ok() || text.contains('\\') {
        Shape::Bulk
    } else {
        Shape::Word
    }
}

/// The union of the locals of several ways out of a statement (each with the same scopes).
fn merge(ways: &[Scopes]) -> Option<Scopes> {
    let (first, rest) = ways.split_first()?;
    let mut out = first.clone();
    for other in rest {
        for (scope, theirs) in out.iter_mut().zip(other) {
            for (local, their) in scope.iter_mut().zip(theirs) {
                local.value = local.value.union(&their.value);
                if local.text != their.text {
                    local.text = None;
                }
            }
        }
    }
    Some(out)
}

impl Walk {
    fn find(&mut self, name: &str) -> Option<&mut Local> {
        self.scopes
            .iter_mut()
            .rev()
            .find_map(|s| s.iter_mut().rev().find(|l| l.name == name))
    }

    fn declare(&mut self, name: &str, value: Value) {
        self.declare_as(name, value, None);
    }

    fn declare_as(&mut self, name: &str, value: Value, text: Option<String>) {
        let depth = self.depth;
        if let Some(scope) = self.scopes.last_mut() {
            scope.push(Local {
                name: name.to_owned(),
                value,
                text,
                depth,
            });
        }
    }

    fn assign(&mut self, name: &str, value: Value) {
        let depth = self.depth;
        if let Some(local) = self.find(name) {
            // A function assigning a local of the code around it: when it runs is not
            // followed, so the local may hold anything from then on.
            local.value = if local.depth < depth {
                Value::Data(Shapes::unknown())
            } else {
                value
            };
            local.text = None;
        }
    }

    /// The protocols the walk may be in here.
    fn protocol(&mut self) -> Resp {
        match self.find(RESP).map(|l| &l.value) {
            Some(Value::Resp(r)) => *r,
            Some(_) => Resp::EITHER,
            None => Resp::TWO,
        }
    }

    /// `redis.setresp(...)` here: the path is in `resp` from now on; a function that
    /// switches leaves the code around it in either (when it runs is not followed).
    pub(super) fn set_protocol(&mut self, resp: Resp) {
        let depth = self.depth;
        for local in self.scopes.iter_mut().flatten() {
            if local.name == RESP {
                local.value = Value::Resp(if local.depth < depth {
                    Resp::EITHER
                } else {
                    resp
                });
            }
        }
    }

    fn narrow(&mut self, narrows: &[(String, Narrow)]) {
        for (name, how) in narrows {
            if let Some(local) = self.find(name)
                && let Value::Data(shapes) = &local.value
            {
                local.value = Value::Data(match how {
                    Narrow::Not(kinds) => kinds.iter().fold(shapes.clone(), |s, k| s.without(*k)),
                    Narrow::Only(kinds) => shapes.only(kinds),
                });
            }
        }
    }

    /// Walks a block in a new scope; true when it never ends normally (every path
    /// returns, breaks or raises an error).
    fn block(&mut self, block: &Block) -> bool {
        self.scopes.push(Vec::new());
        let known = std::mem::take(&mut self.pending);
        self.written.push(known);
        let ends = self.block_in(block);
        self.written.pop();
        self.scopes.pop();
        ends
    }

    fn block_in(&mut self, block: &Block) -> bool {
        for stmt in block.stmts() {
            if self.stmt(stmt) {
                // The rest cannot run.
                return true;
            }
        }
        match block.last_stmt() {
            Some(LastStmt::Return(ret)) => {
                let mut shapes = ret
                    .returns()
                    .iter()
                    .next()
                    .map_or_else(|| Shapes::of(Shape::Nil), |e| self.expr(e).shapes());
                if self.depth == 0 {
                    // The script's reply: Lua's false becomes what it replies.
                    let replies = self.protocol().false_replies();
                    shapes = shapes.replaced(Shape::False, &replies);
                }
                self.returns.push(Return {
                    at: position(ret.token()),
                    shapes,
                    implicit: false,
                });
                true
            }
            Some(LastStmt::Break(_)) => {
                let here = self.scopes.clone();
                if let Some(breaks) = self.breaks.last_mut() {
                    breaks.push(here);
                }
                true
            }
            _ => false,
        }
    }

    /// Walks a statement; true when it never ends normally.
    fn stmt(&mut self, stmt: &Stmt) -> bool {
        match stmt {
            Stmt::LocalAssignment(l) => {
                let values = self.values(l.expressions().iter(), l.names().len());
                let exprs: Vec<&Expression> = l.expressions().iter().collect();
                let texts: Vec<Option<String>> = (0..l.names().len())
                    .map(|i| exprs.get(i).map(|e| self.text_of(e)))
                    .collect();
                for ((name, value), text) in l.names().iter().zip(values).zip(texts) {
                    if let Some(name) = name_of(name) {
                        self.declare_as(name, value, text);
                    }
                }
            }
            Stmt::Assignment(a) => {
                let values = self.values(a.expressions().iter(), a.variables().len());
                for (var, value) in a.variables().iter().zip(values) {
                    self.assign_var(var, value);
                }
            }
            Stmt::Do(d) => return self.block(d.block()),
            Stmt::FunctionCall(call) => {
                self.call(call);
                self.note_writes(call);
                return is_error_call(call);
            }
            Stmt::LocalFunction(f) => {
                let Some(name) = name_of(f.name()) else {
                    return false;
                };
                // Visible in its own body (recursion), as not yet known.
                self.declare(name, Value::Function(Shapes::unknown()));
                let shapes = self.body(f.body());
                self.assign(name, Value::Function(shapes));
            }
            Stmt::FunctionDeclaration(f) => {
                self.body(f.body());
            }
            Stmt::If(i) => return self.if_stmt(i),
            Stmt::While(w) => {
                self.expr(w.condition());
                let forever = is_symbol(w.condition(), Symbol::True);
                return self.loop_body(w.block(), &[], forever);
            }
            Stmt::Repeat(r) => {
                let forever = is_symbol(r.until(), Symbol::False);
                return self.loop_body(r.block(), &[], forever);
            }
            Stmt::NumericFor(f) => {
                self.expr(f.start());
                self.expr(f.end());
                let names: Vec<String> = name_of(f.index_variable())
                    .map(str::to_owned)
                    .into_iter()
                    .collect();
                return self.loop_body(f.block(), &names, false);
            }
            Stmt::GenericFor(f) => {
                for e in f.expressions() {
                    self.expr(e);
                }
                let names: Vec<String> = f
                    .names()
                    .iter()
                    .filter_map(name_of)
                    .map(str::to_owned)
                    .collect();
                return self.loop_body(f.block(), &names, false);
            }
            _ => {}
        }
        false
    }

    /// The values of an expression list for `count` names: the last expression may give
    /// several (a call), and names without one get nil.
    fn values<'a>(
        &mut self,
        exprs: impl Iterator<Item = &'a Expression>,
        count: usize,
    ) -> Vec<Value> {
        let exprs: Vec<&Expression> = exprs.collect();
        let mut values: Vec<Value> = exprs.iter().map(|e| self.expr(e)).collect();
        let open = exprs.last().is_some_and(|e| {
            matches!(e, Expression::FunctionCall(_))
                || matches!(e, Expression::Symbol(s) if matches!(s.token().token_type(), TokenType::Symbol { symbol: Symbol::Ellipsis }))
        });
        while values.len() < count {
            values.push(if open {
                Value::Data(Shapes::unknown())
            } else {
                data(Shape::Nil)
            });
        }
        values
    }

    fn assign_var(&mut self, var: &Var, value: Value) {
        match var {
            Var::Name(name) => {
                if let Some(name) = name_of(name) {
                    self.assign(name, value);
                }
            }
            Var::Expression(v) => {
                let suffixes: Vec<&Suffix> = v.suffixes().collect();
                if let Prefix::Name(table) = v.prefix()
                    && let Some(table) = name_of(table)
                {
                    match suffixes.as_slice() {
                        // `t[#t + 1] = x`: appended.
                        [Suffix::Index(Index::Brackets { expression, .. })]
                            if is_append_index(expression, table) =>
                        {
                            self.append(table, &value);
                            return;
                        }
                        // `t[i] = x`, `t.ok = x`: the table may now hold anything.
                        _ => self.widen(table),
                    }
                }
                for s in suffixes {
                    self.suffix_args(s);
                }
            }
            _ => {}
        }
    }

    /// `t[#t + 1] = x`, `table.insert(t, x)`: an array of this function's stays an array,
    /// with `x` among its elements; any other table is no longer known. A nil `x` is no
    /// element at all; a `false` one (a command's nil reply, under RESP2) is an element,
    /// sent as nil.
    pub(super) fn append(&mut self, name: &str, value: &Value) {
        let depth = self.depth;
        let added = value.shapes().without(Shape::Nil);
        if let Some(local) = self.find(name)
            && local.depth == depth
            && let Value::Data(shapes) = &local.value
            && shapes.iter().eq([Shape::Array])
        {
            let element = shapes.element().cloned().unwrap_or_default();
            local.value = Value::Data(Shapes::array(element.union(&added)));
            local.text = None;
        } else {
            self.widen(name);
        }
    }

    /// A local table written or handed to code the walk does not follow: its elements,
    /// and whether it still is an array, are no longer known.
    fn widen(&mut self, name: &str) {
        if let Some(local) = self.find(name)
            && let Value::Data(shapes) = &local.value
            && shapes.contains(Shape::Array)
        {
            local.value = Value::Data(Shapes::unknown());
        }
    }

    fn if_stmt(&mut self, i: &full_moon::ast::If) -> bool {
        let mut branches: Vec<(Option<&Expression>, &Block)> =
            vec![(Some(i.condition()), i.block())];
        for e in i.else_if().into_iter().flatten() {
            branches.push((Some(e.condition()), e.block()));
        }
        let has_else = i.else_block().is_some();
        if let Some(b) = i.else_block() {
            branches.push((None, b));
        }
        let mut rest = self.scopes.clone();
        // What the tests that failed so far say exists (`EXISTS k == 0` false).
        let mut rest_facts = Vec::new();
        let mut ways: Vec<Scopes> = Vec::new();
        for (condition, block) in branches {
            self.scopes = rest.clone();
            let mut known = rest_facts.clone();
            if let Some(condition) = condition {
                self.expr(condition);
                self.narrow(&narrows(condition, true));
                known.extend(self.tested_exists(condition, true));
            }
            self.pending = known;
            if !self.block(block) {
                ways.push(self.scopes.clone());
            }
            if let Some(condition) = condition {
                self.scopes = std::mem::take(&mut rest);
                self.narrow(&narrows(condition, false));
                rest.clone_from(&self.scopes);
                let facts = self.tested_exists(condition, false);
                rest_facts.extend(facts);
            }
        }
        if !has_else {
            ways.push(rest.clone());
        }
        let only_rest = !has_else && ways.len() == 1;
        if let Some(joined) = merge(&ways) {
            self.scopes = joined;
            // Every branch that passed ended: what the failed tests say holds after.
            if only_rest && let Some(block) = self.written.last_mut() {
                block.extend(rest_facts);
            }
            false
        } else {
            self.scopes = rest;
            true
        }
    }

    /// A loop's body, walked twice so that what it assigns late reaches its top; the
    /// locals after it are those before it, after each pass, and at each `break`.
    /// `forever`: `while true` / `until false`, which ends only by a `break`.
    fn loop_body(&mut self, block: &Block, names: &[String], forever: bool) -> bool {
        let before = self.scopes.clone();
        // Two passes per level would cost 2^n walks for n nested loops: loops nested
        // deeper than three get one.
        let passes = if self.breaks.len() < 3 { 2 } else { 1 };
        self.breaks.push(Vec::new());
        let mut ways = vec![before];
        for _ in 0..passes {
            self.scopes.push(
                names
                    .iter()
                    .map(|n| Local {
                        name: n.clone(),
                        value: Value::Data(Shapes::unknown()),
                        text: None,
                        depth: self.depth,
                    })
                    .collect(),
            );
            self.block(block);
            self.scopes.pop();
            ways.push(self.scopes.clone());
            self.scopes = merge(&ways).unwrap_or_default();
        }
        let breaks = self.breaks.pop().unwrap_or_default();
        let broke = !breaks.is_empty();
        ways.extend(breaks);
        self.scopes = merge(&ways).unwrap_or_default();
        forever && !broke
    }

    /// A function body's returns (its end, when reachable, returns nil); the walk of it
    /// in its own frame.
    fn body(&mut self, body: &FunctionBody) -> Shapes {
        let outer = std::mem::take(&mut self.returns);
        let breaks = std::mem::take(&mut self.breaks);
        // What the code around wrote is not known to be written when the function runs.
        let written = std::mem::take(&mut self.written);
        self.depth += 1;
        let mut frame: Vec<Local> = body
            .parameters()
            .iter()
            .filter_map(|p| match p {
                full_moon::ast::Parameter::Name(n) => name_of(n),
                _ => None,
            })
            .map(|n| Local {
                name: n.to_owned(),
                value: Value::Data(Shapes::unknown()),
                text: None,
                depth: self.depth,
            })
            .collect();
        if self.switches {
            // Called from wherever, after a switch or not.
            frame.push(Local {
                name: RESP.to_owned(),
                value: Value::Resp(Resp::EITHER),
                text: None,
                depth: self.depth,
            });
        }
        self.scopes.push(frame);
        let ends = self.block(body.block());
        self.scopes.pop();
        self.depth -= 1;
        self.breaks = breaks;
        self.written = written;
        let inner = std::mem::replace(&mut self.returns, outer);
        let mut shapes = Return::all(&inner);
        if !ends {
            shapes = shapes.with(Shape::Nil);
        }
        shapes
    }
}

fn is_symbol(expr: &Expression, symbol: Symbol) -> bool {
    match expr {
        Expression::Symbol(s) => {
            matches!(s.token().token_type(), TokenType::Symbol { symbol: found } if *found == symbol)
        }
        Expression::Parentheses { expression, .. } => is_symbol(expression, symbol),
        _ => false,
    }
}

/// `#table + 1`, the index that appends to `table`.
fn is_append_index(expr: &Expression, table: &str) -> bool {
    let Expression::BinaryOperator { lhs, binop, rhs } = expr else {
        return false;
    };
    let length_of_table = matches!(
        lhs.as_ref(),
        Expression::UnaryOperator { unop: full_moon::ast::UnOp::Hash(_), expression }
            if matches!(expression.as_ref(), Expression::Var(Var::Name(n)) if name_of(n) == Some(table))
    );
    let one = matches!(rhs.as_ref(), Expression::Number(n) if n.token().to_string() == "1");
    length_of_table && one && matches!(binop, full_moon::ast::BinOp::Plus(_))
}

/// `error(...)` as a statement: the script stops there.
fn is_error_call(call: &FunctionCall) -> bool {
    matches!(call.prefix(), Prefix::Name(n) if name_of(n) == Some("error"))
        && matches!(
            call.suffixes().collect::<Vec<_>>().as_slice(),
            [Suffix::Call(Call::AnonymousCall(_))]
        )
}

#[cfg(test)]
mod tests {
    use crate::lua::analyze;
    use crate::reply::Return;

    /// The shapes of each return, in the compact form.
    fn shapes(source: &str) -> Vec<String> {
        let analysis = analyze(source);
        assert!(analysis.parsed, "{:?}", analysis.problems);
        analysis.returns.iter().map(|r| r.shapes.code()).collect()
    }

    fn all(source: &str) -> String {
        Return::all(&analyze(source).returns).code()
    }

    #[test]
    fn a_command_reply_comes_back_as_the_command_sends_it() {
        assert_eq!(shapes("return redis.call('GET', KEYS[1])"), ["nb"]);
        assert_eq!(shapes("return redis.call('HGETALL', KEYS[1])"), ["[b]"]);
        assert_eq!(shapes("return redis.call('incr', KEYS[1])"), ["i"]);
        assert_eq!(shapes("return redis.pcall('INCR', KEYS[1])"), ["ie"]);
        // A subcommand, an alias of redis.call, a computed name.
        assert_eq!(
            shapes("local rcall = redis.call\nreturn rcall('SET', KEYS[1], 1)"),
            ["o"]
        );
        assert_eq!(
            shapes("return redis.call('SET', KEYS[1], 1, 'GET')"),
            ["nbo"]
        );
        assert_eq!(
            shapes("return redis.call('SET', KEYS[1], 1, 'PX', ARGV[1])"),
            ["o"]
        );
        assert_eq!(shapes("return redis.call('LPOP', KEYS[1])"), ["nb"]);
        assert_eq!(
            shapes("return redis.call('LPOP', KEYS[1], ARGV[1])"),
            ["nb[b]"]
        );
        assert_eq!(shapes("return redis.call('SET', unpack(ARGV))"), ["nbo"]);
        assert_eq!(shapes("return redis.call(ARGV[1], KEYS[1])"), ["?"]);
        assert_eq!(
            shapes("return redis.call('XINFO', 'STREAM', KEYS[1])")[0]
                .chars()
                .next(),
            Some('[')
        );
    }

    #[test]
    fn lua_values_follow_the_lua_to_resp_rules() {
        assert_eq!(shapes("return 1"), ["i"]);
        assert_eq!(shapes("return 1.5"), ["f"]);
        assert_eq!(shapes("return true"), ["i"]);
        assert_eq!(shapes("return false"), ["n"]);
        assert_eq!(shapes("return nil"), ["n"]);
        assert_eq!(shapes("return"), ["n"]);
        assert_eq!(shapes("return 'missing'"), ["w"]);
        assert_eq!(shapes("return '12'"), ["b"]);
        assert_eq!(shapes("return {ok = 'DONE'}"), ["o"]);
        assert_eq!(shapes("return {err = 'no'}"), ["e"]);
        assert_eq!(shapes("return redis.error_reply('no')"), ["e"]);
        assert_eq!(shapes("return redis.status_reply('DONE')"), ["o"]);
        assert_eq!(
            shapes("return {1, 'a', redis.call('GET', KEYS[1])}"),
            ["[nibw?]"]
        );
        assert_eq!(shapes("return {}"), ["[]"]);
        assert_eq!(shapes("return #KEYS"), ["i"]);
        assert_eq!(shapes("return cjson.encode({1})"), ["b"]);
        assert_eq!(shapes("return cjson.decode(ARGV[1])"), ["?"]);
        assert_eq!(shapes("return ARGV[1]"), ["?"]);
    }

    #[test]
    fn a_script_without_a_return_replies_nil() {
        let analysis = analyze("redis.call('SET', KEYS[1], 1)");
        assert_eq!(analysis.returns.len(), 1);
        assert!(analysis.returns[0].implicit);
        assert_eq!(analysis.returns[0].shapes.code(), "n");
    }

    #[test]
    fn numbers_are_truncated_unless_every_operand_is_an_integer() {
        assert_eq!(shapes("local n = tonumber(ARGV[1])\nreturn n / 2"), ["f"]);
        assert_eq!(shapes("return redis.call('INCR', KEYS[1]) + 1"), ["i"]);
        assert_eq!(shapes("return redis.call('GET', KEYS[1]) + 1"), ["f"]);
        assert_eq!(shapes("return tostring(tonumber(ARGV[1]) / 2)"), ["b"]);
        assert_eq!(shapes("return math.floor(ARGV[1] / 2)"), ["i"]);
    }

    #[test]
    fn branches_locals_and_reassignments_are_followed() {
        let script = "local v = redis.call('INCR', KEYS[1])\nif v > 10 then\n  return 'missing'\nend\nreturn v";
        assert_eq!(shapes(script), ["w", "i"]);
        let script = "local v = 1\nif ARGV[1] then v = 'x' else v = 2 end\nreturn v";
        assert_eq!(shapes(script), ["iw"]);
        let script = "local v\nfor i = 1, 3 do\n  if i == 2 then v = 'x' end\nend\nreturn v";
        assert_eq!(all(script), "nw");
    }

    #[test]
    fn a_test_of_a_local_narrows_it() {
        let script =
            "local v = redis.call('GET', KEYS[1])\nif not v then return false end\nreturn v";
        assert_eq!(shapes(script), ["n", "b"]);
        let script = "local v = redis.call('GET', KEYS[1])\nif v then return v end\nreturn ''";
        assert_eq!(shapes(script), ["b", "w"]);
        let script =
            "local v = redis.call('GET', KEYS[1])\nif v == false then v = '' end\nreturn v";
        assert_eq!(shapes(script), ["bw"]);
        let script =
            "local v = redis.call('GET', KEYS[1])\nif v == 'a' then return v end\nreturn 0";
        assert_eq!(shapes(script), ["b", "i"]);
        let script =
            "local v = redis.call('GET', KEYS[1])\nif v == ARGV[1] then return v end\nreturn ''";
        assert_eq!(shapes(script), ["b", "w"]);
        // A pcall's error, returned only when it is one (acquire-with-retry.lua).
        let script = "local r = redis.pcall('INCR', KEYS[1])\nif type(r) == 'table' and r.err then\n  return r\nend\nreturn {1, r}";
        assert_eq!(shapes(script), ["e", "[ie]"]);
        let script = "local r = redis.pcall('INCR', KEYS[1])\nif type(r) ~= 'number' then return 0 end\nreturn r";
        assert_eq!(shapes(script), ["i", "i"]);
    }

    #[test]
    fn a_read_of_what_the_script_wrote_before_is_not_nil() {
        let script = "local rcall = redis.call\nlocal job = KEYS[1] .. ARGV[1]\nrcall('HSET', job, 'state', 'active')\nreturn rcall('HGET', KEYS[1] .. ARGV[1], 'state')";
        assert_eq!(shapes(script), ["b"]);
        let script =
            "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])\nreturn redis.call('GET', KEYS[1])";
        assert_eq!(shapes(script), ["b"]);
        // Another field, a write only on one path, SET ... XX: still maybe nil.
        let script = "redis.call('HSET', KEYS[1], 'a', 1)\nreturn redis.call('HGET', KEYS[1], 'b')";
        assert_eq!(shapes(script), ["nb"]);
        let script =
            "if ARGV[1] then redis.call('SET', KEYS[1], 1) end\nreturn redis.call('GET', KEYS[1])";
        assert_eq!(shapes(script), ["nb"]);
        let script = "redis.call('SET', KEYS[1], 1, 'XX')\nreturn redis.call('GET', KEYS[1])";
        assert_eq!(shapes(script), ["nb"]);
    }

    #[test]
    fn a_read_of_what_a_test_found_is_not_nil() {
        let script = "if redis.call('EXISTS', KEYS[1]) == 1 then\n  return redis.call('GET', KEYS[1])\nend\nreturn ''";
        assert_eq!(shapes(script), ["b", "w"]);
        let script = "if redis.call('HEXISTS', KEYS[1], 'f') == 0 then return '' end\nreturn redis.call('HGET', KEYS[1], 'f')";
        assert_eq!(shapes(script), ["w", "b"]);
        // Another key, or a test that does not end its branch: still maybe nil.
        let script = "if redis.call('EXISTS', KEYS[2]) == 1 then\n  return redis.call('GET', KEYS[1])\nend\nreturn ''";
        assert_eq!(shapes(script), ["nb", "w"]);
        let script = "if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('INCR', KEYS[2]) end\nreturn redis.call('GET', KEYS[1])";
        assert_eq!(shapes(script), ["nb"]);
    }

    #[test]
    fn and_or_and_not_follow_truthiness() {
        assert_eq!(shapes("return redis.call('GET', KEYS[1]) or ''"), ["bw"]);
        assert_eq!(
            shapes("return redis.call('GET', KEYS[1]) and 1 or 0"),
            ["i"]
        );
        assert_eq!(shapes("return not redis.call('GET', KEYS[1])"), ["ni"]);
        assert_eq!(shapes("return redis.call('EXISTS', KEYS[1]) == 1"), ["ni"]);
    }

    #[test]
    fn local_functions_give_what_they_return() {
        let script =
            "local function get(k)\n  return redis.call('GET', k)\nend\nreturn get(KEYS[1])";
        assert_eq!(shapes(script), ["nb"]);
        let script = "local f = function() if ARGV[1] then return 1 end end\nreturn f()";
        assert_eq!(shapes(script), ["ni"]);
        // A function that assigns an outer local: that local is no longer known.
        let script =
            "local r = 1\nlocal function set() r = redis.call('GET', KEYS[1]) end\nset()\nreturn r";
        assert_eq!(shapes(script), ["?"]);
    }

    #[test]
    fn a_table_changed_after_it_is_built_is_not_known() {
        let script = "local t = {}\nt[2] = redis.call('GET', KEYS[1])\nreturn t";
        assert_eq!(shapes(script), ["?"]);
        let script = "local t = {}\nt.ok = 'x'\nreturn t";
        assert_eq!(shapes(script), ["?"]);
        let script = "local t = {}\ntable.insert(t, 1, 'x')\nreturn t";
        assert_eq!(shapes(script), ["?"]);
        // Several values from a call may make it `table.insert(t, pos, x)`.
        let script = "local t = {}\ntable.insert(t, unpack(ARGV))\nreturn t";
        assert_eq!(shapes(script), ["?"]);
        // Appended to by a function, or by another table's length.
        let script = "local t = {}\nlocal function add() t[#t + 1] = 1 end\nadd()\nreturn t";
        assert_eq!(shapes(script), ["?"]);
        let script = "local t, u = {}, {}\nt[#u + 1] = 1\nreturn t";
        assert_eq!(shapes(script), ["?"]);
    }

    #[test]
    fn an_array_appended_to_stays_an_array_of_what_was_appended() {
        // BullMQ's getCounts: an integer per state, appended in a loop.
        let script = "local results = {}\nfor i = 1, #ARGV do\n  if ARGV[i] == 'active' then\n    results[#results+1] = redis.call('LLEN', KEYS[1] .. ARGV[i])\n  else\n    results[#results+1] = redis.call('ZCARD', KEYS[1] .. ARGV[i])\n  end\nend\nreturn results";
        assert_eq!(shapes(script), ["[i]"]);
        // A nil appended is no element; `false` (GET's nil, as Lua holds it) is one, sent
        // as nil.
        let script = "local t = {}\nlocal v\nif ARGV[1] then v = 1 end\nt[#t + 1] = v\nreturn t";
        assert_eq!(shapes(script), ["[i]"]);
        let script = "local t = {}\nt[#t + 1] = redis.call('GET', KEYS[1])\nreturn t";
        assert_eq!(shapes(script), ["[nb]"]);
        let script = "local t = {'a'}\ntable.insert(t, 1)\nreturn t";
        assert_eq!(shapes(script), ["[iw]"]);
        let script = "local t = redis.call('HGETALL', KEYS[1])\nt[#t + 1] = 1\nreturn t";
        assert_eq!(shapes(script), ["[ib]"]);
    }

    #[test]
    fn an_error_or_an_endless_loop_is_not_an_end_of_the_script() {
        assert_eq!(shapes("if ARGV[1] then return 1 end\nerror('no')"), ["i"]);
        assert_eq!(shapes("while true do\n  return 1\nend"), ["i"]);
    }

    #[test]
    fn deeply_nested_loops_are_walked_in_bounded_time() {
        let depth = 24;
        let script = format!(
            "local v = 1\n{}v = 'x'\n{}return v",
            "for i = 1, 2 do\n".repeat(depth),
            "end\n".repeat(depth)
        );
        let started = std::time::Instant::now();
        assert_eq!(shapes(&script), ["iw"]);
        // 2^24 walks of the innermost body would take minutes; the bounded walk, milliseconds.
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn the_newest_servers_commands_are_known() {
        assert_eq!(
            shapes("return redis.call('DELIFEQ', KEYS[1], ARGV[1])"),
            ["i"]
        );
        assert_eq!(
            shapes("return redis.call('HGETEX', KEYS[1], 'FIELDS', 1, ARGV[1])"),
            ["[nb]"]
        );
        assert_eq!(
            shapes("return redis.call('HSETEX', KEYS[1], 'FIELDS', 1, 'f', ARGV[1])"),
            ["i"]
        );
        assert_eq!(
            shapes("return redis.call('SET', KEYS[1], ARGV[1], 'IFEQ', ARGV[2])"),
            ["no"]
        );
    }

    /// After `redis.setresp(3)` a command's reply is its RESP3 form, returned to a RESP2
    /// caller: null is nil, a map its pairs, flat, a double with its member a nested pair.
    #[test]
    fn after_setresp_3_replies_take_their_resp3_form() {
        assert_eq!(
            shapes("redis.setresp(3)\nreturn redis.call('GET', KEYS[1])"),
            ["nb"]
        );
        assert_eq!(
            shapes("redis.setresp(3)\nreturn redis.call('HGETALL', KEYS[1])"),
            ["[b]"]
        );
        let zrange = "return redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')";
        assert_eq!(shapes(zrange), ["[b?]"]);
        assert_eq!(shapes(&format!("redis.setresp(3)\n{zrange}")), ["[b[b]]"]);
        // A null inside an array ends the Lua table: not an element.
        assert_eq!(
            shapes("redis.setresp(3)\nreturn redis.call('MGET', KEYS[1], KEYS[2])"),
            ["[b]"]
        );
        // Back to RESP2.
        assert_eq!(
            shapes(&format!("redis.setresp(3)\nredis.setresp(2)\n{zrange}")),
            ["[b?]"]
        );
        assert_eq!(
            shapes("server.setresp(3)\nreturn redis.call('MGET', KEYS[1])"),
            ["[b]"]
        );
    }

    /// Lua's false replies nil, but 0 once the script is on RESP3 (a RESP2 null, read
    /// before the switch, is false too); nil stays nil.
    #[test]
    fn false_replies_zero_after_setresp_3() {
        assert_eq!(shapes("redis.setresp(3)\nreturn false"), ["i"]);
        assert_eq!(shapes("redis.setresp(3)\nreturn nil"), ["n"]);
        assert_eq!(shapes("redis.setresp(3)\nreturn {1, false}"), ["[i]"]);
        assert_eq!(
            shapes("redis.setresp(3)\nreturn not redis.call('GET', KEYS[1])"),
            ["i"]
        );
        assert_eq!(
            shapes("local v = redis.call('GET', KEYS[1])\nredis.setresp(3)\nreturn v"),
            ["ib"]
        );
        assert_eq!(shapes("return {1, false}"), ["[ni]"]);
    }

    /// A path that may or may not have switched gets either form: a switch in one
    /// branch, in a function, or to a protocol the script computes.
    #[test]
    fn a_switch_on_some_paths_gives_either_form() {
        let zrange = "return redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')";
        assert_eq!(
            shapes(&format!("if ARGV[1] then redis.setresp(3) end\n{zrange}")),
            ["[b?[b]]"]
        );
        assert_eq!(
            shapes("local function three() redis.setresp(3) end\nthree()\nreturn false"),
            ["ni"]
        );
        assert_eq!(
            shapes("redis.setresp(tonumber(ARGV[1]))\nreturn false"),
            ["ni"]
        );
        assert_eq!(shapes("pcall(redis.setresp, 3)\nreturn false"), ["ni"]);
        // A function's body may run after a switch.
        assert_eq!(
            shapes("local function f() return false end\nredis.setresp(3)\nreturn f()"),
            ["i"]
        );
        assert_eq!(
            shapes(
                "local function f()\n  return redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')\nend\nredis.setresp(3)\nreturn f()"
            ),
            ["[b?[b]]"]
        );
    }

    /// RESP3's forms a script builds reply to a RESP2 caller as Redis 7 and Valkey send
    /// them: a double, a big number, a verbatim string as text; a map, a set as an array.
    /// (Redis 6.2 sends the big number and the verbatim string as an empty array.)
    #[test]
    fn resp3_tables_reply_as_their_resp2_form() {
        assert_eq!(shapes("return {double = 1.5}"), ["b"]);
        // Redis 6.2 reads neither of these: an empty array there.
        assert_eq!(shapes("return {big_number = '123'}"), ["b[]"]);
        assert_eq!(
            shapes("return {verbatim_string = {format = 'txt', string = 'hi'}}"),
            ["b[]"]
        );
        assert_eq!(shapes("return {map = {a = 1}}"), ["[?]"]);
        assert_eq!(shapes("return {set = {a = true}}"), ["[?]"]);
        // Not of the form's kind: read as an array, which is not followed.
        assert_eq!(shapes("return {double = 'x'}"), ["?"]);
    }
}
