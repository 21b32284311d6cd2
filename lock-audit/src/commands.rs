//! The Redis command table the lint checks `redis.call` names against.
//!
//! Generated from `COMMAND LIST` and `COMMAND INFO` of redis-server 7.0.15, plus the
//! commands added in 7.2 to 8.2 (WAITAOF, hash-field expiry, HGETDEL/HGETEX/HSETEX,
//! vector sets, XACKDEL/XDELEX, CLIENT SETINFO/NO-TOUCH, ...), so a script written for a
//! newer server is not refused. Container subcommands are spelled `PARENT|SUB`, as the
//! server spells them. Names with a dot (`JSON.SET`) are module commands and not checked.

/// One command: its name and the two flags the lint needs.
#[derive(Clone, Copy, Debug)]
pub struct Command {
    /// Upper-case name; subcommands as `PARENT|SUB`.
    pub name: &'static str,
    /// Refused in a `no-writes` script: the server flags it `write`, or `may-replicate`
    /// (`PUBLISH`, `SPUBLISH`, `PFCOUNT`, which Redis refuses there too: "Write commands
    /// are not allowed from read-only scripts").
    pub write: bool,
    /// The server flags it `noscript`: refused inside any script.
    pub noscript: bool,
}

/// The commands that are not flagged `write` but `may-replicate`, which Redis refuses in a
/// `no-writes` script as it refuses writes (their [`Command::write`] is set).
pub const MAY_REPLICATE: &[&str] = &["PFCOUNT", "PUBLISH", "SPUBLISH"];

