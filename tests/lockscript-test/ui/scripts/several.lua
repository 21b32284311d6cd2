#!lua flags=no-writes
-- three problems at once: an unknown command, a write, and ARGV[2] unused by Rust
redis.call("NOPE", KEYS[1])
redis.call("DEL", KEYS[1])
return ARGV[2]
