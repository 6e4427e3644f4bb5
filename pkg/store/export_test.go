package store

// ShardOf lets the external tests check where an entry was written.
var ShardOf = shardOf
