#!/usr/bin/env python3
"""./tests/gen-replies.py OWNER/NAME=GIT_DIR[@COMMIT]... > lock-audit/src/commands/replies.rs

For example, with clones of both sources:
  tests/gen-replies.py redis/redis=../redis/.git valkey-io/valkey=../valkey/.git \
    > lock-audit/src/commands/replies.rs

Writes the reply table of the script lint (lock-audit/src/commands/replies.rs): for each
command (subcommands as `PARENT|SUB`), the shapes a script sees when it calls it, from the
`reply_schema` of each `src/commands/*.json` in the Redis and Valkey sources (release builds
of the servers leave the schemas out of `COMMAND DOCS`, so they are read from the sources, at
the commit named on the command line, the default HEAD, and recorded in the table). A
command both sources describe gets the union of their shapes.

The schemas describe RESP3 replies; a script runs on RESP2 (until `redis.setresp(3)`), so:
  null -> n (nil; Lua sees false)      integer, boolean -> i (a RESP2 boolean is 0 or 1)
  const "OK" (any string const) -> o (a status whose text is not a number)
  string -> b (bulk string)            number (a double) -> b (RESP2 sends it as text)
  array -> [..] (the union of its items' shapes; a fixed tuple's items united; an array
    of pairs with a double, RESP3's member-and-score, is flat in RESP2 but GEOPOS's
    stays nested, so its elements are the pair's members and ?)
  object (a map) -> [..] (RESP2 flattens it: the keys, bulk strings, and the values; with
    ? when its values are arrays, which some commands (XREAD) send as pairs instead)
  a part whose description mentions RESP2, a form this does not read -> ? (unknown)
Arrays deeper than three levels are [?]. Only the Python standard library is used.

An alternative of a reply (`oneOf` / `anyOf`) whose description says an option or
argument was given, used or specified (`GET`, 'COUNT', WITHSCORES, `count`), and not that
it was not, is kept apart with the words it names: the lint adds it only to a call that
has more arguments than the command's arity (SET without options never replies nil), as
`crate::commands::reply_to` says.
"""
import json
import re
import subprocess
import sys

DEPTH = 3


def git(gitdir, *args):
    return subprocess.run(["git", "--git-dir", gitdir, *args], check=True,
                          capture_output=True, text=True).stdout


def union(parts):
    """The shapes of several alternatives, as one sorted string; arrays merged into one."""
    letters = set()
    elements = []
    for p in parts:
        i = 0
        while i < len(p):
            if p[i] == "[":
                depth, j = 1, i + 1
                while depth:
                    depth += {"[": 1, "]": -1}.get(p[j], 0)
                    j += 1
                elements.append(p[i + 1:j - 1])
                i = j
            else:
                letters.add(p[i])
                i += 1
    out = "".join(sorted(letters, key="nifbwsoe?".index))
    if elements:
        out += "[" + union(elements) + "]"
    return out


def paired(schema):
    """An array of fixed tuples with a double in them, or one its description says RESP2
    sends otherwise."""
    items = schema.get("items")
    if not isinstance(items, dict) or not isinstance(items.get("items"), list):
        return False
    return "RESP2" in schema.get("description", "") or any(
        isinstance(m, dict) and m.get("type") == "number" for m in items["items"])


def shape(schema, depth=0):
    if not isinstance(schema, dict):
        return "?"
    if "oneOf" in schema or "anyOf" in schema:
        return union([shape(s, depth) for s in schema.get("oneOf", []) + schema.get("anyOf", [])])
    kind = schema.get("type")
    if kind == "object":
        if depth >= DEPTH:
            return "[?]"
        values = ["b"]
        for v in schema.get("properties", {}).values():
            values.append(shape(v, depth + 1))
        for v in schema.get("patternProperties", {}).values():
            values.append(shape(v, depth + 1))
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            values.append(shape(extra, depth + 1))
        elif extra is not False and not schema.get("properties") and not schema.get("patternProperties"):
            values.append("?")
        inner = union(values)
        if "[" in inner:
            # A map of arrays (XREAD's streams) is an array of pairs in RESP2, not flat.
            inner = union([inner, "?"])
        return "[" + inner + "]"
    if kind == "number":
        return "b"
    if kind == "array" and paired(schema):
        # RESP3's pairs (member and score, field and value), which RESP2 sends flat;
        # GEOPOS's pairs stay nested: which one is not in the schema.
        return "[" + union([shape(s, depth + 1) for s in schema["items"]["items"]] + ["?"]) + "]"
    if "RESP2" in schema.get("description", ""):
        return "?"
    if "const" in schema:
        return "o" if isinstance(schema["const"], str) else "i"
    if isinstance(kind, list):
        return union([shape(dict(schema, type=k), depth) for k in kind])
    if kind == "null":
        return "n"
    if kind in ("integer", "boolean"):
        return "i"
    if kind in ("string", "number"):
        return "b"
    if kind == "array":
        if depth >= DEPTH:
            return "[?]"
        items = schema.get("items")
        if items is None:
            return "[?]"
        if isinstance(items, list):
            inner = union([shape(s, depth + 1) for s in items])
        else:
            inner = shape(items, depth + 1)
        extra = schema.get("additionalItems")
        if isinstance(items, list) and isinstance(extra, dict):
            inner = union([inner, shape(extra, depth + 1)])
        return "[" + inner + "]"
    return "?"


