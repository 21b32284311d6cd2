-- Replaces the value only while it still is the one given (Valkey 8.1+, Redis 8.4+):
-- OK, or nil when it is not.
return redis.call('SET', KEYS[1], ARGV[2], 'IFEQ', ARGV[1])
