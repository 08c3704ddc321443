# Offline checks of one regional stack (terraform test, mocked AWS provider: no
# credentials, no API calls). tests/deploy/test_terraform.py runs them.

mock_provider "aws" {
  mock_data "aws_region" {
    defaults = { name = "eu-west-1" }
  }
  mock_data "aws_partition" {
    defaults = { partition = "aws" }
  }
  mock_data "aws_vpc" {
    defaults = { cidr_block = "10.20.0.0/16" }
  }
  mock_data "aws_secretsmanager_secret_version" {
    defaults = { secret_string = "mock-auth-token-0123456789abcdef" }
  }
  mock_resource "aws_iam_instance_profile" {
    defaults = { arn = "arn:aws:iam::111111111111:instance-profile/mock" }
  }
  mock_resource "aws_lb" {
    defaults = { arn = "arn:aws:elasticloadbalancing:eu-west-1:111111111111:loadbalancer/net/mock/0123456789abcdef" }
  }
  mock_resource "aws_launch_template" {
    defaults = { id = "lt-0123456789abcdef0", latest_version = 1 }
  }
  mock_resource "aws_lb_target_group" {
    defaults = { arn = "arn:aws:elasticloadbalancing:eu-west-1:111111111111:targetgroup/mock/0123456789abcdef" }
  }
  mock_resource "aws_autoscaling_group" {
    defaults = { arn = "arn:aws:autoscaling:eu-west-1:111111111111:autoScalingGroup:mock" }
  }
  mock_resource "aws_elasticache_replication_group" {
    defaults = { primary_endpoint_address = "master.mock.cache.amazonaws.com" }
  }
}

variables {
  name                        = "cs"
  vpc_id                      = "vpc-0a1b2c3d"
  bridge_subnet_ids           = { "eu-west-1a" = "subnet-0a", "eu-west-1b" = "subnet-0b" }
  redis_subnet_ids            = ["subnet-1a", "subnet-1b"]
  ami_id                      = "ami-0123abcd"
  container_image             = "111111111111.dkr.ecr.eu-west-1.amazonaws.com/callshield:1.0-gpu"
  redis_auth_token_secret_arn = "arn:aws:secretsmanager:eu-west-1:111111111111:secret:cs-redis-AbCdEf"
  sip_tls_secret_arn          = "arn:aws:secretsmanager:eu-west-1:111111111111:secret:cs-sip-tls-AbCdEf"
  sip_allowed_cidrs           = ["198.51.100.0/24", "203.0.113.0/24"]
  drain_timeout_s             = 3600
}

