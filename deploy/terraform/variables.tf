variable "name" {
  description = "Prefix of every resource name (lower-case letters, digits and hyphens)."
  type        = string
  default     = "callshield"
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,20}$", var.name))
    error_message = "name: 2-21 characters, lower-case letters, digits and hyphens, starting with a letter."
  }
}

variable "regions" {
  description = "One entry per AWS region to deploy to, keyed by region name. Each becomes a modules/region stack; Route 53 sends every caller to the nearest healthy one. Keys must be among the regions wired in regions.tf (Terraform cannot create provider configurations in a loop)."
  type = map(object({
    vpc_id                      = string
    bridge_subnet_ids           = map(string) # availability zone => public subnet
    redis_subnet_ids            = list(string)
    ami_id                      = string
    redis_auth_token_secret_arn = string
    sip_tls_secret_arn          = optional(string)
    instance_type               = optional(string, "g6.xlarge")
    asg_size                    = optional(object({ min = number, max = number, desired = number }), { min = 1, max = 4, desired = 1 })
    redis_node_type             = optional(string, "cache.r7g.large")
    redis_kms_key_arn           = optional(string)
  }))
  validation {
    condition     = length(var.regions) >= 1
    error_message = "regions: at least one region."
  }
  validation {
    condition     = alltrue([for r in keys(var.regions) : contains(["us-east-1", "us-west-2", "eu-west-1", "eu-central-1", "ap-southeast-2"], r)])
    error_message = "regions: keys must be among us-east-1, us-west-2, eu-west-1, eu-central-1, ap-southeast-2 (add a provider and a module block to regions.tf for another)."
  }
}

variable "container_image" {
  description = "The CallShield GPU image per region (deploy/docker/Dockerfile.gpu), keyed like var.regions; pull from the region's own registry (ECR replication), e.g. {\"eu-west-1\" = \"<account>.dkr.ecr.eu-west-1.amazonaws.com/callshield:1.4.0-gpu\"}."
  type        = map(string)
  validation {
    condition     = alltrue([for i in values(var.container_image) : length(i) > 0 && !can(regex("\\s", i))])
    error_message = "container_image: image references without spaces."
  }
}

variable "hosted_zone_id" {
  description = "Route 53 public hosted zone that holds sip_hostname."
  type        = string
  validation {
    condition     = can(regex("^Z[0-9A-Z]+$", var.hosted_zone_id))
    error_message = "hosted_zone_id must be a Route 53 zone id (Z...)."
  }
}

variable "sip_hostname" {
  description = "Name SBCs and PBXs send SIP to (e.g. sip.callshield.example.com); latency-based records resolve it to the nearest region's NLB."
  type        = string
  validation {
    condition     = can(regex("^([a-z0-9]([a-z0-9-]*[a-z0-9])?\\.)+[a-z]{2,}$", var.sip_hostname))
    error_message = "sip_hostname must be a lower-case fully qualified domain name."
  }
}

variable "sip_allowed_cidrs" {
  description = "Networks of the SBCs/PBXs allowed to send SIP and RTP (every region)."
  type        = list(string)
  validation {
    condition     = length(var.sip_allowed_cidrs) > 0 && alltrue([for c in var.sip_allowed_cidrs : can(cidrhost(c, 0))])
    error_message = "sip_allowed_cidrs: one or more CIDR blocks."
  }
}

variable "rtp_ports" {
  description = "RTP port range of every bridge."
  type        = object({ from = number, to = number })
  default     = { from = 20000, to = 20999 }
}

variable "drain_timeout_s" {
  description = "How long a bridge being scaled in keeps its live calls (at most 6900 s: a lifecycle hook waits at most 7200 s)."
  type        = number
  default     = 3600
}

variable "prewarm_timeout_s" {
  description = "How long a new bridge may take to report /ready before its launch is abandoned."
  type        = number
  default     = 900
}

variable "redis_client_cidrs" {
  description = "Networks of the dashboard / webhook dispatcher that read each region's Redis."
  type        = list(string)
  default     = []
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
