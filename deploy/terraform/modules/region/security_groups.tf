# Bridges: SIP from the NLB (client IP preserved, so the rule names the SBC networks) and
# in-dialog straight to the node (its Contact), RTP straight to the node, /ready and
# /metrics from inside the VPC (the NLB's health checks come from its private addresses).
resource "aws_security_group" "bridge" {
  name        = "${var.name}-bridge"
  description = "CallShield bridge nodes: SIP, RTP, readiness"
  vpc_id      = var.vpc_id
  tags        = local.common_tags
}

resource "aws_vpc_security_group_ingress_rule" "sip_udp" {
  for_each          = toset(var.sip_allowed_cidrs)
  security_group_id = aws_security_group.bridge.id
  description       = "SIP over UDP"
  ip_protocol       = "udp"
  from_port         = 5060
  to_port           = 5060
  cidr_ipv4         = each.value
}

resource "aws_vpc_security_group_ingress_rule" "sip_tcp" {
  for_each          = toset(var.sip_allowed_cidrs)
  security_group_id = aws_security_group.bridge.id
  description       = "SIP over TCP (and TLS on 5061 when configured)"
  ip_protocol       = "tcp"
  from_port         = 5060
  to_port           = local.tls ? 5061 : 5060
  cidr_ipv4         = each.value
}

resource "aws_vpc_security_group_ingress_rule" "rtp" {
  for_each          = toset(var.sip_allowed_cidrs)
  security_group_id = aws_security_group.bridge.id
  description       = "RTP straight to the node's public address (never through the NLB)"
  ip_protocol       = "udp"
  from_port         = var.rtp_ports.from
  to_port           = var.rtp_ports.to
  cidr_ipv4         = each.value
}

resource "aws_vpc_security_group_ingress_rule" "http_from_vpc" {
  security_group_id = aws_security_group.bridge.id
  description       = "NLB health checks on /ready, Prometheus on /metrics"
  ip_protocol       = "tcp"
  from_port         = local.http_port
  to_port           = local.http_port
  cidr_ipv4         = data.aws_vpc.this.cidr_block
}

resource "aws_vpc_security_group_egress_rule" "bridge_all" {
  security_group_id = aws_security_group.bridge.id
  description       = "Redis, Secrets Manager, ECR, Auto Scaling API, RTP/SIP replies"
  ip_protocol       = "-1"
  cidr_ipv4         = "0.0.0.0/0"
}

resource "aws_security_group" "redis" {
  name        = "${var.name}-redis"
  description = "CallShield ElastiCache: 6379 from the bridges and the listed clients"
  vpc_id      = var.vpc_id
  tags        = local.common_tags
}

resource "aws_vpc_security_group_ingress_rule" "redis_from_bridges" {
  security_group_id            = aws_security_group.redis.id
  description                  = "Redis (TLS) from the bridges"
  ip_protocol                  = "tcp"
  from_port                    = 6379
  to_port                      = 6379
  referenced_security_group_id = aws_security_group.bridge.id
}

resource "aws_vpc_security_group_ingress_rule" "redis_from_clients" {
  for_each          = toset(var.redis_client_cidrs)
  security_group_id = aws_security_group.redis.id
  description       = "Redis (TLS) from the dashboard / webhook dispatcher"
  ip_protocol       = "tcp"
  from_port         = 6379
  to_port           = 6379
  cidr_ipv4         = each.value
}
