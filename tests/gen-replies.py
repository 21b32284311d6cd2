#!/usr/bin/env python3
"""./tests/gen-replies.py SOURCE... > lock-audit/src/commands/replies.rs

A SOURCE is a server's source tree, NAME=DIR (a release's source tarball unpacked: DIR
holds src/commands/ and src/version.h), or a git clone, OWNER/NAME=GIT_DIR[@COMMIT]. The
table in the repository was made from the newest release source of each product that
could be had, and the older clones it was first read from (their union):
  redis 8.0.6 and valkey 9.1.2 (the release tarballs Debian's source packages `redis`
  5:8.0.6-3 and `valkey` 9.1.2-1 carry: `apt-get source --download-only redis valkey`
  with a deb-src line for Debian unstable, then unpack each *.orig.tar.gz), and the
  clones redis/redis 4f8cdc2a (2024-10-18) and valkey-io/valkey 55bbbe09 (2024-10-25):
  tests/gen-replies.py redis=/tmp/redis-8.0.6 valkey=/tmp/valkey-9.1.2 \
    redis/redis=../redis/.git@4f8cdc2a1ea53e42955af758aabffee67cb455dd \
    valkey-io/valkey=../valkey/.git@55bbbe09a3b37a98c907dbfbc225768ff253e84f \
    > lock-audit/src/commands/replies.rs
Valkey 9.1.2 is the matrix's Valkey. No Redis 8.2 source was to be had (Debian carries
8.0.6, and no package in the registries this project reaches ships the 8.2 tree), so the
commands Redis 8.2.3's `COMMAND LIST` has and no source describes (XACKDEL, XDELEX, and
the vector set commands VADD VCARD VDIM VEMB VGETATTR VINFO VISMEMBER VLINKS VRANDMEMBER
VREM VSETATTR VSIM, which the built-in vectorset module registers with no reply schema)
get their rows from DOCUMENTED below: written by hand from the Redis documentation
(redis.io's command pages, and the module's README for the V* commands), each form of
each checked by running the command in a script, under RESP2 and `redis.setresp(3)`,
against the Redis 8.2.3 binary (tests/tests/replies.rs,
`redis_8_2_commands_reply_as_their_rows_say`, skipped on servers without them). They
are merged like a source's rows, so a newer source's schema adds to them. To take a
newer source, unpack it and add it to the command line: every shape of every source is
kept.

Writes the reply table of the script lint (lock-audit/src/commands/replies.rs): for each
command (subcommands as `PARENT|SUB`), the shapes a script sees when it calls it, from the
`reply_schema` of each `src/commands/*.json` (release builds of the servers leave the
schemas out of `COMMAND DOCS`, so they are read from the sources, and the sources are
recorded in the table). A command several sources describe gets the union of their shapes,
so no server's reply is refused. Each row has two columns: the reply as the script sees
it under RESP2 (the default), and under `redis.setresp(3)`.

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

Under `redis.setresp(3)` the script gets the RESP3 reply as Lua values (a map is
`{map = ...}`, a set `{set = ...}`, a double `{double = n}`, null is nil), and the column
holds what that value replies when the script returns it to a RESP2 caller, as Redis 7.0
and Valkey 9.1 convert it back (tests/tests/replies.rs reads ZRANGE, HGETALL, MGET
and ZSCORE back so from both):
  null -> n (nil)                      integer -> i; boolean -> i (Lua true or false,
                                       which a script under RESP3 replies as 1 or 0)
  const string -> o                    string, number ({double = n}) -> b
  array -> [..] as the schema says it, pairs nested (ZRANGE WITHSCORES is [b[b]]); a null
    among its items is left out (a Lua table ends at its first nil)
  object -> [..] the keys (b) and the values, flat (a map replies as its pairs to RESP2),
    a null value left out (a Lua table holds no nil)
  the description's mention of RESP2 is about the other protocol: the schema holds.

An alternative of a reply (`oneOf` / `anyOf`) whose description says an option or
argument was given, used or specified (`GET`, 'COUNT', WITHSCORES, `count`), and not that
it was not, is kept apart with the words it names: the lint adds it only to a call that
has more arguments than the command's arity (SET without options never replies nil), as
`crate::commands::reply_to` says.
"""
import json
import os
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


def shape(schema, depth=0, resp3=False):
    """The shapes of a reply described by `schema`, as a script returns it under RESP2, or
    under `redis.setresp(3)` (`resp3`)."""
    if resp3:
        return shape3(schema, depth)
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


