data "aws_region" "current" {}

data "aws_partition" "current" {}

data "aws_vpc" "this" {
  id = var.vpc_id
}

data "aws_secretsmanager_secret_version" "redis_auth" {
  secret_id = var.redis_auth_token_secret_arn
}

locals {
  region         = data.aws_region.current.name
  tls            = var.sip_tls_secret_arn != null
  launch_hook    = "${var.name}-prewarmed"
  terminate_hook = "${var.name}-drained"
  http_port      = 9464
  common_tags    = merge(var.tags, { "callshield:stack" = var.name })
  secret_arns    = compact([var.redis_auth_token_secret_arn, var.sip_tls_secret_arn])
  terminate_wait = var.drain_timeout_s + 300
  sip_ports      = local.tls ? [5060, 5061] : [5060]
}
