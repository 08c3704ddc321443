# Offline checks of the whole root (terraform test with mocked AWS providers: no
# credentials, no API calls). tests/deploy/test_terraform.py runs them.
mock_provider "aws" {
  alias = "us_east_1"
  mock_resource "aws_iam_instance_profile" {
    defaults = { arn = "arn:aws:iam::111111111111:instance-profile/mock" }
  }
  mock_resource "aws_lb" {
    defaults = { arn = "arn:aws:elasticloadbalancing:us-east-1:111111111111:loadbalancer/net/mock/0123456789abcdef", dns_name = "mock-nlb.elb.us-east-1.amazonaws.com", zone_id = "ZMOCKNLBUSEAST1" }
  }
  mock_resource "aws_launch_template" {
    defaults = { id = "lt-0123456789abcdef0", latest_version = 1 }
  }
  mock_resource "aws_lb_target_group" {
    defaults = { arn = "arn:aws:elasticloadbalancing:us-east-1:111111111111:targetgroup/mock/0123456789abcdef" }
  }
  mock_resource "aws_autoscaling_group" {
    defaults = { arn = "arn:aws:autoscaling:us-east-1:111111111111:autoScalingGroup:mock" }
  }
  mock_resource "aws_elasticache_replication_group" {
    defaults = { primary_endpoint_address = "master.mock.cache.amazonaws.com" }
  }
  mock_data "aws_region" {
    defaults = { name = "us-east-1" }
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
}

mock_provider "aws" {
  alias = "us_west_2"
  mock_resource "aws_iam_instance_profile" {
    defaults = { arn = "arn:aws:iam::111111111111:instance-profile/mock" }
  }
  mock_resource "aws_lb" {
    defaults = { arn = "arn:aws:elasticloadbalancing:us-west-2:111111111111:loadbalancer/net/mock/0123456789abcdef", dns_name = "mock-nlb.elb.us-west-2.amazonaws.com", zone_id = "ZMOCKNLBUSWEST2" }
  }
  mock_resource "aws_launch_template" {
    defaults = { id = "lt-0123456789abcdef0", latest_version = 1 }
  }
  mock_resource "aws_lb_target_group" {
    defaults = { arn = "arn:aws:elasticloadbalancing:us-west-2:111111111111:targetgroup/mock/0123456789abcdef" }
  }
  mock_resource "aws_autoscaling_group" {
    defaults = { arn = "arn:aws:autoscaling:us-west-2:111111111111:autoScalingGroup:mock" }
  }
  mock_resource "aws_elasticache_replication_group" {
    defaults = { primary_endpoint_address = "master.mock.cache.amazonaws.com" }
  }
  mock_data "aws_region" {
    defaults = { name = "us-west-2" }
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
}

mock_provider "aws" {
  alias = "eu_west_1"
  mock_resource "aws_iam_instance_profile" {
    defaults = { arn = "arn:aws:iam::111111111111:instance-profile/mock" }
  }
  mock_resource "aws_lb" {
    defaults = { arn = "arn:aws:elasticloadbalancing:eu-west-1:111111111111:loadbalancer/net/mock/0123456789abcdef", dns_name = "mock-nlb.elb.eu-west-1.amazonaws.com", zone_id = "ZMOCKNLBEUWEST1" }
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
}

mock_provider "aws" {
  alias = "eu_central_1"
  mock_resource "aws_iam_instance_profile" {
    defaults = { arn = "arn:aws:iam::111111111111:instance-profile/mock" }
  }
  mock_resource "aws_lb" {
    defaults = { arn = "arn:aws:elasticloadbalancing:eu-central-1:111111111111:loadbalancer/net/mock/0123456789abcdef", dns_name = "mock-nlb.elb.eu-central-1.amazonaws.com", zone_id = "ZMOCKNLBEUCENTRAL1" }
  }
  mock_resource "aws_launch_template" {
    defaults = { id = "lt-0123456789abcdef0", latest_version = 1 }
  }
  mock_resource "aws_lb_target_group" {
    defaults = { arn = "arn:aws:elasticloadbalancing:eu-central-1:111111111111:targetgroup/mock/0123456789abcdef" }
  }
  mock_resource "aws_autoscaling_group" {
    defaults = { arn = "arn:aws:autoscaling:eu-central-1:111111111111:autoScalingGroup:mock" }
  }
  mock_resource "aws_elasticache_replication_group" {
    defaults = { primary_endpoint_address = "master.mock.cache.amazonaws.com" }
  }
  mock_data "aws_region" {
    defaults = { name = "eu-central-1" }
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
}

mock_provider "aws" {
  alias = "ap_southeast_2"
  mock_resource "aws_iam_instance_profile" {
    defaults = { arn = "arn:aws:iam::111111111111:instance-profile/mock" }
  }
  mock_resource "aws_lb" {
    defaults = { arn = "arn:aws:elasticloadbalancing:ap-southeast-2:111111111111:loadbalancer/net/mock/0123456789abcdef", dns_name = "mock-nlb.elb.ap-southeast-2.amazonaws.com", zone_id = "ZMOCKNLBAPSOUTHEAST2" }
  }
  mock_resource "aws_launch_template" {
    defaults = { id = "lt-0123456789abcdef0", latest_version = 1 }
  }
  mock_resource "aws_lb_target_group" {
    defaults = { arn = "arn:aws:elasticloadbalancing:ap-southeast-2:111111111111:targetgroup/mock/0123456789abcdef" }
  }
  mock_resource "aws_autoscaling_group" {
    defaults = { arn = "arn:aws:autoscaling:ap-southeast-2:111111111111:autoScalingGroup:mock" }
  }
  mock_resource "aws_elasticache_replication_group" {
    defaults = { primary_endpoint_address = "master.mock.cache.amazonaws.com" }
  }
  mock_data "aws_region" {
    defaults = { name = "ap-southeast-2" }
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
}

variables {
  name              = "cs"
  hosted_zone_id    = "Z0123456789ABCDEFGHIJ"
  sip_hostname      = "sip.callshield.example.com"
  sip_allowed_cidrs = ["198.51.100.0/24"]
  container_image = {
    "eu-west-1" = "111111111111.dkr.ecr.eu-west-1.amazonaws.com/callshield:1.0-gpu"
    "us-east-1" = "111111111111.dkr.ecr.us-east-1.amazonaws.com/callshield:1.0-gpu"
  }
  regions = {
    "eu-west-1" = {
      vpc_id                      = "vpc-0a1b2c3d"
      bridge_subnet_ids           = { "eu-west-1a" = "subnet-0a", "eu-west-1b" = "subnet-0b", "eu-west-1c" = "subnet-0c" }
      redis_subnet_ids            = ["subnet-1a", "subnet-1b"]
      ami_id                      = "ami-0123abcd"
      redis_auth_token_secret_arn = "arn:aws:secretsmanager:eu-west-1:111111111111:secret:cs-redis-AbCdEf"
      sip_tls_secret_arn          = "arn:aws:secretsmanager:eu-west-1:111111111111:secret:cs-sip-tls-AbCdEf"
    }
    "us-east-1" = {
      vpc_id                      = "vpc-0f1e2d3c"
      bridge_subnet_ids           = { "us-east-1a" = "subnet-0d", "us-east-1b" = "subnet-0e" }
      redis_subnet_ids            = ["subnet-1d", "subnet-1e"]
      ami_id                      = "ami-0456cdef"
      redis_auth_token_secret_arn = "arn:aws:secretsmanager:us-east-1:111111111111:secret:cs-redis-GhIjKl"
    }
  }
}

run "two_regions" {
  command = apply

  assert {
    condition     = length(module.eu_west_1) == 1 && length(module.us_east_1) == 1 && length(module.us_west_2) == 0
    error_message = "one regional stack per entry of var.regions, none for the others"
  }
  assert {
    condition     = length(module.eu_west_1["eu-west-1"].autoscaling_group_names) == 3 && length(module.us_east_1["us-east-1"].autoscaling_group_names) == 2
    error_message = "one auto-scaling group per availability zone"
  }
  assert {
    condition     = jsonencode(module.eu_west_1["eu-west-1"].sip_ports) == "[5060,5061]" && jsonencode(module.us_east_1["us-east-1"].sip_ports) == "[5060]"
    error_message = "5061 (TLS) only where a certificate secret is given"
  }
  assert {
    condition     = length(aws_route53_record.sip) == 2 && alltrue([for k, r in aws_route53_record.sip : r.latency_routing_policy[0].region == k && r.set_identifier == k && r.alias[0].evaluate_target_health])
    error_message = "one latency record per region, aliased to that region's NLB with target health"
  }
  assert {
    condition     = alltrue([for r in aws_route53_record.sip : r.name == "sip.callshield.example.com" && r.type == "A"])
    error_message = "every latency record answers the same SIP name"
  }
}

run "rejects_a_region_without_a_provider" {
  command = plan
  variables {
    regions = {
      "sa-east-1" = {
        vpc_id                      = "vpc-0a1b2c3d"
        bridge_subnet_ids           = { "sa-east-1a" = "subnet-0a" }
        redis_subnet_ids            = ["subnet-1a", "subnet-1b"]
        ami_id                      = "ami-0123abcd"
        redis_auth_token_secret_arn = "arn:aws:secretsmanager:sa-east-1:111111111111:secret:x"
      }
    }
    container_image = { "sa-east-1" = "callshield:1.0-gpu" }
  }
  expect_failures = [var.regions]
}