def shape3(schema, depth=0):
    """The shapes of a RESP3 reply turned into Lua values under `redis.setresp(3)`, as the
    script returns them to a RESP2 caller."""
    if not isinstance(schema, dict):
        return "?"
    if "oneOf" in schema or "anyOf" in schema:
        return union([shape3(s, depth) for s in schema.get("oneOf", []) + schema.get("anyOf", [])])
    kind = schema.get("type")
    if "const" in schema:
        return "o" if isinstance(schema["const"], str) else "i"
    if isinstance(kind, list):
        return union([shape3(dict(schema, type=k), depth) for k in kind])
    if kind == "null":
        return "n"
    if kind in ("integer", "boolean"):
        return "i"
    if kind in ("string", "number"):
        return "b"
    if kind not in ("array", "object"):
        return "?"
    if depth >= DEPTH:
        return "[?]"
    if kind == "object":
        values = ["b"]
        for v in list(schema.get("properties", {}).values()) + list(schema.get("patternProperties", {}).values()):
            values.append(shape3(v, depth + 1))
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            values.append(shape3(extra, depth + 1))
        elif extra is not False and not schema.get("properties") and not schema.get("patternProperties"):
            values.append("?")
    else:
        items = schema.get("items")
        if items is None:
            return "[?]"
        values = [shape3(s, depth + 1) for s in (items if isinstance(items, list) else [items])]
        extra = schema.get("additionalItems")
        if isinstance(items, list) and isinstance(extra, dict):
            values.append(shape3(extra, depth + 1))
    # A Lua table holds no nil: a null element or value is not in the reply.
    inner = union(values)
    return "[" + (inner[1:] if inner.startswith("n") else inner) + "]"


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


def replies(schema, resp3=False):
    """The reply without options, and each alternative only options give, with its words."""
    alternatives = schema.get("oneOf", []) + schema.get("anyOf", [])
    if not alternatives:
        return shape(schema, resp3=resp3), []
    base, optional = [], []
    for alternative in alternatives:
        words = condition(alternative.get("description", ""))
        if words is None:
            base.append(shape(alternative, resp3=resp3))
        else:
            optional.append((shape(alternative, resp3=resp3), words))
    return union(base), optional


# Where a schema says other than what the server sends, checked in its source:
# TYPE replies the status `none` for a missing key (typeCommand), never nil.
OVERRIDES = {
    "TYPE": (("o", []), ("o", [])),
}

# Replies a schema leaves out, checked against the server: Valkey 9.1's `SET ... IFEQ`
# replies nil when the value differs (its schema names only `XX`/`NX` for the nil).
EXTRA = {
    "SET": ("n", ["IFEQ"]),
}


# Commands no source describes (Redis 8.2's, above), as `(RESP2 row, RESP3 row)`, each row
# `(shapes without options, [(shapes, words its options name)])` as `replies` returns
# them: from the Redis documentation, every form checked against Redis 8.2.3. Only what
# the server showed differs from the pages is noted.
DOCUMENTED = {
    # An array with, for each id, -1 (no such id), 1 (deleted) or 2 (dangling references).
    "XACKDEL": (("[i]", []), ("[i]", [])),
    "XDELEX": (("[i]", []), ("[i]", [])),
    # 1 when added, 0 when updated (RESP3: true / false, which a script replies as 1 / 0).
    "VADD": (("i", []), ("i", [])),
    "VCARD": (("i", []), ("i", [])),
    # An error, not nil, for a missing key.
    "VDIM": (("i", []), ("i", [])),
    # The vector (doubles: text under RESP2, `{double = n}` under RESP3), nil for a missing
    # key or element; RAW: the quantization's name (a status, the server shows), the raw
    # bytes, the norm and, for q8, the range.
    "VEMB": (("n[b]", [("[bo]", ["RAW"])]), ("n[b]", [("[bo]", ["RAW"])])),
    "VGETATTR": (("nb", []), ("nb", [])),
    # The set's fields and values (statuses and integers, the server shows), nil for a
    # missing key.
    "VINFO": (("n[io]", []), ("n[io]", [])),
    "VISMEMBER": (("i", []), ("i", [])),
    # The neighbours at each layer (WITHSCORES: with their scores, a map under RESP3,
    # flat when replied), nil for a missing key or element.
    "VLINKS": (("n[[b]]", []), ("n[[b]]", [])),
    # One member, nil for a missing key; with a count, an array (empty for a missing key).
    "VRANDMEMBER": (("nb", [("[b]", ["*"])]), ("nb", [("[b]", ["*"])])),
    "VREM": (("i", []), ("i", [])),
    "VSETATTR": (("i", []), ("i", [])),
    # The members (WITHSCORES: each with its score, flat; a map under RESP3, flat when
    # replied); WITHATTRIBS: each with its attributes, nil when it has none (under RESP3
    # a map's null value is left out, and with WITHSCORES each value is `[score,
    # attributes]`, cut at a null).
    "VSIM": (("[b]", [("[nb]", ["WITHATTRIBS"])]), ("[b]", [("[b[b]]", ["WITHATTRIBS"])])),
}


