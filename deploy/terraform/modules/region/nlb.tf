# SIP only. An NLB listener serves one port (TCP_UDP covers UDP and TCP on that port), so
# the RTP range does not go through it: RTP goes to each node's public address, which the
# bridge advertises in SDP (see user_data.sh.tftpl and README.md).
resource "aws_lb" "sip" {
  name                             = "${var.name}-sip"
  load_balancer_type               = "network"
  internal                         = false
  subnets                          = values(var.bridge_subnet_ids)
  enable_cross_zone_load_balancing = true
  tags                             = local.common_tags
}

resource "aws_lb_target_group" "sip" {
  for_each             = toset([for p in local.sip_ports : tostring(p)])
  name                 = "${var.name}-sip-${each.key}"
  port                 = tonumber(each.key)
  protocol             = each.key == "5060" ? "TCP_UDP" : "TCP"
  target_type          = "instance"
  vpc_id               = var.vpc_id
  deregistration_delay = 30
  preserve_client_ip   = "true"

  # Healthy only while the bridge reports /ready (models pre-warmed, alerts have a path).
  health_check {
    protocol            = "HTTP"
    port                = tostring(local.http_port)
    path                = "/ready"
    matcher             = "200"
    interval            = 10
    timeout             = 5
    healthy_threshold   = 3
    unhealthy_threshold = 2
  }

  stickiness {
    type    = "source_ip"
    enabled = true
  }

  tags = local.common_tags
}

resource "aws_lb_listener" "sip" {
  for_each          = aws_lb_target_group.sip
  load_balancer_arn = aws_lb.sip.arn
  port              = each.value.port
  # 5061 is TLS passed through as TCP: the bridge terminates it, so it sees the client's
  # certificate (mutual TLS, sip_trusted_peers) and writes its own address in Via/Contact.
  protocol = each.value.protocol

  default_action {
    type             = "forward"
    target_group_arn = each.value.arn
  }

  tags = local.common_tags
}
