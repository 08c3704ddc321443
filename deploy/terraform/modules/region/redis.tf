resource "aws_elasticache_subnet_group" "this" {
  name       = "${var.name}-redis"
  subnet_ids = var.redis_subnet_ids
  tags       = local.common_tags
}

# A primary and a replica in another AZ with automatic failover; TLS required in transit,
# encrypted at rest, AUTH token from Secrets Manager. ElastiCache has no AOF on Redis 7:
# durability is the replica plus daily snapshots, and each bridge's local outbox rides out
# a failover (DESIGN.md section 6).
resource "aws_elasticache_replication_group" "this" {
  replication_group_id       = "${var.name}-redis"
  description                = "CallShield alerts, scores and call state"
  engine                     = "redis"
  engine_version             = "7.1"
  node_type                  = var.redis_node_type
  port                       = 6379
  num_cache_clusters         = 2
  automatic_failover_enabled = true
  multi_az_enabled           = true
  subnet_group_name          = aws_elasticache_subnet_group.this.name
  security_group_ids         = [aws_security_group.redis.id]
  transit_encryption_enabled = true
  transit_encryption_mode    = "required"
  at_rest_encryption_enabled = true
  kms_key_id                 = var.redis_kms_key_arn
  auth_token                 = data.aws_secretsmanager_secret_version.redis_auth.secret_string
  auth_token_update_strategy = "ROTATE"
  snapshot_retention_limit   = 7
  apply_immediately          = false
  tags                       = local.common_tags

  lifecycle {
    precondition {
      condition     = can(regex("^[A-Za-z0-9_-]{16,128}$", data.aws_secretsmanager_secret_version.redis_auth.secret_string))
      error_message = "The Redis AUTH token secret must hold 16-128 letters, digits, - or _ (it goes into a rediss:// URL unescaped)."
    }
  }
}