def merge(old, new):
    """Two rows of one command (from two sources) as one: every shape of both."""
    if old is None:
        return new
    (old_base, old_optional), (base, optional) = old, new
    merged = dict((",".join(w), s) for s, w in old_optional)
    for s, w in optional:
        key = ",".join(w)
        merged[key] = union([merged[key], s]) if key in merged else s
    return (union([old_base, base]), [(s, k.split(",")) for k, s in sorted(merged.items())])


def read_source(arg):
    """The source's description for the header, and its command files' texts."""
    label, _, rest = arg.partition("=")
    if os.path.isdir(os.path.join(rest, "src", "commands")):
        with open(os.path.join(rest, "src", "version.h")) as f:
            version = dict(re.findall(r'#define (\w+)_VERSION "([^"]+)"', f.read()))
        number = version.get(label.upper(), version.get("REDIS"))
        folder = os.path.join(rest, "src", "commands")
        texts = []
        for path in sorted(os.listdir(folder)):
            if path.endswith(".json"):
                with open(os.path.join(folder, path)) as f:
                    texts.append(f.read())
        return f"{label} {number} (the release's source tarball)", texts
    gitdir, _, commit = rest.partition("@")
    commit = git(gitdir, "rev-parse", commit or "HEAD").strip()
    when = git(gitdir, "show", "-s", "--format=%cs", commit).strip()
    texts = [git(gitdir, "show", f"{commit}:{path}")
             for path in git(gitdir, "ls-tree", "--name-only", commit, "src/commands/").split()
             if path.endswith(".json")]
    return f"github.com/{label} {commit} ({when})", texts


def code(row):
    base, optional = row
    return base + "".join(f"|{s}:{','.join(w)}" for s, w in optional)


def main():
    table = {}
    sources = []
    for arg in sys.argv[1:]:
        source, texts = read_source(arg)
        sources.append(source)
        for text in texts:
            for name, command in json.loads(text).items():
                if "reply_schema" not in command:
                    continue
                full = name.upper()
                if command.get("container"):
                    full = command["container"].upper() + "|" + full
                old2, old3 = table.get(full, (None, None))
                table[full] = (merge(old2, replies(command["reply_schema"])),
                               merge(old3, replies(command["reply_schema"], resp3=True)))
    for name, rows in DOCUMENTED.items():
        old2, old3 = table.get(name, (None, None))
        table[name] = (merge(old2, rows[0]), merge(old3, rows[1]))
    table.update(OVERRIDES)
    for name, (shapes, words) in EXTRA.items():
        table[name] = tuple(merge(row, ("", [(shapes, words)])) for row in table[name])
    print("//! The reply shapes of the commands, GENERATED by tests/gen-replies.py from the")
    print("//! `reply_schema` of each `src/commands/*.json` of these sources (a command any")
    print("//! of them describes, with every shape any of them gives):")
    for source in sources:
        print(f"//! {source}")
    print("//! and, for the commands of Redis 8.2.3 none of them describes")
    print("//! (" + ", ".join(sorted(DOCUMENTED)) + "),")
    print("//! rows written from the Redis documentation (`DOCUMENTED` in the generator),")
    print("//! each form checked against Redis 8.2.3 by tests/tests/replies.rs.")
    print("//! Do not edit. Each row is `shapes` for the reply without options, then for")
    print("//! each reply only options give, `|shapes:WORDS`, the words its description names")
    print("//! (`crate::commands::reply_to` says which calls may get it); first as a script")
    print("//! sees it under RESP2, then under `redis.setresp(3)` (what it replies when the")
    print("//! script returns it to a RESP2 caller). The letters are read by")
    print("//! `crate::reply::Shapes::parse`.")
    print()
    print("/// `(command, shapes under RESP2, shapes under RESP3)`, sorted by command for binary")
    print("/// search.")
    print("#[rustfmt::skip]")
    print("pub const REPLIES: &[(&str, &str, &str)] = &[")
    for name in sorted(table):
        resp2, resp3 = table[name]
        print(f'    ("{name}", "{code(resp2)}", "{code(resp3)}"),')
    print("];")


if __name__ == "__main__":
    main()
