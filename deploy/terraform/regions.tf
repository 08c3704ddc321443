# Terraform configures providers statically (no for_each over providers), so each region
# this root can deploy to has a provider alias and a module block here: the block is
# instantiated once when var.regions names its region, and not at all otherwise. To add a
# region, copy one pair and add its name to the validation in variables.tf.

provider "aws" {
  alias  = "us_east_1"
  region = "us-east-1"
  default_tags {
    tags = var.tags
  }
}

module "us_east_1" {
  source    = "./modules/region"
  for_each  = { for k, v in var.regions : k => v if k == "us-east-1" }
  providers = { aws = aws.us_east_1 }

  name                        = var.name
  vpc_id                      = each.value.vpc_id
  bridge_subnet_ids           = each.value.bridge_subnet_ids
  redis_subnet_ids            = each.value.redis_subnet_ids
  ami_id                      = each.value.ami_id
  instance_type               = each.value.instance_type
  asg_size                    = each.value.asg_size
  container_image             = var.container_image[each.key]
  redis_auth_token_secret_arn = each.value.redis_auth_token_secret_arn
  redis_node_type             = each.value.redis_node_type
  redis_kms_key_arn           = each.value.redis_kms_key_arn
  redis_client_cidrs          = var.redis_client_cidrs
  sip_tls_secret_arn          = each.value.sip_tls_secret_arn
  sip_allowed_cidrs           = var.sip_allowed_cidrs
  rtp_ports                   = var.rtp_ports
  drain_timeout_s             = var.drain_timeout_s
  prewarm_timeout_s           = var.prewarm_timeout_s
  tags                        = var.tags
}

provider "aws" {
  alias  = "us_west_2"
  region = "us-west-2"
  default_tags {
    tags = var.tags
  }
}

module "us_west_2" {
  source    = "./modules/region"
  for_each  = { for k, v in var.regions : k => v if k == "us-west-2" }
  providers = { aws = aws.us_west_2 }

  name                        = var.name
  vpc_id                      = each.value.vpc_id
  bridge_subnet_ids           = each.value.bridge_subnet_ids
  redis_subnet_ids            = each.value.redis_subnet_ids
  ami_id                      = each.value.ami_id
  instance_type               = each.value.instance_type
  asg_size                    = each.value.asg_size
  container_image             = var.container_image[each.key]
  redis_auth_token_secret_arn = each.value.redis_auth_token_secret_arn
  redis_node_type             = each.value.redis_node_type
  redis_kms_key_arn           = each.value.redis_kms_key_arn
  redis_client_cidrs          = var.redis_client_cidrs
  sip_tls_secret_arn          = each.value.sip_tls_secret_arn
  sip_allowed_cidrs           = var.sip_allowed_cidrs
  rtp_ports                   = var.rtp_ports
  drain_timeout_s             = var.drain_timeout_s
  prewarm_timeout_s           = var.prewarm_timeout_s
  tags                        = var.tags
}

provider "aws" {
  alias  = "eu_west_1"
  region = "eu-west-1"
  default_tags {
    tags = var.tags
  }
}

module "eu_west_1" {
  source    = "./modules/region"
  for_each  = { for k, v in var.regions : k => v if k == "eu-west-1" }
  providers = { aws = aws.eu_west_1 }

  name                        = var.name
  vpc_id                      = each.value.vpc_id
  bridge_subnet_ids           = each.value.bridge_subnet_ids
  redis_subnet_ids            = each.value.redis_subnet_ids
  ami_id                      = each.value.ami_id
  instance_type               = each.value.instance_type
  asg_size                    = each.value.asg_size
  container_image             = var.container_image[each.key]
  redis_auth_token_secret_arn = each.value.redis_auth_token_secret_arn
  redis_node_type             = each.value.redis_node_type
  redis_kms_key_arn           = each.value.redis_kms_key_arn
  redis_client_cidrs          = var.redis_client_cidrs
  sip_tls_secret_arn          = each.value.sip_tls_secret_arn
  sip_allowed_cidrs           = var.sip_allowed_cidrs
  rtp_ports                   = var.rtp_ports
  drain_timeout_s             = var.drain_timeout_s
  prewarm_timeout_s           = var.prewarm_timeout_s
  tags                        = var.tags
}

provider "aws" {
  alias  = "eu_central_1"
  region = "eu-central-1"
  default_tags {
    tags = var.tags
  }
}

module "eu_central_1" {
  source    = "./modules/region"
  for_each  = { for k, v in var.regions : k => v if k == "eu-central-1" }
  providers = { aws = aws.eu_central_1 }

  name                        = var.name
  vpc_id                      = each.value.vpc_id
  bridge_subnet_ids           = each.value.bridge_subnet_ids
  redis_subnet_ids            = each.value.redis_subnet_ids
  ami_id                      = each.value.ami_id
  instance_type               = each.value.instance_type
  asg_size                    = each.value.asg_size
  container_image             = var.container_image[each.key]
  redis_auth_token_secret_arn = each.value.redis_auth_token_secret_arn
  redis_node_type             = each.value.redis_node_type
  redis_kms_key_arn           = each.value.redis_kms_key_arn
  redis_client_cidrs          = var.redis_client_cidrs
  sip_tls_secret_arn          = each.value.sip_tls_secret_arn
  sip_allowed_cidrs           = var.sip_allowed_cidrs
  rtp_ports                   = var.rtp_ports
  drain_timeout_s             = var.drain_timeout_s
  prewarm_timeout_s           = var.prewarm_timeout_s
  tags                        = var.tags
}

provider "aws" {
  alias  = "ap_southeast_2"
  region = "ap-southeast-2"
  default_tags {
    tags = var.tags
  }
}

module "ap_southeast_2" {
  source    = "./modules/region"
  for_each  = { for k, v in var.regions : k => v if k == "ap-southeast-2" }
  providers = { aws = aws.ap_southeast_2 }

  name                        = var.name
  vpc_id                      = each.value.vpc_id
  bridge_subnet_ids           = each.value.bridge_subnet_ids
  redis_subnet_ids            = each.value.redis_subnet_ids
  ami_id                      = each.value.ami_id
  instance_type               = each.value.instance_type
  asg_size                    = each.value.asg_size
  container_image             = var.container_image[each.key]
  redis_auth_token_secret_arn = each.value.redis_auth_token_secret_arn
  redis_node_type             = each.value.redis_node_type
  redis_kms_key_arn           = each.value.redis_kms_key_arn
  redis_client_cidrs          = var.redis_client_cidrs
  sip_tls_secret_arn          = each.value.sip_tls_secret_arn
  sip_allowed_cidrs           = var.sip_allowed_cidrs
  rtp_ports                   = var.rtp_ports
  drain_timeout_s             = var.drain_timeout_s
  prewarm_timeout_s           = var.prewarm_timeout_s
  tags                        = var.tags
}

locals {
  stacks = merge(module.us_east_1, module.us_west_2, module.eu_west_1, module.eu_central_1, module.ap_southeast_2)
}