run "stack" {
  command = apply

  # SIP through the NLB: one TCP_UDP listener on 5060, TLS passed through on 5061.
  assert {
    condition     = aws_lb.sip.load_balancer_type == "network" && aws_lb_listener.sip["5060"].protocol == "TCP_UDP" && aws_lb_listener.sip["5061"].protocol == "TCP"
    error_message = "NLB listeners: 5060 TCP_UDP and 5061 TCP (TLS passthrough)"
  }
  assert {
    condition     = alltrue([for tg in aws_lb_target_group.sip : tg.health_check[0].path == "/ready" && tg.health_check[0].port == "9464" && tg.health_check[0].protocol == "HTTP"])
    error_message = "NLB health checks on the bridge's /ready"
  }
  # RTP never through the NLB: a security-group range to the nodes instead.
  assert {
    condition     = length([for l in aws_lb_listener.sip : l if l.port >= 20000]) == 0 && aws_vpc_security_group_ingress_rule.rtp["198.51.100.0/24"].from_port == 20000 && aws_vpc_security_group_ingress_rule.rtp["198.51.100.0/24"].to_port == 20999 && aws_vpc_security_group_ingress_rule.rtp["198.51.100.0/24"].ip_protocol == "udp"
    error_message = "RTP range opened on the nodes' security group, not on the NLB"
  }
  assert {
    condition     = aws_launch_template.bridge.network_interfaces[0].associate_public_ip_address == "true" && aws_launch_template.bridge.metadata_options[0].http_tokens == "required"
    error_message = "nodes get a public address for RTP; IMDSv2 only"
  }
  # One auto-scaling group per AZ with both lifecycle hooks from the first instance.
  assert {
    condition     = length(aws_autoscaling_group.bridge) == 2 && alltrue([for az, g in aws_autoscaling_group.bridge : g.vpc_zone_identifier == toset([var.bridge_subnet_ids[az]])])
    error_message = "one auto-scaling group per availability zone, each in its own subnet"
  }
  assert {
    condition = alltrue([for g in aws_autoscaling_group.bridge :
      length([for h in g.initial_lifecycle_hook : h if h.lifecycle_transition == "autoscaling:EC2_INSTANCE_LAUNCHING" && h.default_result == "ABANDON"]) == 1 &&
      length([for h in g.initial_lifecycle_hook : h if h.lifecycle_transition == "autoscaling:EC2_INSTANCE_TERMINATING" && h.heartbeat_timeout == 3900]) == 1 &&
    g.health_check_type == "ELB"])
    error_message = "LAUNCHING hook (abandon if never ready), TERMINATING hook waiting the drain + 300 s, ELB health"
  }
  # The user data: advertised address from IMDS, launch completed only after /ready,
  # drain (SIGTERM via docker stop) before the TERMINATING action completes.
  assert {
    condition = alltrue([for s in [
      "PUBLIC_IP=$(md public-ipv4)",
      "--advertised-address \"$PUBLIC_IP\"",
      "until curl -sf \"http://127.0.0.1:$HTTP_PORT/ready\"",
      "complete_action 'cs-prewarmed' CONTINUE",
      "autoscaling/target-lifecycle-state",
      "docker stop --time \"$((DRAIN_TIMEOUT_S + 60))\" callshield-bridge",
      "--lifecycle-hook-name 'cs-drained' --lifecycle-action-result CONTINUE",
      "rediss://:$${REDIS_TOKEN}@master.mock.cache.amazonaws.com:6379/0",
      "CALLSHIELD_SIP_TLS_LISTEN=0.0.0.0:5061",
    ] : strcontains(base64decode(aws_launch_template.bridge.user_data), s)])
    error_message = "user data: advertise the public IP, gate on /ready, drain before terminating"
  }
  # Redis: TLS required in transit, encrypted at rest, AUTH token from Secrets Manager.
  assert {
    condition     = aws_elasticache_replication_group.this.transit_encryption_enabled && aws_elasticache_replication_group.this.transit_encryption_mode == "required" && aws_elasticache_replication_group.this.at_rest_encryption_enabled && aws_elasticache_replication_group.this.auth_token == "mock-auth-token-0123456789abcdef" && aws_elasticache_replication_group.this.multi_az_enabled
    error_message = "ElastiCache: TLS, encryption at rest, AUTH token from the secret, Multi-AZ"
  }
  assert {
    condition     = strcontains(aws_iam_role_policy.bridge.policy, "autoscaling:CompleteLifecycleAction") && strcontains(aws_iam_role_policy.bridge.policy, var.redis_auth_token_secret_arn) && !strcontains(aws_iam_role_policy.bridge.policy, "\"*\"")
    error_message = "the node role may finish its lifecycle actions and read its own secrets, nothing wider"
  }
}

run "no_tls_no_5061" {
  command = apply
  variables {
    sip_tls_secret_arn = null
  }
  assert {
    condition     = keys(aws_lb_listener.sip) == ["5060"] && aws_vpc_security_group_ingress_rule.sip_tcp["198.51.100.0/24"].to_port == 5060
    error_message = "without a certificate: no 5061 listener and no 5061 rule"
  }
}

run "rejects_cpu_instances" {
  command = plan
  variables {
    instance_type = "m7i.xlarge"
  }
  expect_failures = [var.instance_type]
}

run "rejects_a_drain_longer_than_a_hook_can_wait" {
  command = plan
  variables {
    drain_timeout_s = 7200
  }
  expect_failures = [var.drain_timeout_s]
}

run "rejects_a_short_redis_token" {
  command = plan
  override_data {
    target = data.aws_secretsmanager_secret_version.redis_auth
    values = { secret_string = "short" }
  }
  expect_failures = [aws_elasticache_replication_group.this]
}