NEGATED = re.compile(r"(not|n't) (given|used|specified)|isn't|\bIf no\b|\bas not\b")
AFFIRMED = re.compile(r"\b(given|used|specified|option|options|aborted)\b")
WORD = re.compile(r"`([A-Za-z_*-]+)`|'([A-Za-z_* -]+)'|\b([A-Z][A-Z_]+\*?)(?![a-z])")


def condition(description):
    """The words an alternative needs among the call's arguments, or None when it is the
    reply without options: an option's keyword (`GET`), `*` for an argument named in lower
    case (`count`), which only its position tells."""
    # "`GET` not given: Operation was aborted (conflict with `XX`/`NX`)": only options
    # abort it, whatever else is not given.
    aborted = "aborted" in description and "conflict" in description
    if not aborted and (NEGATED.search(description) or not AFFIRMED.search(description)):
        return None
    words = []
    for m in WORD.finditer(description):
        word = next(g for g in m.groups() if g)
        if word in ("RESP2", "RESP3", "ID", "OK", "ACL", "RAM", "TTL", "LCS"):
            continue
        words.append(word.rstrip("*").split()[-1] if word.isupper() or " " in word else "*")
    return sorted(set(words)) or None


def replies(schema):
    """The reply without options, and each alternative only options give, with its words."""
    alternatives = schema.get("oneOf", []) + schema.get("anyOf", [])
    if not alternatives:
        return shape(schema), []
    base, optional = [], []
    for alternative in alternatives:
        words = condition(alternative.get("description", ""))
        if words is None:
            base.append(shape(alternative))
        else:
            optional.append((shape(alternative), words))
    return union(base), optional


# Where a schema says other than what the server sends, checked in its source:
# TYPE replies the status `none` for a missing key (typeCommand), never nil.
OVERRIDES = {
    "TYPE": ("o", []),
}


def main():
    table = {}
    sources = []
    for arg in sys.argv[1:]:
        repo, _, rest = arg.partition("=")
        gitdir, _, commit = rest.partition("@")
        commit = git(gitdir, "rev-parse", commit or "HEAD").strip()
        when = git(gitdir, "show", "-s", "--format=%cs", commit).strip()
        sources.append(f"github.com/{repo} {commit} ({when})")
        for path in git(gitdir, "ls-tree", "--name-only", commit, "src/commands/").split():
            if not path.endswith(".json"):
                continue
            doc = json.loads(git(gitdir, "show", f"{commit}:{path}"))
            for name, command in doc.items():
                if "reply_schema" not in command:
                    continue
                full = name.upper()
                if command.get("container"):
                    full = command["container"].upper() + "|" + full
                base, optional = replies(command["reply_schema"])
                old_base, old_optional = table.get(full, ("", []))
                merged = dict((",".join(w), s) for s, w in old_optional)
                for s, w in optional:
                    key = ",".join(w)
                    merged[key] = union([merged[key], s]) if key in merged else s
                table[full] = (union([old_base, base]) if full in table else base,
                               [(s, k.split(",")) for k, s in sorted(merged.items())])
    table.update(OVERRIDES)
    print("//! The reply shapes of the commands, GENERATED by tests/gen-replies.py from the")
    print("//! `reply_schema` of each `src/commands/*.json` of these sources:")
    for source in sources:
        print(f"//! {source}")
    print("//! Do not edit. Each row is `shapes` for the reply without options, then for")
    print("//! each reply only options give, `|shapes:WORDS`, the words its description names")
    print("//! (`crate::commands::reply_to` says which calls may get it). The letters are read")
    print("//! by `crate::reply::Shapes::parse`.")
    print()
    print("/// `(command, shapes)`, sorted by command for binary search.")
    print("#[rustfmt::skip]")
    print("pub const REPLIES: &[(&str, &str)] = &[")
    for name in sorted(table):
        base, optional = table[name]
        code = base + "".join(f"|{s}:{','.join(w)}" for s, w in optional)
        print(f'    ("{name}", "{code}"),')
    print("];")


if __name__ == "__main__":
    main()