/// Sorted by name, for binary search.
pub const COMMANDS: &[Command] = &[
    Command {
        name: "ACL",
        write: false,
        noscript: false,
    },
    Command {
        name: "ACL|CAT",
        write: false,
        noscript: true,
    },
    Command {
        name: "ACL|DELUSER",
        write: false,
        noscript: true,
    },
    Command {
        name: "ACL|DRYRUN",
        write: false,
        noscript: true,
    },
    Command {
        name: "ACL|GENPASS",
        write: false,
        noscript: true,
    },
    Command {
        name: "ACL|GETUSER",
        write: false,
        noscript: true,
    },
    Command {
        name: "ACL|HELP",
        write: false,
        noscript: false,
    },
    Command {
        name: "ACL|LIST",
        write: false,
        noscript: true,
    },
    Command {
        name: "ACL|LOAD",
        write: false,
        noscript: true,
    },
    Command {
        name: "ACL|LOG",
        write: false,
        noscript: true,
    },
    Command {
        name: "ACL|SAVE",
        write: false,
        noscript: true,
    },
    Command {
        name: "ACL|SETUSER",
        write: false,
        noscript: true,
    },
    Command {
        name: "ACL|USERS",
        write: false,
        noscript: true,
    },
    Command {
        name: "ACL|WHOAMI",
        write: false,
        noscript: true,
    },
    Command {
        name: "APPEND",
        write: true,
        noscript: false,
    },
    Command {
        name: "ASKING",
        write: false,
        noscript: false,
    },
    Command {
        name: "AUTH",
        write: false,
        noscript: true,
    },
    Command {
        name: "BGREWRITEAOF",
        write: false,
        noscript: true,
    },
    Command {
        name: "BGSAVE",
        write: false,
        noscript: true,
    },
    Command {
        name: "BITCOUNT",
        write: false,
        noscript: false,
    },
    Command {
        name: "BITFIELD",
        write: true,
        noscript: false,
    },
    Command {
        name: "BITFIELD_RO",
        write: false,
        noscript: false,
    },
    Command {
        name: "BITOP",
        write: true,
        noscript: false,
    },
    Command {
        name: "BITPOS",
        write: false,
        noscript: false,
    },
    Command {
        name: "BLMOVE",
        write: true,
        noscript: true,
    },
    Command {
        name: "BLMPOP",
        write: true,
        noscript: false,
    },
    Command {
        name: "BLPOP",
        write: true,
        noscript: true,
    },
    Command {
        name: "BRPOP",
        write: true,
        noscript: true,
    },
    Command {
        name: "BRPOPLPUSH",
        write: true,
        noscript: true,
    },
    Command {
        name: "BZMPOP",
        write: true,
        noscript: false,
    },
    Command {
        name: "BZPOPMAX",
        write: true,
        noscript: true,
    },
    Command {
        name: "BZPOPMIN",
        write: true,
        noscript: true,
    },
    Command {
        name: "CLIENT",
        write: false,
        noscript: false,
    },
    Command {
        name: "CLIENT|CACHING",
        write: false,
        noscript: true,
    },
    Command {
        name: "CLIENT|GETNAME",
        write: false,
        noscript: true,
    },
    Command {
        name: "CLIENT|GETREDIR",
        write: false,
        noscript: true,
    },
    Command {
        name: "CLIENT|HELP",
        write: false,
        noscript: false,
    },
    Command {
        name: "CLIENT|ID",
        write: false,
        noscript: true,
    },
    Command {
        name: "CLIENT|INFO",
        write: false,
        noscript: true,
    },
    Command {
        name: "CLIENT|KILL",
        write: false,
        noscript: true,
    },
    Command {
        name: "CLIENT|LIST",
        write: false,
        noscript: true,
    },
    Command {
        name: "CLIENT|NO-EVICT",
        write: false,
        noscript: true,
    },
    Command {
        name: "CLIENT|NO-TOUCH",
        write: false,
        noscript: true,
    },
    Command {
        name: "CLIENT|PAUSE",
        write: false,
        noscript: true,
    },
    Command {
        name: "CLIENT|REPLY",
        write: false,
        noscript: true,
    },
    Command {
        name: "CLIENT|SETINFO",
        write: false,
        noscript: true,
    },
    Command {
        name: "CLIENT|SETNAME",
        write: false,
        noscript: true,
    },
    Command {
        name: "CLIENT|TRACKING",
        write: false,
        noscript: true,
    },
    Command {
        name: "CLIENT|TRACKINGINFO",
        write: false,
        noscript: true,
    },
    Command {
        name: "CLIENT|UNBLOCK",
        write: false,
        noscript: true,
    },
    Command {
        name: "CLIENT|UNPAUSE",
        write: false,
        noscript: true,
    },
    Command {
        name: "CLUSTER",
        write: false,
        noscript: false,
    },
    Command {
        name: "CLUSTER|ADDSLOTS",
        write: false,
        noscript: false,
    },
    Command {
        name: "CLUSTER|ADDSLOTSRANGE",
        write: false,
        noscript: false,
    },
    Command {
        name: "CLUSTER|BUMPEPOCH",
        write: false,
        noscript: false,
    },
    Command {
        name: "CLUSTER|COUNT-FAILURE-REPORTS",
        write: false,
        noscript: false,
    },
    Command {
        name: "CLUSTER|COUNTKEYSINSLOT",
        write: false,
        noscript: false,
    },
    Command {
        name: "CLUSTER|DELSLOTS",
        write: false,
        noscript: false,
    },
    Command {
        name: "CLUSTER|DELSLOTSRANGE",
        write: false,
        noscript: false,
    },
    Command {
        name: "CLUSTER|FAILOVER",
        write: false,
        noscript: false,
    },
    Command {
        name: "CLUSTER|FLUSHSLOTS",
        write: false,
        noscript: false,
    },
    Command {
        name: "CLUSTER|FORGET",
        write: false,
        noscript: false,
    },
    Command {
        name: "CLUSTER|GETKEYSINSLOT",
        write: false,
        noscript: false,
    },
    Command {
        name: "CLUSTER|HELP",
        write: false,
        noscript: false,
    },
    Command {
        name: "CLUSTER|INFO",
        write: false,
        noscript: false,
    },
    Command {
        name: "CLUSTER|KEYSLOT",
        write: false,
        noscript: false,
    },
    Command {
        name: "CLUSTER|LINKS",
        write: false,
        noscript: false,
    },
    Command {
        name: "CLUSTER|MEET",
        write: false,
        noscript: false,
    },
    Command {
        name: "CLUSTER|MYID",
        write: false,
        noscript: false,
    },
    Command {
        name: "CLUSTER|MYSHARDID",
        write: false,
        noscript: false,
    },
    Command {
        name: "CLUSTER|NODES",
        write: false,
        noscript: false,
    },
    Command {
        name: "CLUSTER|REPLICAS",
        write: false,
        noscript: false,
    },
    Command {
        name: "CLUSTER|REPLICATE",
        write: false,
        noscript: false,
    },
    Command {
        name: "CLUSTER|RESET",
        write: false,
        noscript: true,
    },
    Command {
        name: "CLUSTER|SAVECONFIG",
        write: false,
        noscript: false,
    },
    Command {
        name: "CLUSTER|SET-CONFIG-EPOCH",
        write: false,
        noscript: false,
    },
    Command {
        name: "CLUSTER|SETSLOT",
        write: false,
        noscript: false,
    },
    Command {
        name: "CLUSTER|SHARDS",
        write: false,
        noscript: false,
    },
    Command {
        name: "CLUSTER|SLAVES",
        write: false,
        noscript: false,
    },
    Command {
        name: "CLUSTER|SLOT-STATS",
        write: false,
        noscript: false,
    },
    Command {
        name: "CLUSTER|SLOTS",
        write: false,
        noscript: false,
    },
    Command {
        name: "COMMAND",
        write: false,
        noscript: false,
    },
    Command {
        name: "COMMAND|COUNT",
        write: false,
        noscript: false,
    },
    Command {
        name: "COMMAND|DOCS",
        write: false,
        noscript: false,
    },
    Command {
        name: "COMMAND|GETKEYS",
        write: false,
        noscript: false,
    },
    Command {
        name: "COMMAND|GETKEYSANDFLAGS",
        write: false,
        noscript: false,
    },
    Command {
        name: "COMMAND|HELP",
        write: false,
        noscript: false,
    },
    Command {
        name: "COMMAND|INFO",
        write: false,
        noscript: false,
    },
    Command {
        name: "COMMAND|LIST",
        write: false,
        noscript: false,
    },
    Command {
        name: "CONFIG",
        write: false,
        noscript: false,
    },
    Command {
        name: "CONFIG|GET",
        write: false,
        noscript: true,
    },
    Command {
        name: "CONFIG|HELP",
        write: false,
        noscript: false,
    },
    Command {
        name: "CONFIG|RESETSTAT",
        write: false,
        noscript: true,
    },
    Command {
        name: "CONFIG|REWRITE",
        write: false,
        noscript: true,
    },
    Command {
        name: "CONFIG|SET",
        write: false,
        noscript: true,
    },
    Command {
        name: "COPY",
        write: true,
        noscript: false,
    },
    Command {
        name: "DBSIZE",
        write: false,
        noscript: false,
    },
    Command {
        name: "DEBUG",
        write: false,
        noscript: true,
    },
    Command {
        name: "DECR",
        write: true,
        noscript: false,
    },
    Command {
        name: "DECRBY",
        write: true,
        noscript: false,
    },
    Command {
        name: "DEL",
        write: true,
        noscript: false,
    },
    Command {
        name: "DISCARD",
        write: false,
        noscript: true,
    },
    Command {
        name: "DUMP",
        write: false,
        noscript: false,
    },
    Command {
        name: "ECHO",
        write: false,
        noscript: false,
    },
    Command {
        name: "EVAL",
        write: false,
        noscript: true,
    },
    Command {
        name: "EVALSHA",
        write: false,
        noscript: true,
    },
    Command {
        name: "EVALSHA_RO",
        write: false,
        noscript: true,
    },
    Command {
        name: "EVAL_RO",
        write: false,
        noscript: true,
    },
    Command {
        name: "EXEC",
        write: false,
        noscript: true,
    },
    Command {
        name: "EXISTS",
        write: false,
        noscript: false,
    },
    Command {
        name: "EXPIRE",
        write: true,
        noscript: false,
    },
    Command {
        name: "EXPIREAT",
        write: true,
        noscript: false,
    },
    Command {
        name: "EXPIRETIME",
        write: false,
        noscript: false,
    },
    Command {
        name: "FAILOVER",
        write: false,
        noscript: true,
    },
    Command {
        name: "FCALL",
        write: false,
        noscript: true,
    },
    Command {
        name: "FCALL_RO",
        write: false,
        noscript: true,
    },
    Command {
        name: "FLUSHALL",
        write: true,
        noscript: false,
    },
    Command {
        name: "FLUSHDB",
        write: true,
        noscript: false,
    },
    Command {
        name: "FUNCTION",
        write: false,
        noscript: false,
    },
    Command {
        name: "FUNCTION|DELETE",
        write: true,
        noscript: true,
    },
    Command {
        name: "FUNCTION|DUMP",
        write: false,
        noscript: true,
    },
    Command {
        name: "FUNCTION|FLUSH",
        write: true,
        noscript: true,
    },
    Command {
        name: "FUNCTION|HELP",
        write: false,
        noscript: false,
    },
    Command {
        name: "FUNCTION|KILL",
        write: false,
        noscript: true,
    },
    Command {
        name: "FUNCTION|LIST",
        write: false,
        noscript: true,
    },
    Command {
        name: "FUNCTION|LOAD",
        write: true,
        noscript: true,
    },
    Command {
        name: "FUNCTION|RESTORE",
        write: true,
        noscript: true,
    },
    Command {
        name: "FUNCTION|STATS",
        write: false,
        noscript: true,
    },
    Command {
        name: "GEOADD",
        write: true,
        noscript: false,
    },
    Command {
        name: "GEODIST",
        write: false,
        noscript: false,
    },
    Command {
        name: "GEOHASH",
        write: false,
        noscript: false,
    },
    Command {
        name: "GEOPOS",
        write: false,
        noscript: false,
    },
    Command {
        name: "GEORADIUS",
        write: true,
        noscript: false,
    },
    Command {
        name: "GEORADIUSBYMEMBER",
        write: true,
        noscript: false,
    },
    Command {
        name: "GEORADIUSBYMEMBER_RO",
        write: false,
        noscript: false,
    },
    Command {
        name: "GEORADIUS_RO",
        write: false,
        noscript: false,
    },
    Command {
        name: "GEOSEARCH",
        write: false,
        noscript: false,
    },
    Command {
        name: "GEOSEARCHSTORE",
        write: true,
        noscript: false,
    },
    Command {
        name: "GET",
        write: false,
        noscript: false,
    },
    Command {
        name: "GETBIT",
        write: false,
        noscript: false,
    },
    Command {
        name: "GETDEL",
        write: true,
        noscript: false,
    },
    Command {
        name: "GETEX",
        write: true,
        noscript: false,
    },
    Command {
        name: "GETRANGE",
        write: false,
        noscript: false,
    },
    Command {
        name: "GETSET",
        write: true,
        noscript: false,
    },
    Command {
        name: "HDEL",
        write: true,
        noscript: false,
    },
    Command {
        name: "HELLO",
        write: false,
        noscript: true,
    },
    Command {
        name: "HEXISTS",
        write: false,
        noscript: false,
    },
    Command {
        name: "HEXPIRE",
        write: true,
        noscript: false,
    },
    Command {
        name: "HEXPIREAT",
        write: true,
        noscript: false,
    },
    Command {
        name: "HEXPIRETIME",
        write: false,
        noscript: false,
    },
    Command {
        name: "HGET",
        write: false,
        noscript: false,
    },
    Command {
        name: "HGETALL",
        write: false,
        noscript: false,
    },
    Command {
        name: "HGETDEL",
        write: true,
        noscript: false,
    },
    Command {
        name: "HGETEX",
        write: true,
        noscript: false,
    },
    Command {
        name: "HINCRBY",
        write: true,
        noscript: false,
    },
    Command {
        name: "HINCRBYFLOAT",
        write: true,
        noscript: false,
    },
    Command {
        name: "HKEYS",
        write: false,
        noscript: false,
    },
    Command {
        name: "HLEN",
        write: false,
        noscript: false,
    },
    Command {
        name: "HMGET",
        write: false,
        noscript: false,
    },
    Command {
        name: "HMSET",
        write: true,
        noscript: false,
    },
    Command {
        name: "HPERSIST",
        write: true,
        noscript: false,
    },
    Command {
        name: "HPEXPIRE",
        write: true,
        noscript: false,
    },
    Command {
        name: "HPEXPIREAT",
        write: true,
        noscript: false,
    },
    Command {
        name: "HPEXPIRETIME",
        write: false,
        noscript: false,
    },
    Command {
        name: "HPTTL",
        write: false,
        noscript: false,
    },
    Command {
        name: "HRANDFIELD",
        write: false,
        noscript: false,
    },
    Command {
        name: "HSCAN",
        write: false,
        noscript: false,
    },
    Command {
        name: "HSET",
        write: true,
        noscript: false,
    },
    Command {
        name: "HSETEX",
        write: true,
        noscript: false,
    },
    Command {
        name: "HSETNX",
        write: true,
        noscript: false,
    },
    Command {
        name: "HSTRLEN",
        write: false,
        noscript: false,
    },
    Command {
        name: "HTTL",
        write: false,
        noscript: false,
    },
    Command {
        name: "HVALS",
        write: false,
        noscript: false,
    },
    Command {
        name: "INCR",
        write: true,
        noscript: false,
    },
    Command {
        name: "INCRBY",
        write: true,
        noscript: false,
    },
    Command {
        name: "INCRBYFLOAT",
        write: true,
        noscript: false,
    },
    Command {
        name: "INFO",
        write: false,
        noscript: false,
    },
    Command {
        name: "KEYS",
        write: false,
        noscript: false,
    },
    Command {
        name: "LASTSAVE",
        write: false,
        noscript: false,
    },
    Command {
        name: "LATENCY",
        write: false,
        noscript: false,
    },
    Command {
        name: "LATENCY|DOCTOR",
        write: false,
        noscript: true,
    },
    Command {
        name: "LATENCY|GRAPH",
        write: false,
        noscript: true,
    },
    Command {
        name: "LATENCY|HELP",
        write: false,
        noscript: false,
    },
    Command {
        name: "LATENCY|HISTOGRAM",
        write: false,
        noscript: true,
    },
    Command {
        name: "LATENCY|HISTORY",
        write: false,
        noscript: true,
    },
    Command {
        name: "LATENCY|LATEST",
        write: false,
        noscript: true,
    },
    Command {
        name: "LATENCY|RESET",
        write: false,
        noscript: true,
    },
    Command {
        name: "LCS",
        write: false,
        noscript: false,
    },
    Command {
        name: "LINDEX",
        write: false,
        noscript: false,
    },
    Command {
        name: "LINSERT",
        write: true,
        noscript: false,
    },
    Command {
        name: "LLEN",
        write: false,
        noscript: false,
    },
    Command {
        name: "LMOVE",
        write: true,
        noscript: false,
    },
    Command {
        name: "LMPOP",
        write: true,
        noscript: false,
    },
    Command {
        name: "LOLWUT",
        write: false,
        noscript: false,
    },
    Command {
        name: "LPOP",
        write: true,
        noscript: false,
    },
    Command {
        name: "LPOS",
        write: false,
        noscript: false,
    },
    Command {
        name: "LPUSH",
        write: true,
        noscript: false,
    },
    Command {
        name: "LPUSHX",
        write: true,
        noscript: false,
    },
    Command {
        name: "LRANGE",
        write: false,
        noscript: false,
    },
    Command {
        name: "LREM",
        write: true,
        noscript: false,
    },
    Command {
        name: "LSET",
        write: true,
        noscript: false,
    },
    Command {
        name: "LTRIM",
        write: true,
        noscript: false,
    },
    Command {
        name: "MEMORY",
        write: false,
        noscript: false,
    },
    Command {
        name: "MEMORY|DOCTOR",
        write: false,
        noscript: false,
    },
    Command {
        name: "MEMORY|HELP",
        write: false,
        noscript: false,
    },
    Command {
        name: "MEMORY|MALLOC-STATS",
        write: false,
        noscript: false,
    },
    Command {
        name: "MEMORY|PURGE",
        write: false,
        noscript: false,
    },
    Command {
        name: "MEMORY|STATS",
        write: false,
        noscript: false,
    },
    Command {
        name: "MEMORY|USAGE",
        write: false,
        noscript: false,
    },
    Command {
        name: "MGET",
        write: false,
        noscript: false,
    },
    Command {
        name: "MIGRATE",
        write: true,
        noscript: false,
    },
    Command {
        name: "MODULE",
        write: false,
        noscript: false,
    },
    Command {
        name: "MODULE|HELP",
        write: false,
        noscript: false,
    },
    Command {
        name: "MODULE|LIST",
        write: false,
        noscript: true,
    },
    Command {
        name: "MODULE|LOAD",
        write: false,
        noscript: true,
    },
    Command {
        name: "MODULE|LOADEX",
        write: false,
        noscript: true,
    },
    Command {
        name: "MODULE|UNLOAD",
        write: false,
        noscript: true,
    },
    Command {
        name: "MONITOR",
        write: false,
        noscript: true,
    },
    Command {
        name: "MOVE",
        write: true,
        noscript: false,
    },
    Command {
        name: "MSET",
        write: true,
        noscript: false,
    },
    Command {
        name: "MSETNX",
        write: true,
        noscript: false,
    },
    Command {
        name: "MULTI",
        write: false,
        noscript: true,
    },
    Command {
        name: "OBJECT",
        write: false,
        noscript: false,
    },
    Command {
        name: "OBJECT|ENCODING",
        write: false,
        noscript: false,
    },
    Command {
        name: "OBJECT|FREQ",
        write: false,
        noscript: false,
    },
    Command {
        name: "OBJECT|HELP",
        write: false,
        noscript: false,
    },
    Command {
        name: "OBJECT|IDLETIME",
        write: false,
        noscript: false,
    },
    Command {
        name: "OBJECT|REFCOUNT",
        write: false,
        noscript: false,
    },
    Command {
        name: "PERSIST",
        write: true,
        noscript: false,
    },
    Command {
        name: "PEXPIRE",
        write: true,
        noscript: false,
    },
    Command {
        name: "PEXPIREAT",
        write: true,
        noscript: false,
    },
    Command {
        name: "PEXPIRETIME",
        write: false,
        noscript: false,
    },
    Command {
        name: "PFADD",
        write: true,
        noscript: false,
    },
    Command {
        name: "PFCOUNT",
        write: true,
        noscript: false,
    },
    Command {
        name: "PFDEBUG",
        write: true,
        noscript: false,
    },
    Command {
        name: "PFMERGE",
        write: true,
        noscript: false,
    },
    Command {
        name: "PFSELFTEST",
        write: false,
        noscript: false,
    },
    Command {
        name: "PING",
        write: false,
        noscript: false,
    },
    Command {
        name: "PSETEX",
        write: true,
        noscript: false,
    },
    Command {
        name: "PSUBSCRIBE",
        write: false,
        noscript: true,
    },
    Command {
        name: "PSYNC",
        write: false,
        noscript: true,
    },
    Command {
        name: "PTTL",
        write: false,
        noscript: false,
    },
    Command {
        name: "PUBLISH",
        write: true,
        noscript: false,
    },
    Command {
        name: "PUBSUB",
        write: false,
        noscript: false,
    },
    Command {
        name: "PUBSUB|CHANNELS",
        write: false,
        noscript: false,
    },
    Command {
        name: "PUBSUB|HELP",
        write: false,
        noscript: false,
    },
    Command {
        name: "PUBSUB|NUMPAT",
        write: false,
        noscript: false,
    },
    Command {
        name: "PUBSUB|NUMSUB",
        write: false,
        noscript: false,
    },
    Command {
        name: "PUBSUB|SHARDCHANNELS",
        write: false,
        noscript: false,
    },
    Command {
        name: "PUBSUB|SHARDNUMSUB",
        write: false,
        noscript: false,
    },
    Command {
        name: "PUNSUBSCRIBE",
        write: false,
        noscript: true,
    },
    Command {
        name: "QUIT",
        write: false,
        noscript: true,
    },
    Command {
        name: "RANDOMKEY",
        write: false,
        noscript: false,
    },
    Command {
        name: "READONLY",
        write: false,
        noscript: false,
    },
    Command {
        name: "READWRITE",
        write: false,
        noscript: false,
    },
    Command {
        name: "RENAME",
        write: true,
        noscript: false,
    },
    Command {
        name: "RENAMENX",
        write: true,
        noscript: false,
    },
    Command {
        name: "REPLCONF",
        write: false,
        noscript: true,
    },
    Command {
        name: "REPLICAOF",
        write: false,
        noscript: true,
    },
    Command {
        name: "RESET",
        write: false,
        noscript: true,
    },
    Command {
        name: "RESTORE",
        write: true,
        noscript: false,
    },
    Command {
        name: "RESTORE-ASKING",
        write: true,
        noscript: false,
    },
    Command {
        name: "ROLE",
        write: false,
        noscript: true,
    },
    Command {
        name: "RPOP",
        write: true,
        noscript: false,
    },
    Command {
        name: "RPOPLPUSH",
        write: true,
        noscript: false,
    },
    Command {
        name: "RPUSH",
        write: true,
        noscript: false,
    },
    Command {
        name: "RPUSHX",
        write: true,
        noscript: false,
    },
    Command {
        name: "SADD",
        write: true,
        noscript: false,
    },
    Command {
        name: "SAVE",
        write: false,
        noscript: true,
    },
    Command {
        name: "SCAN",
        write: false,
        noscript: false,
    },
    Command {
        name: "SCARD",
        write: false,
        noscript: false,
    },
    Command {
        name: "SCRIPT",
        write: false,
        noscript: false,
    },
    Command {
        name: "SCRIPT|DEBUG",
        write: false,
        noscript: true,
    },
    Command {
        name: "SCRIPT|EXISTS",
        write: false,
        noscript: true,
    },
    Command {
        name: "SCRIPT|FLUSH",
        write: false,
        noscript: true,
    },
    Command {
        name: "SCRIPT|HELP",
        write: false,
        noscript: false,
    },
    Command {
        name: "SCRIPT|KILL",
        write: false,
        noscript: true,
    },
    Command {
        name: "SCRIPT|LOAD",
        write: false,
        noscript: true,
    },
    Command {
        name: "SDIFF",
        write: false,
        noscript: false,
    },
    Command {
        name: "SDIFFSTORE",
        write: true,
        noscript: false,
    },
    Command {
        name: "SELECT",
        write: false,
        noscript: false,
    },
    Command {
        name: "SET",
        write: true,
        noscript: false,
    },
    Command {
        name: "SETBIT",
        write: true,
        noscript: false,
    },
    Command {
        name: "SETEX",
        write: true,
        noscript: false,
    },
    Command {
        name: "SETNX",
        write: true,
        noscript: false,
    },
    Command {
        name: "SETRANGE",
        write: true,
        noscript: false,
    },
    Command {
        name: "SHUTDOWN",
        write: false,
        noscript: true,
    },
    Command {
        name: "SINTER",
        write: false,
        noscript: false,
    },
    Command {
        name: "SINTERCARD",
        write: false,
        noscript: false,
    },
    Command {
        name: "SINTERSTORE",
        write: true,
        noscript: false,
    },
    Command {
        name: "SISMEMBER",
        write: false,
        noscript: false,
    },
    Command {
        name: "SLAVEOF",
        write: false,
        noscript: true,
    },
    Command {
        name: "SLOWLOG",
        write: false,
        noscript: false,
    },
    Command {
        name: "SLOWLOG|GET",
        write: false,
        noscript: false,
    },
    Command {
        name: "SLOWLOG|HELP",
        write: false,
        noscript: false,
    },
    Command {
        name: "SLOWLOG|LEN",
        write: false,
        noscript: false,
    },
    Command {
        name: "SLOWLOG|RESET",
        write: false,
        noscript: false,
    },
    Command {
        name: "SMEMBERS",
        write: false,
        noscript: false,
    },
    Command {
        name: "SMISMEMBER",
        write: false,
        noscript: false,
    },
    Command {
        name: "SMOVE",
        write: true,
        noscript: false,
    },
    Command {
        name: "SORT",
        write: true,
        noscript: false,
    },
    Command {
        name: "SORT_RO",
        write: false,
        noscript: false,
    },
    Command {
        name: "SPOP",
        write: true,
        noscript: false,
    },
    Command {
        name: "SPUBLISH",
        write: true,
        noscript: false,
    },
    Command {
        name: "SRANDMEMBER",
        write: false,
        noscript: false,
    },
    Command {
        name: "SREM",
        write: true,
        noscript: false,
    },
    Command {
        name: "SSCAN",
        write: false,
        noscript: false,
    },
    Command {
        name: "SSUBSCRIBE",
        write: false,
        noscript: true,
    },
    Command {
        name: "STRLEN",
        write: false,
        noscript: false,
    },
    Command {
        name: "SUBSCRIBE",
        write: false,
        noscript: true,
    },
    Command {
        name: "SUBSTR",
        write: false,
        noscript: false,
    },
    Command {
        name: "SUNION",
        write: false,
        noscript: false,
    },
    Command {
        name: "SUNIONSTORE",
        write: true,
        noscript: false,
    },
    Command {
        name: "SUNSUBSCRIBE",
        write: false,
        noscript: true,
    },
    Command {
        name: "SWAPDB",
        write: true,
        noscript: false,
    },
    Command {
        name: "SYNC",
        write: false,
        noscript: true,
    },
    Command {
        name: "TIME",
        write: false,
        noscript: false,
    },
    Command {
        name: "TOUCH",
        write: false,
        noscript: false,
    },
    Command {
        name: "TTL",
        write: false,
        noscript: false,
    },
    Command {
        name: "TYPE",
        write: false,
        noscript: false,
    },
    Command {
        name: "UNLINK",
        write: true,
        noscript: false,
    },
    Command {
        name: "UNSUBSCRIBE",
        write: false,
        noscript: true,
    },
    Command {
        name: "UNWATCH",
        write: false,
        noscript: true,
    },
    Command {
        name: "VADD",
        write: true,
        noscript: false,
    },
    Command {
        name: "VCARD",
        write: false,
        noscript: false,
    },
    Command {
        name: "VDIM",
        write: false,
        noscript: false,
    },
    Command {
        name: "VEMB",
        write: false,
        noscript: false,
    },
    Command {
        name: "VGETATTR",
        write: false,
        noscript: false,
    },
    Command {
        name: "VINFO",
        write: false,
        noscript: false,
    },
    Command {
        name: "VLINKS",
        write: false,
        noscript: false,
    },
    Command {
        name: "VRANDMEMBER",
        write: false,
        noscript: false,
    },
    Command {
        name: "VREM",
        write: true,
        noscript: false,
    },
    Command {
        name: "VSETATTR",
        write: true,
        noscript: false,
    },
    Command {
        name: "VSIM",
        write: false,
        noscript: false,
    },
    Command {
        name: "WAIT",
        write: false,
        noscript: true,
    },
    Command {
        name: "WAITAOF",
        write: false,
        noscript: true,
    },
    Command {
        name: "WATCH",
        write: false,
        noscript: true,
    },
    Command {
        name: "XACK",
        write: true,
        noscript: false,
    },
    Command {
        name: "XACKDEL",
        write: true,
        noscript: false,
    },
    Command {
        name: "XADD",
        write: true,
        noscript: false,
    },
    Command {
        name: "XAUTOCLAIM",
        write: true,
        noscript: false,
    },
    Command {
        name: "XCLAIM",
        write: true,
        noscript: false,
    },
    Command {
        name: "XDEL",
        write: true,
        noscript: false,
    },
    Command {
        name: "XDELEX",
        write: true,
        noscript: false,
    },
    Command {
        name: "XGROUP",
        write: false,
        noscript: false,
    },
    Command {
        name: "XGROUP|CREATE",
        write: true,
        noscript: false,
    },
    Command {
        name: "XGROUP|CREATECONSUMER",
        write: true,
        noscript: false,
    },
    Command {
        name: "XGROUP|DELCONSUMER",
        write: true,
        noscript: false,
    },
    Command {
        name: "XGROUP|DESTROY",
        write: true,
        noscript: false,
    },
    Command {
        name: "XGROUP|HELP",
        write: false,
        noscript: false,
    },
    Command {
        name: "XGROUP|SETID",
        write: true,
        noscript: false,
    },
    Command {
        name: "XINFO",
        write: false,
        noscript: false,
    },
    Command {
        name: "XINFO|CONSUMERS",
        write: false,
        noscript: false,
    },
    Command {
        name: "XINFO|GROUPS",
        write: false,
        noscript: false,
    },
    Command {
        name: "XINFO|HELP",
        write: false,
        noscript: false,
    },
    Command {
        name: "XINFO|STREAM",
        write: false,
        noscript: false,
    },
    Command {
        name: "XLEN",
        write: false,
        noscript: false,
    },
    Command {
        name: "XPENDING",
        write: false,
        noscript: false,
    },
    Command {
        name: "XRANGE",
        write: false,
        noscript: false,
    },
    Command {
        name: "XREAD",
        write: false,
        noscript: false,
    },
    Command {
        name: "XREADGROUP",
        write: true,
        noscript: false,
    },
    Command {
        name: "XREVRANGE",
        write: false,
        noscript: false,
    },
    Command {
        name: "XSETID",
        write: true,
        noscript: false,
    },
    Command {
        name: "XTRIM",
        write: true,
        noscript: false,
    },
    Command {
        name: "ZADD",
        write: true,
        noscript: false,
    },
    Command {
        name: "ZCARD",
        write: false,
        noscript: false,
    },
    Command {
        name: "ZCOUNT",
        write: false,
        noscript: false,
    },
    Command {
        name: "ZDIFF",
        write: false,
        noscript: false,
    },
    Command {
        name: "ZDIFFSTORE",
        write: true,
        noscript: false,
    },
    Command {
        name: "ZINCRBY",
        write: true,
        noscript: false,
    },
    Command {
        name: "ZINTER",
        write: false,
        noscript: false,
    },
    Command {
        name: "ZINTERCARD",
        write: false,
        noscript: false,
    },
    Command {
        name: "ZINTERSTORE",
        write: true,
        noscript: false,
    },
    Command {
        name: "ZLEXCOUNT",
        write: false,
        noscript: false,
    },
    Command {
        name: "ZMPOP",
        write: true,
        noscript: false,
    },
    Command {
        name: "ZMSCORE",
        write: false,
        noscript: false,
    },
    Command {
        name: "ZPOPMAX",
        write: true,
        noscript: false,
    },
    Command {
        name: "ZPOPMIN",
        write: true,
        noscript: false,
    },
    Command {
        name: "ZRANDMEMBER",
        write: false,
        noscript: false,
    },
    Command {
        name: "ZRANGE",
        write: false,
        noscript: false,
    },
    Command {
        name: "ZRANGEBYLEX",
        write: false,
        noscript: false,
    },
    Command {
        name: "ZRANGEBYSCORE",
        write: false,
        noscript: false,
    },
    Command {
        name: "ZRANGESTORE",
        write: true,
        noscript: false,
    },
    Command {
        name: "ZRANK",
        write: false,
        noscript: false,
    },
    Command {
        name: "ZREM",
        write: true,
        noscript: false,
    },
    Command {
        name: "ZREMRANGEBYLEX",
        write: true,
        noscript: false,
    },
    Command {
        name: "ZREMRANGEBYRANK",
        write: true,
        noscript: false,
    },
    Command {
        name: "ZREMRANGEBYSCORE",
        write: true,
        noscript: false,
    },
    Command {
        name: "ZREVRANGE",
        write: false,
        noscript: false,
    },
    Command {
        name: "ZREVRANGEBYLEX",
        write: false,
        noscript: false,
    },
    Command {
        name: "ZREVRANGEBYSCORE",
        write: false,
        noscript: false,
    },
    Command {
        name: "ZREVRANK",
        write: false,
        noscript: false,
    },
    Command {
        name: "ZSCAN",
        write: false,
        noscript: false,
    },
    Command {
        name: "ZSCORE",
        write: false,
        noscript: false,
    },
    Command {
        name: "ZUNION",
        write: false,
        noscript: false,
    },
    Command {
        name: "ZUNIONSTORE",
        write: true,
        noscript: false,
    },
];

/// Looks a command up by name, ignoring case.
pub fn find(name: &str) -> Option<&'static Command> {
    let upper = name.to_ascii_uppercase();
    COMMANDS
        .binary_search_by(|c| c.name.cmp(upper.as_str()))
        .ok()
        .map(|i| &COMMANDS[i])
}

#[cfg(test)]
mod tests {
    use super::{COMMANDS, find};

    #[test]
    fn table_is_sorted_for_binary_search() {
        assert!(COMMANDS.windows(2).all(|w| w[0].name < w[1].name));
    }

    #[test]
    fn lookup_ignores_case_and_knows_flags() {
        assert!(find("set").is_some_and(|c| c.write && !c.noscript));
        assert!(find("GET").is_some_and(|c| !c.write));
        assert!(find("multi").is_some_and(|c| c.noscript));
        assert!(find("SLEEP").is_none());
        assert!(find("SCRIPT|FLUSH").is_some_and(|c| c.noscript));
    }
}
